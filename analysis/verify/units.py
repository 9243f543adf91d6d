"""The run as finished units, and what a rule that is a plain function finds in one (issue 51).

A rule of verify is ``def rule(unit) -> findings``: a function of one finished
unit of the run, its row's text its docstring, listed once in the registry
(:data:`analysis.verify.registry.FAMILIES`) as a (row, function) pair.  The unit
it reads is the type its first parameter names:

- :class:`TaskUnit`: a task, once it has ended (its ``model_done`` or
  ``model_failed``) or the log has (a task its segment discarded stays open:
  an epoch may still name it): its first proposal, its later ones while open,
  its epochs, its end, its stored graph read and counted once;
- :class:`StrayEvent`: an event of a task that was not open when it came (an
  epoch after its task's end, an end with no open task, a second proposal of
  an ended task), finished at once;
- :class:`Misplaced`: an event before the first ``run_start`` or, other than a
  ``score``, after its segment's ``run_stop``, finished at once;
- :class:`SegmentUnit`: a segment, once the next ``run_start`` opened another
  or the log ended: its record in the run's model, its ``run_start``(s),
  ``run_stop``(s) and ``score`` events, each score as recomputed from the log
  as of it;
- :class:`RunUnit`: the run, once: its model, the score recomputed from the
  whole log, ``score.json`` as read, what the stream counted;
- :class:`SegmentEvent` (the evidence family): an event of an open segment
  that belongs to no task (a ``system``, ``layout``, ``peak``, ``monitor``,
  ``staging``, ``group_lost``, ``run_stop``, ``score``…), finished at once,
  with what held when it came (:class:`Timed`; a task's events carry theirs
  on its unit);
- the mllog family's units (:mod:`analysis.verify.mllog_reader`): what
  ``mllog.log`` said at one event, read in step with the log;
- :class:`Proposal` (the search and data families): every ``model_proposed``
  event, finished at once, with what held before it: the data set of the
  last ``run_start``, the tuners' batch sizes (sized once), its parent's graph
  place, the latest earlier proposal of the same graph (:class:`Repeat`);
- :class:`DataEpoch` (the data family): every ``epoch`` event, finished at
  once, with the split of the last ``run_start`` and its group's ranks and
  task's batch size as the segment logged them.

A task's first proposal is rebuilt from its lineage once, when it comes
(:func:`analysis.verify.lineage.rebuild_proposal`, on its task unit): the
``repeated graphs`` row needs the rebuild's identity in the proposals' order.

:class:`UnitStream` makes them, in step with the walk (the run's model has read
each event first, then the stream's view, :mod:`analysis.verify.view`), and
keeps every fact that needs the log's order — the model id the previous end
implies, whose graph already lay at a place, which graph the master had seen,
the hardware bounds as of an event (:mod:`analysis.verify.bounds`), the
tuners' space (:mod:`analysis.verify.tuner`), ``mllog.log``'s lines — so a
rule keeps none: what it needs is on its unit.  Memory: the open tasks'
epochs (the view keeps them too), one segment, counters, and what the old
rules kept per model (each model's graph place and digest for its children's
lineage and the repeated graphs row; each task's latest graph place for the
weights row).

A rule yields :class:`Finding` s: a problem, a missing record, a note, a
summary, or a count (``count("hashes")``) that the row's run function reads
back (its second parameter).  Each carries ``at``, the number of the event it
was found at (:data:`END`: at the log's end), and a row's lines are put in that
order (:class:`RowFindings`): a task's lines come when the task ends, in the
places its events had in the log.
"""

from __future__ import annotations

import heapq
import inspect
import math
import os
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

import networkx as nx

from aiperf_mpi.graph.model import GraphError, infer_shapes, input_node, output_node
from aiperf_mpi.results import runlog
from aiperf_mpi.results.datasets import DataSplit, documented_split, image_shape
from aiperf_mpi.results.graphs import OFFSET
from aiperf_mpi.results.logmodel import RunModel, Segment, Timeline, epoch_values
from aiperf_mpi.results.score import Score, run_step, score_inputs
from aiperf_mpi.results.stored_weights import BEST_METADATA, WEIGHTS_SHA256
from analysis.checks import MAX_KEPT, Check, Lines, is_hex, is_regular_file, read_json
from analysis.verify.bounds import BoundsAsOf, BoundsTracker
from analysis.verify.lineage import Rebuilt, StoredGraph, rebuild_proposal
from analysis.verify.mllog_reader import (
    EpochLines,
    MLLogEnded,
    MLLogFollower,
    PowerLines,
    RunStopLine,
    SegmentEnded,
    SegmentStarted,
)
from analysis.verify.tuner import TunerBatches, tuner_batches
from analysis.verify.view import COUNT_CACHE, Before, OpenTask, ProposedGraph, RunView, SegmentTimes, TaskTimes

END = math.inf
"""where a finding made at the log's end sorts: after every event"""
PROBLEM, MISSING, NOTE, SUMMARY, COUNT = "problem", "missing", "note", "summary", "count"
MOST = "most"
"""(evidence family) a finding that keeps the largest value of a name for the row's run function"""


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: its kind, its text (a count's: the counter's name), the event it was found at."""

    at: float
    text: str
    kind: str = PROBLEM
    row: str | None = None
    """the row it belongs to when its rule fills several (``rule dataset``: one per validity rule); None: the
    rule's own"""
    value: float = 0.0
    """(evidence family) a :func:`most`'s value"""


def problem(at: float, text: str, row: str | None = None) -> Finding:
    return Finding(at, text, PROBLEM, row)


def missing(at: float, text: str, row: str | None = None) -> Finding:
    return Finding(at, text, MISSING, row)


def note(at: float, text: str, row: str | None = None) -> Finding:
    return Finding(at, text, NOTE, row)


def summary(text: str, row: str | None = None) -> Finding:
    return Finding(END, text, SUMMARY, row)


def count(name: str) -> Finding:
    """One more of ``name`` for the row's run function (``counted[name]``)."""
    return Finding(END, name, COUNT)


def most(name: str, value: float) -> Finding:
    """(evidence family) ``value`` for the row's run function, which reads the largest (``counted[name]``; 0 when
    none came)."""
    return Finding(END, name, MOST, value=value)


Findings = Iterator[Finding]


# ------------------------------------------------------------------------------------------------------ the units


@dataclass
class Logged:
    """One event of the log as the walk judged it: the event, its number in the log (1, 2, …)."""

    event: dict
    number: int


