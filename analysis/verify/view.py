"""What several of verify's rules need of the run, kept once: the shared view the walk updates before any rule
sees an event (issue 44).

The run's model (:class:`aiperf_mpi.results.logmodel.RunModel`, ``run.model``) holds the segments, their
configuration, system, layout and peaks, and the open tasks as the scorer reads them; this view holds what the
model does not and more than one family reads, so that no family reaches into another's state:

- ``strategies``: how many tasks' first proposals name each search strategy (the ``record`` family's
  ``proposed twice`` is not counted again), which the ``score`` family's rule ``algorithms`` holds to the
  configured search;
- ``graph`` (:class:`ProposedGraph`): the stored graph of the task just proposed (its first proposal), read
  once, which the ``record`` family's ``graph files`` row judges; only the latest is kept (a task's later
  readers read its file again, by the logged place), so the view's memory does not grow with the models;
- ``lineage`` (:class:`analysis.verify.lineage.LineageCheck`): each proposed graph rebuilt from its seed or
  its parent's stored graph (read back from the graph files by its logged place, never kept) and the logged
  morphisms, its problems the ``lineage`` row's; the ``search`` family's ``repeated graphs`` asks it for a
  graph's identity when its file holds it in other bytes;
- ``segment`` (:class:`SegmentView`), since the last ``run_start`` event: each layout group's ranks and each
  proposed task's batch size, as logged (a second ``layout`` in a segment replaces the groups it lists: the
  ``inventory`` row names the second one), which the ``data`` family holds an epoch's steps to.

The walk (:func:`analysis.verify.registry.walk`) calls :meth:`RunView.see` with each event that keeps to the
schema, after the model has read it and before the families are given it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import GraphFileError, read_graph
from aiperf_mpi.results.logmodel import RunModel
from analysis.checks import Check, is_regular_file
from analysis.verify.lineage import LineageCheck


@dataclass
class ProposedGraph:
    """The stored graph of the task just proposed, as read for its first ``model_proposed``."""

    task: object
    data: bytes | None
    """the graph's bytes (None: it could not be read, ``error`` says why)"""
    error: str = ""
    """why it could not be read (:class:`~aiperf_mpi.results.graphs.GraphFileError`), as the graph files row
    names it"""


@dataclass
class SegmentView:
    """What the rules share of the segment a ``run_start`` event opened, until the next one."""

    group_ranks: dict[int, int] = field(default_factory=dict)
    """each layout group's number of ranks: a group whose ``index`` is an integer and whose ``ranks`` is a list
    (a later layout's group replaces an earlier one's; one that is no such group changes nothing)"""
    task_batches: dict[object, object] = field(default_factory=dict)
    """each task proposed in the segment → its ``batch_size`` as logged (its hyper-parameters'; None: none)"""

    def layout(self, event: dict) -> None:
        for group in event["groups"]:
            index, ranks = group.get("index") if isinstance(group, Mapping) else None, None
            if isinstance(group, Mapping):
                ranks = group.get("ranks")
            if isinstance(index, int) and not isinstance(index, bool) and isinstance(ranks, list):
                self.group_ranks[index] = len(ranks)


@dataclass
class RunView:
    """The shared facts of one verification, as of the event being judged."""

    run_dir: Path
    strategies: dict[str, int] = field(default_factory=dict)
    """search strategy → the tasks whose first proposal names it (``?``: a proposal that names none)"""
    seen_tasks: set[int] = field(default_factory=set)
    """every task proposed, or failed without a proposal (its search found no child): a second proposal of one
    is the record family's problem, never a second strategy"""
    segment: SegmentView | None = None
    """the segment the last ``run_start`` event opened (None before the first)"""
    graph: ProposedGraph | None = None
    """the stored graph of the latest first proposal (None before one)"""
    lineage: LineageCheck = field(init=False)
    """the graphs rebuilt from their proposals: the ``lineage`` row"""

    def __post_init__(self) -> None:
        self.lineage = LineageCheck(self.run_dir, Check("lineage"))

    def see(self, event: dict, model: RunModel) -> None:
        """Take ``event`` (one that keeps to the schema; ``model`` has read it) into the view."""
        name, task = event[runlog.EVENT], event.get("task")
        if name == runlog.RUN_START:
            self.segment = SegmentView()
        elif self.segment is not None and name == runlog.LAYOUT:
            self.segment.layout(event)
        elif self.segment is not None and name == runlog.MODEL_PROPOSED:
            self.segment.task_batches[task] = event["hparams"].get("batch_size")
        if not model.segment_records:  # before the model's first segment: the segments row names it, none counts
            return
        if name == runlog.MODEL_PROPOSED and task not in self.seen_tasks:
            self.seen_tasks.add(task)
            strategy = str((event.get("search") or {}).get("strategy", "?"))
            self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
            self._proposed(event, model)
        elif name == runlog.MODEL_FAILED:
            self.seen_tasks.add(task)
            self.lineage.ended(task, event["model"])
        elif name == runlog.MODEL_DONE:
            self.lineage.ended(task, event["model"].get("id"))

    def _proposed(self, event: dict, model: RunModel) -> None:
        """A task's first proposal: its stored graph read, and rebuilt from what the proposal logs."""
        name = event.get("graph_file")
        if isinstance(name, str) and name and not Path(name).is_absolute() and ".." not in Path(name).parts:
            is_regular_file(self.run_dir / name)  # a FIFO is bad input, not a missing graph (outside: named later)
        try:
            self.graph = ProposedGraph(event["task"], read_graph(self.run_dir, event))
        except GraphFileError as exc:
            self.graph = ProposedGraph(event["task"], None, str(exc))
        text = None
        if self.graph.data is not None:
            try:
                text = self.graph.data.decode("utf-8")
            except UnicodeDecodeError:
                text = None  # the graph files row names it
        self.lineage.proposed(event, text, model.segment_records[-1].config)
