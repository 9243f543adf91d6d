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
  whole log, ``score.json`` as read, what the stream counted.

:class:`UnitStream` makes them, in step with the walk (the run's model and the
shared view, :mod:`analysis.verify.view`, have read each event first), and
keeps every fact that needs the log's order — the model id the previous end
implies, whose graph already lay at a place, which graph the master had seen —
so a rule keeps none: what it needs is on its unit.  Memory: the open tasks'
epochs (the view keeps them too), one segment, counters.

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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import OFFSET
from aiperf_mpi.results.logmodel import RunModel, Segment, Timeline, epoch_values
from aiperf_mpi.results.score import Score, run_step, score_inputs
from aiperf_mpi.results.stored_weights import BEST_METADATA, WEIGHTS_SHA256
from analysis.checks import MAX_KEPT, Check, Lines, is_regular_file, read_json
from analysis.verify.view import OpenTask, ProposedGraph, RunView

END = math.inf
"""where a finding made at the log's end sorts: after every event"""
PROBLEM, MISSING, NOTE, SUMMARY, COUNT = "problem", "missing", "note", "summary", "count"


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: its kind, its text (a count's: the counter's name), the event it was found at."""

    at: float
    text: str
    kind: str = PROBLEM
    row: str | None = None
    """the row it belongs to when its rule fills several (``rule dataset``: one per validity rule); None: the
    rule's own"""


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


Findings = Iterator[Finding]


# ------------------------------------------------------------------------------------------------------ the units


@dataclass
class Logged:
    """One event of the log as the walk judged it: the event, its number in the log (1, 2, …)."""

    event: dict
    number: int


@dataclass
class EpochLogged(Logged):
    """An epoch of an open task, with the segment it was logged in (the model's last as of it)."""

    segment: Segment


@dataclass
class EndLogged(Logged):
    """A ``model_done`` or ``model_failed``, with the model id the log's order implies for it: one past the
    previous end's id (or past the one before that, when the previous logged no whole number)."""

    next_id: int


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


@dataclass
class Misplaced(Logged):
    """An event where none may be: before the first ``run_start``, or after a segment's ``run_stop`` (not its
    ``score``, not the next ``run_start``)."""

    after_stop_of: int | None
    """the segment whose ``run_stop`` it follows (None: it comes before the first ``run_start``)"""


@dataclass
class ScoreLogged(Logged):
    """A ``score`` event, with the score recomputed from the log as of the event before it."""

    stopped: bool
    """its segment had its ``run_stop`` before it"""
    recomputed: Score | None
    unscored: str = ""
    """why no score could be recomputed (None ``recomputed``)"""


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


@dataclass
class RunUnit:
    """The run, once the log has been read: its model, the score recomputed from it, ``score.json``."""

    run_dir: Path
    model: Timeline
    truncated: bool
    score: Score | None
    unscored: str
    """why the log cannot be scored ("": it can)"""
    recorded: dict | None
    unread: str
    """why ``score.json`` could not be read ("": it was)"""
    strategies: Mapping[str, int]
    """search strategy → the tasks whose first proposal names it"""
    epochs: int
    """the epochs logged after the first ``run_start``"""
    tasks: int
    """the tasks proposed, or failed without a proposal"""
    scored: Mapping[int, int]
    """segment number → its ``score`` events (those after the first ``run_start``)"""
    saved_weights: Mapping[str, SavedWeights] = field(default_factory=dict)
    """(weights) each weights file a ``model_done`` names → what the last such ``model_done`` logged"""
    proposed_places: Mapping[object, tuple[dict, object]] = field(default_factory=dict)
    """(weights) task → (where its latest ``model_proposed`` placed its graph: ``graph_file``, ``graph_offset``,
    ``graph_bytes`` as logged; the kernel size it proposed)"""
    best: BestLogged | None = None
    """(best) ``best/metadata.json`` and what the log says of the tasks it names"""

    @property
    def segments(self) -> list[Segment]:
        return self.model.segment_records


