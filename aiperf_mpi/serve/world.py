"""The ranks a serving run has: a launcher's MPI world, or this one process, without mpi4py.

On a laptop ``python -m aiperf_mpi.serve run …`` is one process: no launcher, so mpi4py is never imported
(nor Horovod, which serving never needs).  Under ``mpirun``/``srun`` the launcher leaves its task count in the
environment (:data:`aiperf_mpi.mpi.launch.STEP_VARIABLES`); then the world is ``MPI.COMM_WORLD``, and a
multi-task launch that came up as worlds of one is refused (:func:`aiperf_mpi.mpi.launch.check_launch`).
"""

from __future__ import annotations

import os
from typing import Any

from aiperf_mpi.errors import UsageError
from aiperf_mpi.mpi.launch import STEP_VARIABLES, check_launch
from aiperf_mpi.serve import ServeError


class OneProcess:
    """The world of one process: the few collective calls serving makes, each its one-rank identity."""

    def Get_rank(self) -> int:  # mpi4py's names: the runner calls one interface
        return 0

    def Get_size(self) -> int:
        return 1

    def bcast(self, value: Any, root: int = 0) -> Any:
        return value

    def gather(self, value: Any, root: int = 0) -> list[Any]:
        return [value]

    def allgather(self, value: Any) -> list[Any]:
        return [value]

    def Barrier(self) -> None:
        return None


def under_launcher(environ: dict[str, str] | os._Environ) -> bool:
    """Whether a launcher started this process (its task-count variable is set)."""
    return any(environ.get(name, "").strip() for name in STEP_VARIABLES)


def join_world() -> Any:
    """``MPI.COMM_WORLD`` under a launcher, else :class:`OneProcess` (mpi4py not imported)."""
    if not under_launcher(os.environ):
        return OneProcess()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    try:
        check_launch(world.Get_size(), os.environ)
    except UsageError as exc:
        raise ServeError(str(exc)) from None
    return world
