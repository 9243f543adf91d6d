"""Whether this job can lose a group and go on: the MPI library's fault tolerance (ULFM), found at start.

Open MPI 5 carries ULFM (User-Level Failure Mitigation): with the launch
options of :data:`OPEN_MPI_LAUNCH`, a rank that dies is reported to the
others as ``MPI_ERR_PROC_FAILED`` (the launcher tells them), and the launcher
keeps the rest of the job alive.  Then the master takes the dead rank's group
out of the run (``group_lost``) and the others train on; a rank that hangs
without dying is lost by the master's deadline (:mod:`aiperf_mpi.job.faults`).

It is on only where the launch gives it (:func:`fault_tolerance`): Open MPI,
launched by its own launcher (``mpirun``, PRRTE) with the settings, over the
ob1 messaging layer.  Not under a direct ``srun --mpi=pmix``, whatever the
environment says: measured in the Slurm fixture (docs/cluster.md), Slurm's
PMIx plugin reports a dead rank to no other rank (no ``MPI_ERR_PROC_FAILED``,
``OMPI_MCA_mpi_ft_enable=true`` or not) and ends the step itself: by SIGTERM
0.1 s after the death with ``--kill-on-bad-exit=1`` (rank 0 writes the score),
by SIGKILL about a second after it with ``--kill-on-bad-exit=0``.  Nor where the
messaging layer is UCX (or cm), which has no ULFM code.  Off, the job behaves
as it always did: one dead rank ends the job, through the abort guard or the
launcher.  Rank 0 says which in one line at start, and what a failure costs.

Measured here (Open MPI 5.0.11, 4 ranks, one host, docs/cluster.md): with
ULFM's heartbeat detector (10 s timeout, the launch before issue 38) a
training rank's ``os._exit`` or ``SIGSTOP`` reached rank 0's ``Iprobe`` as
``MPI_ERR_PROC_FAILED`` 8.4–8.9 s later; without it the launcher reports a
``kill -9`` within a second (0.11–0.36 s in the Slurm fixture), but not an
``os._exit(1)`` (:mod:`aiperf_mpi.mpi.launch_settings`), so the abort guard
ends a failing rank of a fault-tolerant job by SIGKILL.  The dead rank's Horovod partner got an error
from its all-reduce, not a hang; ``MPI_Finalize`` after a failure hangs,
``MPI_Abort`` with a non-zero code ends every rank, a stopped one included
(``MPI_Abort(0)`` does not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aiperf_mpi.mpi.launch_settings import ft_mpirun

OPEN_MPI_LAUNCH = ft_mpirun()
"""the mpirun options that turn fault tolerance on (:mod:`aiperf_mpi.mpi.launch_settings` says why each)"""
TRUE = ("1", "true", "yes", "on", "enabled")


def mca_on(environ: Mapping[str, str], name: str) -> bool:
    """Whether the ``--mca`` setting ``name`` is on: Open MPI hands it to every rank as ``OMPI_MCA_<name>``."""
    return environ.get(f"OMPI_MCA_{name}", "").strip().lower() in TRUE


SRUN_NAMESPACE = "slurm.pmix."
"""how the PMIx namespace of a task that a direct ``srun --mpi=pmix`` started begins (``slurm.pmix.<job>.<step>``)"""
PRRTE_NAMESPACES = ("prterun-", "prte-")
"""how the PMIx namespace of a rank Open MPI's launcher started begins (``mpirun``: ``prterun-<host>-<pid>@1``)"""


def launcher(environ: Mapping[str, str]) -> str:
    """Who started this rank: ``"mpirun"`` (Open MPI's PRRTE), ``"srun"`` (a direct ``srun``) or ``"unknown"``.

    The PMIx namespace decides first: a rank that ``mpirun`` started on another node of a Slurm allocation
    inherits ``SLURM_STEP_ID`` from the ``srun`` step that started PRRTE's daemon there, so the Slurm step
    variables say ``srun`` only when no namespace says otherwise.  Measured (docs/cluster.md): ``srun``'s ranks
    carry ``slurm.pmix.1.0`` and ``SLURM_STEP_ID=0``; ``mpirun``'s ``prterun-vm-11779@1``, ``PRTE_LAUNCHED=1``.
    """
    namespace = environ.get("PMIX_NAMESPACE", "")
    if namespace.startswith(PRRTE_NAMESPACES) or (not namespace and environ.get("PRTE_LAUNCHED")):
        return "mpirun"
    if namespace.startswith(SRUN_NAMESPACE) or (not namespace and "SLURM_STEP_ID" in environ):
        return "srun"
    return "unknown"


