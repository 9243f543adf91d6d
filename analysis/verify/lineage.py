"""The verifier's lineage: every model's graph rebuilt from the seed, its logged morphisms and kernel size.

A graph file and its ``graph_sha256`` can be forged together (a kernel size
changed, a layer widened, and the hash recomputed), and the ops recount then
counts the forged graph.  What a forger cannot also change is where the graph
comes from: the seed model the configuration names, and a chain of
morphisms, each logged with its proposal (``model_proposed``'s ``seed`` or
``morphs``, see :mod:`aiperf_mpi.graph.lineage`).  Each proposal is rebuilt
when the walk reads it (:func:`rebuild_proposal`, called once a proposal by
the unit stream, :class:`analysis.verify.units.UnitStream`, which keeps what
needs the log's order: each model's graph place and sha256 as logged before
its children, and the seed graphs), against the stored graph file of its
parent — which was itself rebuilt when *its* proposal was read, so by
induction every graph descends from the seed as logged.  Parents must
therefore precede their children in the log, as they do in a run.  The
outcome (:class:`Rebuilt`) lies on the task's unit: the ``lineage`` row
(:func:`analysis.verify.record.lineage`) reads it there, and the
``repeated graphs`` row its identity, on the proposal's unit.

Memory: per model its task, graph file name and the file's sha256 (the
parent's file is read again, and must still hash the same, when a child
names it), and the seed graph; no graph is kept between events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from aiperf_mpi.graph.lineage import rebuild, seed_from_record, structure_difference
from aiperf_mpi.graph.model import from_json, to_json
from aiperf_mpi.graph.morph import MAX_CHAINED as MAX_MORPHS
from aiperf_mpi.results.graphs import LENGTH, OFFSET, GraphFileError, graph_place, read_graph

ERRORS = (ValueError, KeyError, TypeError, AttributeError, RecursionError)
"""what a malformed record or graph raises here (GraphError and MorphError are ValueErrors)"""


StoredGraph = tuple[dict, str]
"""where a proposal's graph lies (its graph fields) and the sha256 of its text"""


@dataclass(frozen=True)
class Rebuilt:
    """A first proposal's graph as its lineage rebuilt it: what the ``lineage`` row says of it, and what its
    children and the ``repeated graphs`` row need of it."""

    stored: StoredGraph | None = None
    """where its graph lies and the sha256 of the text read (None: unreadable: the graph files row says so)"""
    problem: str = ""
    """the ``lineage`` row's line about it ("": none)"""
    rebuilt: bool = False
    """its graph file is its rebuild (in the package's bytes, or in others of the same structure)"""
    unrecorded: bool = False
    """it logs neither a seed nor morphisms (a log older than the fields)"""
    identity: str | None = None
    """the sha256 of its rebuild written as the package writes it (``to_json``), when its file holds the rebuilt
    structure in other bytes (re-serialised): the identity the ``repeated graphs`` row compares, so the same graph
    in other bytes is the same graph (None: its bytes are the package's, or it was not rebuilt)"""


def rebuild_proposal(run_dir: Path, event: dict, graph_text: str | None, config: dict,
                     models: Mapping[object, tuple[object, StoredGraph | None]],
                     seeds: dict[str, nx.DiGraph]) -> Rebuilt:  # fmt: skip
    """Rebuild a first proposal's graph and compare it with ``graph_text``, the task's stored graph file.

    ``models`` is each model logged before it (its id → its task and where its graph lies), ``seeds`` the seed
    graphs built so far by their record's JSON (a run has one): both the caller's, which keeps them in the log's
    order; a seed built here is added to ``seeds``."""
    if graph_text is None:  # missing, outside the run or not UTF-8: the graph files check says so
        return Rebuilt()
    place = {name: event[name] for name in ("graph_file", OFFSET, LENGTH) if name in event}
    stored = (place, _sha256(graph_text))
    parent, kernel = event["parent"], event["hparams"].get("kernel_size")
    where = f"model_proposed of task {event['task']}"
    if "seed" not in event if parent is None else "morphs" not in event:
        return Rebuilt(stored, unrecorded=True)
    if isinstance(kernel, bool) or not isinstance(kernel, int):
        return Rebuilt(stored, f"{where}: no kernel_size in its hparams ({str(kernel)[:40]}) to rebuild its graph at")
    if parent is None:
        rebuilt, rule = _seed(event, kernel, config, where, seeds)
    else:
        rebuilt, rule = _child(run_dir, event, kernel, where, models)
    if rebuilt is None:
        return Rebuilt(stored, rule)
    return _compare(stored, graph_text, rebuilt, rule)


