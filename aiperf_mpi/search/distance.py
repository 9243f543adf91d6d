"""A distance between architectures: edit distance of the main chain + matching of skips.

An architecture's *signature* is computed once per graph:

* the main chain — the longest input→output path — as a sequence of layer
  tokens (type, width bucket, kernel, stride);
* its skips — every add/concat input that leaves the chain — as (from, to,
  kind), positions relative to the chain length.

``distance(a, b)`` = Levenshtein distance of the chains (insert/delete 1,
substitute 0.5 for the same layer type with other attributes, 1 otherwise) +
the cost of the best one-to-one matching of skips (|Δfrom| + |Δto| + 1 for a
different kind, at most 2; 1 for a skip left unmatched).  It is symmetric,
zero on identical signatures, and the chain part is a row-vectorised dynamic
program (NumPy), so ResNet-50-sized chains cost about a millisecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from aiperf_mpi.graph.model import LAYER_TYPES, Analysis, analyse

TYPE_IDS = {name: index for index, name in enumerate(LAYER_TYPES)}
SAME_TYPE_COST = 0.5
UNMATCHED_SKIP_COST = 1.0
MAX_SKIP_COST = 2.0


@dataclass(frozen=True)
class Signature:
    """What the distance needs of a graph."""

    tokens: np.ndarray
    types: np.ndarray
    skips: np.ndarray  # (n, 3): from (relative), to (relative), kind (0 add, 1 concat)


def _token(data: dict) -> int:
    """One integer per layer description: equal layers, equal tokens."""
    width = data.get("filters", data.get("units", 0))
    bucket = int(round(math.log2(width) * 2)) if width else 0  # half-octave buckets
    kernel = data.get("kernel", data.get("pool", 0)) or 0
    stride = data.get("stride", 0) or 0
    return ((TYPE_IDS[data["type"]] * 64 + bucket) * 16 + kernel) * 8 + stride


def main_chain(graph: nx.DiGraph, analysis: Analysis | None = None) -> list[str]:
    """The longest input→output path (ties broken by name, so it is deterministic)."""
    analysis = analyse(graph) if analysis is None else analysis
    length: dict[str, int] = {}
    best_pred: dict[str, str | None] = {}
    for node in analysis.order:
        preds = analysis.inputs[node]
        if preds:
            pred = max(preds, key=lambda p: (length[p], p))
            length[node], best_pred[node] = length[pred] + 1, pred
        else:
            length[node], best_pred[node] = 1, None
    chain = []
    node: str | None = analysis.order[-1]
    while node is not None:
        chain.append(node)
        node = best_pred[node]
    return chain[::-1]


def signature(graph: nx.DiGraph, analysis: Analysis | None = None) -> Signature:
    """Compute the signature of ``graph`` (validates it unless given its analysis)."""
    chain = main_chain(graph, analysis)
    position = {node: i for i, node in enumerate(chain)}
    scale = max(1, len(chain) - 1)
    skips = []
    for node in chain:
        kind = graph.nodes[node]["type"]
        if kind not in ("add", "concat"):
            continue
        for source in graph.predecessors(node):
            if source in position and position[source] == position[node] - 1:
                continue  # the chain's own edge
            origin = source
            while origin not in position:  # walk the branch back to where it left the chain
                origin = min(graph.predecessors(origin))
            skips.append((position[origin] / scale, position[node] / scale, 1.0 if kind == "concat" else 0.0))
    tokens = np.array([_token(graph.nodes[n]) for n in chain], dtype=np.int64)
    types = np.array([TYPE_IDS[graph.nodes[n]["type"]] for n in chain], dtype=np.int64)
    return Signature(tokens, types, np.array(sorted(skips), dtype=float).reshape(-1, 3))


def chain_distance(a: Signature, b: Signature) -> float:
    """Weighted Levenshtein distance of the two main chains."""
    n, m = len(a.tokens), len(b.tokens)
    if n == m and np.array_equal(a.tokens, b.tokens):
        return 0.0
    substitute = np.where(
        a.tokens[:, None] == b.tokens[None, :], 0.0, np.where(a.types[:, None] == b.types[None, :], SAME_TYPE_COST, 1.0)
    )
    index = np.arange(m + 1, dtype=float)
    previous = index.copy()
    row = np.empty(m + 1)
    for i in range(1, n + 1):
        row[0] = i
        np.minimum(previous[1:] + 1.0, previous[:-1] + substitute[i - 1], out=row[1:])
        # insertions: row[j] = min over k ≤ j of row[k] + (j − k)
        previous = np.minimum.accumulate(row - index) + index
    return float(previous[m])


def chain_distances(a: Signature, anchors: list[Signature]) -> np.ndarray:
    """:func:`chain_distance` from ``a`` to every anchor at once.

    The anchors' chains are padded to one length and stacked, so each row of
    the dynamic program is one set of NumPy operations for all anchors; each
    anchor's distance is read at its own length.
    """
    count = len(anchors)
    lengths = np.array([len(b.tokens) for b in anchors])
    m = int(lengths.max())
    tokens = np.full((count, m), -1, dtype=np.int64)
    types = np.full((count, m), -1, dtype=np.int64)
    for k, b in enumerate(anchors):
        tokens[k, : lengths[k]] = b.tokens
        types[k, : lengths[k]] = b.types
    substitute = np.where(
        a.tokens[:, None, None] == tokens[None],
        0.0,
        np.where(a.types[:, None, None] == types[None], SAME_TYPE_COST, 1.0),
    )  # (n, count, m)
    index = np.arange(m + 1, dtype=float)
    previous = np.tile(index, (count, 1))
    row = np.empty((count, m + 1))
    for i in range(1, len(a.tokens) + 1):
        row[:, 0] = i
        np.minimum(previous[:, 1:] + 1.0, previous[:, :-1] + substitute[i - 1], out=row[:, 1:])
        previous = np.minimum.accumulate(row - index, axis=1) + index
    return previous[np.arange(count), lengths]


def distances(a: Signature, anchors: list[Signature]) -> np.ndarray:
    """:func:`distance` from ``a`` to every anchor (the embedding of ``a``)."""
    if not anchors:
        return np.zeros(0)
    return chain_distances(a, anchors) + np.array([skip_distance(a, b) for b in anchors])


def skip_distance(a: Signature, b: Signature) -> float:
    """Cost of the best matching of skips; unmatched skips cost 1 each.

    The pair is put in a canonical order first, so that floating-point
    summation makes ``skip_distance(a, b) == skip_distance(b, a)`` exactly.
    """
    if (len(a.skips), a.skips.tobytes()) > (len(b.skips), b.skips.tobytes()):
        a, b = b, a
    n, m = len(a.skips), len(b.skips)
    if n == 0 or m == 0:
        return UNMATCHED_SKIP_COST * (n + m)
    pair = (
        np.abs(a.skips[:, None, 0] - b.skips[None, :, 0])
        + np.abs(a.skips[:, None, 1] - b.skips[None, :, 1])
        + (a.skips[:, None, 2] != b.skips[None, :, 2])
    )
    cost = np.full((n + m, n + m), UNMATCHED_SKIP_COST)
    cost[:n, :m] = np.minimum(pair, MAX_SKIP_COST)
    cost[n:, m:] = 0.0
    from scipy.optimize import linear_sum_assignment  # here, not at the top: ≈ 0.6 s of every rank's start-up

    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].sum())


def distance(a: Signature, b: Signature) -> float:
    """Architecture distance: chain edit distance + skip matching."""
    return chain_distance(a, b) + skip_distance(a, b)
