"""ResNet-50's training step as the trainer builds it, for the benchmarks that time or profile one process.

The trainer's maths (forward, gradients, SGD with momentum from
:func:`~aiperf_mpi.train.trainer.make_optimizer`) without Horovod or data:
synthetic tensors, fp32, one ``tf.function``.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from aiperf_mpi.graph.seeds import resnet50
from aiperf_mpi.train.keras_model import build_keras_model
from aiperf_mpi.train.trainer import make_optimizer


def resnet50_step(size: int, batch: int, prebuild: bool = True):
    """(step, x, y): a new ResNet-50 at ``size``², its untraced training step, and one synthetic batch.

    ``prebuild`` creates the optimizer's slots before the first step, as the
    trainer does (created inside it, they make ``tf.function`` trace twice).
    """
    x, y = tf.random.uniform((batch, size, size, 3)), tf.zeros((batch,), tf.int32)
    model = build_keras_model(resnet50(size, 3, 10), dtype="float32")
    optimizer = make_optimizer("fp32", 0.01, 0.9)
    variables = model.trainable_variables
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    if prebuild:
        optimizer.build(variables)

    @tf.function
    def step(a, b):
        with tf.GradientTape() as tape:
            loss = loss_fn(b, model(a, training=True))
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    return step, x, y
