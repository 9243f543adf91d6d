"""The trainer's maths for one model: its optimizer, loss, training step and evaluation function.

Kept apart from :mod:`aiperf_mpi.train.trainer` (which drives them over MPI
and Horovod) so that a process without MPI can run exactly the steps a run
ran: the audit (:mod:`aiperf_mpi.export.audit`) times them to bound the rates
a log claims.  TensorFlow and Keras only; the all-reduce is handed in.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import networkx as nx
import tensorflow as tf

from aiperf_mpi.graph.model import output_node
from aiperf_mpi.results.precisions import PRECISIONS


def precision_policy(precision: str) -> str:
    """Keras dtype policy of a precision name; anything narrower than FP16 is refused."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision {precision!r} is not allowed: the benchmark trains at fp32, fp16 or bf16 "
            "(nothing narrower than FP16)"
        )
    return PRECISIONS[precision].keras_policy


def make_optimizer(precision: str, learning_rate, momentum: float) -> keras.optimizers.Optimizer:
    """SGD with momentum; at fp16 wrapped in dynamic loss scaling.

    fp16's range ends at 65504 and its smallest normal is 6e-5: small
    gradients underflow to zero unless the loss is scaled up first.  The
    dynamic scale starts at 2¹⁵, halves (and the step is skipped) whenever a
    gradient is not finite, and doubles after 2000 good steps.  bf16 has
    fp32's exponent range and needs none.  Every rank of a group sees the
    same averaged gradients, so all skip the same steps and keep the same scale.
    """
    optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum)
    if precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def loss_function(graph: nx.DiGraph) -> keras.losses.Loss:
    """Sparse cross-entropy, on logits unless the graph ends in a softmax."""
    from_logits = graph.nodes[output_node(graph)]["type"] != "softmax"
    return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)


def make_train_step(model: keras.Model, optimizer: keras.optimizers.Optimizer, loss_fn: keras.losses.Loss,
                    fp16: bool, xla: bool, allreduce: Callable | None = None):  # fmt: skip
    """One training step ``step(x, y) -> loss``: gradients (fp16: of the scaled loss), ``allreduce`` of them when
    given (Horovod's, outside XLA), the optimizer's update.  ``step.traces()`` counts the traces so far, for the
    trainer's compile accounting."""
    variables = model.trainable_variables

    def gradients(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss) if fp16 else loss
        return loss, tape.gradient(scaled, variables)

    def apply(grads):
        if allreduce is not None:
            grads = allreduce(grads)
        optimizer.apply(grads, variables)

    if xla:  # XLA compiles the model's maths; Horovod's all-reduce stays outside it
        compiled = tf.function(gradients, jit_compile=True)
        apply_fn = tf.function(apply)

        def step(x, y):
            loss, grads = compiled(x, y)
            apply_fn(grads)
            return loss

        functions = (compiled, apply_fn)
    else:

        @tf.function
        def step(x, y):
            loss, grads = gradients(x, y)
            apply(grads)
            return loss

        functions = (step,)
    step.traces = lambda: sum(f.experimental_get_tracing_count() for f in functions)  # compile accounting
    return step


def make_evaluate(model: keras.Model):
    """The evaluation function: the model's forward pass, not training; one trace for any batch size (the full
    batches and the short last one)."""
    return tf.function(lambda x: model(x, training=False), reduce_retracing=True,
                       input_signature=[tf.TensorSpec([None, *model.input_shape[1:]], model.input.dtype)])  # fmt: skip
