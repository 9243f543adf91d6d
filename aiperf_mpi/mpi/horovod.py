"""Horovod on a group's communicator, with a check that it really is.

Horovod is initialised on the group's mpi4py sub-communicator, so the master
(rank 0) never joins Horovod and stays free to talk to every group.  If
Horovod were built against another MPI library than mpi4py's, ``hvd.init``
would silently come up as a world of one; :func:`horovod_on` refuses that.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from mpi4py import MPI


class HorovodMismatch(RuntimeError):
    """Horovod's view of the group differs from MPI's."""


@contextmanager
def horovod_on(group_comm: MPI.Comm) -> Iterator[ModuleType]:
    """Initialise ``horovod.tensorflow`` on ``group_comm``; shut it down after.

    Yields the ``horovod.tensorflow`` module.  Collective over ``group_comm``.
    """
    if group_comm == MPI.COMM_NULL:
        raise ValueError("this rank is in no group (the master does not run Horovod)")
    import horovod.tensorflow as hvd

    if not hvd.mpi_built():
        raise HorovodMismatch("Horovod was built without MPI support; rebuild it with `make install`")
    hvd.init(comm=group_comm)
    try:
        if (hvd.size(), hvd.rank()) != (group_comm.Get_size(), group_comm.Get_rank()):
            raise HorovodMismatch(
                f"Horovod sees rank {hvd.rank()} of {hvd.size()} but MPI says "
                f"{group_comm.Get_rank()} of {group_comm.Get_size()}: Horovod and mpi4py "
                "load different MPI libraries; rebuild Horovod against mpi4py's MPI"
            )
        yield hvd
    finally:
        hvd.shutdown()
