"""aiperf_mpi: an AutoML benchmark for AI supercomputers, run as one MPI job.

The package is split so that the pure logic (layout planning, graphs, operation
counting, search, scores) imports neither MPI nor TensorFlow; thin layers in
:mod:`aiperf_mpi.mpi` and the training side wrap mpi4py, Horovod and TensorFlow.
"""

__version__ = "0.1.0"