@dataclass
class EpochLogged(Logged):
    """An epoch of an open task, with the segment it was logged in (the model's last as of it) and what that
    segment's layouts had said of its task's group by then (a layout logged later, or a second one, is not this
    epoch's: the differential fuzz of the move found a recount against a later layout)."""

    segment: Segment
    ranks: int | None = None
    """its task's group's ranks in the segment's layouts so far (None: none gave them)"""
    laid_out: bool = False
    """whether the segment had logged a layout by then"""
    bounds: BoundsAsOf | None = None
    """(the hardware family) the hardware bounds as of it"""


@dataclass
class EndLogged(Logged):
    """A ``model_done`` or ``model_failed``, with the model id the log's order implies for it: one past the
    previous end's id (or past the one before that, when the previous logged no whole number)."""

    next_id: int


@dataclass(frozen=True)
class ShapeFound:
    """(evidence family) A task's graph as the shared view parsed it for an event: its input's (height, width,
    channels) and its output's classes, or why they cannot be read."""

    task: object
    place: str
    """where the graph lies, as problem lines name it"""
    found: tuple | None
    """(height, width, channels, classes) (None: ``error``)"""
    error: str = ""


@dataclass
class Timed(Logged):
    """(evidence family) An event of an open segment (the shared view's :class:`~analysis.verify.view.SegmentTimes`)
    as the evidence rows judge it, with what held of the run when it came: snapshots, never the view's objects that
    change later."""

    segment: int = 0
    """the open segment's number"""
    start: float = 0.0
    """the open segment's start"""
    config: Mapping = field(default_factory=dict)
    """the run's configuration (the first ``run_start``'s)"""
    before: Before | None = None
    """what held of the segment before the event (the view's, made for it: its group a copy; None: a run_start)"""
    task: TaskTimes | None = None
    """(an epoch, a model's end) a copy of its task's times after it (None: no task of the segment open)"""
    in_layout: bool = False
    """(a peak) the open segment has its group"""
    group_size: int | None = None
    """(a peak) its group's Horovod size then"""
    claim: tuple[float, str] | None = None
    """(a run_stop) the latest time the segment claims after it, and what claims it"""
    closed: SegmentTimes | None = None
    """(a run_start) the segment it closed (no longer changing)"""
    data: object = None
    """(an epoch) its segment's ``run_start``'s ``data`` as logged"""
    samples: tuple | None = None
    """(an epoch) its task's first epoch's (train, validation) samples since its proposal (None: this is its
    first)"""
    peak: float | None = None
    """(an epoch) its group's measured peak as of it (None: none)"""
    peaks: dict | None = None
    """(a score) the open segment's measured peaks as of it"""
    groups: tuple = ()
    """(a score) the open segment's groups as of it"""
    layout: bool = False
    """(a score) the open segment has a layout as of it"""
    peak_sums: tuple[float, ...] = ()
    """(a score) each closed segment's sum of its groups' peaks (a segment with a group unprobed adds none)"""
    shape: tuple[tuple, str] | None = None
    """the data's shape every graph must have, and whence, as of before the event (None: none yet)"""
    first_data: Mapping | None = None
    """(a run_start) the first well-formed data check before it"""
    graph: ShapeFound | None = None
    """the graph the view parsed for the event (a task's first epoch, else its model_done; None: none)"""


@dataclass
class TaskUnit:
    """A task, finished: its first proposal and what followed it while it was open."""

    task: object
    segment: Segment
    """the segment it was proposed in"""
    proposal: Logged
    """its first ``model_proposed``"""
    open: OpenTask
    """the view's record of it: its graph as read, its counts (or why none), its stored kernels"""
    repeats: list[Logged] = field(default_factory=list)
    """its later proposals while it was open"""
    epochs: list[EpochLogged] = field(default_factory=list)
    end: EndLogged | None = None
    """its ``model_done``/``model_failed`` (None: open when the log ended)"""
    counted_at: int | None = None
    """the event its graph was counted (or found uncountable) at: its first epoch, else its end (None: never)"""
    place_owner: tuple | None = None
    """(an appended graphs file) (the task,) whose graph the log placed at the same line first, when another's"""
    seen_as: tuple | None = None
    """(task, segment) of an earlier proposal of the same graph that the master knew of when it came (None:
    none), as its duplicate table held them"""
    timed: list[Timed] = field(default_factory=list)
    """(evidence family) its proposals, epochs and end that came in an open segment, in log order, with what held
    then"""
    lineage: Rebuilt = field(default_factory=Rebuilt)
    """(the lineage row) its graph rebuilt from its seed or its parent's stored graph and the logged morphisms,
    once, when its proposal came (:func:`analysis.verify.lineage.rebuild_proposal`)"""

    @property
    def graph(self) -> ProposedGraph:
        return self.open.graph

    @property
    def hparams(self) -> dict:
        return self.open.hparams

    @property
    def group(self) -> object:
        return self.open.group


@dataclass
class StrayEvent(Logged):
    """An event of a task that was not open when it came: an epoch, an end or a second proposal."""

    ended: bool
    """its task had ended before (else it was never proposed)"""
    next_id: int | None = None
    """for an end: the model id the log's order implies (:class:`EndLogged`)"""
    bounds: BoundsAsOf | None = None
    """(the hardware family) the hardware bounds as of it"""
    timed: Timed | None = None
    """(evidence family) the event with what held then, when it came in an open segment"""


@dataclass
class Misplaced(Logged):
    """An event where none may be: before the first ``run_start``, or after a segment's ``run_stop`` (not its
    ``score``, not the next ``run_start``)."""

    after_stop_of: int | None
    """the segment whose ``run_stop`` it follows (None: it comes before the first ``run_start``)"""
    bounds: BoundsAsOf | None = None
    """(the hardware family) the hardware bounds as of it"""


@dataclass
class ScoreLogged(Logged):
    """A ``score`` event, with the score recomputed from the log as of the event before it."""

    stopped: bool
    """its segment had its ``run_stop`` before it"""
    recomputed: Score | None
    unscored: str = ""
    """why no score could be recomputed (None ``recomputed``)"""
    bounds: BoundsAsOf | None = None
    """(the hardware family) the hardware bounds as of it"""


@dataclass
class Bounded(Logged):
    """(the hardware family) an event with the hardware bounds as of it (a ``peak``: after its own probe)."""

    bounds: BoundsAsOf | None = None


