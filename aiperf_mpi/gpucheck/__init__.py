"""``make gpu-check``: what an HPC user runs first on a GPU node, in at most 8 minutes.

No GPU exists where this project is built and tested, so everything that
touches a GPU is gathered here, in one prepared command whose output says
whether the node, the build and the benchmark's GPU defaults work together:
the GPUs that TensorFlow and NVML see, the peak probe per GPU and precision,
the trainer on ResNet-50 at 224² against that probe, the XLA compile time,
NCCL's all-reduce bandwidth through Horovod, and a 3-minute benchmark run
with its report and NVML monitor samples.

``plan`` is the pure part (the steps and their time budget, the bus-bandwidth
formula, the JSON and Markdown written), tested without a GPU; ``worker``
runs the TensorFlow/Horovod side of each step in its own process;
``__main__`` runs the steps, each under its own timeout.
"""
