"""The start-up peak probe: real TensorFlow matrix multiplies on this machine."""

import pytest

from aiperf_mpi.train.peak import matmul_ops, measure_peak

pytestmark = pytest.mark.tf


def test_matmul_ops_counts_a_multiply_add_as_two() -> None:
    assert matmul_ops(2) == 16 and matmul_ops(1024) == 2 * 1024**3


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_probe_runs_for_its_time_and_its_rate_is_its_own_arithmetic(precision: str) -> None:
    result = measure_peak(precision, 0.5)
    assert result["precision"] == precision and result["device"] == "CPU:0"
    assert result["seconds"] >= 0.5 and result["products"] >= 1
    expected = matmul_ops(result["matrix_size"]) * result["products"] / result["seconds"]
    assert result["ops_per_second"] == pytest.approx(expected)
    assert 1e8 < result["ops_per_second"] < 1e13  # a CPU core does between 0.1 GFLOP/s and 10 TFLOP/s