@dataclass
class SegmentUnit:
    """A segment, finished: the next ``run_start`` opened another, or the log ended."""

    record: Segment
    """the run's model's record of it (whole: its end, stop, system, layout, peaks)"""
    before: tuple[Segment, ...]
    """the segments before it, in order"""
    run_starts: list[Logged] = field(default_factory=list)
    """its ``run_start`` and any the model took no segment of while it was the last"""
    run_stops: list[Logged] = field(default_factory=list)
    scores: list[ScoreLogged] = field(default_factory=list)
    last: bool = False
    """the log's last segment"""
    systems: list[Logged] = field(default_factory=list)
    """its ``system`` events, in order (those after a ``run_start`` the model took no segment of included)"""
    layouts: list[Logged] = field(default_factory=list)
    """its ``layout`` events, in order"""
    peaks: list[Bounded] = field(default_factory=list)
    """its ``peak`` events, in order, each with the hardware bounds as of it"""
    first_system: dict | None = None
    """the run's first ``system`` event that was its segment's first, before this segment (None: none before)"""
    closed_at: int | None = None
    """the ``run_start`` that opened the next segment (None: the log ended)"""
    times: SegmentTimes | None = None
    """(evidence family) the shared view's times and groups of it, whole once it closed (None: the view opened
    none)"""
    peak_rates: dict[int, float] = field(default_factory=dict)
    """(evidence family) its groups' measured peaks (a group unprobed has none)"""
    closed_by: float = END
    """(evidence family) the ``run_start`` that closed it (:data:`END`: the log's end)"""


@dataclass(frozen=True, slots=True)
class SavedWeights:
    """(weights) A weights file as the last ``model_done`` that names it logged it."""

    task: object
    sha256: str
    """its ``weights_sha256`` ("": none logged)"""
    kernel: object
    """the kernel size it trained with: its record's, else its task's latest proposal's as of that end"""


@dataclass
class Exported:
    """(best) ``best/metadata.json`` as it was before the log was read: what the row ``best/`` holds to the log."""

    present: bool
    """a regular file is there"""
    meta: object = None
    """its JSON value (None: absent or unreadable)"""
    unreadable: str = ""
    """why it could not be read ("": it was, or there is none)"""

    @property
    def task(self) -> int | None:
        """the task it names (None: it names none, or could not be read)"""
        return self.meta["task"] if isinstance(self.meta, dict) and isinstance(self.meta.get("task"), int) else None


@dataclass
class BestLogged:
    """(best) What the log says of the tasks ``best/metadata.json`` names — its task and each lineage step's — and
    of the best trained model, kept as the walk read it (nothing is kept while the file names no task)."""

    exported: Exported
    tasks: frozenset = frozenset()
    """the export's task and its lineage steps' (empty: it names no task)"""
    model_ids: frozenset = frozenset()
    """its lineage steps' model ids"""
    proposals: dict = field(default_factory=dict)
    """task of ``tasks`` → its latest ``model_proposed``"""
    records: dict = field(default_factory=dict)
    """task of ``tasks`` → its latest ``model_done``'s record"""
    seen_ids: set = field(default_factory=set)
    """those of ``model_ids`` that a ``model_done`` logged"""
    best: tuple | None = None
    """(accuracy, task) of the best trained model so far (ties: the earliest)"""
    best_at_stop: tuple | None = None
    """``best`` as of the latest ``run_stop``"""
    stopped: bool = False
    """a ``run_stop`` came"""
    config: dict = field(default_factory=dict)
    """the latest ``run_start``'s configuration"""

    @classmethod
    def read(cls, run_dir: Path) -> BestLogged:
        """The export as it is now, and the lineage it names (:class:`BadInput`: a file that cannot be opened)."""
        path = run_dir / BEST_METADATA
        if not is_regular_file(path):
            return cls(Exported(False))
        try:
            exported = Exported(True, read_json(path))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return cls(Exported(True, None, " ".join(str(exc).split())))
        if exported.task is None:
            return cls(exported)
        steps = exported.meta.get("lineage") if isinstance(exported.meta.get("lineage"), list) else []
        steps = [step for step in steps if isinstance(step, dict)]
        tasks = {exported.task} | {step["task"] for step in steps if isinstance(step.get("task"), int)}
        ids = {step["model_id"] for step in steps if isinstance(step.get("model_id"), int)}
        return cls(exported, frozenset(tasks), frozenset(ids))

    def see(self, event: dict) -> None:
        """One event that keeps to the schema, wherever it lies in the log."""
        if not self.tasks:
            return
        name = event[runlog.EVENT]
        if name == runlog.RUN_START:
            self.config = event.get("config") if isinstance(event.get("config"), dict) else {}
        elif name == runlog.MODEL_PROPOSED:
            if event.get("task") in self.tasks:
                self.proposals[event["task"]] = event
        elif name == runlog.MODEL_DONE:
            model = event.get("model") if isinstance(event.get("model"), dict) else {}
            if model.get("id") in self.model_ids:
                self.seen_ids.add(model["id"])
            if event.get("task") in self.tasks:
                self.records[event["task"]] = model
            accuracy = model.get("accuracy")
            if model.get("status") == "trained" and isinstance(accuracy, int | float) and math.isfinite(accuracy) \
                    and (self.best is None or accuracy > self.best[0]):  # fmt: skip
                self.best = (accuracy, event.get("task"))
        elif name == runlog.RUN_STOP:
            self.stopped, self.best_at_stop = True, self.best


@dataclass(frozen=True)
class OpenSplit:
    """(the data family) the data set as of a ``run_start``: the first ``run_start``'s ``dataset``, the split the
    table names for this one's data check, the side it allows the images."""

    dataset: object
    split: DataSplit | None
    """the documented split (None: a user's own set)"""
    image_size: int | None
    """the side the table allows its images (a resizable set: the configured one)"""


@dataclass
class StartLogged(Logged):
    """(the data family) a ``run_start`` (any: one the model took no segment of too), with the data set as of it."""

    split: OpenSplit


@dataclass(frozen=True)
class Repeat:
    """(the search family's ``repeated graphs``) a proposal's graph (one with a ``graph_sha256``) against the latest
    earlier proposal of the same graph, as the log stood when it came."""

    key: str
    """the graph's identity: its rebuild's sha256 when its file holds it in other bytes, else its ``graph_sha256``"""
    earlier: tuple[object, int, bool] | None
    """the latest earlier proposal of it: (task, segment, a seed) (None: the first)"""
    segment: int
    """its segment: the ``run_start`` events so far"""
    handed_out: tuple[int, object] | None = None
    """(a seed after a seed) when its group's work was handed out: the event number and the log's time of its
    probe or its previous task's end (the segment's ``run_start`` and None: neither yet); None: not asked"""
    ranked_at: int | None = None
    """the first ``model_done`` whose model has an accuracy to rank (after it the master hands out no seed)"""
    earlier_ended: bool = False
    """the earlier proposal's task had ended"""
    earlier_not_ended: tuple[str, object] | None = None
    """why the earlier proposal's task never ended, as the log said: ("cut", segment), ("discarded", segment) or
    ("lost", group) (None: it did not say)"""


