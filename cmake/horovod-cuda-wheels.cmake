# CMake toolchain file for Horovod's GPU build from PyPI wheels only (no CUDA
# toolkit on the machine): cmake/build-horovod-gpu.sh points CMAKE_TOOLCHAIN_FILE
# here and sets the AIPERF_* variables read below.
#
# Why a toolchain file: Horovod's setup.py passes no CMake options through, and
# the two things this build needs differ from Horovod's defaults:
#   * Horovod's two CUDA kernels (batched device copies, buffer scaling) are
#     compiled by the CUDA 13 nvcc wheel, the only wheel that ships an nvcc, but
#     nothing of CUDA 13 may be *loaded*: TensorFlow 2.18 runs on its CUDA 12
#     runtime.  So no CUDA runtime is linked by CMake (None, instead of Horovod's
#     default Static, which would embed CUDA 13's libcudart_static).  Horovod's
#     CUDA calls then bind to TensorFlow's CUDA runtime: libtensorflow_framework
#     exports every cuda* entry point (a stub that forwards to the libcudart.so.12
#     TensorFlow loads), including those CUDA 13's launch code calls
#     (__cudaGetKernel, __cudaLaunchKernel), so one CUDA runtime serves both.
#     libcudart.so.12 is named on the link line as well, for any entry point
#     TensorFlow's stub might lack; TensorFlow's --as-needed drops it while the
#     stub has them all (tests/integration/test_gpu_build.py checks the bindings).
#   * the C++ files (which call the CUDA runtime API) are compiled against the
#     CUDA 12 headers of TensorFlow's wheels: -I is searched before the CUDA 13
#     -isystem directories CMake adds, so struct layouts and API versions are
#     those of the runtime actually loaded.
# The libraries are found at run time through RPATHs into the venv's wheels.

set(CMAKE_CUDA_RUNTIME_LIBRARY None CACHE STRING "no CUDA runtime from the compiler's toolkit")
set(CMAKE_CXX_FLAGS_INIT "-I$ENV{AIPERF_CUDA12_INCLUDE} -I$ENV{AIPERF_CUDA12_CRT_INCLUDE}")
set(CMAKE_CXX_STANDARD_LIBRARIES
    "-L$ENV{AIPERF_CUDA12_LIB} -l:libcudart.so.12 -Wl,-rpath,$ENV{AIPERF_CUDA12_LIB} -Wl,-rpath,$ENV{AIPERF_NCCL_LIB}"
    CACHE STRING "TensorFlow's CUDA 12 runtime, found at run time in the venv")
# Horovod's FindCUDAToolkit requires a libcudart beside nvcc; the CUDA 13 wheel has only
# libcudart.so.13.  Name TensorFlow's CUDA 12 one (Horovod links no CUDA:: target from it).
set(CUDA_CUDART "$ENV{AIPERF_CUDA12_LIB}/libcudart.so.12" CACHE FILEPATH "TensorFlow's CUDA 12 runtime")
