"""An exception on one rank ends the whole job, fast, naming the rank."""

import sys

import pytest

from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH
from tests.support.mpirun import SCRIPTS, MpiTimeout, mpi_vendor, mpirun_command, run_command, run_mpi


def test_exception_on_rank_two_aborts_the_job_and_names_it() -> None:
    result = run_mpi(4, [str(SCRIPTS / "raise_on_rank.py"), "2"], timeout=60)
    assert result.returncode != 0, result.output
    assert result.elapsed < 30, f"abort took {result.elapsed:.1f} s"
    fatal = [line for line in result.lines_of_rank(2) if "aiperf_mpi: fatal:" in line]
    assert len(fatal) == 1, result.output
    assert "rank 2 on " in fatal[0]
    assert "RuntimeError: injected failure on rank 2" in fatal[0]
    assert "Traceback" not in result.output


def test_harness_timeout_shows_every_rank() -> None:
    """The harness itself: a hung job fails within its timeout, output of all ranks attached."""
    with pytest.raises(MpiTimeout) as caught:
        run_mpi(4, [str(SCRIPTS / "hang_on_rank.py")], timeout=8)
    message = str(caught.value)
    for rank in range(4):
        assert f"rank {rank} says hello before the hang" in message, message


@pytest.mark.long  # a few seconds of a fault-tolerant launch; make test is near its 15 minutes
@pytest.mark.skipif(mpi_vendor() != "openmpi", reason="fault tolerance needs Open MPI's ULFM")
def test_under_fault_tolerance_a_rank_that_fails_by_itself_is_reported_to_the_others() -> None:
    """Under the fault-tolerant launch the guard ends a failing training rank alone, and the launcher must tell
    the others: it reports a killed rank, not a non-zero exit (``state_base_error_non_zero_exit 0``).  Measured
    before the guard ended itself by SIGKILL: its ``os._exit(1)`` left ranks 0, 1 and 3 in their barrier until the
    60 s timeout; now rank 3 learns of rank 2's failure and rank 0's guard ends the job, in about 3 s here."""
    command = mpirun_command(4, [sys.executable, str(SCRIPTS / "raise_on_rank.py"), "2", "3"])
    command[1:1] = OPEN_MPI_LAUNCH.split()
    result = run_command(command, timeout=60)
    assert result.returncode != 0 and result.elapsed < 30, result.output
    assert len([line for line in result.lines_of_rank(2) if "aiperf_mpi: fatal:" in line]) == 1, result.output
    assert "its group lost rank(s) [2] (Exception: MPI_ERR_PROC_FAILED" in result.output, result.output