@dataclass
class Proposal(Logged):
    """(the search and data families) a ``model_proposed`` event, any, finished at once, with what held before it."""

    run_dir: Path
    split: OpenSplit | None
    """the data set as of the last ``run_start`` (None: none yet)"""
    batches: TunerBatches
    """the batch sizes the tuners may choose, sized once, at the log's first proposal"""
    sized: bool
    """the batch sizes were sized at this one (the log's first proposal)"""
    parent_place: dict | None
    """(a child) where its parent model's graph lies, as that model's last proposal logged it before its end (None:
    no such model ended before it)"""
    repeat: Repeat | None
    """its graph against the earlier ones (None: it logs no ``graph_sha256``)"""


@dataclass
class DataEpoch(Logged):
    """(the data family) an ``epoch`` event, any, finished at once, with the split it is held to."""

    split: DataSplit | None
    """the documented split of the last ``run_start`` (None: a user's own set, or no ``run_start`` yet)"""
    ranks: object = None
    """its group's ranks in the segment's layouts (None: not known)"""
    batch: object = None
    """its task's ``batch_size`` as proposed in the segment (None: not known)"""


@dataclass
class RunUnit:
    """The run, once the log has been read: its model, the score recomputed from it, ``score.json`` (both computed
    or read when a rule first asks, once: a log with no ``run_start`` is refused by the segments row before
    ``score.json`` is opened)."""

    run_dir: Path
    model: Timeline
    truncated: bool
    view: RunView = field(repr=False)
    """the stream's view, which computes the score and reads ``score.json`` once"""
    strategies: Mapping[str, int]
    """search strategy → the tasks whose first proposal names it"""
    epochs: int
    """the epochs logged after the first ``run_start``"""
    tasks: int
    """the tasks proposed, or failed without a proposal"""
    scored: Mapping[int, int]
    """segment number → its ``score`` events (those after the first ``run_start``)"""
    graph_files: frozenset[str] = frozenset()
    """every graph file a first proposal names (what the graph files row reads, which the side files row does not
    name)"""

    @property
    def score(self) -> Score | None:
        """the score recomputed from the whole log (None: it cannot be, :attr:`unscored` says why)"""
        return self.view.score(self.model, self.truncated)[0]

    @property
    def unscored(self) -> str:
        """why the log cannot be scored ("": it can)"""
        return self.view.score(self.model, self.truncated)[1]

    @property
    def recorded(self) -> dict | None:
        """``score.json`` as the run recorded it (None: :attr:`unread` says why)"""
        return self.view.recorded_score(self.run_dir / "score.json")[0]

    @property
    def unread(self) -> str:
        """why ``score.json`` could not be read ("": it was)"""
        return self.view.recorded_score(self.run_dir / "score.json")[1]
    bounds: BoundsAsOf | None = None
    """(the hardware family) the hardware bounds as the log left them (whether it was a rehearsal)"""
    data_shape: tuple[tuple, str] | None = None
    """(evidence family) the data's shape every graph must have, and whence (None: none found)"""
    mllog: MLLogEnded | None = None
    """(mllog family) ``mllog.log`` once the log has ended: what follows its last segment, its counts (None: there
    is no such file)"""
    saved_weights: Mapping[str, SavedWeights] = field(default_factory=dict)
    """(weights) each weights file a ``model_done`` names → what the last such ``model_done`` logged"""
    proposed_places: Mapping[object, tuple[dict, object]] = field(default_factory=dict)
    """(weights) task → (where its latest ``model_proposed`` placed its graph: ``graph_file``, ``graph_offset``,
    ``graph_bytes`` as logged; the kernel size it proposed)"""
    best: BestLogged | None = None
    """(best) ``best/metadata.json`` and what the log says of the tasks it names"""
    starts: tuple[StartLogged, ...] = ()
    """(the data family) every ``run_start`` of the log, in order (one a segment, but any the model took none of)"""

    @property
    def segments(self) -> list[Segment]:
        return self.model.segment_records


@dataclass
class SegmentEvent(Timed):
    """(evidence family) An event of an open segment that belongs to no task (its opening ``run_start``, a
    ``system``, ``layout``, ``staging``, ``peak``, ``monitor``, ``group_lost``, ``weights_removed``, ``run_stop``,
    ``score``), with what held then, finished at once: a monitor sample comes once per node and sample, unbounded
    over a day."""


UNIT_NAMES: Mapping[type, str] = MappingProxyType({
    TaskUnit: "task", StrayEvent: "stray event", Misplaced: "event out of place", SegmentUnit: "segment",
    RunUnit: "run", SegmentEvent: "event of a segment", Proposal: "proposal", DataEpoch: "epoch",
    # the mllog family's (analysis/verify/mllog_reader.py): what mllog.log said at one event, finished at once
    EpochLines: "mllog epoch", PowerLines: "mllog power", RunStopLine: "mllog run_stop",
    SegmentStarted: "mllog run_start", SegmentEnded: "mllog segment end",
})  # fmt: skip
"""each unit as the docs' table of families names it"""
UNITS = tuple(UNIT_NAMES)
"""every kind of unit a rule may be a function of"""


def unit_of(rule: Callable) -> type:
    """The unit a rule function reads: the type its first parameter names."""
    parameters = list(inspect.signature(rule).parameters.values())
    hint = parameters[0].annotation if parameters else None
    named = {kind.__name__: kind for kind in UNITS}
    kind = named.get(hint) if isinstance(hint, str) else hint
    if kind not in UNITS:
        raise TypeError(f"rule {rule.__qualname__}: its first parameter names no unit ({', '.join(named)})")
    return kind


def takes_counts(rule: Callable) -> bool:
    """Whether a run rule reads its row's counts (a second parameter)."""
    return len(inspect.signature(rule).parameters) > 1


# --------------------------------------------------------------------------------- the evidence family's facts


def is_int(value: object) -> bool:
    """A JSON integer (``true`` is none): what the verify rules hold a count or a size to."""
    return isinstance(value, int) and not isinstance(value, bool)


