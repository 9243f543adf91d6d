"""Whether this job can lose a group and go on: the MPI library's fault tolerance (ULFM), found at start.

Open MPI 5 carries ULFM (User-Level Failure Mitigation): with the launch
options of :data:`OPEN_MPI_LAUNCH`, a rank that dies is reported to the
others as ``MPI_ERR_PROC_FAILED`` (the launcher tells them), and the launcher
keeps the rest of the job alive.  Then the master takes the dead rank's group
out of the run (``group_lost``) and the others train on; a rank that hangs
without dying is lost by the master's deadline (:mod:`aiperf_mpi.job.faults`).

Without it (MPICH, a direct ``srun`` without the settings, Open MPI launched
without them) the job behaves as it always did: one dead rank ends the job
through the abort guard.  Rank 0 says which in one line at start.

Measured here (Open MPI 5.0.11, 4 ranks, one host, docs/cluster.md): with
ULFM's heartbeat detector (10 s timeout, the launch before issue 38) a
training rank's ``os._exit`` or ``SIGSTOP`` reached rank 0's ``Iprobe`` as
``MPI_ERR_PROC_FAILED`` 8.4–8.9 s later; without it the launcher reports a
``kill -9`` within a second.  The dead rank's Horovod partner got an error
from its all-reduce, not a hang; ``MPI_Finalize`` after a failure hangs,
``MPI_Abort`` with a non-zero code ends every rank, a stopped one included
(``MPI_Abort(0)`` does not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OPEN_MPI_LAUNCH = ("--with-ft ulfm --enable-recovery --mca mpi_ft_enable true --mca mpi_ft_detector false "
                   "--prtemca state_base_error_non_zero_exit 0")  # fmt: skip
"""the mpirun options that turn fault tolerance on, without ULFM's heartbeat detector.

``mpi_ft_detector false``: a dead rank (or a lost node, whose launcher daemon goes with it) is reported to every
other rank by the launcher (PRRTE), without ULFM's heartbeat detector (measured: rank 0's ``Iprobe`` raised
``MPI_ERR_PROC_FAILED`` for a ``kill -9`` with the detector off); a rank that hangs without dying is lost by the
master's deadline (:mod:`aiperf_mpi.job.faults`).  The detector itself made starts fail, more often the more
ranks (issue 38; docs/cluster.md, "Known limits"): in Open MPI 5.0.x its thread starts inside ``MPI_Init``
and at once sends its first heartbeat, over the shared-memory transport, to a neighbour that may not have
registered the receiving callback yet; that neighbour, still polling in ``MPI_Init``'s fence, calls a null
callback and dies of signal 11 ("Failing at address: (nil)").  Measured with ``benchmarks/ft_start.py``
(BENCHMARKS.md, "Fault-tolerant launches"): with the detector 5 of 10 launches of 32 ranks and
2 of 3 of 128 failed; without it, and with :func:`aiperf_mpi.mpi.faults.leave_together`'s end, none of 20, 20
and 3 at 4, 32 and 128 ranks.  What the detector gave is lost: a stopped rank (SIGSTOP) is no longer reported,
and its group is lost by the master's deadline instead (measured: 114 s after the stop, 4 ranks).  Without the
thread the detector starts after the last barrier of ``MPI_Init`` (no race), but
then a rank beats only while it calls MPI, and rank 0 writing the report (a minute at 128 ranks) would be
declared dead by the ranks waiting for it.

``state_base_error_non_zero_exit 0``: Open MPI 5.0.11's launcher (PRRTE 3.0.14) counts a remote rank's
non-zero exit up to three times (its error report, the faked local states of a remote rank, and the remote
daemon's "all local ranks ended" report), so with one of a node's two ranks killed and the other exiting 1, the
count of ended ranks reached the job's size and mpirun ended the job as finished, before the score (seen across
the multi-node fixture's hosts; PRRTE fixed it after 3.0.14: openpmix/prrte#2403).  With the setting off, a
non-zero exit is an ordinary exit, counted once; a failure is still reported to the ranks by ULFM."""
TRUE = ("1", "true", "yes", "on", "enabled")


def mca_on(environ: Mapping[str, str], name: str) -> bool:
    """Whether the ``--mca`` setting ``name`` is on: Open MPI hands it to every rank as ``OMPI_MCA_<name>``."""
    return environ.get(f"OMPI_MCA_{name}", "").strip().lower() in TRUE


def fault_tolerance(environ: Mapping[str, str], library: str) -> tuple[bool, str]:
    """(on, why): whether a failed rank will be reported to the master and the job kept alive.

    ``library`` is ``MPI.Get_library_version()``.  Open MPI passes ``--mca``
    settings to every rank as ``OMPI_MCA_*`` variables, so each rank reads
    the same answer from its environment.  No MPI here (unit-tested).
    """
    if "Open MPI" not in library:
        return False, f"{library.split(',')[0].strip() or 'this MPI'} is not Open MPI with ULFM"
    if not mca_on(environ, "mpi_ft_enable"):
        return False, "launched without --with-ft ulfm --mca mpi_ft_enable true"
    if mca_on(environ, "mpi_ft_detector"):  # an older launch line: it works, but fails to start more, the more ranks
        return True, "Open MPI ULFM, heartbeat detector on (--mca mpi_ft_detector false starts reliably)"
    return True, "Open MPI ULFM, failures reported by the launcher"


def finalize_returns(environ: Mapping[str, str]) -> bool:
    """Whether ``MPI_Finalize`` returns in a fault-tolerant job: not under ULFM's detector thread.

    Open MPI 5.0.11's ``MPI_Finalize`` never returns with ``mpi_ft_detector_thread`` on, even when nothing
    failed (a 3-rank barrier-then-exit program hangs until killed); with the detector off it returned at every
    launch measured (BENCHMARKS.md, "Fault-tolerant launches").  Read from the ``OMPI_MCA_*`` variables, as
    :func:`fault_tolerance` is.
    """
    return not (mca_on(environ, "mpi_ft_detector") and mca_on(environ, "mpi_ft_detector_thread"))


def job_fault_tolerance() -> tuple[bool, str]:
    """(on, why) for this job: :func:`fault_tolerance` of this rank's environment and MPI library.

    The one place a rank decides it: the master's start line and transport,
    the relays and the abort guard all call this.  mpi4py is imported here,
    not at the top, so the rule above stays importable (and unit-tested)
    without MPI.
    """
    from mpi4py import MPI

    return fault_tolerance(os.environ, MPI.Get_library_version())


def start_line(on: bool, why: str) -> str:
    """The one line rank 0 prints at start."""
    if on:
        return (f"aiperf_mpi: fault tolerance on ({why}): a dead or hung group is logged (group_lost) and "
                "the other groups train on; rank 0's death still ends the job")  # fmt: skip
    return (f"aiperf_mpi: fault tolerance off ({why}): a dead rank ends the job, as before; "
            "docs/cluster.md says how to turn it on")  # fmt: skip
