"""Graph → Keras model, layer by layer, every attribute honoured.

Each graph node becomes exactly one Keras layer with the node's name, so
Keras' layers, TensorFlow's profiler output and the op-count table name the
same things, and tests can compare them layer by layer.  Nothing is guessed
or substituted: a graph this builder cannot express raises, it never falls
back to another model.
"""

from __future__ import annotations

from typing import Any

import keras
import networkx as nx

from aiperf_mpi.graph.model import GraphError, attr, infer_shapes, inputs_of, output_node, topological_order


def _layer(graph: nx.DiGraph, node: str, dtype: Any) -> keras.layers.Layer:
    kind = graph.nodes[node]["type"]
    common = {"name": node, "dtype": dtype}
    if kind == "conv":
        kernel = attr(graph, node, "kernel")
        return keras.layers.Conv2D(
            filters=attr(graph, node, "filters"),
            kernel_size=(kernel, kernel),
            strides=attr(graph, node, "stride"),
            padding=attr(graph, node, "padding"),
            use_bias=attr(graph, node, "bias"),
            **common,
        )
    if kind == "bn":
        return keras.layers.BatchNormalization(
            axis=-1, epsilon=attr(graph, node, "epsilon"), momentum=attr(graph, node, "momentum"), **common
        )
    if kind == "relu":
        return keras.layers.ReLU(**common)
    if kind == "add":
        return keras.layers.Add(**common)
    if kind == "concat":
        return keras.layers.Concatenate(axis=-1, **common)
    if kind in ("maxpool", "avgpool"):
        pool = attr(graph, node, "pool")
        cls = keras.layers.MaxPooling2D if kind == "maxpool" else keras.layers.AveragePooling2D
        stride = attr(graph, node, "stride") or pool
        return cls(pool_size=(pool, pool), strides=(stride, stride), padding=attr(graph, node, "padding"), **common)
    if kind == "gap":
        return keras.layers.GlobalAveragePooling2D(**common)
    if kind == "dense":
        return keras.layers.Dense(units=attr(graph, node, "units"), use_bias=attr(graph, node, "bias"), **common)
    if kind == "dropout":
        return keras.layers.Dropout(rate=attr(graph, node, "rate"), **common)
    if kind == "softmax":
        # the probabilities stay float32 under mixed precision (numerically safe loss)
        return keras.layers.Softmax(name=node, dtype="float32")
    raise GraphError(f"no Keras layer for type {kind!r}", node)


def build_keras_model(graph: nx.DiGraph, dtype: Any = None) -> keras.Model:
    """Build the Keras functional model of ``graph``.

    ``dtype`` is a Keras dtype policy name (``"float32"``, ``"mixed_float16"``,
    ``"mixed_bfloat16"``) or ``None`` for the global policy.
    """
    infer_shapes(graph)  # validate first: the builder assumes a valid graph
    tensors: dict[str, Any] = {}
    model_input = None
    for node in topological_order(graph):
        data = graph.nodes[node]
        if data["type"] == "input":
            model_input = keras.Input(shape=(data["h"], data["w"], data["c"]), name=node)
            tensors[node] = model_input
            continue
        sources = [tensors[p] for p in inputs_of(graph, node)]
        layer = _layer(graph, node, dtype)
        tensors[node] = layer(sources if len(sources) > 1 else sources[0])
    output = tensors[output_node(graph)]
    return keras.Model(model_input, output, name=graph.graph.get("name", "model"))
