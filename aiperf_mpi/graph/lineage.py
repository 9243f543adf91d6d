"""A model's lineage: what a verifier needs to rebuild its graph, and the rebuild.

Every model of a run is either the seed architecture or a child its search
made by morphing a parent's graph.  The leader logs, with each proposal,
either the seed's record (:func:`seed_record`: the seed's name, input size
and classes) or the morphisms' steps (:attr:`~aiperf_mpi.graph.morph.Morphed.steps`);
the kernel size is in the proposal's hyper-parameters.  :func:`rebuild` then
reproduces the stored graph from the seed or from the parent's stored graph,
and :func:`structure_difference` says where a stored graph departs from it —
so a graph file forged together with its logged hash no longer passes as the
model that was trained.

The search morphs the parent's *stored* graph (the tuned one, with the
parent's kernel size), and the child is tuned to its own kernel size after
the morphisms: tuning rewrites every tunable convolution, so the parent's
kernel size does not reach the child.  Nothing here imports TensorFlow or MPI.
"""

from __future__ import annotations

import networkx as nx

from aiperf_mpi.graph.model import GraphError, analyse, input_node, output_node, with_kernel_size
from aiperf_mpi.graph.morph import replay
from aiperf_mpi.graph.seeds import seed_model

SEED_FIELDS = ("model", "image_size", "channels", "classes")
"""what a seed proposal records: :func:`~aiperf_mpi.graph.seeds.seed_model`'s arguments"""


def seed_record(name: str, graph: nx.DiGraph) -> dict:
    """The seed proposal's record: ``name`` and the input size, channels and classes of its ``graph``."""
    analysis = analyse(graph)
    data = graph.nodes[input_node(graph)]
    return {"model": name, "image_size": data["h"], "channels": data["c"],
            "classes": analysis.shapes[output_node(graph)][-1]}  # fmt: skip


def seed_from_record(record: object) -> nx.DiGraph:
    """The seed graph a :func:`seed_record` describes; GraphError when it describes none."""
    if not isinstance(record, dict) or set(record) != set(SEED_FIELDS):
        raise GraphError(f"a seed record has the fields {', '.join(SEED_FIELDS)}, got {str(record)[:120]}")
    if not isinstance(record["model"], str):
        raise GraphError(f"the seed's model must be a name, got {str(record['model'])[:40]}")
    return seed_model(record["model"], record["image_size"], record["channels"], record["classes"])


def rebuild(seed_graph: nx.DiGraph | None, parent_graph: nx.DiGraph | None, steps: list[dict],
            kernel_size: int) -> nx.DiGraph:  # fmt: skip
    """The graph a proposal describes: the seed (no parent) or the parent's graph with ``steps``, then tuned.

    Raises :class:`~aiperf_mpi.graph.morph.MorphError` for steps that do not
    apply, GraphError for a kernel size that is not one.
    """
    if parent_graph is None:
        if seed_graph is None:
            raise GraphError("neither a seed nor a parent to rebuild from")
        if steps:
            raise GraphError("the seed is proposed as it is, without morphisms")
        return with_kernel_size(seed_graph, kernel_size)
    return with_kernel_size(replay(parent_graph, steps), kernel_size)


def structure_difference(stored: nx.DiGraph, rebuilt: nx.DiGraph) -> str:
    """Where ``stored`` differs from ``rebuilt`` in its layers, their attributes or its edges ("" if nowhere).

    The graph-level attributes (the model's name) are not compared: they do
    not change what the model computes.
    """
    only_stored = sorted(set(stored) - set(rebuilt))
    only_rebuilt = sorted(set(rebuilt) - set(stored))
    if only_stored or only_rebuilt:
        parts = []
        if only_stored:
            parts.append(f"layers {', '.join(only_stored[:3])}{' …' if len(only_stored) > 3 else ''} only stored")
        if only_rebuilt:
            parts.append(f"layers {', '.join(only_rebuilt[:3])}{' …' if len(only_rebuilt) > 3 else ''} "
                         "only rebuilt")  # fmt: skip
        return "; ".join(parts)
    for node in sorted(stored):
        mine, theirs = stored.nodes[node], rebuilt.nodes[node]
        if mine != theirs:
            keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            return f"layer {node}: " + ", ".join(f"{k} {mine.get(k)!r} stored, {theirs.get(k)!r} rebuilt"
                                                  for k in keys[:3])  # fmt: skip
    edges = {(u, v): d.get("slot", 0) for u, v, d in stored.edges(data=True)}
    expected = {(u, v): d.get("slot", 0) for u, v, d in rebuilt.edges(data=True)}
    if edges != expected:
        wrong = sorted(set(edges.items()) ^ set(expected.items()))
        (u, v), slot = wrong[0]
        where = "stored" if edges.get((u, v)) == slot else "rebuilt"
        return f"edge {u} → {v} (slot {slot}) only {where}"
    return ""
