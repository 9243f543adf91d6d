"""``python -m analysis.export RUN_DIR [--task N] [--out DIR]``: the old name of ``python -m aiperf_mpi.export``.

Model export builds a Keras model, so it lives in its own room above
``train/`` (:mod:`aiperf_mpi.export`); ``analysis/`` reads only the log and
loads no TensorFlow.  This entry point stays because scripts call it by this
name (the run's end calls ``python -m aiperf_mpi.export``): it imports the
export room only when it runs, so ``import analysis.export``
loads nothing of TensorFlow or ``train/`` (``tests/unit/test_architecture.py``
allows this one module that import, by name).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run :func:`aiperf_mpi.export.__main__.main` under this command's name (its lines say ``analysis.export``)."""
    from aiperf_mpi.export.__main__ import main as export_main

    return export_main(argv, prog="analysis.export")


if __name__ == "__main__":
    sys.exit(main())
