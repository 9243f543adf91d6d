"""The GPU build (``make install GPU=cuda``) where there is no GPU: Horovod with NCCL and MPI, loadable, CUDA 12 only.

These run in the GPU venv (``make test-gpu-build``, BENCHMARKS.md keeps the
last result); in the CPU venv Horovod is the MPI-only build and they skip,
saying so.  What a machine without a GPU can prove: the build has NCCL, MPI
and CUDA; ``import horovod.tensorflow`` works and TensorFlow falls back to
the CPU; the library resolves every CUDA and NCCL dependency to TensorFlow's
own CUDA 12 wheels in the venv and loads nothing of the CUDA 13 compiler
wheels (PyPI route).  That its kernels run is for ``make gpu-check`` on a GPU
node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from aiperf_mpi.gpucheck.plan import nvidia_gpus_in_proc

BUILD_INFO = Path(sys.prefix) / ".aiperf-stamps" / "horovod-gpu-build.json"
pytestmark = [
    pytest.mark.tf,
    pytest.mark.horovod,
    pytest.mark.skipif(not BUILD_INFO.exists(), reason="not the GPU venv (make test-gpu-build runs these there)"),
]


@pytest.fixture(scope="module")
def build() -> dict:
    return json.loads(BUILD_INFO.read_text())


@pytest.fixture(scope="module")
def library() -> Path:
    [found] = Path(find_spec("horovod").submodule_search_locations[0]).glob("tensorflow/mpi_lib*.so")
    return found


@pytest.fixture(scope="module")
def site() -> Path:
    return Path(find_spec("horovod").submodule_search_locations[0]).parent


def test_horovod_is_built_with_nccl_and_mpi_and_imports_with_no_gpu(build: dict) -> None:
    code = (
        "import json, horovod.tensorflow as hvd, tensorflow as tf\n"
        "print(json.dumps({'nccl': hvd.nccl_built(), 'mpi': hvd.mpi_built(), 'cuda': hvd.cuda_built(),\n"
        "                  'gloo': hvd.gloo_built(), 'gpus': len(tf.config.list_physical_devices('GPU')),\n"
        "                  'sum': float(tf.reduce_sum(tf.ones((4, 4))))}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    flags = json.loads(done.stdout.strip().splitlines()[-1])
    assert flags["nccl"] and flags["mpi"] and flags["cuda"], flags
    assert not flags["gloo"]  # left out on purpose: the benchmark runs under MPI
    assert flags["sum"] == 16.0  # TensorFlow computes, on the CPU here
    if nvidia_gpus_in_proc() == 0:
        assert flags["gpus"] == 0
    assert build["nccl_built"] and build["mpi_built"]


def _ldd(path: Path) -> dict[str, str]:
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=60, check=True)
    found = {}
    for line in done.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where:
            found[name] = where.split(" (")[0]
    return found


def test_the_library_resolves_cuda_and_nccl_to_tensorflows_cuda_12_wheels(build: dict, library: Path,
                                                                         site: Path) -> None:  # fmt: skip
    needed = _ldd(library)
    assert "not found" not in needed.values(), needed
    assert not any("libcudart.so.13" in name or "/cu13/" in where for name, where in needed.items()), needed
    if build["route"] == "wheels":
        assert needed["libcudart.so.12"] == str(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")
    if "wheel" in build["nccl_from"]:
        assert needed["libnccl.so.2"] == str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")


def test_every_cuda_entry_point_the_library_calls_is_exported_by_the_cuda_12_runtime(build: dict, library: Path,
                                                                                    site: Path) -> None:  # fmt: skip
    """The PyPI route's kernels come from nvcc 13: its launch code must find all it calls in TensorFlow's runtime."""
    if build["route"] != "wheels":
        pytest.skip("the site route links the toolkit's own runtime, statically")

    def symbols(path: Path, which: str) -> set[str]:
        done = subprocess.run(["nm", "-D", which, str(path)], capture_output=True, text=True, timeout=60, check=True)
        return {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()}

    wanted = {s for s in symbols(library, "--undefined-only") if s.startswith(("cuda", "__cuda"))}
    assert {"__cudaRegisterFatBinary", "__cudaLaunchKernel", "cudaStreamCreateWithPriority"} <= wanted
    runtime = symbols(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12", "--defined-only")
    assert wanted - runtime == set()
    nccl = {s for s in symbols(library, "--undefined-only") if s.startswith("nccl")}
    assert {"ncclAllReduce", "ncclCommInitRank"} <= nccl


def test_importing_horovod_maps_cuda_12_and_no_cuda_13_library(build: dict, site: Path) -> None:
    code = (
        "import horovod.tensorflow as hvd\n"
        "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    mapped = done.stdout.split()
    assert not [m for m in mapped if "/cu13/" in m or "cuda-build" in m], mapped
    if build["route"] == "wheels":
        assert str(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12") in mapped
