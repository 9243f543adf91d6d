"""What a rank asks MPI about failures (ULFM): whether rank 0 is among them, and who the failed are.

The settings and the start line are in :mod:`aiperf_mpi.mpi.tolerance` (no MPI there).
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import sys
from collections.abc import Callable
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


FINALIZE_ALARM = 120
"""seconds ``MPI_Finalize`` may take once every rank has met before SIGALRM ends the rank"""
LEAVE_TAG = 32_000
"""the tag a survivor waits on at the end after a failure; never sent (rank 0's ``MPI_Abort`` ends the wait), and
apart from every message tag (:data:`aiperf_mpi.job.messages.TAGS`)"""


def leave_together(comm: MPI.Comm, status: int, finalize: bool,
                   backstop: Callable[[], float] = lambda: FINALIZE_ALARM) -> NoReturn:  # fmt: skip
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

    A rank stopped (SIGSTOP, a hung node) after its part of the agreement holds the others in ``MPI_Finalize``
    (ULFM's finalize shrinks the communicator, an agreement of its own; measured) and the launcher, which under
    fault tolerance does not end a job when a rank dies, waits for it: only ``MPI_Abort`` ends a stopped rank.
    So ``MPI_Finalize`` is called with the interpreter lock released
    (:func:`finalize_releasing_the_interpreter`), and the rank's watchdog thread (:mod:`aiperf_mpi.mpi.deadline`)
    calls ``MPI_Abort`` when the end passes its deadline.  SIGALRM's default action after ``backstop()`` seconds
    (asked when ``MPI_Finalize`` begins; give it more than the watchdog's remaining bound) is the last resort
    where the watchdog cannot run: it ends this rank, not the job.
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
        finalize_with_a_backstop(backstop(), release_interpreter=True)
    os._exit(status)


def finalize_with_a_backstop(seconds: float = FINALIZE_ALARM, release_interpreter: bool = False) -> None:
    """``MPI_Finalize``, with SIGALRM's default action as the backstop after ``seconds`` (at least one).

    mpi4py holds the interpreter lock inside ``MPI_Finalize`` (measured: a watchdog thread's ``MPI_Abort`` never
    ran while three ranks' ``MPI_Finalize`` waited for a stopped fourth), so a rank's watchdog
    (:mod:`aiperf_mpi.mpi.deadline`) cannot end a hang there; without fault tolerance the ranks meet before it,
    in a wait the watchdog bounds (a polled barrier), and what is left is the alarm's.  ``release_interpreter``
    (fault tolerance on: the alarm ends a rank, not the job) calls it with the lock released, so that the
    watchdog can still end the job from inside it.
    """
    if signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:  # its default action needs no Python code to run
        signal.alarm(max(1, math.ceil(seconds)))
    if not (release_interpreter and finalize_releasing_the_interpreter()):
        MPI.Finalize()


def finalize_releasing_the_interpreter() -> bool:
    """``MPI_Finalize`` called through ctypes, which releases the interpreter lock for the call; False (nothing
    called) where the MPI library's file cannot be found among this process's mappings (not Linux).

    mpi4py's ``MPI.Finalize`` holds the lock while it waits, so no other thread of the rank runs; a ctypes
    ``CDLL`` call does not.  Measured (4 ranks, Open MPI 5.0.11, the fault-tolerant launch, one rank stopped
    after the agreement): three ranks waited in ULFM's finalize (``ompi_comm_shrink_internal``, an agreement)
    and a thread's ``MPI_Abort`` 5 s later ended the job, the stopped rank included, 7 s after the stop; through
    mpi4py the thread never ran.  mpi4py then finds MPI finalized and does not finalize it again at exit.
    """
    path = loaded_library("/libmpi.so")
    if path is None:
        return False
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)  # the copy mpi4py loaded, never a second one
    except OSError:
        return False
    library.MPI_Finalize.restype = ctypes.c_int
    library.MPI_Finalize.argtypes = []
    library.MPI_Finalize()
    return True


def loaded_library(name: str) -> str | None:
    """The file of the first shared library mapped into this process whose path contains ``name`` (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and name in fields[5]:
                    return fields[5].strip()
    except OSError:
        return None
    return None


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