def _seed(event: dict, kernel: int, config: dict, where: str,
          seeds: dict[str, nx.DiGraph]) -> tuple[nx.DiGraph | None, str]:  # fmt: skip
    """The seed rebuilt, and the rule its file is held to (None and the problem: it cannot be)."""
    record, steps = event["seed"], event.get("morphs")
    named = config.get("seed_model")
    if named is not None and (not isinstance(record, dict) or record.get("model") != named):
        return None, f"{where}: its seed record {_brief(record)} is not the configuration's seed_model {named!r}"
    if steps:
        return None, f"{where}: a seed (no parent) with morphisms {_steps(steps)}"
    key = json.dumps(record, sort_keys=True, default=str)
    try:
        if key not in seeds:
            seeds[key] = seed_from_record(record)
        rebuilt = rebuild(seeds[key], None, [], kernel)
    except ERRORS as exc:
        return None, f"{where}: its seed record {_brief(record)} builds no seed ({_brief(exc)})"
    return rebuilt, (f"{where}: its graph is not the seed {record.get('model')!r} ({_brief(record)}) at kernel "
                     f"{kernel}")  # fmt: skip


def _child(run_dir: Path, event: dict, kernel: int, where: str,
           models: Mapping[object, tuple[object, StoredGraph | None]]) -> tuple[nx.DiGraph | None, str]:  # fmt: skip
    """The child rebuilt from its parent's stored graph, read again, and the rule its file is held to (None and
    the problem: it cannot be)."""
    parent, steps = event["parent"], event["morphs"]
    if not 1 <= len(steps) <= MAX_MORPHS:
        return None, f"{where}: {len(steps)} morphisms logged, the search chains 1 to {MAX_MORPHS}"
    if isinstance(parent, bool) or parent not in models:
        return None, (f"{where}: its parent model {parent} is not a model logged before it (a parent precedes its "
                      "children)")  # fmt: skip
    parent_task, parent_file = models[parent]
    named = f"its parent model {parent} (task {parent_task})"
    if parent_file is None:
        return None, f"{where}: {named} has no readable graph file to morph"
    try:
        text = read_graph(run_dir, parent_file[0]).decode("utf-8")
    except (GraphFileError, UnicodeDecodeError) as exc:
        return None, f"{where}: {named}: {graph_place(parent_file[0])} cannot be read again ({_brief(exc)})"
    if _sha256(text) != parent_file[1]:
        return None, f"{where}: {named}: {graph_place(parent_file[0])} changed while it was verified"
    rule = f"{where}: its graph is not {named}'s graph with the logged morphisms {_steps(steps)} at kernel {kernel}"
    try:
        return rebuild(None, from_json(text), steps, kernel), rule
    except ERRORS as exc:
        return None, f"{rule}: they do not apply ({_brief(exc)})"


def _compare(stored: StoredGraph, text: str, rebuilt: nx.DiGraph, rule: str) -> Rebuilt:
    """``text`` (the graph file's) against the rebuild: the same text as the leader wrote, or else the same
    structure (a file re-serialised differently still passes, under the rebuild's identity)."""
    try:
        written = to_json(rebuilt)
    except ERRORS as exc:  # a value no JSON holds (an inf a forged parent's file carries): no graph file is it
        return Rebuilt(stored, f"{rule}: the rebuild cannot be written as a graph file ({_brief(exc)})")
    if text == written:
        return Rebuilt(stored, rebuilt=True)
    try:
        difference = structure_difference(from_json(text), rebuilt)
    except ERRORS as exc:
        difference = f"the graph file is not a graph: {_brief(exc)}"
    if difference:
        return Rebuilt(stored, f"{rule} ({difference})")
    return Rebuilt(stored, rebuilt=True, identity=_sha256(written))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _brief(value: object) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 120 else text[:117] + "…"


def _steps(steps: object) -> str:
    """``deeper(s2b1_relu1, 3); wider(stem_conv, 8)``: the logged morphisms, short."""
    if not isinstance(steps, list):
        return _brief(steps)
    parts = []
    for step in steps[:MAX_MORPHS + 1]:
        if isinstance(step, dict) and isinstance(step.get("args"), list):
            parts.append(f"{step.get('kind')}({', '.join(str(a) for a in step['args'])})")
        else:
            parts.append(_brief(step))
    return _brief("; ".join(parts) + ("; …" if len(steps) > MAX_MORPHS + 1 else ""))
