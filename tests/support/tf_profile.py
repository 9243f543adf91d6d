"""An independent operation count: TensorFlow's own profiler on the forward graph.

Used by the tests (and ``make bench``) to check the analytic counter against
a counter that knows nothing of it.  The model's inference function is traced
at a fixed batch of one (the profiler skips ops whose shapes are not fully
known — with a ``None`` batch it counts only ``Conv2D``), variables are
frozen to constants, and ``float_ops`` is collected per op.  The profiler uses
the same convention, a multiply-accumulate is 2 operations.

Its per-layer-type conventions differ from ours where noted in
:data:`PROFILER_CONVENTIONS`; the tests check those differences exactly.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping

import keras
import networkx as nx
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from aiperf_mpi.graph.model import Shape
from aiperf_mpi.graph.ops import LayerOps

PROFILER_CONVENTIONS = {  # per layer type: what TensorFlow's profiler counts, against our table
    "conv": "same as ours: 2·K²·Cin·Cout·Ho·Wo (Conv2D) + Ho·Wo·Cout (BiasAdd)",
    "dense": "same as ours: 2·Cin·Cout (MatMul) + Cout (BiasAdd)",
    "bn": "2 per element (x·scale + offset): TensorFlow folds γ/σ and β − μγ/σ per channel (+ ~5 per channel); "
    "ours is 4 per element in inference (x−μ, ×1/σ, ×γ, +β), no folding",
    "relu": "not counted (0); ours is 1 per element",
    "maxpool": "K² per output element; ours is K²−1 comparisons per output element",
    "avgpool": "K² per output element: same as ours",
    "dropout": "0 in inference: same as ours",
    "input": "0: same as ours",
    "gap": "1 per input element (Mean): same as ours",
    "add": "1 per output element per extra input: same as ours",
    "concat": "0: same as ours",
    "softmax": "5 per element: same as ours",
}


def expected_profiler_ops(graph: nx.DiGraph, layer: LayerOps, shapes: Mapping[str, Shape]) -> int:
    """What TensorFlow's profiler should report for ``layer``, per :data:`PROFILER_CONVENTIONS`.

    Where the conventions agree this is our own ``forward_eval``; where they
    differ it is TensorFlow's formula, so a test can check the profiler
    exactly and the difference is explained, layer type by layer type.
    """
    elements = math.prod(layer.output_shape)
    if layer.type == "bn":
        channels = layer.output_shape[-1]
        return 2 * elements + 6 * channels
    if layer.type == "relu":
        return 0
    if layer.type == "maxpool":
        return elements * int(graph.nodes[layer.name]["pool"]) ** 2
    return layer.forward_eval


def profiler_float_ops(model: keras.Model) -> dict[str, dict[str, int]]:
    """``{layer name: {TensorFlow op type: float ops}}`` of one inference sample."""
    spec = tf.TensorSpec([1, *model.input_shape[1:]], model.inputs[0].dtype)
    function = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    frozen = convert_variables_to_constants_v2(function)
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    profile = tf.compat.v1.profiler.profile(graph=frozen.graph, options=options)
    op_types = {op.name: op.type for op in frozen.graph.get_operations()}
    layer_names = {layer.name for layer in model.layers}

    per_layer: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for child in profile.children:
        layer = next(
            (name for part in child.name.split("/") for name in _scope_names(part) if name in layer_names), None
        )
        if layer is None:
            raise RuntimeError(f"profiler op {child.name!r} belongs to no layer of the model")
        per_layer[layer][op_types.get(child.name, "?")] += child.float_ops
    return {name: dict(ops) for name, ops in per_layer.items()}


def _scope_names(part: str) -> tuple[str, ...]:
    """A name scope as Keras writes it (``conv_1_1`` for layer ``conv_1``), and the bare name."""
    return (re.sub(r"_\d+$", "", part), part)
