#!/usr/bin/env bash
# Builds Horovod 0.28.1 with NCCL GPU operations (and MPI) into a venv that
# already holds tensorflow[and-cuda]; `make install GPU=cuda` runs it.
#
#   cmake/build-horovod-gpu.sh VENV_PYTHON CONSTRAINTS BUILD_INFO_JSON
#
# Two routes, chosen by the environment:
#   site    CUDA_HOME is set (`module load cuda`): Horovod's own route, its
#           kernels compiled by $CUDA_HOME/bin/nvcc, NCCL from NCCL_HOME, else
#           from $CUDA_HOME, else TensorFlow's nvidia-nccl-cu12 wheel.
#   wheels  no CUDA_HOME: everything from PyPI.  No CUDA 12 wheel ships nvcc,
#           so Horovod's two small CUDA kernels are compiled by the CUDA 13
#           compiler wheels (installed beside the venv in VENV/cuda-build, not
#           in it), while the library links TensorFlow's CUDA 12 runtime and
#           NCCL wheels and loads nothing of CUDA 13
#           (cmake/horovod-cuda-wheels.cmake says how).  The price: CUDA 13
#           cubins need an R580 driver or newer, and CUDA 13 targets Turing
#           (sm_75) and newer only.  docs/install.md has the reasons.
# CUDA_ARCHS (comma list of compute capabilities, e.g. 80,90) narrows the
# kernels to the GPUs you have; HOROVOD_BUILD_CUDA_CC_LIST is Horovod's name.
set -euo pipefail

py=${1:?usage: build-horovod-gpu.sh VENV_PYTHON CONSTRAINTS BUILD_INFO_JSON}
constraints=${2:?constraints file}
info=${3:?build info json}
say() { echo "build-horovod-gpu: $*"; }
die() { echo "build-horovod-gpu: error: $*" >&2; exit 2; }

venv=$("$py" -c 'import sys; print(sys.prefix)')
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pip=("$py" -m pip --disable-pip-version-check)
cudart_lib=$site/nvidia/cuda_runtime/lib
nccl_wheel=$site/nvidia/nccl
[ -f "$cudart_lib/libcudart.so.12" ] || die "no CUDA 12 runtime wheel in $site (install tensorflow[and-cuda] first)"
[ -f "$nccl_wheel/lib/libnccl.so.2" ] || die "no nvidia-nccl-cu12 wheel in $site (install tensorflow[and-cuda] first)"

export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1
export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_CPU_OPERATIONS=MPI HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_GPU=CUDA
unset HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_ALLGATHER HOROVOD_GPU_BROADCAST HOROVOD_GPU_ALLTOALL HOROVOD_GPU_REDUCESCATTER
[ -n "${CUDA_ARCHS:-}" ] && export HOROVOD_BUILD_CUDA_CC_LIST=$CUDA_ARCHS

nccl_from_wheel() {
    # the wheel has only libnccl.so.2; Horovod's FindNCCL looks for libnccl.so
    mkdir -p "$venv/cuda-build/link"
    ln -sf "$nccl_wheel/lib/libnccl.so.2" "$venv/cuda-build/link/libnccl.so"
    export HOROVOD_NCCL_INCLUDE=$nccl_wheel/include HOROVOD_NCCL_LIB=$venv/cuda-build/link HOROVOD_NCCL_LINK=SHARED
    unset HOROVOD_NCCL_HOME
}

if [ -n "${CUDA_HOME:-}" ]; then
    route=site
    nvcc=$CUDA_HOME/bin/nvcc
    [ -x "$nvcc" ] || die "CUDA_HOME=$CUDA_HOME has no bin/nvcc (module load cuda, or unset CUDA_HOME to use the PyPI wheels)"
    export HOROVOD_CUDA_HOME=$CUDA_HOME
    if [ -n "${NCCL_HOME:-}" ]; then
        [ -f "$NCCL_HOME/include/nccl.h" ] || die "NCCL_HOME=$NCCL_HOME has no include/nccl.h"
        export HOROVOD_NCCL_HOME=$NCCL_HOME
        nccl_from="$NCCL_HOME"
    elif [ -f "$CUDA_HOME/include/nccl.h" ]; then
        nccl_from="$CUDA_HOME"
    else
        nccl_from_wheel
        export LDFLAGS="${LDFLAGS:-} -Wl,-rpath,$nccl_wheel/lib"
        nccl_from="the nvidia-nccl-cu12 wheel"
    fi
