"""Analyses of finished (or killed) runs, from their event logs alone: report, scaling, comparison.

``python -m analysis.report RUN_DIR``, ``python -m analysis.scaling RUN_DIR...``,
``python -m analysis.compare RUN RUN [RUN...]``.  Nothing here imports TensorFlow or MPI, so
the master can write the report at the end of a run and anyone can rerun it
on a laptop from ``events.jsonl``.
"""

from __future__ import annotations

from pathlib import Path


def write_report(run_dir: Path | str, out_dir: Path | str | None = None) -> Path:
    """Write the run's report (see :func:`analysis.report.write_report`); imports matplotlib only when called."""
    from analysis.report import write_report as write

    return write(run_dir, out_dir)
