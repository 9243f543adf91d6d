"""Fault tolerance only where the launch gives it (issue 43): the rule as a decision table, and the start line.

The environments are the ones measured in the Slurm fixture (docs/cluster.md,
"When a node fails"): what a rank of a direct ``srun --mpi=pmix`` and of
``mpirun`` inside the allocation carry.  No MPI here: the rule is pure.
"""

from __future__ import annotations

import pytest

from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH, fault_tolerance, launcher, start_line, transport

OPEN_MPI = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
MPICH = "MPICH Version:\t4.2.0"
SRUN = {"PMIX_NAMESPACE": "slurm.pmix.1.0", "PMIX_RANK": "0", "SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0"}  # fmt: skip
MPIRUN = {"PMIX_NAMESPACE": "prterun-vm-11779@1", "PMIX_RANK": "0", "PRTE_LAUNCHED": "1", "OMPI_COMM_WORLD_SIZE": "4",
          "SLURM_JOB_ID": "5"}  # fmt: skip
FT = {"OMPI_MCA_mpi_ft_enable": "true", "OMPI_MCA_mpi_ft_detector": "false"}


@pytest.mark.parametrize(
    ("library", "environ", "on", "reason"),
    [
        # the MPI library
        (MPICH, {**MPIRUN, **FT}, False, "MPICH Version:\t4.2.0 is not Open MPI"),
        # the settings
        (OPEN_MPI, MPIRUN, False, "launched without --with-ft ulfm"),
        (OPEN_MPI, SRUN, False, "launched without --with-ft ulfm"),
        # the launcher: a direct srun gives none, whatever the environment says (measured)
        (OPEN_MPI, {**SRUN, **FT}, False, "direct srun: Slurm's PMIx plugin reports no failure"),
        (OPEN_MPI, {**SRUN, **FT, "OMPI_MCA_pml": "ob1"}, False, "direct srun"),
        (OPEN_MPI, {"SLURM_STEP_ID": "3", **FT}, False, "direct srun"),
        (OPEN_MPI, FT, False, "launcher unknown (PMIX_NAMESPACE=unset)"),
        (OPEN_MPI, {**FT, "PMIX_NAMESPACE": "singleton.1"}, False, "launcher unknown (PMIX_NAMESPACE=singleton.1)"),
        # mpirun inside the allocation: on, and a rank on another node keeps the srun step's variables of PRRTE's
        # daemon there: the namespace decides
        (OPEN_MPI, {**MPIRUN, **FT}, True, "Open MPI ULFM, failures reported by the launcher"),
        (OPEN_MPI, {**MPIRUN, **FT, "SLURM_STEP_ID": "0"}, True, "Open MPI ULFM, failures reported by the launcher"),
        (OPEN_MPI, {"PRTE_LAUNCHED": "1", **FT}, True, "Open MPI ULFM, failures reported by the launcher"),
        (OPEN_MPI, {**MPIRUN, **FT, "PMIX_NAMESPACE": "prte-host-77@2"}, True, "Open MPI ULFM"),
        # the transport: ULFM needs ob1
        (OPEN_MPI, {**MPIRUN, **FT, "OMPI_MCA_pml": "ob1"}, True, "Open MPI ULFM"),
        (OPEN_MPI, {**MPIRUN, **FT, "OMPI_MCA_pml": "ucx"}, False, "pml ucx: ULFM needs pml ob1"),
        (OPEN_MPI, {**MPIRUN, **FT, "OMPI_MCA_pml": "cm"}, False, "pml cm: ULFM needs pml ob1"),
        # the older launch line, with the heartbeat detector: on, and it says what starts more reliably
        (OPEN_MPI, {**MPIRUN, **FT, "OMPI_MCA_mpi_ft_detector": "true"}, True, "--mca mpi_ft_detector false"),
    ],
)
def test_the_decision_table(library: str, environ: dict[str, str], on: bool, reason: str) -> None:
    decided, why = fault_tolerance(environ, library)
    assert decided is on and reason in why, (decided, why)


def test_the_launcher_and_the_transport_as_measured() -> None:
    assert launcher(SRUN) == "srun" and launcher(MPIRUN) == "mpirun" and launcher({}) == "unknown"
    assert transport({}) == "ob1" and transport({"OMPI_MCA_pml": " ucx "}) == "ucx"


def test_the_settings_of_the_fault_tolerant_launch_turn_it_on() -> None:
    """OPEN_MPI_LAUNCH's --mca settings, as mpirun hands them to every rank (OMPI_MCA_*), make the rule say on."""
    words = OPEN_MPI_LAUNCH.split()
    launched = {f"OMPI_MCA_{words[at + 1]}": words[at + 2] for at, word in enumerate(words) if word == "--mca"}
    on = fault_tolerance({**MPIRUN, **launched}, OPEN_MPI)
    assert on == (True, "Open MPI ULFM, failures reported by the launcher")
    assert not fault_tolerance({**SRUN, **launched}, OPEN_MPI)[0]


def test_the_start_line_says_what_a_failure_costs() -> None:
    """One line; on: a dead rank, a hung rank (the master's deadline, from HangPolicy) and rank 0; off: what ends
    the job on this launcher, whether the score is written, and that --resume continues it."""
    hang = HangPolicy()
    on = start_line(True, "Open MPI ULFM, failures reported by the launcher", "mpirun", hang)
    assert on.startswith("aiperf_mpi: fault tolerance on (Open MPI ULFM")
    for words in ("a dead rank costs its group (reported by the launcher within about a second",
                  f"a hung rank costs its group by the master's deadline ({hang.epochs:g} × the group's longest "
                  f"epoch + {hang.margin:g} s", "rank 0's death ends the job, --resume continues it"):  # fmt: skip
        assert words in on, on
    why = fault_tolerance({**SRUN, **FT}, OPEN_MPI)[1]
    srun = start_line(False, why, "srun", hang)
    assert srun.startswith("aiperf_mpi: fault tolerance off (direct srun: ")
    assert "Slurm ends the step within seconds (on one node by SIGTERM" in srun and "on which rank 0 scores" in srun
    assert "across nodes over TCP Open MPI aborts on the lost connection first" in srun  # docs/cluster.md
    for line in (on, srun, start_line(False, why, "mpirun", hang)):  # who writes the score when rank 0 cannot
        assert "python -m aiperf_mpi.job.close RUN_DIR" in line, line
    assert "a hung rank ends the run with its score at its group's deadline" in srun  # the deadlines of issue 43
    first = start_line(False, why, "srun", HangPolicy(first_model=3600.0, tolerant=False))
    assert "3600 s in its first model, then 3 × the group's longest epoch" in first
    assert "mpirun ends every rank within about a second" in start_line(False, "x", "mpirun", hang)
    for line in (on, srun, start_line(False, "x", "unknown")):
        assert "\n" not in line and "--resume" in line
