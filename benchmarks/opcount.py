"""How long the analytic op counter takes on a 1,000-layer graph (goal < 50 ms)."""

from __future__ import annotations

import networkx as nx

from aiperf_mpi.graph.model import GraphBuilder, from_json, to_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import resnet50
from benchmarks.common import summary_ms, time_calls

GOAL_MS = 50.0


def deep_residual_graph(layers: int) -> nx.DiGraph:
    """A residual chain (conv-BN-ReLU-conv-BN-add-ReLU blocks) with about ``layers`` nodes."""
    b = GraphBuilder(32, 32, 3, name=f"deep_{layers}")
    x = b.conv_bn_relu(b.input, 16, 3)
    while b.graph.number_of_nodes() < layers - 4:
        y = b.bn(b.conv(b.conv_bn_relu(x, 16, 3), 16, 3))
        x = b.relu(b.add([x, y]))
    b.softmax(b.dense(b.gap(x), 10))
    return b.build()


def run() -> str:
    big = deep_residual_graph(1000)
    r50 = resnet50()
    big_count = time_calls(lambda: count_ops(big), repeat=20)
    r50_count = time_calls(lambda: count_ops(r50), repeat=20)
    text = to_json(big)
    json_round = time_calls(lambda: from_json(to_json(big)), repeat=10)
    median_ms = sorted(big_count)[len(big_count) // 2] * 1e3
    verdict = "meets" if median_ms < GOAL_MS else "MISSES"
    return "\n".join(
        [
            "| graph | nodes | count_ops (validation + shapes + count) |",
            "|---|---|---|",
            f"| residual chain | {big.number_of_nodes()} | {summary_ms(big_count)} |",
            f"| ResNet-50 224² | {r50.number_of_nodes()} | {summary_ms(r50_count)} |",
            "",
            f"JSON round trip of the {big.number_of_nodes()}-node graph ({len(text):,} bytes): "
            f"{summary_ms(json_round)}.",
            "",
            f"Goal: under {GOAL_MS:.0f} ms for 1,000 layers — the median {verdict} it.",
        ]
    )