def transport(environ: Mapping[str, str]) -> str:
    """The messaging layer (Open MPI's pml) this rank was asked for: ``OMPI_MCA_pml``, else ``"ob1"``.

    Unset, a fault-tolerant launch gets ob1 from Open MPI's ``ft-mpi`` parameter set; a value in the environment
    wins over that set (measured: ``OMPI_MCA_pml=ucx`` under ``mpirun --with-ft ulfm`` selects UCX).  mpi4py
    cannot say which pml was selected, so the request is what is judged.
    """
    return environ.get("OMPI_MCA_pml", "").strip() or "ob1"


def fault_tolerance(environ: Mapping[str, str], library: str) -> tuple[bool, str]:
    """(on, why): whether a failed rank will be reported to the master and the job kept alive.

    The rule, from the MPI library (``library``: ``MPI.Get_library_version()``), the launcher
    (:func:`launcher`) and the transport (:func:`transport`), each read from this rank's environment, which
    every rank of a launch shares (Open MPI passes ``--mca`` settings to every rank as ``OMPI_MCA_*``).  No
    MPI here (a decision table in the unit tests).
    """
    if "Open MPI" not in library:
        return False, f"{library.split(',')[0].strip() or 'this MPI'} is not Open MPI with ULFM"
    if not mca_on(environ, "mpi_ft_enable"):
        return False, "launched without --with-ft ulfm --mca mpi_ft_enable true"
    started_by = launcher(environ)
    if started_by == "srun":
        return False, ("direct srun: Slurm's PMIx plugin reports no failure to the ranks and ends the step, "
                       "OMPI_MCA_mpi_ft_enable or not; fault tolerance needs mpirun inside the allocation")  # fmt: skip
    if started_by != "mpirun":
        namespace = environ.get("PMIX_NAMESPACE", "")
        return False, (f"launcher unknown (PMIX_NAMESPACE={namespace or 'unset'}): only Open MPI's mpirun is known "
                       "to report a failure")  # fmt: skip
    pml = transport(environ)
    if pml != "ob1":
        return False, f"pml {pml}: ULFM needs pml ob1 (UCX and cm have no ULFM code)"
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


def deadline(hang) -> str:
    """The master's deadline for a hung group, in words, from a :class:`~aiperf_mpi.job.faults.HangPolicy`."""
    first = f"{hang.first_model:g} s in its first model, then " if getattr(hang, "first_model", None) else ""
    if getattr(hang, "first_model_epoch_ops", None) is not None:
        first = "a bound derived from its probed peak in its first model (the deadlines line), then "
    return (f"{first}{hang.epochs:g} × the group's longest epoch + {hang.margin:g} s (--hang-margin), checked "
            f"every {hang.check_interval:g} s")  # fmt: skip


def start_line(on: bool, why: str, started_by: str = "unknown", hang=None) -> str:
    """The one line rank 0 prints at start: whether fault tolerance is on, why, and what each failure costs.

    ``started_by`` is :func:`launcher`'s answer, ``hang`` the master's
    :class:`~aiperf_mpi.job.faults.HangPolicy` (its deadline is what a hung
    rank costs with fault tolerance on).  The costs are the measured ones
    (docs/cluster.md, "When a node fails").
    """
    if on:
        hung = f"by the master's deadline ({deadline(hang)})" if hang is not None else "by the master's deadline"
        return (f"aiperf_mpi: fault tolerance on ({why}): a dead rank costs its group (reported by the launcher "
                f"within about a second; group_lost, the other groups train on); a hung rank costs its group {hung}; "
                "rank 0's death ends the job, --resume continues it (python -m aiperf_mpi.job.close RUN_DIR scores "
                "it from the log first, as the templates do)")  # fmt: skip
    dead = {
        "srun": "Slurm ends the step within seconds (on one node by SIGTERM with --kill-on-bad-exit=1, on which rank "
                "0 scores; across nodes over TCP Open MPI aborts on the lost connection first and Slurm SIGKILLs the "
                "step, and without --kill-on-bad-exit Slurm's SIGKILL comes first, before rank 0 scores: "
                "python -m aiperf_mpi.job.close RUN_DIR scores the run from its log, as the templates do after srun)",
        "mpirun": "mpirun ends every rank within about a second (if rank 0 wrote no score, python -m "
                  "aiperf_mpi.job.close RUN_DIR scores the run from its log, as the templates do after mpirun)",
    }.get(started_by, "the launcher ends the job")
    hung = f" ({deadline(hang)})" if hang is not None else ""
    return (f"aiperf_mpi: fault tolerance off ({why}): a dead rank ends the job: {dead}; a hung rank ends the run "
            f"with its score at its group's deadline{hung}; --resume continues an ended run from its log; "
            "docs/cluster.md says how to turn fault tolerance on")  # fmt: skip


def job_start_line(hang=None) -> str:
    """:func:`start_line` for this job: :func:`job_fault_tolerance` and this rank's launcher."""
    on, why = job_fault_tolerance()
    return start_line(on, why, launcher(os.environ), hang)
