"""The MPI side of the phases' deadlines (:mod:`aiperf_mpi.job.deadlines`): what ends the job when one passes.

The watchdog's thread runs while the main thread waits inside an MPI call, so the action calls MPI from a second
thread.  Where the library gives ``MPI_THREAD_MULTIPLE`` (Open MPI 5 and MPICH, as mpi4py asks by default; the
utilisation monitor's thread relies on it too) the action is ``MPI_Abort`` on ``COMM_WORLD``: the launcher ends
every rank of the job, a stopped one (SIGSTOP) included, with fault tolerance on or off.  Where it does not, a
second thread may not call MPI at all, and the rank kills itself (``SIGKILL``): the launcher then sees a rank die,
and without fault tolerance ends the job as it does for any dead rank; with it, the death is reported to the other
ranks as a failure, and a rank that hangs waiting for the dead one is left to its own deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time

from mpi4py import MPI

from aiperf_mpi.job.deadlines import BACKSTOP, END_MARGIN, Watchdog
from aiperf_mpi.mpi.faults import FINALIZE_ALARM, finalize_with_a_backstop


def end_the_job(status: int, thread_multiple: bool | None = None) -> None:
    """The watchdog's action: ``MPI_Abort(status)`` where a second thread may call MPI, else ``SIGKILL`` itself.

    Also once ``MPI_Finalize`` has begun: under fault tolerance the rank waits inside it for a stopped peer with
    the interpreter lock released (:func:`~aiperf_mpi.mpi.faults.leave_together`), and only ``MPI_Abort`` ends
    that peer.  Measured (4 ranks, the fault-tolerant launch, a rank stopped in ``MPI_Finalize``'s closing PMIx
    fence, after ULFM's shrink): the waiting ranks' ``MPI_Finalized`` said true, and their ``MPI_Abort`` still
    ended the job, the stopped rank included (Open MPI aborts through PMIx, which is up until the fence is
    over).  ``thread_multiple`` is the thread level, asked once before (not inside ``MPI_Finalize``).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if thread_multiple is None:
        thread_multiple = MPI.Is_initialized() and MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    if thread_multiple and MPI.Is_initialized():
        with contextlib.suppress(MPI.Exception):
            MPI.COMM_WORLD.Abort(status)
    os.kill(os.getpid(), signal.SIGKILL)  # no MPI from this thread, or Abort returned (MPICH may, briefly)


def rank_watchdog() -> Watchdog:
    """This rank's watchdog, its action :func:`end_the_job` (started in ``main``, before anything collective)."""
    thread_multiple = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    return Watchdog(MPI.COMM_WORLD.Get_rank(), socket.gethostname(),
                    lambda status: end_the_job(status, thread_multiple), backstop=BACKSTOP)  # fmt: skip


def abort_kind() -> str:
    """How a deadline ends this job, for the start line: ``MPI_Abort`` or a rank's ``SIGKILL``."""
    if MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        return "MPI_Abort"
    return "SIGKILL of the rank (the MPI library gives no MPI_THREAD_MULTIPLE)"


def meet_then_finalize(comm: MPI.Comm, watchdog: Watchdog) -> None:
    """End MPI on this rank without fault tolerance, every wait bounded by the watchdog.

    Open MPI's ``MPI_Finalize`` waits for every rank, and mpi4py holds the interpreter lock inside it, so no
    deadline could fire there (:func:`~aiperf_mpi.mpi.faults.finalize_with_a_backstop`).  The ranks first meet
    in non-blocking barriers polled from Python (each poll lets the watchdog's thread run: a rank stopped there
    ends the job at the end's deadline, ``MPI_Abort`` killing the stopped one too), and only then finalize,
    SIGALRM set to what is left of the phase's bound, at most the end's own bound (:attr:`Watchdog.after_meeting`).

    Two barriers, not one: a rank can do its part of a barrier and be stopped before it sees the barrier
    complete, and the others then complete it and leave.  Measured under ``srun`` across two nodes: rank 3,
    stopped in the meeting while rank 0 wrote its report, let ranks 0 and 1 (node1) pass the barrier and
    ``MPI_Finalize`` and exit 0, while rank 2, its node-mate, waited in ``MPI_Finalize`` until its own alarm, the
    training rank's end bound (210 s, against rank 0's 30 s).  A rank posts the second barrier only once it saw
    the first complete, so a rank stopped in the first holds every other in the second, where rank 0's deadline
    ends the job.  What is left is a rank stopped in the moment between its part of the second and its own
    completion, after which its node-mates wait in ``MPI_Finalize``: their alarm is then at most the end's bound
    from the meeting (the meeting means rank 0's end is done: a training rank needs no longer margin), and a
    rank stopped with no node-mate waiting is the launcher's to end (docs/cluster.md).
    """
    for _ in range(2):
        request = comm.Ibarrier()
        while not request.Test():
            time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    finalize_with_a_backstop(watchdog.finalize_bound(FINALIZE_ALARM))


def after_the_deadline(watchdog: Watchdog) -> float:
    """Seconds for the fault-tolerant end's SIGALRM backstop (:func:`~aiperf_mpi.mpi.faults.leave_together`):
    past what is left of the phase's bound, by :data:`~aiperf_mpi.job.deadlines.END_MARGIN`.

    Under fault tolerance the alarm ends a rank and not the job (the launcher keeps a job alive when a rank
    dies, and waits for a stopped one), so it must never fire before the watchdog, whose ``MPI_Abort`` ends
    every rank, a stopped one included.
    """
    left = watchdog.remaining()
    return FINALIZE_ALARM if left is None else max(0.0, left) + END_MARGIN
