"""The end of a run on rank 0: the score in a few lines a person reads, then the report.

Printing and the report hook live apart from the run's life cycle
(:mod:`aiperf_mpi.mpi.run`): a failure of the report costs the report, never
the score, which is already on disk.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiperf_mpi.results import runlog


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


def print_score(score, run_dir: Path) -> None:
    print(f"aiperf_mpi: score {score.score / 1e9:.4f} GOPS (analytic operations per second) over "
          f"{score.active_time:.0f} s of active time, {score.models_trained} models, {score.epochs} epochs",
          flush=True)  # fmt: skip
    if score.regulated_score is not None:
        print(f"aiperf_mpi: regulated score {score.regulated_score / 1e9:.4f} GOPS "
              f"(best accuracy {score.best_accuracy:.4f})", flush=True)  # fmt: skip
    else:
        print("aiperf_mpi: regulated score not defined (no accuracy: synthetic data or no epoch)", flush=True)
    broken = [f"{name} {rule['value']} (needs {rule['need']})" for name, rule in score.rules.items() if not rule["ok"]]
    verdict = "valid run" if score.valid else "unofficial run: " + "; ".join(broken)
    print(f"aiperf_mpi: {verdict}", flush=True)
    print(f"aiperf_mpi: results in {run_dir}/score.json and {run_dir}/{runlog.EVENTS_FILE}", flush=True)
