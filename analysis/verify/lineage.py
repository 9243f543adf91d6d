"""The verifier's lineage check: every model's graph rebuilt from the seed, its logged morphisms and kernel size.

A graph file and its ``graph_sha256`` can be forged together (a kernel size
changed, a layer widened, and the hash recomputed), and the ops recount then
counts the forged graph.  What a forger cannot also change is where the graph
comes from: the seed model the configuration names, and a chain of
morphisms, each logged with its proposal (``model_proposed``'s ``seed`` or
``morphs``, see :mod:`aiperf_mpi.graph.lineage`).  Each proposal is checked
when the walk reads it, against the stored graph file of its parent — which
was itself checked when *its* proposal was read, so by induction every graph
descends from the seed as logged.  Parents must therefore precede their
children in the log, as they do in a run.

Memory: per model its task, graph file name and the file's sha256 (the
parent's file is read again, and must still hash the same, when a child
names it), and the seed graph; no graph is kept between events.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import networkx as nx

from aiperf_mpi.graph.lineage import rebuild, seed_from_record, structure_difference
from aiperf_mpi.graph.model import from_json, to_json
from aiperf_mpi.graph.morph import MAX_CHAINED as MAX_MORPHS
from aiperf_mpi.results.graphs import LENGTH, OFFSET, GraphFileError, graph_place, read_graph

ERRORS = (ValueError, KeyError, TypeError, AttributeError, RecursionError)
"""what a malformed record or graph raises here (GraphError and MorphError are ValueErrors)"""


class LineageCheck:
    """Fed by the verifier's walk: :meth:`proposed` for each ``model_proposed``, :meth:`ended` for each model."""

    def __init__(self, run_dir: Path, check) -> None:
        """``check`` is the verifier's row (``analysis.checks.Check``): problems and missing lines go there."""
        self.run_dir = run_dir
        self.check = check
        self.tasks: dict[int, tuple[dict, str] | None] = {}
        """a proposed task not yet ended → (where its graph lies: the event's graph fields, its sha256), None when
        its graph was unreadable"""
        self.models: dict[int, tuple[int, tuple[dict, str] | None]] = {}
        """a logged model's id → (its task, its task's graph file and sha256 or None)"""
        self.seeds: dict[str, nx.DiGraph] = {}
        """seed graphs by their record's JSON (a run has one)"""
        self.identity: dict[int, str] = {}
        """a proposed task → the sha256 of its graph written as the package writes it (``to_json`` of the rebuild),
        for a graph file that holds the rebuilt structure in other bytes (re-serialised): the identity the repeated
        graphs row compares, so the same graph in other bytes is the same graph.  Read once (``take_identity``)"""
        self.proposals = self.rebuilt = self.seed_proposals = self.unrecorded = 0

    def proposed(self, event: dict, graph_text: str | None, config: dict) -> None:
        """Rebuild the proposed graph and compare it with ``graph_text``, the task's stored graph file."""
        task = event["task"]
        self.proposals += 1
        if graph_text is None:  # missing, outside the run or not UTF-8: the graph files check says so
            self.tasks[task] = None
            return
        place = {name: event[name] for name in ("graph_file", OFFSET, LENGTH) if name in event}
        self.tasks[task] = (place, _sha256(graph_text))
        parent, kernel = event["parent"], event["hparams"].get("kernel_size")
        where = f"model_proposed of task {task}"
        if "seed" not in event if parent is None else "morphs" not in event:
            self.unrecorded += 1
            return
        if isinstance(kernel, bool) or not isinstance(kernel, int):
            self.check.problems.append(f"{where}: no kernel_size in its hparams ({str(kernel)[:40]}) to rebuild "
                                       "its graph at")  # fmt: skip
            return
        if parent is None:
            self._seed(event, graph_text, kernel, config, where)
        else:
            self._child(event, graph_text, kernel, where)

    def _seed(self, event: dict, stored: str, kernel: int, config: dict, where: str) -> None:
        record, steps = event["seed"], event.get("morphs")
        self.seed_proposals += 1
        named = config.get("seed_model")
        if named is not None and (not isinstance(record, dict) or record.get("model") != named):
            self.check.problems.append(f"{where}: its seed record {_brief(record)} is not the configuration's "
                                       f"seed_model {named!r}")  # fmt: skip
            return
        if steps:
            self.check.problems.append(f"{where}: a seed (no parent) with morphisms {_steps(steps)}")
            return
        key = json.dumps(record, sort_keys=True, default=str)
        try:
            if key not in self.seeds:
                self.seeds[key] = seed_from_record(record)
            rebuilt = rebuild(self.seeds[key], None, [], kernel)
        except ERRORS as exc:
            self.check.problems.append(f"{where}: its seed record {_brief(record)} builds no seed ({_brief(exc)})")
            return
        self._compare(stored, rebuilt, f"{where}: its graph is not the seed {record.get('model')!r} "
                                       f"({_brief(record)}) at kernel {kernel}", event["task"])  # fmt: skip

    def _child(self, event: dict, stored: str, kernel: int, where: str) -> None:
        parent, steps = event["parent"], event["morphs"]
        if not 1 <= len(steps) <= MAX_MORPHS:
            self.check.problems.append(f"{where}: {len(steps)} morphisms logged, the search chains 1 to "
                                       f"{MAX_MORPHS}")  # fmt: skip
            return
        if isinstance(parent, bool) or parent not in self.models:
            self.check.problems.append(f"{where}: its parent model {parent} is not a model logged before it "
                                       "(a parent precedes its children)")  # fmt: skip
            return
        parent_task, parent_file = self.models[parent]
        named = f"its parent model {parent} (task {parent_task})"
        if parent_file is None:
            self.check.problems.append(f"{where}: {named} has no readable graph file to morph")
            return
        try:
            text = read_graph(self.run_dir, parent_file[0]).decode("utf-8")
        except (GraphFileError, UnicodeDecodeError) as exc:
            self.check.problems.append(f"{where}: {named}: {graph_place(parent_file[0])} cannot be read again "
                                       f"({_brief(exc)})")  # fmt: skip
            return
        if _sha256(text) != parent_file[1]:
            self.check.problems.append(f"{where}: {named}: {graph_place(parent_file[0])} changed while it was "
                                       "verified")  # fmt: skip
            return
        rule = f"{where}: its graph is not {named}'s graph with the logged morphisms {_steps(steps)} at kernel {kernel}"
        try:
            rebuilt = rebuild(None, from_json(text), steps, kernel)
        except ERRORS as exc:
            self.check.problems.append(f"{rule}: they do not apply ({_brief(exc)})")
            return
        self._compare(stored, rebuilt, rule, event["task"])

    def _compare(self, stored: str, rebuilt: nx.DiGraph, rule: str, task: int) -> None:
        """``stored`` (the graph file's text) against the rebuild: the same text as the leader wrote, or else
        the same structure (a file re-serialised differently still passes, under the rebuild's identity)."""
        written = to_json(rebuilt)
        if stored != written:
            try:
                difference = structure_difference(from_json(stored), rebuilt)
            except ERRORS as exc:
                difference = f"the graph file is not a graph: {_brief(exc)}"
            if difference:
                self.check.problems.append(f"{rule} ({difference})")
                return
            self.identity[task] = _sha256(written)
        self.rebuilt += 1

    def take_identity(self, task: object) -> str | None:
        """The canonical sha256 of ``task``'s graph when its file holds it in other bytes than the package writes
        (None: its bytes are the package's, or it was not rebuilt), once."""
        return self.identity.pop(task, None) if isinstance(task, int) else None

    def ended(self, task: object, model_id: object) -> None:
        """A model_done or model_failed: model ``model_id`` is ``task``'s, a parent its successors may name."""
        if isinstance(model_id, int) and not isinstance(model_id, bool) and isinstance(task, int):
            self.models[model_id] = (task, self.tasks.pop(task, None))

    def finish(self) -> None:
        """The row's summary, and what older logs do not record."""
        self.check.summary = (f"{self.rebuilt} of {self.proposals} graph files rebuilt from the seed model, the "
                              "logged morphisms and kernel sizes")  # fmt: skip
        if self.unrecorded:
            self.check.missing.append(f"{self.unrecorded} of {self.proposals} model_proposed events record neither "
                                      "a seed nor morphisms (a log older than the fields): their graphs cannot be "
                                      "rebuilt")  # fmt: skip


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
