"""A known accuracy as a function of graph features, for testing the search without training.

Rewards depth (convolutions) and additive skips with diminishing returns and
penalises parameters past a budget, so that both what to morph and where
the best parents are matter.
"""

from __future__ import annotations

import math

import networkx as nx

from aiperf_mpi.graph.model import total_params
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.search.history import ModelRecord

BASE = tiny_resnet()
BASE_CONVS = sum(1 for _, t in BASE.nodes(data="type") if t == "conv")
BASE_PARAMS = total_params(BASE)


def synthetic_accuracy(graph: nx.DiGraph) -> float:
    convs = sum(1 for _, t in graph.nodes(data="type") if t == "conv") - BASE_CONVS
    adds = sum(1 for _, t in graph.nodes(data="type") if t == "add")
    concats = sum(1 for _, t in graph.nodes(data="type") if t == "concat")
    growth = total_params(graph) / BASE_PARAMS
    quality = 0.5 * convs + 0.8 * adds + 0.3 * concats - 0.6 * max(0.0, growth - 3.0)
    return 0.5 + 0.45 * (1 - math.exp(-max(quality, 0.0) / 6.0)) - 0.05 * max(0.0, -quality)


def record(model_id: int, parent: int | None, graph: nx.DiGraph, graph_json: str) -> ModelRecord:
    return ModelRecord(id=model_id, parent=parent, graph=graph_json, accuracy=synthetic_accuracy(graph))
