"""What the benchmark's master hands its run directory to once the score is on disk: the report, the best model.

These are the end-of-run hooks ``python -m aiperf_mpi`` injects into the
session (:class:`aiperf_mpi.job.session.EndOfRunHooks`): they live here, above
the job, because the job may not import ``analysis``.  Neither ever raises nor
hangs the run: a failure costs that file, never the score, and is one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiperf_mpi.results.child import run_child

EXPORT = "aiperf_mpi.export"
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
    done = run_child(EXPORT, ["--single-copy", str(run_dir)], timeout=timeout, no_accelerator=True)
    if done.returncode is None:
        return f"it took longer than {timeout:g} s and was stopped"
    if done.returncode != 0:
        return done.reason(EXPORT)
    where = done.stdout[-1].removeprefix(f"{EXPORT}: ") if done.stdout else f"in {run_dir / 'best'}"
    print(f"aiperf_mpi: best model: {where}", flush=True)
    return ""
