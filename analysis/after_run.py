"""What the benchmark's master hands its run directory to once the score is on disk: the report, the best model.

These are the end-of-run hooks ``python -m aiperf_mpi`` injects into the
session (:class:`aiperf_mpi.job.session.EndOfRunHooks`): they live here, above
the job, because the job may not import ``analysis``.  Neither ever raises nor
hangs the run: a failure costs that file, never the score, and is one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

EXPORT_TIMEOUT = 300.0
"""seconds the best model's export may take at the end of a run (ResNet-50 at 32², 52 M parameters: 6 s)"""


def write_report(run_dir: Path) -> None:
    """The report (analysis.report) after the score: a failure here costs the report, never the score."""
    try:
        from analysis.report import write_report

        path = write_report(run_dir)
    except Exception as exc:  # noqa: BLE001 - the score is written; say what went wrong in one line
        print(f"aiperf_mpi: warning: no report: {type(exc).__name__}: {' '.join(str(exc).split())}",
              file=sys.stderr, flush=True)  # fmt: skip
        return
    print(f"aiperf_mpi: report in {path} (and {path.with_suffix('.html').name} beside it)", flush=True)


def export_best(run_dir: Path, dataset: str, timeout: float = EXPORT_TIMEOUT) -> None:
    """The best model to ``run_dir/best/``, stored once (``aiperf_mpi.export``), after the score; never failing the run.

    It runs in a child process: a timeout can end it (a call in this process
    could not be stopped), its TensorFlow does not stay in rank 0's memory,
    and with no GPU visible to it (``CUDA_VISIBLE_DEVICES`` empty) it cannot
    take an accelerator a training rank on this node holds.  Any failure is
    one warning line; the score stands.
    """
    if dataset == "synthetic":  # nothing to choose the best by; skip the child's start-up
        print("aiperf_mpi: no model export: synthetic data has no accuracy to choose the best model by", flush=True)
        return
    try:
        why = _run_export(run_dir, timeout)
    except Exception as exc:  # noqa: BLE001 - the score is written; whatever went wrong is one line
        why = f"{type(exc).__name__}: {exc}"
    if why:
        print(f"aiperf_mpi: warning: no model export: {' '.join(why.split())[:300]} (python -m aiperf_mpi.export "
              f"--single-copy {run_dir} retries it)", file=sys.stderr, flush=True)  # fmt: skip


def _run_export(run_dir: Path, timeout: float) -> str:
    """Run ``python -m aiperf_mpi.export --single-copy RUN_DIR``, print where the model went; '' or why there is none.

    ``--single-copy``: the best model's ``weights/task-N.npz`` goes once ``best/model.keras`` holds the same
    arrays (a ResNet-50 at 32² is 400 MB stored twice otherwise); a resumed run's ranks then read it from there.
    """
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter stays out of the run's output
    home = str(Path(__file__).resolve().parents[1])  # where the package lives, however this was started
    env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "aiperf_mpi.export", "--single-copy", str(run_dir)]
    # output to files, not pipes: after a timeout nothing (a grandchild holding a pipe) can keep this waiting
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            done = subprocess.run(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return f"it took longer than {timeout:g} s and was stopped"
        out.seek(0), err.seek(0)
        printed, errors = out.read().strip().splitlines(), [line for line in err.read().splitlines() if line.strip()]
    if done.returncode != 0:
        return errors[-1] if errors else f"exit status {done.returncode}"
    where = printed[-1].removeprefix("aiperf_mpi.export: ") if printed else f"in {run_dir / 'best'}"
    print(f"aiperf_mpi: best model: {where}", flush=True)
    return ""
