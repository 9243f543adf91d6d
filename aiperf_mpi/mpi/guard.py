"""The abort guard: no rank may die alone and leave the others hanging.

An MPI job in which one rank raised and exited while the others wait in a
collective hangs until the batch system's time limit — hours of a whole
machine.  :func:`run_guarded` wraps a rank's ``main``: an unhandled exception
prints exactly one line tagged with rank and host, then ``MPI_Abort`` ends
every rank of the job with a non-zero status.  The full traceback goes to
stderr only when ``AIPERF_MPI_DEBUG`` is set, so a 4,096-rank failure is not a
wall of identical tracebacks.

With fault tolerance on (:mod:`aiperf_mpi.mpi.tolerance`) a training rank's
failure ends that rank alone: its group is lost and the run goes on.  Rank
0's failure, or a training rank's that knows rank 0 has died, still ends the
job.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable

from mpi4py import MPI

from aiperf_mpi.errors import EXIT_FATAL, EXIT_OK, EXIT_USAGE, UsageError, one_line
from aiperf_mpi.mpi.faults import known_failed, master_failed, wait_for_the_masters_end
from aiperf_mpi.mpi.tolerance import job_fault_tolerance

DEBUG_ENV = "AIPERF_MPI_DEBUG"
PROGRAM = "aiperf_mpi"


def fatal_line(rank: int, host: str, exc: BaseException) -> str:
    """The one line printed for a fatal error."""
    return f"{PROGRAM}: fatal: rank {rank} on {host}: {one_line(exc)}"


def run_guarded(comm: MPI.Comm, main: Callable[[], int | None]) -> int:
    """Run ``main`` on this rank; return its exit status or abort the job.

    * ``main`` returns (``None`` counts as success): that status.
    * :class:`UsageError` (a collective, agreed error): rank 0 prints
      ``aiperf_mpi: error: …``; every rank returns 2.
    * ``SystemExit``: its status, unchanged.
    * anything else, ``KeyboardInterrupt`` included: one line, then
      ``comm.Abort(1)`` — this call does not return.
    """
    try:
        status = main()
        return EXIT_OK if status is None else int(status)
    except UsageError as exc:
        if comm.Get_rank() == 0:
            print(f"{PROGRAM}: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_FATAL)
    except BaseException as exc:  # the whole point: catch everything
        abort(comm, exc)
        raise  # unreachable: abort() ends the process


def fault_tolerant() -> bool:
    """Whether this job runs with fault tolerance on (:func:`~aiperf_mpi.mpi.tolerance.job_fault_tolerance`).

    Off where the MPI library cannot even say its version: this is asked on the way out of a failed rank.
    """
    try:
        return job_fault_tolerance()[0]
    except MPI.Exception:
        return False


def survivor_line(rank: int, host: str, failed: list[int], exc: BaseException) -> str:
    """The one line of a rank whose group lost another rank: not a fatal error of its own."""
    return (f"{PROGRAM}: rank {rank} on {host}: its group lost rank(s) {failed} ({one_line(exc)[:160]}); "
            "it waits for the run's end")  # fmt: skip


def abort(comm: MPI.Comm, exc: BaseException) -> None:
    """Print the fatal line (and the traceback on request), then abort the job.

    With fault tolerance on, a training rank's failure takes only its group
    out: a rank whose failure follows another rank's death (its Horovod
    all-reduce lost a peer) says so in one line and waits for rank 0's end of
    the job; a rank that failed by itself exits, and MPI tells the master.
    """
    rank = MPI.COMM_WORLD.Get_rank()
    tolerant = rank != 0 and fault_tolerant() and not master_failed(MPI.COMM_WORLD)
    failed = known_failed(MPI.COMM_WORLD) if tolerant else []
    if failed:
        print(survivor_line(rank, socket.gethostname(), failed, exc), file=sys.stderr, flush=True)
    else:
        print(fatal_line(rank, socket.gethostname(), exc), file=sys.stderr, flush=True)
    if os.environ.get(DEBUG_ENV):
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()
    if failed:
        # the master knows of the dead peer already; an exit here is an abnormal termination the launcher may
        # miscount into ending the whole job (mpi/faults.py), so this rank holds until rank 0 ends the job
        wait_for_the_masters_end(MPI.COMM_WORLD)
    if tolerant:
        # fault tolerance on: this rank's death takes only its group out (the master is told by MPI and the
        # other groups go on); an Abort would end them all, and under ULFM MPI_Finalize would hang.  It dies
        # of SIGKILL, not by os._exit(1): the launcher reports a killed rank to the others (0.1-0.4 s,
        # measured), but with state_base_error_non_zero_exit 0 (launch_settings.py) it takes a non-zero exit
        # for an ordinary one and tells no one (measured: the other ranks waited in a barrier until killed)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    comm.Abort(EXIT_FATAL)
    # MPICH's MPI_Abort can return to the caller before the launcher kills the
    # job; exiting here keeps the promise "one line, no traceback".
    os._exit(EXIT_FATAL)
