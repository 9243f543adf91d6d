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
import os
import shutil
import subprocess
import sys
import tempfile
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


def _dynamic(library: Path) -> tuple[list[str], list[str]]:
    """The library's NEEDED entries and its RUNPATH directories."""
    done = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, timeout=60, check=True)
    needed, runpath = [], []
    for line in done.stdout.splitlines():
        if "(NEEDED)" in line:
            needed.append(line.split("[", 1)[1].rstrip("]"))
        elif "(RUNPATH)" in line or "(RPATH)" in line:
            runpath += line.split("[", 1)[1].rstrip("]").split(":")
    return needed, runpath


def test_the_library_needs_nccl_from_the_venv_and_nothing_of_cuda_13(build: dict, library: Path, site: Path) -> None:
    needed, runpath = _dynamic(library)
    assert "libnccl.so.2" in needed and "libmpi.so.40" in needed
    assert not [n for n in needed if "libcudart.so.13" in n or "cu13" in n], needed
    if "wheel" in build["nccl_from"]:
        assert str(site / "nvidia" / "nccl" / "lib") in runpath
    if build["route"] == "wheels":
        assert str(site / "nvidia" / "cuda_runtime" / "lib") in runpath


def test_at_load_every_cuda_call_binds_to_tensorflows_cuda_12_runtime_and_nccl_to_its_wheel(
    build: dict, library: Path, site: Path
) -> None:
    """The dynamic linker's own report (LD_DEBUG=bindings; the library is linked with -z now, so all bind at load).

    The PyPI route's kernels come from nvcc 13, whose launch code calls CUDA 12.4+ entry points
    (``__cudaGetKernel``, ``__cudaLaunchKernel``): they must bind to TensorFlow's CUDA runtime (its stub in
    libtensorflow_framework, which forwards to the libcudart.so.12 it loads) or that libcudart itself.
    """
    debug = Path(tempfile.mkdtemp(prefix="ld-bindings-"))
    env = {**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(debug / "ld")}
    done = subprocess.run([sys.executable, "-c", "import horovod.tensorflow"], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    bound: dict[str, str] = {}
    for log in debug.glob("ld.*"):
        for line in log.read_text(errors="replace").splitlines():
            if f"binding file {library} " in line and "symbol `" in line:
                target = line.split(" to ", 1)[1].split(" [", 1)[0]
                bound[line.rsplit("`", 1)[1].rstrip("'")] = os.path.realpath(target)
    shutil.rmtree(debug)
    cuda = {name: target for name, target in bound.items() if name.startswith(("cuda", "__cuda"))}
    nccl = {name: target for name, target in bound.items() if name.startswith("nccl")}
    assert {"ncclAllReduce", "ncclCommInitRank"} <= set(nccl)
    if "wheel" in build["nccl_from"]:
        assert set(nccl.values()) == {str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")}
    assert not [t for t in bound.values() if "/cu13/" in t or "cuda-build" in t], bound
    if build["route"] == "wheels":  # the site route links its toolkit's runtime statically: nothing to bind
        assert {"__cudaRegisterFatBinary", "__cudaLaunchKernel", "cudaStreamCreateWithPriority"} <= set(cuda)
        tensorflow_runtime = str(site / "tensorflow" / "libtensorflow_framework.so.2")
        cudart = str(site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12")
        assert set(cuda.values()) <= {tensorflow_runtime, cudart}, cuda
        exported = subprocess.run(["nm", "-D", "--defined-only", cudart], capture_output=True, text=True,
                                  timeout=60, check=True).stdout  # fmt: skip
        assert set(cuda) <= {line.split()[-1].split("@")[0] for line in exported.splitlines() if line.strip()}


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