UNITS = (TaskUnit, StrayEvent, Misplaced, SegmentUnit, RunUnit)
UNIT_NAMES = {TaskUnit: "task", StrayEvent: "stray event", Misplaced: "event out of place", SegmentUnit: "segment",
              RunUnit: "run"}  # fmt: skip
"""each unit as the docs' table of families names it"""


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


# ------------------------------------------------------------------------------------------------------ the stream


class UnitStream:
    """Makes the units as the walk reads the log, after the run's model and the shared view have read each event.

    :meth:`see` returns the units an event finished; :meth:`end` those the log's end finished, the run last.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
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
        self.proposed_places: dict[object, tuple[dict, object]] = {}
        """(weights) task → where its latest proposal placed its graph, the kernel size it proposed"""
        self.saved_weights: dict[str, SavedWeights] = {}
        """(weights) weights file → what the last ``model_done`` naming it logged"""
        self.best = BestLogged.read(run_dir)
        """(best) ``best/metadata.json`` as it is before the log is read, and what the log says of its tasks"""

    def see(self, event: dict, number: int, model: RunModel, view: RunView) -> list[object]:
        """The units ``event`` (the log's ``number``-th, read by ``model`` and ``view``) finished."""
        name, segments = event[runlog.EVENT], model.segment_records
        done: list[object] = []
        self._weights(event)  # weights: every proposal and end, wherever it lies in the log
        self.best.see(event)  # best: the export's tasks, the best model, the configuration
        if name == runlog.RUN_START:
            if segments and (self.segment is None or self.segment.record is not segments[-1]):
                if self.segment is not None:
                    done.append(self.segment)
                self.segment = SegmentUnit(segments[-1], tuple(segments[:-1]))
            if self.segment is not None:
                self.segment.run_starts.append(Logged(event, number))
            self._moved(segments)
            return done
        if not segments:
            done.append(Misplaced(event, number, None))
            return done
        segment = segments[-1]
        if segment.stop is not None and segment.stop is not event and name != runlog.SCORE:
            done.append(Misplaced(event, number, segment.number))
        if name == runlog.EPOCH:
            epoch_values(event["end"], event["ops"], event.get("val_accuracy"))  # a log the score cannot add up
            self._epoch(event, number, segment, view, done)
        elif name == runlog.MODEL_PROPOSED:
            self._proposed(event, number, segment, view, done)
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self._ended(event, number, view, done)
        elif name == runlog.RUN_STOP and self.segment is not None:
            self.segment.run_stops.append(Logged(event, number))
        elif name == runlog.SCORE and self.segment is not None:
            self.scored[segment.number] += 1
            self.segment.scores.append(self._score(event, number, model, segment))
        self._moved(segments)
        return done

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
        unit.epochs.append(EpochLogged(event, number, segment))
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

    def end(self, model: RunModel | None, view: RunView | None, truncated: bool) -> list[object]:
        """The units the log's end finished: the tasks still open, the last segment, the run."""
        done: list[object] = list(self.open.values())
        self.open.clear()
        if self.segment is not None:
            self.segment.last = True
            done.append(self.segment)
        timeline = model if model is not None else Timeline()
        score, unscored = view.score(timeline, truncated) if view is not None else (None, "")
        recorded, unread = view.recorded_score(self.run_dir / "score.json") if view is not None else (None, "")
        done.append(RunUnit(self.run_dir, timeline, truncated, score, unscored, recorded, unread,
                            dict(view.strategies) if view is not None else {}, self.epochs,
                            len(self.finished) + len(self.open_tasks(view)), dict(self.scored)))  # fmt: skip
        done[-1].saved_weights, done[-1].proposed_places = self.saved_weights, self.proposed_places  # weights
        done[-1].best = self.best  # best
        return done

    @staticmethod
    def open_tasks(view: RunView | None) -> dict:
        return view.tasks if view is not None else {}


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
        result.notes = [text for _, _, text in sorted(self.kept[NOTE], reverse=True)]
        return result


def lines(findings: Iterable[Finding]) -> Lines:
    """Problem texts of ``findings`` (a test's view of one rule's answer)."""
    return Lines(f.text for f in findings if f.kind == PROBLEM)