def data_problem(data: object) -> str:
    """What is wrong with a ``run_start``'s ``data`` (empty when nothing): its shape, not its agreement."""
    if not isinstance(data, Mapping):
        return f"not an object: {str(data)[:80]}"
    wrong = [key for key in ("train", "validation", "classes") if not (is_int(data.get(key)) and data[key] >= 0)]
    shape = data.get("image_shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(is_int(d) and d > 0 for d in shape)):
        wrong.append("image_shape")
    if not isinstance(data.get("dataset"), str):
        wrong.append("dataset")
    return f"{', '.join(wrong)} not as the data check writes them" if wrong else ""


def peak_sum(groups: Iterable[int], layout: bool, peaks: Mapping[int, float]) -> float | None:
    """A segment's sum of its groups' peaks (in the groups' order); None when a group has none, or it has no
    layout or no group."""
    groups = tuple(groups)
    if not layout or not groups or any(index not in peaks for index in groups):
        return None
    return sum(peaks[index] for index in groups)


def _shape(graph: nx.DiGraph) -> tuple[tuple | None, str]:
    """(evidence family) A graph's input's (height, width, channels) and output's classes, or None and why not."""
    try:
        data = graph.nodes[input_node(graph)]
        shape = (data.get("h"), data.get("w"), data.get("c"))
        classes = infer_shapes(graph)[output_node(graph)][-1]
    except (GraphError, KeyError, IndexError, TypeError) as exc:
        return None, str(exc)
    return (*shape, classes), ""


class EvidenceStream:
    """(evidence family) What the evidence rows hold an event to that needs the log's order, kept as the stream
    reads it and put on each event of an open segment as a :class:`Timed` snapshot: the open segment's measured
    peaks and the closed ones' sums, each open task's first samples, the data's shape and the first data check.
    Memory: the open segment's groups and tasks."""

    def __init__(self) -> None:
        self.peaks: dict[int, float] = {}
        """the open segment's groups' measured peaks: a ``peak`` of a group of the segment, a measurement"""
        self.peak_sums: list[float] = []
        """each closed segment's sum of group peaks (a segment with a group unprobed adds none)"""
        self.samples: dict[object, tuple] = {}
        """each task of the open segment → its first epoch's (train, validation) samples since its proposal"""
        self.shape: tuple[tuple, str] | None = None
        """(height, width, channels, classes) every graph must have and whence: the configured data set's, else
        the first well-formed data check's or graph's"""
        self.first_data: Mapping | None = None
        """the first well-formed data check"""
        self.opening: dict = {}
        """the open segment's ``run_start``"""
        self.shapes: OrderedDict[str, tuple[tuple | None, str]] = OrderedDict()
        """a graph file's bytes' sha256 → its input's shape and output's classes (or why none), last used last: the
        same bytes (the seed handed to every group) are read once, :data:`~analysis.verify.view.COUNT_CACHE` kept"""

    def see(self, event: dict, number: int, model: RunModel, view: RunView) -> Timed | None:
        """``event`` as the evidence rows judge it (None: no segment open, or a run_start that opened none)."""
        name, segment = event[runlog.EVENT], view.timed
        config = model.config or {}
        if name == runlog.RUN_START:
            return self._opened(event, number, config, view) if view.opened else None
        if segment is None:
            return None
        graph = self._graph(view)
        kind = Timed if name in (runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.MODEL_DONE, runlog.MODEL_FAILED) \
            else SegmentEvent  # fmt: skip
        timed = kind(event, number, segment.record.number, segment.record.start, config, view.before,
                     shape=self.shape, graph=graph)  # fmt: skip
        if graph is not None and graph.found is not None and self.shape is None:
            self.shape = (graph.found, f"task {graph.task}'s graph")
        if name in (runlog.MODEL_PROPOSED, runlog.MODEL_DONE, runlog.MODEL_FAILED, runlog.GROUP_LOST):
            self.samples.pop(event["task"], None)  # a proposal again: its samples are its new first epoch's
        if name in (runlog.EPOCH, runlog.MODEL_DONE, runlog.MODEL_FAILED) and view.timed_task is not None:
            timed.task = replace(view.timed_task)
        if name == runlog.EPOCH:
            timed.data, timed.peak = self.opening.get("data"), self.peaks.get(event["group"])
            timed.samples = self.samples.get(event["task"])
            if view.timed_task is not None and timed.samples is None:
                self.samples[event["task"]] = (event["train_samples"], event["validation_samples"])
        elif name == runlog.PEAK:
            group = segment.groups.get(event["group"])
            timed.in_layout, timed.group_size = group is not None, group.size if group is not None else None
            if group is not None and event["ops_per_second"] > 0:
                self.peaks[event["group"]] = float(event["ops_per_second"])
        elif name == runlog.RUN_STOP:
            timed.claim = (segment.latest_claim, segment.latest_claim_what)
        elif name == runlog.SCORE:
            timed.peaks, timed.groups, timed.peak_sums = dict(self.peaks), tuple(segment.groups), tuple(self.peak_sums)
            timed.layout = segment.record.layout is not None
        return timed

    def _opened(self, event: dict, number: int, config: Mapping, view: RunView) -> SegmentEvent:
        """A ``run_start`` that opened a segment: the one it closed has its peak sum; the run's first, the
        configured data set's shape; its data check, the first well-formed one's and the shape's."""
        closed, segment = view.closed, view.timed
        if closed is not None:
            peaks = peak_sum(closed.groups, closed.record.layout is not None, self.peaks)
            if peaks is not None:
                self.peak_sums.append(peaks)
        self.peaks, self.opening = {}, event
        self.samples.clear()  # a task still open was discarded with its segment
        if closed is None:
            dataset = config.get("dataset")
            known = image_shape(dataset, config.get("image_size"))
            if known is not None:  # hdf5 files say their own shape: its graphs are held to agree with each other
                self.shape = (known, f"dataset {dataset}")
        timed = SegmentEvent(event, number, segment.record.number, segment.record.start, config, closed=closed,
                             shape=self.shape, first_data=self.first_data)  # fmt: skip
        data = event.get("data")
        if data is not None and not data_problem(data):
            if self.first_data is None:
                self.first_data = data
            if self.shape is None:
                self.shape = ((*data["image_shape"], data["classes"]), "the data check")
        return timed

    def _graph(self, view: RunView) -> ShapeFound | None:
        """The graph the view parsed for the event, its input's shape and output's classes read once a graph."""
        parsed = view.parsed
        if parsed is None:
            return None
        known = self.shapes.get(parsed.sha256) if parsed.sha256 else None
        if known is None:
            known = _shape(parsed.graph)
            if parsed.sha256:
                self.shapes[parsed.sha256] = known
                if len(self.shapes) > COUNT_CACHE:
                    self.shapes.popitem(last=False)
        else:
            self.shapes.move_to_end(parsed.sha256)
        return ShapeFound(parsed.task, parsed.place, *known)

    def place(self, timed: Timed, stream: UnitStream, view: RunView, done: list) -> None:
        """Put ``timed`` where it is judged: on its task's unit, on the event of a task not open, or (an event of
        no task) a unit of its own; a run_start's segment unit gets the segment's times and peaks."""
        event = timed.event
        if event[runlog.EVENT] == runlog.RUN_START:
            for unit in done:
                if isinstance(unit, SegmentUnit) and timed.closed is not None:
                    unit.closed_by = timed.number
            if stream.segment is not None:
                stream.segment.times, stream.segment.peak_rates = view.timed, self.peaks
        if isinstance(timed, SegmentEvent):
            done.append(timed)
            return
        for unit in done:
            if isinstance(unit, StrayEvent) and unit.event is event:
                unit.timed = timed
                return
            if isinstance(unit, TaskUnit) and unit.end is not None and unit.end.event is event:
                unit.timed.append(timed)
                return
        unit = stream.open.get(event["task"])
        if unit is not None:
            unit.timed.append(timed)


# ------------------------------------------------------------------------------------------------------ the stream


class UnitStream:
    """Makes the units as the walk reads the log, after the run's model and the shared view have read each event.

    :meth:`see` returns the units an event finished; :meth:`end` those the log's end finished, the run last.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.view = RunView(run_dir)
        """what several units are made of, kept once as the log is read (:mod:`analysis.verify.view`): the open
        tasks' graphs read, parsed and counted once, the open segment's times and groups; no rule reads it"""
        self.open: dict[object, TaskUnit] = {}
        self.finished: set[object] = set()
        """the tasks ended: an open task's end, or a model_failed of a task never proposed (its search found no
        child)"""
        self.next_id = 0
        self.places: dict[tuple[str, int], object] = {}
        """(appended graphs file, offset) → the task whose graph the log placed there first"""
        self.owners: dict[str, tuple[object, int]] = {}
        """a graph's identity (its sha256's first 20 hex digits, the master's duplicate key) → (task, segment) of
        the proposal the master knew it from"""
        self.segment: SegmentUnit | None = None
        self.open_end = math.nan
        """the open segment's end in the model as of the event before"""
        self.epochs = 0
        self.scored: Counter[int] = Counter()
        self.hardware = BoundsTracker()
        """(the hardware family) the hardware bounds through the log"""
        self.evidence = EvidenceStream()
        """(evidence family) what its rows need of the log's order"""
        self.mllog = MLLogFollower.of(run_dir)
        """(mllog family) ``mllog.log`` read in step with the walk (None: no such file)"""
        self.proposed_places: dict[object, tuple[dict, object]] = {}
        """(weights) task → where its latest proposal placed its graph, the kernel size it proposed"""
        self.saved_weights: dict[str, SavedWeights] = {}
        """(weights) weights file → what the last ``model_done`` naming it logged"""
        self.best = BestLogged.read(run_dir)
        """(best) ``best/metadata.json`` as it is before the log is read, and what the log says of its tasks"""
        # the lineage row, the search and data families (:meth:`_searched`)
        self.lineage_tasks: dict[object, StoredGraph | None] = {}
        """a task proposed (its first proposal) and not ended → where its graph lies and its sha256 (None: unread)"""
        self.lineage_models: dict[object, tuple[object, StoredGraph | None]] = {}
        """a logged model's id → its task and where its task's graph lies (a parent its successors may name)"""
        self.seeds: dict[str, object] = {}
        """seed graphs by their record's JSON (a run has one)"""
        self.rebuilt = Rebuilt()
        """the rebuild of the proposal being read (its task unit's)"""
        self.identities: dict[int, str] = {}
        """a task → its graph's identity when its file holds the rebuild in other bytes, until a proposal takes it"""
        self.first_start: dict | None = None
        """the log's first ``run_start``"""
        self.split: OpenSplit | None = None
        self.starts: list[StartLogged] = []
        self.batches: TunerBatches | None = None
        self.search_places: dict[object, dict] = {}
        """a task → where its graph lies (its latest proposal's graph fields), until it ends"""
        self.search_models: dict[int, dict] = {}
        """a model id → where its task's graph lies"""
        self.search_segment = self.segment_start = 0
        """the ``run_start`` events so far, and the number of the last"""
        self.graphs: dict[str, tuple[object, int, bool]] = {}
        """a graph's identity → the latest task that had it: (task, segment, a seed)"""
        self.search_ended: set[object] = set()
        self.not_ended: dict[object, tuple[str, object]] = {}
        """a task that never ended → why, as the log says (:attr:`Repeat.earlier_not_ended`)"""
        self.search_open: set[object] = set()
        self.handed_out: dict[object, tuple[int, object]] = {}
        """a group → when its work was last handed out in the segment: the event number and time of its probe or
        its previous task's end"""
        self.ranked_at: int | None = None

    def see(self, event: dict, number: int, model: RunModel) -> list[object]:
        """The units ``event`` (the log's ``number``-th, one that keeps to the schema, read by ``model``) finished."""
        view = self.view
        view.see(event, model, number)  # what several units are made of, before any unit takes the event
        name, segments = event[runlog.EVENT], model.segment_records
        done: list[object] = []
        if self.mllog is not None:  # mllog family: its lines read at this event, first (as the walk's reader did)
            done += self.mllog.see(event, number, model)
        bounds = self.hardware.see(event, number, view)  # the hardware family: the bounds as of this event
        timed = self.evidence.see(event, number, model, view)  # evidence family: the event as its rows judge it
        self._weights(event)  # weights: every proposal and end, wherever it lies in the log
        self.best.see(event)  # best: the export's tasks, the best model, the configuration
        done += self._searched(event, number, model, view)  # the lineage row, the search and data families
        if name == runlog.RUN_START:
            if segments and (self.segment is None or self.segment.record is not segments[-1]):
                if self.segment is not None:
                    self.segment.closed_at = number  # the hardware family
                    done.append(self.segment)
                self.segment = SegmentUnit(segments[-1], tuple(segments[:-1]))
                self.segment.first_system = self.hardware.first_system  # the hardware family
            if self.segment is not None:
                self.segment.run_starts.append(Logged(event, number))
            self._moved(segments)
            if timed is not None:  # evidence family
                self.evidence.place(timed, self, view, done)
            return done
        if not segments:
            done.append(Misplaced(event, number, None, bounds))
            return done
        segment = segments[-1]
        if segment.stop is not None and segment.stop is not event and name != runlog.SCORE:
            done.append(Misplaced(event, number, segment.number, bounds))
        if name == runlog.EPOCH:
            epoch_values(event["end"], event["ops"], event.get("val_accuracy"))  # a log the score cannot add up
            self._epoch(event, number, segment, view, done)
            self._bounded(event, bounds, done)  # the hardware family
        elif name == runlog.MODEL_PROPOSED:
            self._proposed(event, number, segment, view, done)
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self._ended(event, number, view, done)
        elif name == runlog.RUN_STOP and self.segment is not None:
            self.segment.run_stops.append(Logged(event, number))
        elif name == runlog.SCORE and self.segment is not None:
            self.scored[segment.number] += 1
            self.segment.scores.append(self._score(event, number, model, segment))
            self.segment.scores[-1].bounds = bounds  # the hardware family
        elif name == runlog.SYSTEM and self.segment is not None:  # the hardware family (and below)
            self.segment.systems.append(Logged(event, number))
        elif name == runlog.LAYOUT and self.segment is not None:
            self.segment.layouts.append(Logged(event, number))
        elif name == runlog.PEAK and self.segment is not None:
            self.segment.peaks.append(Bounded(event, number, bounds))
        self._moved(segments)
        if timed is not None:  # evidence family
            self.evidence.place(timed, self, view, done)
        return done

    def _bounded(self, event: dict, bounds: BoundsAsOf, done: list) -> None:
        """(the hardware family) An epoch's bounds as of it, on the unit it went to: its open task or a stray."""
        task = self.open.get(event["task"])
        if done and isinstance(done[-1], StrayEvent) and done[-1].event is event:
            done[-1].bounds = bounds
        elif task is not None and task.epochs and task.epochs[-1].event is event:
            task.epochs[-1].bounds = bounds
    def _weights(self, event: dict) -> None:
        """(weights) Where each task's latest proposal placed its graph; each weights file's latest end."""
        name = event[runlog.EVENT]
        if name == runlog.MODEL_PROPOSED:  # an event that keeps to the schema: an int task, a dict of hparams
            place = {key: event[key] for key in ("graph_file", "graph_offset", "graph_bytes") if key in event}
            self.proposed_places[event["task"]] = (place, event["hparams"].get("kernel_size"))
        elif name == runlog.MODEL_DONE:
            model, task = event["model"], event["task"]
            weights = model.get("weights")
            if isinstance(weights, str) and weights:
                hparams = model.get("hparams") if isinstance(model.get("hparams"), dict) else {}
                kernel = hparams.get("kernel_size", self.proposed_places.get(task, ({}, None))[1])
                self.saved_weights[weights] = SavedWeights(task, str(event.get(WEIGHTS_SHA256) or ""), kernel)

    def _moved(self, segments: list[Segment]) -> None:
        if segments:
            self.open_end = segments[-1].end

    def _epoch(self, event: dict, number: int, segment: Segment, view: RunView, done: list) -> None:
        self.epochs += 1
        task = event["task"]
        unit = self.open.get(task) if task in view.tasks else None
        if unit is None:
            done.append(StrayEvent(event, number, task in self.finished))
            return
        unit.epochs.append(EpochLogged(event, number, segment, segment.group_sizes.get(unit.group),
                                       segment.layout is not None))  # fmt: skip
        if view.counted is unit.open:
            unit.counted_at = number

    def _proposed(self, event: dict, number: int, segment: Segment, view: RunView, done: list) -> None:
        task = event["task"]
        state = view.tasks.get(task)
        if state is None or state.proposal is not event:  # not its first proposal
            if task in self.open:
                self.open[task].repeats.append(Logged(event, number))
            else:
                done.append(StrayEvent(event, number, task in self.finished))
            return
        unit = self.open[task] = TaskUnit(task, segment, Logged(event, number), state)
        unit.lineage = self.rebuilt  # the lineage row: _searched rebuilt it
        graph = state.graph
        if graph.data is None:
            return
        if event.get(OFFSET) is not None:  # an appended file: one line a model
            place = (os.path.normpath(str(event["graph_file"])), event[OFFSET])
            owner = self.places.setdefault(place, task)
            unit.place_owner = (owner,) if owner != task else None
        key = graph.sha256[:20]
        owner = self.owners.get(key)
        if owner is not None and (owner[1] == segment.number or view.has_ended(owner[0])):
            unit.seen_as = owner
        else:  # the first, or the first since a resume forgot a task that never ended
            self.owners[key] = (task, segment.number)

    def _ended(self, event: dict, number: int, view: RunView, done: list) -> None:
        task, name = event["task"], event[runlog.EVENT]
        logged = event["model"].get("id") if name == runlog.MODEL_DONE else event["model"]
        next_id = self.next_id
        self.next_id = (logged if isinstance(logged, int) else next_id) + 1
        state = view.ended
        unit = self.open.pop(task, None) if state is not None else None
        if unit is None:
            stray = StrayEvent(event, number, task in self.finished, next_id)
            if name == runlog.MODEL_FAILED and task not in self.finished:
                self.finished.add(task)  # a task handed out, failed before any proposal
            done.append(stray)
            return
        unit.end = EndLogged(event, number, next_id)
        if view.counted is unit.open:
            unit.counted_at = number
        self.finished.add(task)
        done.append(unit)

    def _score(self, event: dict, number: int, model: RunModel, segment: Segment) -> ScoreLogged:
        """The score as of the event before: in a segment still open, the model moved its end to this event."""
        moved, segment.end = segment.end, (segment.end if segment.stop is not None else self.open_end)
        try:
            return ScoreLogged(event, number, segment.stop is not None, score_inputs(model, run_step(model.config)))
        except ValueError as exc:
            return ScoreLogged(event, number, segment.stop is not None, None, str(exc))
        finally:
            segment.end = max(segment.end, moved)

    # -------------------------------------------------------- the lineage row, the search and data families

    def _searched(self, event: dict, number: int, model: RunModel, view: RunView) -> list[object]:
        """Every event, before the others' units are made of it: a proposal's rebuild (for its task unit), its
        :class:`Proposal`, an epoch's :class:`DataEpoch`; what each needs of the log before it."""
        name, segments = event[runlog.EVENT], model.segment_records
        if name == runlog.RUN_START:
            self._started(event, number)
        elif name == runlog.EPOCH:
            return [self._data_epoch(event, number, view)]
        elif name == runlog.MODEL_PROPOSED:
            return [self._proposal(event, number, segments, view)]
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self._search_ended(event, number, bool(segments))
        elif name == runlog.RUN_STOP:
            for task in event["discarded_tasks"]:
                if _whole(task):
                    self.not_ended[task] = ("discarded", self.search_segment)
        elif name == runlog.PEAK:  # the master hands a group its first work at once on its Ready (job/master.py)
            if _whole(event["group"]) and event["group"] not in self.handed_out:
                self.handed_out[event["group"]] = (number, event.get(runlog.TIME))
        elif name == runlog.GROUP_LOST and _whole(event["task"]):
            self.not_ended[event["task"]] = ("lost", event["group"])
            self.search_open.discard(event["task"])
        return []

    def _started(self, event: dict, number: int) -> None:
        if self.first_start is None:
            self.first_start = event
        config, data = event["config"], event.get("data")
        dataset = self.first_start["config"].get("dataset")
        split, configured, size = documented_split(dataset, data), config.get("image_size"), None
        if split is not None:
            size = split.side(configured if _whole(configured) and configured > 0 else None)
        self.split = OpenSplit(dataset, split, size)
        self.starts.append(StartLogged(event, number, self.split))
        for task in self.search_open:  # no run_stop said it discarded them: the segment was killed
            self.not_ended.setdefault(task, ("cut", self.search_segment))
        self.search_open.clear()
        self.search_segment, self.segment_start = self.search_segment + 1, number
        self.handed_out.clear()

    def _data_epoch(self, event: dict, number: int, view: RunView) -> DataEpoch:
        split, segment = self.split.split if self.split is not None else None, view.segment
        if split is None or segment is None:
            return DataEpoch(event, number, None)
        return DataEpoch(event, number, split, segment.group_ranks.get(event["group"]),
                         segment.task_batches.get(event["task"]))  # fmt: skip

    def _proposal(self, event: dict, number: int, segments: list[Segment], view: RunView) -> Proposal:
        task, parent = event["task"], event["parent"]
        state = view.tasks.get(task) if segments else None
        if state is not None and state.proposal is event:  # its first proposal: rebuilt once
            self.rebuilt = rebuild_proposal(self.run_dir, event, state.graph.text, segments[-1].config,
                                            self.lineage_models, self.seeds)  # type: ignore[arg-type]  # fmt: skip
            self.lineage_tasks[task] = self.rebuilt.stored
            if self.rebuilt.identity is not None:
                self.identities[task] = self.rebuilt.identity
        sized = self.batches is None
        if self.batches is None:
            start = self.first_start or {}
            self.batches = tuner_batches(start.get("config"), start.get("data"), event.get("seed"))
        self.search_places[task] = {name: event[name] for name in ("graph_file", "graph_offset", "graph_bytes")
                                    if name in event}  # fmt: skip
        self.search_open.add(task)
        parent_place = self.search_models.get(parent) if _whole(parent) else None
        return Proposal(event, number, self.run_dir, self.split, self.batches, sized, parent_place,
                        self._repeat(event))  # fmt: skip

    def _repeat(self, event: dict) -> Repeat | None:
        digest, task, seed = event.get("graph_sha256"), event["task"], event["parent"] is None
        if not is_hex(digest, 64):
            return None
        identity = self.identities.pop(task, None) if isinstance(task, int) else None
        key = identity or digest  # other bytes, one graph
        earlier = self.graphs.get(key)
        self.graphs[key] = (task, self.search_segment, seed)
        if earlier is None:
            return Repeat(key, None, self.search_segment)
        handed_out = None
        if seed and earlier[2]:
            handed_out = self.handed_out.get(event["group"], (self.segment_start, None))
        return Repeat(key, earlier, self.search_segment, handed_out, self.ranked_at, earlier[0] in self.search_ended,
                      self.not_ended.get(earlier[0]))  # fmt: skip

    def _search_ended(self, event: dict, number: int, in_segment: bool) -> None:
        task, record = event["task"], event["model"]
        model_id = record.get("id") if event[runlog.EVENT] == runlog.MODEL_DONE else record
        place = self.search_places.pop(task, None)
        if _whole(model_id) and place is not None:
            self.search_models[model_id] = place  # type: ignore[index]
        self.search_ended.add(task)
        self.search_open.discard(task)
        self.handed_out[event["group"]] = (number, event.get(runlog.TIME))
        if event[runlog.EVENT] == runlog.MODEL_DONE:
            scores = (record.get("predicted_accuracy"), record.get("accuracy"))  # a junk prediction: its accuracy
            if self.ranked_at is None and record.get("status") == "trained" and any(map(_finite, scores)):
                self.ranked_at = number
        if in_segment and _whole(model_id) and isinstance(task, int):
            self.lineage_models[model_id] = (task, self.lineage_tasks.pop(task, None))

    def end(self, model: RunModel | None, truncated: bool) -> list[object]:
        """The units the log's end finished: the tasks still open, the last segment, the run."""
        done: list[object] = list(self.open.values())
        self.open.clear()
        if self.segment is not None:
            self.segment.last = True
            done.append(self.segment)
        mllog_ended = None
        if self.mllog is not None:  # mllog family: the last segment's lines, then what follows it (the run's)
            mllog_units, mllog_ended = self.mllog.end()
            done += mllog_units
        view, timeline = self.view, model if model is not None else Timeline()
        done.append(RunUnit(self.run_dir, timeline, truncated, view, dict(view.strategies), self.epochs,
                            len(self.finished) + len(view.tasks), dict(self.scored),
                            graph_files=frozenset(view.graph_files)))  # fmt: skip
        done[-1].bounds = self.hardware.now  # the hardware family
        done[-1].data_shape = self.evidence.shape  # evidence family
        done[-1].mllog = mllog_ended  # mllog family
        done[-1].saved_weights, done[-1].proposed_places = self.saved_weights, self.proposed_places  # weights
        done[-1].best = self.best  # best
        done[-1].starts = tuple(self.starts)  # the data family
        return done


