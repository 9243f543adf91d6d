"""What the units of the run are made of, kept once: the unit stream's view of the log as it reads it (issue 51).

The run's model (:class:`aiperf_mpi.results.logmodel.RunModel`, ``run.model``) holds the segments, their
configuration, system, layout and peaks, and the open tasks as the scorer reads them; this view holds what the
model does not and more than one family's units carry.  It belongs to the unit stream
(:class:`analysis.verify.units.UnitStream`, which updates it with each event before it makes any unit of it): no
rule reads it, a rule reads only its unit, on which the stream puts what held at the event (a copy of what changes
later):

- ``strategies``: how many tasks' first proposals name each search strategy (the ``record`` family's
  ``proposed twice`` is not counted again), which the ``score`` family's rule ``algorithms`` holds to the
  configured search;
- ``segment`` (:class:`SegmentView`), since the last ``run_start`` event: each layout group's ranks and each
  proposed task's batch size, as logged (a second ``layout`` in a segment replaces the groups it lists: the
  ``inventory`` row names the second one), which the ``data`` family holds an epoch's steps to; and the
  segment's *first* ``system`` and ``layout`` events and how many of each came (the run's model keeps the last
  of each: the ``hardware`` family bounds a segment by the first and names a second);
- ``tasks`` (:class:`OpenTask`): each task proposed (its first proposal) and not yet ended, with its
  proposal's group, segment and hyper-parameters, its stored graph (:class:`ProposedGraph`, read once at the
  proposal: the ``graph files`` row judges it, the unit stream rebuilds it from its lineage) and its epoch events,
  its graph parsed and counted once, at its
  first epoch or else at its ``model_done`` (never for a task that ends without training, or fails): the
  ``record`` family holds the epochs, the operations and the model record to them, the ``evidence`` family's
  ``configuration`` row the graph's input and output to the data (``parsed``: the graph parsed, or taken from
  the count cache, for the event being judged; ``counted``: the task whose graph was counted for it; ``ended``:
  the task the event ended, still readable while it is judged);
- ``timed`` (:class:`SegmentTimes`), since the first ``run_start`` the run's model took a segment of (a later one
  it took none of opens none): the open segment's record, its last event time and latest claim, its groups
  (:class:`GroupTimes`: the layout's Horovod sizes, of the groups whose ``ranks`` is a non-empty list of integers;
  the task each trains, its last epoch and model, whether it was lost) and ``timed_tasks`` (:class:`TaskTimes`),
  its tasks proposed and not ended (a second proposal replaces the first), which the ``evidence`` family's rows
  hold the events to.  Its rules judge an event against what held *before* it: ``before`` (:class:`Before`) keeps
  that of the event being judged (the group as it was, the time of the segment's previous event), ``closed`` the
  segment a ``run_start`` closed, ``timed_task`` the event's task (an epoch's, or the one a model's end closed);
- after the walk, once: the score the run's own scorer makes of the whole log (:meth:`RunView.score`) and
  ``score.json`` as the run recorded it (:meth:`RunView.recorded_score`), which the ``score`` family's three
  rules (the score, the scored window, the validity rules) each hold to the other.

The unit stream calls :meth:`RunView.see` with each event that keeps to the schema, after the model has read it
and before it makes the units of it.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import networkx as nx

from aiperf_mpi.graph.model import GraphError, from_json, with_kernel_size
from aiperf_mpi.graph.ops import ModelOps, count_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import GraphFileError, graph_place, read_graph
from aiperf_mpi.results.logmodel import RunModel, Segment, Timeline
from aiperf_mpi.results.score import Score, run_step, score_inputs
from analysis.checks import is_regular_file, read_json

COUNT_CACHE = 64
"""distinct graphs whose counts the view keeps (a real run's graphs all differ; a bound, not a hope)"""


@dataclass
class ProposedGraph:
    """The stored graph of the task just proposed, as read for its first ``model_proposed``."""

    task: object
    place: str
    """where the proposal says the graph lies, as problem lines name it
    (:func:`~aiperf_mpi.results.graphs.graph_place`)"""
    data: bytes | None
    """the graph's bytes (None: it could not be read, ``error`` says why)"""
    error: str = ""
    """why it could not be read (:class:`~aiperf_mpi.results.graphs.GraphFileError`), as the graph files row
    names it"""
    sha256: str = ""
    """the sha256 of ``data`` ("" when it could not be read)"""
    text: str | None = None
    """``data`` as UTF-8 text (None: unread, or not UTF-8: the graph files row names it)"""


@dataclass
class OpenTask:
    """A proposed task until its model ends: its first proposal, its epochs, its graph read at the proposal, parsed
    and counted once."""

    task: object
    proposal: dict
    """its first ``model_proposed`` event (a second is not this one: the record family names it)"""
    segment: int
    """the number of the segment it was proposed in (the run's model's)"""
    graph: ProposedGraph
    epochs: list[dict] = field(default_factory=list)
    """its ``epoch`` events so far, in log order (the one being judged included)"""
    counts: ModelOps | None = None
    """the per-sample counts (None: not counted yet, or ``count_error``)"""
    count_error: str = ""
    """why it has no counts, in the words of the ops recount row"""
    stored_kernels: list = field(default_factory=list)
    """the stored graph's tunable convolutions' kernel sizes, sorted, once counted"""

    @property
    def group(self) -> object:
        """the group its proposal gave it to"""
        return self.proposal["group"]

    @property
    def hparams(self) -> dict:
        """its proposal's hyper-parameters"""
        return self.proposal["hparams"]

    @property
    def kernel(self) -> object:
        """its hyper-parameters' ``kernel_size`` (None: none), which the trainer sets in the stored graph"""
        return self.hparams.get("kernel_size")


@dataclass
class ParsedGraph:
    """A task's graph as parsed (or taken from the count cache) for the event being judged."""

    task: object
    graph: nx.DiGraph
    place: str
    sha256: str
    """the graph file's bytes' sha256: the same bytes parse to the same graph"""


@dataclass
class SegmentView:
    """What the rules share of the segment a ``run_start`` event opened, until the next one."""

    group_ranks: dict[int, int] = field(default_factory=dict)
    """each layout group's number of ranks: a group whose ``index`` is an integer and whose ``ranks`` is a list
    (a later layout's group replaces an earlier one's; one that is no such group changes nothing)"""
    task_batches: dict[object, object] = field(default_factory=dict)
    """each task proposed in the segment → its ``batch_size`` as logged (its hyper-parameters'; None: none)"""
    first_system: dict | None = None
    """the segment's first ``system`` event (None: none yet)"""
    systems: int = 0
    """how many ``system`` events the segment has had (one a segment)"""
    first_layout: dict | None = None
    """the segment's first ``layout`` event (None: none yet)"""
    layouts: int = 0
    """how many ``layout`` events the segment has had (one a segment)"""

    def system(self, event: dict) -> None:
        self.systems += 1
        if self.first_system is None:
            self.first_system = event

    def layout(self, event: dict) -> None:
        self.layouts += 1
        if self.first_layout is None:
            self.first_layout = event
        for group in event["groups"]:
            index, ranks = group.get("index") if isinstance(group, Mapping) else None, None
            if isinstance(group, Mapping):
                ranks = group.get("ranks")
            if isinstance(index, int) and not isinstance(index, bool) and isinstance(ranks, list):
                self.group_ranks[index] = len(ranks)


@dataclass
class TaskTimes:
    """A task proposed in the open segment until its model_done/model_failed: what its epochs are held to."""

    proposed: float
    batch: object
    """its ``batch_size`` as logged (the model shares equal hyper-parameters: 32 and 32.0 would be one)"""
    last_end: float | None = None


@dataclass
class GroupTimes:
    """A group within one segment: the one model it trains at a time, and when its last work ended."""

    size: int | None = None
    """its Horovod size (from the layout: the length of its ``ranks``, a non-empty list of integers)"""
    open_task: int | None = None
    last_epoch_end: float | None = None
    last_epoch: str = ""
    model_end: float | None = None
    """the log time of its previous model's model_done/model_failed"""
    model_ended: int | None = None
    lost: str = ""
    """its group_lost event's label: nothing of the group may be logged after it"""


@dataclass
class SegmentTimes:
    """The open segment beside the model's record of it (its number, start and layout): its times and groups."""

    record: Segment
    last_time: float
    """the last event time of the segment (monitor samples apart: they carry the leader's sampling time)"""
    latest_claim: float
    """the latest time anything of the segment claims (event times, epoch ends, monitor samples)"""
    latest_claim_what: str
    groups: dict[int, GroupTimes] = field(default_factory=dict)

    def claim(self, time: float, label: str) -> None:
        if time >= self.latest_claim:
            self.latest_claim, self.latest_claim_what = time, label


@dataclass
class Before:
    """What held of the open segment before the event being judged, which its rules hold it to."""

    last_time: float
    """the segment's previous event time"""
    group: GroupTimes | None = None
    """the event's group as it was (a copy; None: the event names none the view keeps)"""
    training: bool = False
    """(a proposal) its group's previous task was still open"""


def layout_sizes(event: dict) -> list[tuple[int, int]]:
    """Each layout group's index and ranks, of those whose ``index`` is an integer and whose ``ranks`` a non-empty
    list of integers (the evidence family's check, stricter than the data family's ``group_ranks``: the counts row
    names the others)."""
    valid = []
    for group in event["groups"]:
        if not isinstance(group, dict) or not isinstance(group.get("index"), int):
            continue
        ranks = group.get("ranks")
        if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
            valid.append((group["index"], len(ranks)))
    return valid


def event_label(event: Mapping, number: int) -> str:
    """'event 12 (epoch 2 of task 0, group 1)': the event, its task and group, as a problem line names it."""
    name = event[runlog.EVENT]
    if name == runlog.EPOCH:
        return f"event {number} (epoch {event['epoch']} of task {event['task']}, group {event['group']})"
    if "task" in event:
        return f"event {number} ({name} of task {event['task']}, group {event.get('group')})"
    if name in (runlog.PEAK, runlog.MONITOR):
        return f"event {number} ({name} of group {event['group']})"
    return f"event {number} ({name})"


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
    tasks: dict[object, OpenTask] = field(default_factory=dict)
    """each task proposed (its first proposal) whose model has not ended (``model_done``, ``model_failed``)"""
    ended: OpenTask | None = None
    """the task the event being judged ended (None: it ended none)"""
    parsed: ParsedGraph | None = None
    """the graph parsed for the event being judged (None: none was)"""
    counted: OpenTask | None = None
    """the task whose graph was counted (or found uncountable) for the event being judged (None: none)"""
    graph_files: set[str] = field(default_factory=set)
    """every graph file a first proposal names (a segment's appended file, or one file a task in a run from before
    it): what the graph row reads, which the side files row does not name"""
    count_cache: OrderedDict[tuple[str, str], tuple] = field(default_factory=OrderedDict)
    """(graph file sha256, kernel size) → (graph, counts, stored kernels), last used last: tasks that share a
    graph file's bytes are parsed and counted once (~2 ms a graph)"""

    timed: SegmentTimes | None = None
    """the open segment's times and groups (None before the first segment the model took)"""
    timed_tasks: dict[object, TaskTimes] = field(default_factory=dict)
    """the open segment's tasks proposed and not ended"""
    closed: SegmentTimes | None = None
    """the segment the ``run_start`` being judged closed (None: it closed none)"""
    opened: bool = False
    """whether the ``run_start`` being judged opened a segment (the model took one of it)"""
    timed_task: TaskTimes | None = None
    """the task of the epoch being judged, or the one the model_done/model_failed closed (None: none open)"""
    before: Before | None = None
    """what held before the event being judged (None: no segment open)"""

    _score: tuple[Score | None, str] | None = field(default=None, init=False, repr=False)
    _recorded: tuple[dict | None, str] | None = field(default=None, init=False, repr=False)

    def score(self, model: Timeline, truncated: bool) -> tuple[Score | None, str]:
        """The score recomputed from the whole log, computed once after the walk (None and why: it cannot be)."""
        if self._score is None:
            try:
                self._score = (score_inputs(model, run_step(model.config), truncated), "")
            except ValueError as exc:
                self._score = (None, str(exc))
        return self._score

    def recorded_score(self, path: Path) -> tuple[dict | None, str]:
        """``path`` (the run's ``score.json``) read once: its object, or None and the score row's line why not."""
        if self._recorded is None:
            if not is_regular_file(path):
                self._recorded = (None, f"{path.name} is missing (a run that did not finish has no score to submit)")
            else:
                try:
                    recorded = read_json(path)
                    if not isinstance(recorded, dict):
                        raise ValueError("not a JSON object")
                    self._recorded = (recorded, "")
                except (ValueError, UnicodeDecodeError) as exc:  # nested too deeply: bad input (guarded: exit 2)
                    self._recorded = (None, f"{path.name} is not readable: {' '.join(str(exc).split())[:200]}")
        return self._recorded

    def has_ended(self, task: object) -> bool:
        """Whether the task has ended: proposed (or failed without a proposal) and no longer open."""
        return task in self.seen_tasks and task not in self.tasks

    def see(self, event: dict, model: RunModel, number: int) -> None:
        """Take ``event`` (one that keeps to the schema, the log's ``number``-th; ``model`` has read it) into the
        view."""
        name, task = event[runlog.EVENT], event.get("task")
        self.ended = self.parsed = self.counted = None
        self._timed(event, model, number)
        if name == runlog.RUN_START:
            self.segment = SegmentView()
        elif self.segment is not None and name == runlog.LAYOUT:
            self.segment.layout(event)
        elif self.segment is not None and name == runlog.SYSTEM:
            self.segment.system(event)
        elif self.segment is not None and name == runlog.MODEL_PROPOSED:
            self.segment.task_batches[task] = event["hparams"].get("batch_size")
        if not model.segment_records:  # before the model's first segment: the segments row names it, none counts
            return
        if name == runlog.MODEL_PROPOSED and task not in self.seen_tasks:
            self.seen_tasks.add(task)
            strategy = str((event.get("search") or {}).get("strategy", "?"))
            self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
            self._proposed(event, model)
        elif name == runlog.EPOCH and task in self.tasks:
            self.tasks[task].epochs.append(event)
            self._count(self.tasks[task])
        elif name == runlog.MODEL_FAILED:
            self.seen_tasks.add(task)
            self.ended = self.tasks.pop(task, None)
        elif name == runlog.MODEL_DONE:
            self.ended = self.tasks.pop(task, None)
            if self.ended is not None:  # a task that never trained is counted at its end
                self._count(self.ended)

    def _timed(self, event: dict, model: RunModel, number: int) -> None:
        """The open segment's times, groups and tasks, after ``event``; ``before`` what held before it."""
        name, segment = event[runlog.EVENT], self.timed
        self.closed, self.opened, self.timed_task, self.before = None, False, None, None
        if name == runlog.RUN_START:
            if len(model.segment_records) <= (0 if segment is None else segment.record.number):
                return  # the model took no segment of it (a time limit it cannot read): the score family names it
            time = event[runlog.TIME]
            if segment is not None:
                self.closed = segment
                self.timed_tasks.clear()  # a task still open was discarded with its segment
            self.opened = True
            self.timed = SegmentTimes(model.segment_records[-1], time, time, f"event {number} (run_start)")
            return
        if segment is None:
            return
        label, time = event_label(event, number), event[runlog.TIME]
        self.before = before = Before(segment.last_time)
        if name == runlog.MONITOR:  # the leader's sampling time, logged when the master got it
            segment.claim(time, label)
            return
        segment.last_time = max(time, segment.last_time)
        segment.claim(time, label)
        if name == runlog.LAYOUT:
            for index, size in layout_sizes(event):
                segment.groups.setdefault(index, GroupTimes()).size = size
        elif name == runlog.MODEL_PROPOSED:
            group = segment.groups.setdefault(event["group"], GroupTimes())
            before.group = replace(group)
            before.training = group.open_task is not None and group.open_task in self.timed_tasks
            group.open_task = event["task"]
            self.timed_tasks[event["task"]] = TaskTimes(time, event["hparams"].get("batch_size"))
        elif name == runlog.EPOCH:
            end = event["end"]
            segment.claim(end, label)
            self.timed_task = task = self.timed_tasks.get(event["task"])
            group = segment.groups.setdefault(event["group"], GroupTimes())
            before.group = replace(group)
            group.last_epoch_end, group.last_epoch = max(end, group.last_epoch_end or end), label
            if task is not None:
                task.last_end = end if task.last_end is None else max(end, task.last_end)
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self.timed_task = self.timed_tasks.pop(event["task"], None)
            group = segment.groups.setdefault(event["group"], GroupTimes())
            before.group = replace(group)
            if group.open_task == event["task"]:
                group.open_task = None
            group.model_end, group.model_ended = time, event["task"]
        elif name == runlog.GROUP_LOST:
            group = segment.groups.setdefault(event["group"], GroupTimes())
            before.group = replace(group)
            group.lost = label
            self.timed_tasks.pop(event["task"], None)
            group.open_task = None

    def _proposed(self, event: dict, model: RunModel) -> None:
        """A task's first proposal: its stored graph read (the unit stream rebuilds it from what the proposal
        logs)."""
        name = event.get("graph_file")
        if isinstance(name, str) and name and not Path(name).is_absolute() and ".." not in Path(name).parts:
            is_regular_file(self.run_dir / name)  # a FIFO is bad input, not a missing graph (outside: named later)
            self.graph_files.add(Path(name).as_posix())
        place = graph_place(event)
        try:
            graph = ProposedGraph(event["task"], place, read_graph(self.run_dir, event))
        except GraphFileError as exc:
            graph = ProposedGraph(event["task"], place, None, str(exc))
        if graph.data is not None:
            graph.sha256 = hashlib.sha256(graph.data).hexdigest()
            try:
                graph.text = graph.data.decode("utf-8")
            except UnicodeDecodeError:
                graph.text = None  # the graph files row names it
        self.tasks[event["task"]] = OpenTask(event["task"], event, model.segment_records[-1].number, graph)

    def _count(self, task: OpenTask) -> None:
        """The task's per-sample counts, from its graph file, as the trainer built it (once per task).

        The last :data:`COUNT_CACHE` distinct (file sha256, kernel size) are kept: a byte-identical file parses
        to the identical graph, so nothing is skipped but the repetition.  A graph parsed here (or taken from
        the cache) is ``parsed`` for the event's readers, even when its counting then fails.
        """
        if task.counts is not None or task.count_error:
            return
        self.counted, graph = task, task.graph
        if graph.text is None:
            task.count_error = "its graph file could not be read"
            return
        kernel = task.kernel
        key = (graph.sha256, json.dumps(kernel)) if graph.sha256 else None
        cached = self.count_cache.get(key) if key is not None else None
        try:
            if cached is None:
                parsed = from_json(graph.text)
                self.parsed = ParsedGraph(task.task, parsed, graph.place, graph.sha256)
                counts = count_ops(parsed if kernel is None else with_kernel_size(parsed, kernel))
                stored = sorted({data.get("kernel") for _, data in parsed.nodes(data=True) if data.get("tunable")})
                cached = (parsed, counts, stored)
                if key is not None:
                    self.count_cache[key] = cached
                    if len(self.count_cache) > COUNT_CACHE:
                        self.count_cache.popitem(last=False)
            else:
                self.count_cache.move_to_end(key)
                self.parsed = ParsedGraph(task.task, cached[0], graph.place, graph.sha256)
            _, task.counts, task.stored_kernels = cached
        except (GraphError, ValueError, KeyError, TypeError) as exc:
            task.count_error = f"its graph cannot be counted: {' '.join(str(exc).split())[:200]}"
