"""Entry point: ``python -m aiperf_mpi`` (or the ``aiperf-mpi`` script)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from mpi4py import MPI

from aiperf_mpi.cli import check_mode, parse_on_root, run_overrides
from aiperf_mpi.mpi.guard import run_guarded
from aiperf_mpi.mpi.launch import check_launch
from aiperf_mpi.mpi.layout import build_layout
from aiperf_mpi.signals import StopFlag


def rank_main(comm: MPI.Comm, argv: Sequence[str] | None, stop_flag: StopFlag) -> int:
    """What every rank runs, inside the abort guard."""
    options = parse_on_root(comm, argv)
    check_launch(comm.Get_size(), os.environ)  # before anything is measured: N singletons measure nothing
    check_mode(options)
    if options.layout:
        layout = build_layout(comm, options.group_size)
        try:
            if layout.is_master:
                text = json.dumps(layout.plan.to_dict()) if options.json else layout.plan.describe()
                print(text, flush=True)
            return 0
        finally:
            layout.free()
    from aiperf_mpi.config import load_config
    from aiperf_mpi.mpi.run import agree, run_benchmark

    config = agree(comm, lambda: load_config(options.config, run_overrides(options)))
    return run_benchmark(comm, config, resume=options.resume, stop_flag=stop_flag)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one rank of the job and return its exit status."""
    stop_flag = StopFlag().install()  # first: a signal during start-up must not kill the rank unscored
    comm = MPI.COMM_WORLD
    return run_guarded(comm, lambda: rank_main(comm, argv, stop_flag))


if __name__ == "__main__":
    sys.exit(main())