def _whole(value: object) -> bool:
    """A JSON integer (``true`` is none)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ------------------------------------------------------------------------------------------------------ the rows


class RowFindings:
    """One row's findings as its rules yield them, put in the log's order: the :data:`MAX_KEPT` earliest of each
    kind kept (the rest counted), as the event walk kept the first it met."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kept: dict[str, list[tuple[float, int, str]]] = {PROBLEM: [], MISSING: [], NOTE: []}
        self.dropped: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.summary = ""
        self.order = 0

    def add(self, finding: Finding) -> None:
        if finding.kind == COUNT:
            self.counts[finding.text] += 1
            return
        if finding.kind == MOST:  # evidence family: the largest value of a name
            self.counts[finding.text] = max(self.counts[finding.text], finding.value)  # type: ignore[assignment]
            return
        if finding.kind == SUMMARY:
            self.summary = finding.text
            return
        heap = self.kept[finding.kind]
        self.order += 1
        item = (-finding.at, -self.order, finding.text)  # a max-heap: the latest found is the first let go
        if len(heap) < MAX_KEPT:
            heapq.heappush(heap, item)
        else:
            self.dropped[finding.kind] += 1
            heapq.heappushpop(heap, item)

    def check(self) -> Check:
        result = Check(self.name, self.summary)
        for kind, target in ((PROBLEM, result.problems), (MISSING, result.missing)):
            target += [text for _, _, text in sorted(self.kept[kind], reverse=True)]
            target.dropped += self.dropped[kind]  # type: ignore[attr-defined]
        result.notes = Lines(text for _, _, text in sorted(self.kept[NOTE], reverse=True))
        result.notes.dropped += self.dropped[NOTE]  # type: ignore[attr-defined]  # the text says "… and N more"
        return result


def lines(findings: Iterable[Finding]) -> Lines:
    """Problem texts of ``findings`` (a test's view of one rule's answer)."""
    return Lines(f.text for f in findings if f.kind == PROBLEM)
