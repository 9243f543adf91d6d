"""``python -m aiperf_mpi.export RUN_DIR [--task N] [--out DIR] [--single-copy]``: publish a run's best model.

``--task N`` publishes a given one instead.  What it writes and which model: :mod:`aiperf_mpi.export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import aiperf_mpi.export
from aiperf_mpi.export import ExportError, export
from aiperf_mpi.graph.model import GraphError

PROG = "aiperf_mpi.export"


def main(argv: list[str] | None = None) -> int:
    """Export, print one line saying where; bad input is one line ``PROG: error: …`` and exit 2.

    The lines begin with :data:`PROG`, the command's name, which a caller that reads them
    (``analysis/after_run.py``) strips.
    """
    prog = PROG
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=aiperf_mpi.export.__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory")
    parser.add_argument("--task", type=int, default=None, help="export this task (default: the best model)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: RUN_DIR/best, or RUN_DIR/export/task-N with --task)")
    parser.add_argument("--single-copy", action="store_true",
                        help="then remove the best model's weights/task-N.npz: best/model.keras is its only copy "
                             "(what the run's end does; for a finished run only, not with --task or --out)")
    options = parser.parse_args(argv)
    try:
        done = export(options.run_dir, options.task, options.out, single_copy=options.single_copy)
    except (ExportError, FileNotFoundError, GraphError) as exc:
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    accuracy = "–" if done.accuracy is None else f"{done.accuracy:.4f}"
    stored = f"; {done.restored} written back (the replaced best/ held its only copy)" if done.restored else ""
    if done.removed:
        stored += f"; {done.removed} removed (model.keras is its only copy)"
    elif done.only_copy:
        stored += f"; model.keras is the only copy of {done.only_copy}"
    print(f"{prog}: task {done.task} (validation accuracy {accuracy}) in {done.out}: model.keras "
          f"{done.model_bytes / 1e6:.1f} MB, model_card.md, metadata.json; {done.seconds:.1f} s{stored}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
