"""Random valid model graphs for property tests, from a seed.

Every layer type appears; adds and concats join the current tensor with an
earlier one of a compatible shape, so skips of every length occur.  The
graph is a chain plus skips, hence never has a dangling node.
"""

from __future__ import annotations

import random

import networkx as nx

from aiperf_mpi.graph.model import GraphBuilder, Shape, inputs_of, layer_output_shape


def random_graph(seed: int, max_layers: int = 14) -> nx.DiGraph:
    rng = random.Random(seed)
    size = rng.choice([6, 8, 12, 16])
    builder = GraphBuilder(size, size, rng.choice([1, 3]), name=f"random_{seed}")
    shapes: dict[str, Shape] = {}

    def shape_of(node: str) -> Shape:
        if node not in shapes:
            shapes[node] = layer_output_shape(
                builder.graph, node, [shape_of(p) for p in inputs_of(builder.graph, node)]
            )
        return shapes[node]

    x = builder.conv(builder.input, rng.choice([4, 8]), rng.choice([1, 3]), bias=rng.random() < 0.5)
    history = [x]
    for _ in range(rng.randint(1, max_layers)):
        h, w, c = shape_of(x)
        choice = rng.choice(["conv", "conv", "bn", "relu", "pool", "add", "concat", "dropout"])
        if choice == "conv":
            kernel = rng.choice([1, 3, 5])
            padding = "same" if kernel > min(h, w) else rng.choice(["same", "valid"])
            stride = rng.choice([1, 1, 2]) if min(h, w) >= 4 else 1
            x = builder.conv(x, rng.choice([2, 4, 6, 8]), kernel, stride, padding, bias=rng.random() < 0.3)
        elif choice == "bn":
            x = builder.bn(x, epsilon=rng.choice([1e-3, 1e-5]))
        elif choice == "relu":
            x = builder.relu(x)
        elif choice == "pool" and min(h, w) >= 3:
            pool = rng.choice([2, 3])
            kind = rng.choice([builder.maxpool, builder.avgpool])
            x = kind(x, pool, rng.choice([1, 2]), rng.choice(["same", "valid"]))
        elif choice in ("add", "concat"):
            same = (h, w, c) if choice == "add" else (h, w)
            partners = [n for n in history if n != x and shape_of(n)[: len(same)] == same and len(shape_of(n)) == 3]
            if partners:
                other = rng.choice(partners)
                pair = [other, x] if rng.random() < 0.5 else [x, other]
                x = builder.add(pair) if choice == "add" else builder.concat(pair)
        elif choice == "dropout":
            x = builder.dropout(x, rng.choice([0.0, 0.25, 0.5]))
        if x not in history:
            history.append(x)
    x = builder.gap(x)
    if rng.random() < 0.5:
        x = builder.dense(x, rng.choice([8, 16]), bias=rng.random() < 0.8)
    x = builder.dense(x, rng.choice([2, 5, 10]))
    if rng.random() < 0.7:
        x = builder.softmax(x)
    return builder.build()
