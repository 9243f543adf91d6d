"""What a rank asks MPI about failures (ULFM): whether rank 0 is among them, and who the failed are.

The settings and the start line are in :mod:`aiperf_mpi.mpi.tolerance` (no MPI there).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from mpi4py import MPI

from aiperf_mpi.errors import EXIT_FATAL, EXIT_GROUPS_LOST


def master_failed(comm: MPI.Comm) -> bool:
    """Whether rank 0 is among the failures this rank knows of (then the whole job must end).

    When the library cannot say, the answer is yes: the job ends, as it
    does without fault tolerance.
    """
    failed = _failed_ranks(comm)
    return failed is None or 0 in failed


def _failed_ranks(comm: MPI.Comm) -> list[int] | None:
    """The ranks of ``comm`` this rank knows have failed (ULFM); None when the library cannot say."""
    try:
        failed = comm.Get_failed()
        try:
            return world_ranks(failed, comm)
        finally:
            failed.Free()
    except (MPI.Exception, NotImplementedError, AttributeError):
        return None


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


LEAVE_TAG = 32_000
"""the tag a survivor waits on at the end after a failure; never sent (rank 0's ``MPI_Abort`` ends the wait), and
apart from every message tag (:data:`aiperf_mpi.job.messages.TAGS`)"""


def leave_together(comm: MPI.Comm, status: int, finalize: bool) -> NoReturn:
    """End this rank, fault tolerance on: every live rank agrees that none failed, then all leave through
    ``MPI_Finalize`` (``finalize``), or without it under the detector thread, whose ``MPI_Finalize`` never returns.

    The meeting is ULFM's agreement (``MPIX_Comm_agree``), not a barrier: its outcome is the same at every live
    rank, a failure included.  A barrier is not uniform, and leaving by ``os._exit`` right after it hung a job
    (issue 38; docs/cluster.md, "Known limits"): a rank that had left the barrier exited without
    ``MPI_Finalize``, the launcher reported that as a failure, and a slower rank still completing the same
    barrier got ``MPI_ERR_PROC_FAILED`` from it (ULFM, told a rank failed, revokes the communicator's
    collectives locally: a pending one fails even when every message it needed had been sent).  ``MPI_Finalize``
    (Open MPI 5.0.11 with the heartbeat detector off; measured in BENCHMARKS.md, "Fault-tolerant
    launches") keeps every rank alive and answering until the last one reaches it, and the launcher takes
    the ends as normal ones: nothing is reported failed.  Under the detector
    thread (the older launch line) ``MPI_Finalize`` never returns, even when nothing failed (measured: a 3-rank
    barrier-then-exit program hangs until killed), so then the rank leaves with ``os._exit`` after the
    agreement, as before, with the race above.

    When a rank was lost the agreement fails at every live rank, and the job's end is rank 0's ``MPI_Abort``
    (it also ends a stopped rank, which an exit would leave the launcher waiting for): rank 0 aborts, and every
    other rank waits for that here, so that none leaves while rank 0 still writes the report (a survivor that
    left early had the launcher end the job mid-report: seen).  If rank 0 is gone too, the wait fails and this
    rank ends the job.
    """
    try:
        comm.Agree(1)
    except MPI.Exception:
        if comm.Get_rank() == 0:
            comm.Abort(status or EXIT_GROUPS_LOST)
        wait_for_the_masters_end(comm)
    sys.stdout.flush()
    sys.stderr.flush()
    if finalize:
        MPI.Finalize()
    os._exit(status)


def known_failed(comm: MPI.Comm) -> list[int]:
    """The ranks of ``comm`` this rank knows have failed (ULFM); empty when none, or when the library cannot say."""
    return _failed_ranks(comm) or []


def wait_for_the_masters_end(comm: MPI.Comm) -> NoReturn:
    """Hold this rank until rank 0 ends the job (its ``MPI_Abort`` after the score); end it if rank 0 is gone.

    A survivor must not exit on its own while rank 0 still runs: under ULFM an
    exit without ``MPI_Finalize`` is an abnormal termination, and Open MPI
    5.0.11's launcher (PRRTE 3.0.14) counts a remote rank's non-zero exit up to
    three times, which can make it take the job for finished and end every
    rank before the score (docs/cluster.md, "When a node fails").
    """
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        comm.recv(source=0, tag=LEAVE_TAG)  # never sent: rank 0's Abort ends this wait
    except MPI.Exception:
        comm.Abort(EXIT_FATAL)
    os._exit(EXIT_FATAL)  # unreachable unless a message was sent on the tag no one sends
