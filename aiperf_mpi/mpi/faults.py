"""What a rank asks MPI about failures (ULFM): whether rank 0 is among them, and who the failed are.

The settings and the start line are in :mod:`aiperf_mpi.mpi.tolerance` (no MPI there).
"""

from __future__ import annotations

from mpi4py import MPI


def master_failed(comm: MPI.Comm) -> bool:
    """Whether rank 0 is among the failures this rank knows of (then the whole job must end).

    When the library cannot say, the answer is yes: the job ends, as it
    does without fault tolerance.
    """
    try:
        failed = comm.Get_failed()
        try:
            return 0 in world_ranks(failed, comm)
        finally:
            failed.Free()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return True


def world_ranks(group: MPI.Group, comm: MPI.Comm) -> list[int]:
    """The ranks in ``comm`` of a group's members."""
    size = group.Get_size()
    if size == 0:
        return []
    whole = comm.Get_group()
    try:
        return [int(r) for r in MPI.Group.Translate_ranks(group, list(range(size)), whole)]
    finally:
        whole.Free()
