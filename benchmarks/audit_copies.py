"""The audit's ceiling alone and side by side (issue 45): ``python -m benchmarks.audit_copies [RUN_DIR]``.

On the CPU the ranks of a host train at once and share its cores, so ``analysis.audit`` times as many copies of a
sampled task at once as its host held training ranks (:func:`analysis.audit.copies`).  This measures what that
changes: the fastest training step of the first tasks of a run of two groups of one rank on this machine, timed
alone and two at a time, at the run's own threads a rank and at a claim of the whole machine's (what each group of
a forged log would claim).  Without RUN_DIR it makes the run first: 3 ranks under the venv's ``mpirun``, the tiny
seed on digits, 30 s.  Not part of ``make bench``: its figures are kept in BENCHMARKS.md by hand, with this command.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from aiperf_mpi.results.machine import local_description
from analysis.audit import copies, fastest_window, read_run, request, run_children, sampled

TASKS = (0, 1)
SECONDS = 4.0


def make_run(run_dir: Path) -> None:
    """A run of two groups of one rank beside the master, on this machine."""
    mpirun = Path(sys.executable).with_name("mpirun")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([str(mpirun), "--oversubscribe", "-n", "3", sys.executable, "-m", "aiperf_mpi", "--seed-model",
                    "tiny", "--group-size", "1", "--max-epochs", "2", "--peak-seconds", "1", "--time-limit", "30",
                    "--no-report", "--run-dir", str(run_dir)], check=True, env=env, capture_output=True,
                   timeout=600)  # fmt: skip


def steps(run_dir: Path, threads: int | None) -> dict[int, list[float]]:
    """For each of :data:`TASKS`: the fastest training step (s) alone, then each copy's two at a time."""
    here = local_description()
    model, lineage = read_run(run_dir)
    tasks = [sampled(model, lineage, task, 1.0, here) for task in TASKS]
    for task in tasks:
        task.claim.threads = threads or task.claim.threads
    found: dict[int, list[float]] = {task.task: [] for task in tasks}
    for count in (1, 2):
        for answer in run_children(request(tasks, SECONDS, here), 900, count):
            for entry in answer["tasks"]:
                found[entry["task"]].append(fastest_window(entry["train_times"]))
    print(f"{tasks[0].claim.text()}: {copies(tasks[0].claim, here)} copies at once")
    return found


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(argv[0]) if argv else Path(scratch) / "run"
        if not argv:
            make_run(run_dir)
        cores = local_description().get("cores") or 1
        for label, threads in (("the run's threads", None), (f"a claim of {cores} threads a rank", cores)):
            for task, (alone, *side) in steps(run_dir, threads).items():
                print(f"{label}: task {task}: fastest training step alone {alone * 1e3:.2f} ms, two at a time "
                      f"{', '.join(f'{s * 1e3:.2f}' for s in side)} ms (×{min(side) / alone:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
