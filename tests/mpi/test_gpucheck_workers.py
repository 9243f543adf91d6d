"""The GPU check's workers where there is no GPU: the same code on the CPU, through the real command lines.

On a GPU node they measure GPUs and NCCL; here TensorFlow falls back to the CPU and Horovod to MPI,
which still runs every line of the device listing, the probe and the all-reduce timing and checks
the JSON each writes for ``python -m aiperf_mpi.gpucheck`` (tests/unit/test_gpucheck.py covers the rest).
"""

import json
import subprocess
import sys

import pytest

from aiperf_mpi.gpucheck.plan import bus_bandwidth
from tests.support.mpirun import REPO_ROOT, run_mpi

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.long]  # make test-long


def _worker(tmp_path, *argv: str) -> dict:
    result = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", "aiperf_mpi.gpucheck.worker", *argv, "--result", str(result)],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def test_devices_lists_no_gpu_here_and_says_which_tensorflow(tmp_path) -> None:
    devices = _worker(tmp_path, "devices")
    assert devices["gpus"] == [] and devices["tensorflow"].startswith("2.18")
    assert "cuda_version" in devices and "cudnn_version" in devices


def test_the_probe_measures_each_precision_with_the_benchmarks_probe(tmp_path) -> None:
    probe = _worker(tmp_path, "probe", "--index", "0", "--seconds", "0.2")
    assert probe["index"] == 0 and probe["device"] == "CPU"
    for precision in ("bf16", "fp16", "fp32"):
        measured = probe[precision]
        assert measured["ops_per_second"] > 0 and measured["products"] >= 1 and measured["seconds"] >= 0.2
        assert measured["ops_per_second"] == pytest.approx(
            2 * measured["matrix_size"] ** 3 * measured["products"] / measured["seconds"])


@pytest.mark.mpi
@pytest.mark.horovod
def test_the_all_reduce_is_timed_across_ranks_and_checked(tmp_path) -> None:
    result = tmp_path / "allreduce.json"
    done = run_mpi(2, ["-m", "aiperf_mpi.gpucheck.worker", "allreduce", "--max-mib", "4", "--result", str(result)],
                   timeout=240, cwd=REPO_ROOT)  # fmt: skip
    assert done.returncode == 0, done.output[-3000:]
    allreduce = json.loads(result.read_text())
    assert allreduce["ranks"] == 2 and allreduce["device"] == "CPU"
    assert [s["bytes"] for s in allreduce["sizes"]] == [1 << 20, 4 << 20]
    for size in allreduce["sizes"]:
        assert size["seconds"] > 0
        assert size["bus_bandwidth"] == pytest.approx(bus_bandwidth(size["bytes"], size["seconds"], 2))
