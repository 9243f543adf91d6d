"""One accelerator per training rank.

Without pinning, every TensorFlow process on a node claims every GPU of the
node: eight ranks would each reserve memory on eight devices and contend for
the first.  Horovod's rule applies: rank *i* among the node's workers uses GPU
*i*.  When the batch system already gave each task its own device
(``srun --gpus-per-task=1`` or ``--gpu-bind``), TensorFlow sees exactly one
GPU and the index folds onto it.

Memory growth is on (a rank takes device memory as it needs it, leaving room
for the peak probe and NCCL), unless ``TF_FORCE_GPU_ALLOW_GROWTH`` is set: then
TensorFlow's own setting applies (``false``: reserve nearly all memory at once).
"""

from __future__ import annotations

import os

from aiperf_mpi.config import DeviceCaps


def pin_device(index: int) -> str:
    """Make GPU ``index`` (modulo the visible count) this process's only GPU; return the device used.

    Must run before TensorFlow initialises its devices (before any tensor is
    made).  On a node without GPUs it returns ``"CPU"`` and changes nothing.  It is a training rank's
    first import of TensorFlow: :func:`~aiperf_mpi.train.tfimport.import_tensorflow` makes it lighter.
    """
    from aiperf_mpi.train.tfimport import import_tensorflow

    tf = import_tensorflow()

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "CPU"
    chosen = gpus[index % len(gpus)]
    tf.config.set_visible_devices(chosen, "GPU")
    if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") is None:  # TensorFlow's own switch wins where it is set
        tf.config.experimental.set_memory_growth(chosen, True)  # leave room for the peak probe and other ranks
    return chosen.name


def device_caps() -> DeviceCaps:
    """This rank's device, after :func:`pin_device`: what ``--precision auto`` needs to know."""
    import tensorflow as tf

    gpus = tf.config.get_visible_devices("GPU")
    if not gpus:
        return DeviceCaps("CPU")
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability")
    return DeviceCaps("GPU", str(details.get("device_name", gpus[0].name)),
                      tuple(capability) if capability else None)  # fmt: skip