else
    route=wheels
    say "no CUDA_HOME: CUDA 13 compiler wheels into $venv/cuda-build (build only), CUDA 12 runtime and NCCL from TensorFlow's wheels"
    # one pip call: pip --target skips a namespace folder (nvidia/) that already exists
    "${pip[@]}" install -q --target "$venv/cuda-build" --upgrade -c "$constraints" \
        nvidia-cuda-nvcc nvidia-cuda-crt nvidia-nvvm nvidia-cuda-runtime nvidia-cuda-cccl cmake
    cuda13=$venv/cuda-build/nvidia/cu13
    nvcc=$cuda13/bin/nvcc
    [ -x "$nvcc" ] || die "the nvidia-cuda-nvcc wheel brought no $nvcc"
    # nvcc.profile links from $(TOP)/lib64 (a toolkit's layout); the wheels put the libraries in lib
    [ -e "$cuda13/lib64" ] || ln -s lib "$cuda13/lib64"
    # CMake >= 3.21 reads CMAKE_TOOLCHAIN_FILE from the environment: the wheel's, whatever the site has
    export HOROVOD_CMAKE=$venv/cuda-build/cmake/data/bin/cmake
    [ -x "$HOROVOD_CMAKE" ] || die "the cmake wheel brought no $HOROVOD_CMAKE"
    export HOROVOD_CUDA_HOME=$cuda13 PATH=$cuda13/bin:$PATH
    : "${HOROVOD_BUILD_CUDA_CC_LIST:=75,80,86,89,90,100,120}"
    export HOROVOD_BUILD_CUDA_CC_LIST
    nccl_from_wheel
    nccl_from="the nvidia-nccl-cu12 wheel"
    export CMAKE_TOOLCHAIN_FILE
    CMAKE_TOOLCHAIN_FILE=$(cd "$(dirname "$0")" && pwd)/horovod-cuda-wheels.cmake
    export AIPERF_CUDA12_INCLUDE=$site/nvidia/cuda_runtime/include
    export AIPERF_CUDA12_CRT_INCLUDE=$site/nvidia/cuda_nvcc/include
    export AIPERF_CUDA12_LIB=$cudart_lib AIPERF_NCCL_LIB=$nccl_wheel/lib
fi

nvcc_version=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
say "route $route: nvcc $nvcc_version ($nvcc), NCCL from $nccl_from, kernels for ${HOROVOD_BUILD_CUDA_CC_LIST:-every architecture nvcc knows}"
log=$venv/horovod-build.log
say "compiling (log: $log)"
start=$(date +%s)
if ! "${pip[@]}" install -v --no-cache-dir --no-build-isolation --force-reinstall --no-deps -c "$constraints" \
        horovod > "$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" | tail -40 >&2
    die "Horovod did not build; the whole output is in $log"
fi
seconds=$(( $(date +%s) - start ))
# the build above was forced and without dependencies (a rebuild must not find Horovod "already satisfied");
# now its Python dependencies (cloudpickle, psutil, pyyaml, ...)
"${pip[@]}" install -q -c "$constraints" horovod

"$py" - "$info" "$route" "$nvcc_version" "${HOROVOD_BUILD_CUDA_CC_LIST:-}" "$seconds" "$nccl_from" <<'EOF'
"""Checks the build and records what a GPU node needs to know about it (aiperf_mpi.gpucheck reads it)."""
import datetime, json, sys
from importlib.metadata import version
import horovod.tensorflow as hvd

info, route, nvcc, archs, seconds, nccl_from = sys.argv[1:]
assert hvd.mpi_built(), "Horovod built without MPI"
assert hvd.nccl_built(), "Horovod built without NCCL"
assert hvd.cuda_built(), "Horovod built without CUDA"
record = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "route": route, "nvcc": nvcc, "cuda_archs": archs or "all of nvcc's",
    "nccl_from": nccl_from, "build_seconds": int(seconds),
    "horovod": version("horovod"), "tensorflow": version("tensorflow"),
    "cuda_runtime": version("nvidia-cuda-runtime-cu12"), "nccl": version("nvidia-nccl-cu12"),
    "nccl_built": bool(hvd.nccl_built()), "mpi_built": bool(hvd.mpi_built()),
    # CUDA 13 cubins load on R580 drivers and newer; a CUDA 12 toolkit's on any driver TensorFlow runs on
    "min_driver": "580" if nvcc.startswith("13.") else None,
}
with open(info, "w") as f:
    json.dump(record, f, indent=1)
print("build-horovod-gpu: nccl_built", record["nccl_built"], "mpi_built", record["mpi_built"],
      f"({route} route, nvcc {nvcc}, {seconds} s)")
EOF
