"""verify's search rules: what the tuner and the search can propose, and which graphs may come twice (family
``search``).

The lineage row rebuilds each graph from what its proposal logs; it takes
the logged kernel size, batch size and morphisms as given.  A forger who
logs kernels of 9, a batch of 1 (more updates to count) or an extra
morphism (a larger model) rebuilds consistently.  Two rules, one a row
(:class:`SpaceRule`, :class:`RepeatsRule`: the registry's
:class:`~analysis.verify.registry.Rule` entries, neither reading the other),
hold the proposals to the search's own space instead, recomputed from the
configuration and the code, not read from the log:

- ``search space``: each proposal's ``kernel_size`` is one the tuner chooses
  (:data:`~aiperf_mpi.graph.model.KERNEL_SIZES`), its ``batch_size`` one of
  its group's tuner (:func:`~aiperf_mpi.graph.model.batch_choices` of the
  seed model for the configured ``device_memory_gb``, and the configured
  ``batch_size`` of the warm-up rounds); each child's morphisms as many as
  its strategy chains (:data:`STRATEGY_CHAINS`), of the search's kinds, each
  one a place the search could morph
  (:func:`~aiperf_mpi.graph.morph.is_candidate` on the graph it applies to),
  a ``deeper`` block of the proposal's own kernel size (the search makes it
  at the tuner's kernel);
- ``repeated graphs``: no two tasks have the same graph (``graph_sha256``),
  except where the log says why the master accepted it again: a seed (the
  master never refuses one) proposed while no trained model had an accuracy
  to rank — the master hands out the seed then, and a leader's view holds no
  parent — or a graph whose earlier task never ended (discarded at its
  segment's ``run_stop``, lost with its group, or open when its segment was
  killed), proposed in a later segment: a resumed master's history holds the
  ended models only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx

from aiperf_mpi.graph.lineage import seed_from_record
from aiperf_mpi.graph.model import KERNEL_SIZES, batch_choices, from_json
from aiperf_mpi.graph.morph import MAX_CHAINED, MORPH_KINDS, is_candidate, replay
from aiperf_mpi.graph.seeds import seed_model
from aiperf_mpi.results.graphs import GraphFileError, read_graph
from analysis.checks import Check, Run, is_hex
from analysis.verify.evidence import is_int

STRATEGY_CHAINS = {"explore": 1, "random": 1, "gp-ucb": MAX_CHAINED}
"""how many morphisms a child of each search strategy chains (the ``strategy`` of its proposal's ``search``):
the Bayesian search's exploration morphs once and its annealing walks chain up to ``max_morphs``
(``aiperf_mpi/search/bayesian.py``), the random search morphs once"""
ERRORS = (ValueError, KeyError, TypeError, AttributeError, RecursionError, GraphFileError, UnicodeDecodeError)
"""what a malformed record or graph raises here: the graph files and lineage rows name it"""
SEED_LATENCY = 60.0
"""seconds a leader may take to propose the seed after its work was handed out (by the log's clock): it proposes
the seed at once, without a search (a few seconds at most even at 128 ranks on 2 cores, BENCHMARKS.md); a repeated
seed proposed later, after a model was ranked, copies work the master would have refused"""
GIB = 2**30
MAX_MEMORY_GB = 2**20
"""the largest ``device_memory_gb`` the configuration takes (aiperf_mpi/config.py's bounds)"""


def _place(kind: str, args: list) -> tuple:
    return tuple(args[:1]) if kind in ("deeper", "wider") else tuple(args[:2])


class SpaceRule:
    """The row ``search space``: each proposal's kernel and batch sizes the tuner's, each child's morphisms steps
    the search can take (on its parent's stored graph, read back by its logged place)."""

    def __init__(self, run: Run) -> None:
        self.run_dir = run.run_dir
        self.space = Check("search space")
        self.config: Mapping | None = None
        self.data: object = None
        self.batches: set[int] | None = None
        self.batches_why = ""
        self.places: dict[int, dict] = {}
        """a task → where its graph lies (its proposal's graph fields)"""
        self.models: dict[int, dict] = {}
        """a model id → where its graph lies"""
        self.proposals = self.children = 0

    def run_start(self, event: dict, _: int) -> None:
        if self.config is None:
            self.config, self.data = event["config"], event.get("data")

    def model_done(self, event: dict, _: int) -> None:
        self._ended(event["task"], event["model"].get("id"))

    def model_failed(self, event: dict, _: int) -> None:
        self._ended(event["task"], event["model"])

    def _ended(self, task: int, model_id: object) -> None:
        place = self.places.pop(task, None)
        if is_int(model_id) and place is not None:
            self.models[model_id] = place  # type: ignore[index]

    def model_proposed(self, event: dict, number: int) -> None:
        task = event["task"]
        label = _label(event, number)
        self.proposals += 1
        self.places[task] = {name: event[name] for name in ("graph_file", "graph_offset", "graph_bytes")
                             if name in event}  # fmt: skip
        self._hparams(event, label)
        if event["parent"] is not None:
            self.children += 1
            self._morphs(event, label)

    def _hparams(self, event: dict, label: str) -> None:
        hparams = event["hparams"]
        kernel, batch = hparams.get("kernel_size"), hparams.get("batch_size")
        if kernel not in KERNEL_SIZES or not is_int(kernel):
            self.space.problems.append(f"{label}: kernel size {str(kernel)[:20]}: the tuner chooses among "
                                       f"{', '.join(map(str, KERNEL_SIZES))}")  # fmt: skip
        batches = self._batches(event)
        if batches is not None and (not is_int(batch) or batch not in batches):
            self.space.problems.append(f"{label}: batch size {str(batch)[:20]}: the tuner's are "
                                       f"{', '.join(map(str, sorted(batches)))} ({self.batches_why})")

    def _batches(self, event: dict) -> set[int] | None:
        """The batch sizes every group's tuner may choose, recomputed once from the configuration and the seed."""
        if self.batches is not None or self.batches_why:
            return self.batches
        config = self.config or {}
        memory, default = config.get("device_memory_gb"), config.get("batch_size")
        if not (isinstance(memory, int | float) and not isinstance(memory, bool) and 0 <= memory <= MAX_MEMORY_GB
                and is_int(default)):  # fmt: skip
            self.batches_why = "the configuration has no usable device_memory_gb and batch_size"
            self.space.missing.append(f"{self.batches_why} (a log older than them): batch sizes are not held to "
                                      "the tuner's")  # fmt: skip
            return None
        try:
            seed = self._seed(event)
        except ERRORS as exc:
            self.batches_why = f"no seed model to size them by ({str(exc)[:80]})"
            self.space.missing.append(f"{self.batches_why}: batch sizes are not held to the tuner's")
            return None
        self.batches = set(batch_choices(seed, int(memory * GIB))) | {default}
        self.batches_why = (f"the configured batch_size {default} and the powers of two that fit "
                            f"{memory:g} GB for the seed model, {config.get('seed_model')}")  # fmt: skip
        return self.batches

    def _seed(self, event: dict) -> nx.DiGraph:
        """The seed model the leaders sized their batches by: the configured one, for the data the check read
        (a log without the data check: the proposal's seed record)."""
        data = self.data
        if isinstance(data, Mapping) and isinstance(data.get("image_shape"), list) and len(data["image_shape"]) == 3:
            name = (self.config or {}).get("seed_model")
            size, _, channels = data["image_shape"]
            return seed_model(name, size, channels, data.get("classes"))
        return seed_from_record(event.get("seed"))

    def _morphs(self, event: dict, label: str) -> None:
        """A child's morphisms: as many as its strategy chains, each a step the search can take."""
        steps, kernel = event.get("morphs"), event["hparams"].get("kernel_size")
        if not isinstance(steps, list):
            return  # not recorded, or not a list: the lineage row says so
        strategy = event["search"].get("strategy")
        known = isinstance(strategy, str) and strategy in STRATEGY_CHAINS
        chain = STRATEGY_CHAINS[strategy] if known else MAX_CHAINED
        if strategy is not None and not known:
            self.space.problems.append(f"{label}: strategy {str(strategy)[:30]!r}: a child of the search is one of "
                                       f"{', '.join(STRATEGY_CHAINS)}")  # fmt: skip
        if not 1 <= len(steps) <= chain:
            self.space.problems.append(f"{label}: {len(steps)} morphisms: a {strategy or 'search'} proposal "
                                       f"chains 1{f' to {chain}' if chain > 1 else ''}")  # fmt: skip
        graph = self._parent_graph(event["parent"])
        for number, step in enumerate(steps, start=1):
            if not isinstance(step, Mapping) or not isinstance(step.get("args"), list):
                return  # the lineage row names a step that is not one
            kind, args = step.get("kind"), step["args"]
            if kind not in MORPH_KINDS:
                self.space.problems.append(f"{label}: step {number}: {str(kind)[:30]!r} is no morphism the search "
                                           f"makes ({', '.join(MORPH_KINDS)})")  # fmt: skip
                return
            if kind == "deeper" and len(args) == 2 and args[1] != kernel:
                self.space.problems.append(f"{label}: step {number}: a deeper block of kernel {str(args[1])[:20]}, "
                                           f"the search makes it at the proposal's kernel size {kernel}")
            if graph is None:
                continue
            try:
                if not is_candidate(graph, kind, _place(kind, args)):
                    self.space.problems.append(f"{label}: step {number}: {kind}{tuple(args)} is no place the "
                                               "search morphs (not among the candidates of the graph it applies "
                                               "to)")  # fmt: skip
                    return
                graph = replay(graph, [step])
            except ERRORS:
                return  # a step that does not apply: the lineage row names it

    def _parent_graph(self, parent: object) -> nx.DiGraph | None:
        place = self.models.get(parent) if is_int(parent) else None
        if not place:
            return None  # the lineage row names a parent that is not a model logged before
        try:
            return from_json(read_graph(self.run_dir, place).decode("utf-8"))
        except ERRORS:
            return None  # the graph files row names an unreadable graph

    def finish(self) -> list[Check]:
        self.space.summary = (f"{self.proposals} proposals' kernel and batch sizes in the tuner's space, "
                              f"{self.children} children's morphisms steps the search can take")  # fmt: skip
        return [self.space]


class RepeatsRule:
    """The row ``repeated graphs``: no graph twice, but where the log says why the master accepted it again; a
    graph's identity in other bytes is the shared view's lineage's."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.repeats = Check("repeated graphs")
        self.segment = 0
        self.segment_start = 0
        self.graphs: dict[str, tuple[int, int, bool]] = {}
        """a graph_sha256 → the latest task that had it: (task, segment, a seed)"""
        self.ended: set[int] = set()
        self.not_ended: dict[int, str] = {}
        """a task that never ended → why (the log's word)"""
        self.open: set[int] = set()
        self.handed_out: dict[int, tuple[int, object]] = {}
        """a group → when its work was last handed out in the segment: the event number and the log's time of its
        probe or its previous task's end (its next work was handed out after it)"""
        self.ranked_at: int | None = None
        """the first model_done whose model has an accuracy to rank (after it the master hands out no seed)"""
        self.proposals = self.unhashed = self.seeds_again = self.again = 0

    # -- segments and ends

    def run_start(self, event: dict, number: int) -> None:
        for task in self.open:  # no run_stop said it discarded them: the segment was killed
            self.not_ended.setdefault(task, f"open when segment {self.segment} was cut")
        self.open.clear()
        self.segment, self.segment_start = self.segment + 1, number
        self.handed_out.clear()

    def run_stop(self, event: dict, _: int) -> None:
        for task in event["discarded_tasks"]:
            if is_int(task):
                self.not_ended[task] = f"discarded at segment {self.segment}'s run_stop"

    def peak(self, event: dict, number: int) -> None:
        """A group's probe: the master logs it on the group's Ready and hands the group its first work at once
        (job/master.py), so its first task was handed out no earlier than here."""
        if is_int(event["group"]) and event["group"] not in self.handed_out:
            self.handed_out[event["group"]] = (number, event.get("time"))

    def group_lost(self, event: dict, _: int) -> None:
        if is_int(event["task"]):
            self.not_ended[event["task"]] = f"lost with group {event['group']}"
            self.open.discard(event["task"])

    def model_done(self, event: dict, number: int) -> None:
        record = event["model"]
        self._ended(event, number)
        scores = (record.get("predicted_accuracy"), record.get("accuracy"))  # a junk prediction: its accuracy
        if self.ranked_at is None and record.get("status") == "trained" and any(map(_is_number, scores)):
            self.ranked_at = number

    def model_failed(self, event: dict, number: int) -> None:
        self._ended(event, number)

    def _ended(self, event: dict, number: int) -> None:
        task = event["task"]
        self.ended.add(task)
        self.open.discard(task)
        self.handed_out[event["group"]] = (number, event.get("time"))

    # -- proposals

    def model_proposed(self, event: dict, number: int) -> None:
        self.proposals += 1
        self.open.add(event["task"])
        self._repeated(event, _label(event, number))

    def _repeated(self, event: dict, label: str) -> None:
        digest, task, group, seed = event.get("graph_sha256"), event["task"], event["group"], event["parent"] is None
        if not is_hex(digest, 64):
            self.unhashed += 1
            return
        lineage = self.run.view.lineage if self.run.view is not None else None
        digest = (lineage.take_identity(task) if lineage is not None else None) or digest  # other bytes, one graph
        earlier = self.graphs.get(digest)
        self.graphs[digest] = (task, self.segment, seed)
        if earlier is None:
            return
        first, segment, was_seed = earlier
        if seed and was_seed:
            handed_out, since = self.handed_out.get(group, (self.segment_start, None))
            now = event.get("time")
            late = _is_number(since) and _is_number(now) and now - since > SEED_LATENCY  # type: ignore[operator]
            if (self.ranked_at is None or self.ranked_at > handed_out) and not (late and self.ranked_at is not None):
                self.seeds_again += 1
                return
            if late and self.ranked_at is not None and self.ranked_at > handed_out:
                self.repeats.problems.append(f"{label}: the seed again (task {first}'s graph) {now - since:.0f} s "
                                             f"after group {group}'s work was handed out, when model_done at event "
                                             f"{self.ranked_at} had an accuracy to rank: a leader proposes the seed "
                                             f"at once (within {SEED_LATENCY:g} s)")  # type: ignore[operator]
                return
            self.repeats.problems.append(f"{label}: the seed again (task {first}'s graph), but model_done at event "
                                         f"{self.ranked_at} had an accuracy to rank before the group's work was "
                                         "handed out: the master hands out the seed only while no model has one")
        elif first not in self.ended and first in self.not_ended and segment < self.segment:
            self.again += 1
            self.repeats.notes.append(f"{label}: task {first}'s graph again: task {first} was "
                                      f"{self.not_ended[first]} (a resumed master knows only ended models)")
        else:
            known = "ended before it" if first in self.ended else f"of segment {segment}"
            self.repeats.problems.append(f"{label}: task {first}'s graph again (graph_sha256 {digest[:12]}…), a "
                                         f"task {known}: the master answers Duplicate to a graph it knows, and the "
                                         "log gives no reason it was proposed again")  # fmt: skip

    def finish(self) -> list[Check]:
        self.repeats.summary = (f"{len(self.graphs)} distinct graphs of {self.proposals - self.unhashed} "
                                f"proposals; {self.seeds_again} seed(s) proposed again before any model could "
                                f"be ranked, {self.again} graph(s) of a task that never ended proposed again")
        if self.unhashed:
            self.repeats.missing.append(f"{self.unhashed} of {self.proposals} model_proposed events have no "
                                        "graph_sha256 (a log older than the field): their graphs are not compared")
        return [self.repeats]


def _label(event: dict, number: int) -> str:
    """A proposal as the rows' lines name it."""
    return f"event {number} (model_proposed of task {event['task']}, group {event['group']})"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
