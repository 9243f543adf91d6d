"""An exception on one rank ends the whole job, fast, naming the rank."""

import pytest

from tests.support.mpirun import SCRIPTS, MpiTimeout, run_mpi


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
