"""One accelerator per training rank.

Without pinning, every TensorFlow process on a node claims every GPU of the
node: eight ranks would each reserve memory on eight devices and contend for
the first.  Horovod's rule applies: rank *i* among the node's workers uses GPU
*i*.  When the batch system already gave each task its own device
(``srun --gpus-per-task=1`` or ``--gpu-bind``), TensorFlow sees exactly one
GPU and the index folds onto it.
"""

from __future__ import annotations


def pin_device(index: int) -> str:
    """Make GPU ``index`` (modulo the visible count) this process's only GPU; return the device used.

    Must run before TensorFlow initialises its devices (before any tensor is
    made).  On a node without GPUs it returns ``"CPU"`` and changes nothing.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "CPU"
    chosen = gpus[index % len(gpus)]
    tf.config.set_visible_devices(chosen, "GPU")
    tf.config.experimental.set_memory_growth(chosen, True)  # leave room for the peak probe and other ranks
    return chosen.name
