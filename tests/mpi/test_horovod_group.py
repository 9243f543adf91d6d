"""Horovod on a group sub-communicator, the master outside it, world collectives after."""

import pytest

from tests.support.mpirun import SCRIPTS, run_mpi

pytestmark = [pytest.mark.horovod, pytest.mark.tf, pytest.mark.slow, pytest.mark.long]  # make test-long


@pytest.mark.parametrize("group_size", [None, 2])
def test_allreduce_inside_group_master_outside(group_size: int | None) -> None:
    argv = [str(SCRIPTS / "horovod_in_group.py")] + ([str(group_size)] if group_size else [])
    result = run_mpi(4, argv, timeout=180)
    assert result.returncode == 0, result.output
    expected = "[[1, 2, 3]]" if group_size is None else "[[1, 2], [3]]"
    assert f"PASS groups={expected}" in result.output, result.output
