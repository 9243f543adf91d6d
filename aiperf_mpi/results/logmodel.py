"""The run as its event log tells it: ``events.jsonl`` read once, streamed, into one model every reader shares.

Every reader of a run — the score, the report and the comparison, the
export, ``--resume`` and its checks, verify (its rules judge each event in
step with the model: :func:`read_model`'s ``admit`` and ``on_event``) —
needs the same things from the log: its segments and their windows, the
groups, each task's proposal, epochs, end or failure, where its graph lies.
They are built here, once, by one pass over the file, so a new field or
event is taught to one reader, and the meaning of a log older than a field
is said in one place (:data:`UNRECORDED_STATUS`, :func:`legacy_graph_file`,
:func:`aiperf_mpi.results.precisions.logged_precision`: a log without a
precision ran fp32).  Nothing outside ``results/`` parses the log's lines
(``tests/unit/test_architecture.py`` checks it).

It must scale: a long run on a large machine logs 100,000 models and
500,000 epochs, half a gigabyte of JSON.  So nothing keeps an event's dict:

* epochs: one row of :data:`EPOCH_COLUMNS` floats each, in a flat array
  (display only), and beside it the three exact columns the score sums
  (:class:`Timeline`: end, operations as 64-bit integers, accuracy);
* monitor samples: one row per device and sample (:data:`MONITOR_COLUMNS`);
* tasks, proposals, ends, failures: small records with the fields readers
  use (never the graph, never the epoch list a ``model_done`` repeats);
* graphs are read when asked for, one at a time (:meth:`RunModel.graph_text`):
  from the segment's graphs file where the proposal placed it, or from the
  ``model_done`` line of a log from before the graph was logged once
  (its byte offset in the log is kept, not the text).

Lines are parsed with ``orjson`` (six times faster than the standard
library on these lines: it keeps a 500,000-epoch report within its 10 s)
and again with ``json`` where ``orjson`` refuses one, so what is accepted
is exactly what ``json.loads`` accepts.  A ``model_done`` line's repeated
epoch list is cut out before parsing (:func:`parse_line`), and epoch lines
go straight into the columns without a detour through the generic path.

The API (read with :func:`read_model` — its ``on_event`` hands a reader each
event in step with the model, epochs too if asked — or feed
:meth:`RunModel.add` one parsed event at a time in log order and call
:meth:`RunModel.finish`; :func:`read_timeline` reads the score's part alone):

* the run: ``config`` and ``data`` (the first ``run_start``'s), ``system``,
  ``layout``, ``groups``, ``ranks``, ``precision``, ``next_task``;
* segments: ``segment_records`` (:class:`Segment`: number, start, end,
  config, time limit, run_stop, self-ended, system, layout and its groups'
  sizes, peaks, provenance, cut tail), ``segments`` (their (start, end)
  spans), ``windows``, ``declared_end``, :meth:`RunModel.active` (wall →
  active time);
* tasks: ``tasks`` (task → :class:`Task`: its :class:`Proposal`,
  :class:`Done`, :class:`Failure`, epoch count, last and best epoch rows,
  ``hparams``, ``kernel_size``, ``status``, ``place``), ``task_of_model``,
  and in log order ``models`` (every :class:`Done`), ``proposals``
  (task → :class:`Proposal`), ``failures``; :meth:`RunModel.best_trained`
  (the model retention keeps), ``best`` (the report's: with its graph),
  :meth:`RunModel.graph_text`, :meth:`RunModel.proposed_event` (a proposal as logged); the graph as trained is
  :func:`aiperf_mpi.graph.model.as_trained` of it with ``task.kernel_size``;
* epochs: ``epochs`` (rows), :meth:`RunModel.column`, :meth:`RunModel.epoch`
  (one row as the logged fields), the score's exact columns;
* the rest: ``monitor`` rows and ``monitor_nodes``, ``peaks``, ``staging``,
  ``run_stops``, ``lost_groups``, ``removed_files`` and ``removed_models``
  (``weights_removed``), ``logged_score``, ``cut_tails``, ``provenances``,
  event counts, lines, bytes and the cut tail (``truncated_*``).

Pure: no MPI, no TensorFlow, nothing of the package outside ``results/``.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from operator import itemgetter
from pathlib import Path
from sys import intern

import numpy as np

try:
    import orjson

    _fast_loads = orjson.loads
except ImportError:  # optional at run time: the standard library gives the same events, slower
    orjson = None
    _fast_loads = json.loads

from aiperf_mpi.results import runlog
from aiperf_mpi.results.energy import ENERGY_EVENTS, EnergyLedger
from aiperf_mpi.results.graphs import LENGTH, OFFSET, GraphFileError, graph_place, read_graph, read_logged_graph
from aiperf_mpi.results.jsonline import loads as loads
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.stored_weights import WEIGHTS_SHA256

UNRECORDED_STATUS = "trained"
"""the status of a ``model_done`` whose record names none: logs from before a task could end untrained"""
EPOCH_COLUMNS = ("task", "group", "epoch", "start", "end", "ops", "val_accuracy", "data_wait", "compute", "evaluation",
                 "compile", "line")
"""the fields of an epoch the analyses use (as float64: display only — the score keeps exact integers apart), and
``line``: where the epoch's line starts in the log (a byte offset; -1 when not read from a file), so that a reader
wanting an epoch whole (the export: its saved epoch) reads that line again (:meth:`RunModel.epoch`)"""
MONITOR_COLUMNS = ("time", "node", "group", "device", "utilization", "memory_used", "memory_total")
BLOCK = 8192
"""epochs parsed before they are converted to columns at once (1 MB of floats)"""
_HEAD = re.compile(r'\s*\{\s*"event"\s*:\s*"([A-Za-z_]+)"')
_EPOCH_PREFIX = '{"event":"epoch",'
"""how :class:`aiperf_mpi.results.runlog.EventLog` starts an epoch line (other spellings take the generic path)"""
_EPOCH_LIST = re.compile(r'"epochs"\s*:\s*\[')
_ROW = itemgetter(runlog.TIME, *EPOCH_COLUMNS[:-2])
"""an epoch's row while it waits in a block: its time, the columns the schema requires; then its ``compile`` (an
optional field) and its line's offset"""
_ROW_NAMES = (runlog.TIME, *EPOCH_COLUMNS)
_ROW_DEFAULTS = tuple(-1 if name in ("task", "group") else 0 if name == "epoch" else math.nan for name in _ROW_NAMES)
"""what a missing field reads as (a missing ``ops`` stays NaN and stops the score, as it stops the run's)"""
_START, _END = 1 + EPOCH_COLUMNS.index("start"), 1 + EPOCH_COLUMNS.index("end")
_OPS, _ACCURACY = 1 + EPOCH_COLUMNS.index("ops"), 1 + EPOCH_COLUMNS.index("val_accuracy")
_DEVICE_FIELDS = ("index", "utilization", "memory_used", "memory_total")
_DEVICE = itemgetter(*_DEVICE_FIELDS)
_PLACE_FIELDS = ("graph_file", OFFSET, LENGTH, "graph_sha256")
_UNREAD = (TypeError, ValueError, AttributeError, OverflowError, runlog.UnreadableLog)
"""what the model raises on a field of the wrong kind: read past in a judged log (:func:`read_model`'s ``admit``)"""


def parse_line(line: str) -> dict:
    """One log line → its event; a ``model_done`` line without its repeated epoch list (``"epochs": null``).

    The cut relies on an epoch being a flat object (numbers only), which the
    trainer guarantees; anything else makes the cut JSON invalid or nested,
    and the line is parsed whole instead.  A truncated line raises
    ``ValueError`` like ``json.loads``.
    """
    head = _HEAD.match(line)
    if head is None or head.group(1) != runlog.MODEL_DONE:
        return loads(line)
    found = _EPOCH_LIST.search(line)
    if found is not None:
        close = line.find("]", found.end())
        if close > 0 and "[" not in line[found.end() : close]:
            try:
                event = loads(f'{line[: found.start()]}"epochs":null{line[close + 1 :]}')
            except ValueError:
                pass
            else:
                if isinstance(event.get("model"), dict):
                    return event
    return loads(line)


def legacy_graph_file(task: int) -> str:
    """Where a log whose proposals place no graph kept task ``task``'s: one file per model."""
    return f"graphs/task-{task}.json"


def stopped_by_signal(reason: object) -> bool:
    """Whether a ``run_stop`` reason says the segment was cut short from outside (its window is then not extended):
    a signal, a hang that fault tolerance off could not leave behind (``runlog.HANG_REASON``: the job ended
    early with its score, and ``--resume`` goes on from there, as after a signal), or a launch that ended before
    rank 0 wrote a ``run_stop``, closed after it by the job script (``runlog.CLOSED_REASON``)."""
    return isinstance(reason, str) and (reason.startswith(runlog.SIGNAL_REASON)
                                        or reason in (runlog.HANG_REASON, runlog.CLOSED_REASON))  # fmt: skip


def segment_window(start: float, end: float, limit: float | None, self_ended: bool) -> float:
    """A segment's scored window: its time limit when the run ended it itself (never less than it ran)."""
    ran = end - start
    if self_ended and limit is not None:
        return max(ran, limit)
    return ran


def time_limit(config: object) -> float | None:
    """A segment's time limit as its ``run_start``'s configuration records it (None: not recorded, or not one)."""
    limit = config.get("time_limit") if isinstance(config, Mapping) else None
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit) or limit <= 0:
        return None
    return float(limit)


def active_times(times: np.ndarray, segments: list[tuple[float, float]],
                 windows: Sequence[float] | None = None) -> np.ndarray:  # fmt: skip
    """Wall times → active times (the windows of the segments before each time; a gap between segments is skipped).

    A time inside a segment counts from its start; a later segment's time
    counts each earlier segment's whole window (its wall span, or its time
    limit when the run ended it early: ``windows``, default the wall spans).
    Vectorised for the report's hundreds of thousands of epochs; a time
    before a segment's start stops the count there, as for a single time.
    """
    times = np.asarray(times, dtype=float)
    total = np.zeros_like(times)
    counting = np.ones(times.shape, dtype=bool)
    if windows is None:
        windows = [end - start for start, end in segments]
    for (start, end), window in zip(segments, windows, strict=True):
        counting &= times > start
        total += np.where(counting, np.where(times > end, window, times - start), 0.0)
    return total


def _number(value: object) -> float:
    """A logged value as a float (None, strings, an integer past the floats' range and the like → NaN)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _group_sizes(groups: object) -> dict[int, int]:
    """A ``layout``'s groups → their Horovod sizes (:attr:`Segment.group_sizes`)."""
    sizes = {}
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or not isinstance(group.get("index"), int):
            continue
        ranks = group.get("horovod_size", len(group["ranks"]) if isinstance(group.get("ranks"), list) else None)
        if isinstance(ranks, int) and not isinstance(ranks, bool):
            sizes[group["index"]] = ranks
    return sizes


def epoch_values(end: object, ops: object, accuracy: object) -> tuple[float, int, float]:
    """What the score keeps of an epoch (its end, operations, accuracy: NaN for none), each a number of its kind;
    :class:`~aiperf_mpi.results.runlog.UnreadableLog` for a null, a string, operations beyond 64 bits."""
    try:
        row = (float(end), int(ops), math.nan if accuracy is None else float(accuracy))  # type: ignore[arg-type]
        array("q", [row[1]])
    except (TypeError, OverflowError) as exc:
        raise runlog.UnreadableLog(f"an epoch's end, ops or accuracy is not a number of its kind ({exc})") from None
    return row


@dataclass
class Segment:
    """One segment of the run: a first start, or a ``--resume``, from its ``run_start`` to its end."""

    number: int
    """1 for the first ``run_start`` of the log, then 2, … (the log's order, whatever the event says)"""
    start: float
    end: float
    """its ``run_stop``'s time, else (killed) its last event's (a close after the launch ended writes its
    ``run_stop`` at that time: job/close.py)"""
    config: dict
    limit: float | None
    """its time limit (its configuration's ``time_limit``; None: not recorded)"""
    data: dict | None = None
    """what its data check counted (``run_start``'s ``data``; None in older logs)"""
    provenance: dict = field(default_factory=dict)
    """the code it ran (``run_start``'s ``provenance``; empty when none)"""
    logged_provenance: object = None
    """``run_start``'s ``provenance`` as logged (None: none): what the bundle's ``system.json`` holds"""
    cut_tail: dict | None = None
    """the cut end of the log a ``--resume`` set aside before it (:func:`aiperf_mpi.results.runlog.repair_tail`)"""
    stop: dict | None = None
    """its ``run_stop`` event (None: killed, or still running)"""
    system: dict | None = None
    layout: dict | None = None
    peaks: list[dict] = field(default_factory=list)
    """its ``peak`` events, in log order"""
    logged_number: object = None
    """the ``segment`` its ``run_start`` logged (verify checks it against ``number``)"""
    group_sizes: dict[int, int] = field(default_factory=dict)
    """group index → its ranks (``horovod_size``, else the length of its ``ranks``), from each of its ``layout``
    events in turn; a group without an index or a whole number of ranks is left out (its global batch is unknown)"""

    @property
    def self_ended(self) -> bool:
        """Closed by a ``run_stop`` whose reason is not a signal: the run ended it by its own planning."""
        return self.stop is not None and not stopped_by_signal(self.stop.get("reason"))

    @property
    def window(self) -> float:
        """Its scored window in seconds (:mod:`aiperf_mpi.results.score`): its time limit when the run ended it."""
        return segment_window(self.start, self.end, self.limit, self.self_ended)

    @property
    def precision(self) -> object:
        return logged_precision(self.config)


class Timeline:
    """The run's segments and its epochs' score columns, gathered one event at a time: what the score reads.

    A log of a long run holds hundreds of thousands of epochs; keeping their
    dicts would take gigabytes.  This keeps three numbers per epoch (end,
    operations, accuracy) in flat arrays, the segments and the counts.
    :class:`RunModel` builds on it; on its own it is the light reader of the
    run's own score (:func:`read_timeline`).
    """

    def __init__(self) -> None:
        self.config: dict | None = None
        """the configuration of the first ``run_start``"""
        self.data: dict | None = None
        """what the first ``run_start``'s data check counted (its ``data``; None in older logs)"""
        self.segment_records: list[Segment] = []
        self._closed = False
        self.epoch_end = array("d")
        """wall time each completed epoch ended"""
        self.epoch_ops = array("q")
        self.epoch_accuracy = array("d")
        """validation top-1 of each epoch, NaN where there is none"""
        self.models_trained = 0
        self.models_failed = 0
        self.energy = EnergyLedger()
        """the nodes' energy readings, segment by segment (issue 53): the score's ``energy`` record is made of it"""

    def add(self, event: Mapping) -> None:
        """Account for one event (in log order)."""
        name = event[runlog.EVENT]
        if name == runlog.EPOCH:  # nearly every event of a big log: the short way
            self.add_epoch(event[runlog.TIME], event["end"], event["ops"], event.get("val_accuracy"))
            return
        self._count(name, event)

    def _count(self, name: str, event: Mapping) -> None:
        """Any event but an epoch: segments, their ends, the models' counts and the energy readings."""
        if name in ENERGY_EVENTS:
            self.energy.event(event)
        if name == runlog.RUN_START:
            config = event.get("config", {})
            self.segment_records.append(Segment(len(self.segment_records) + 1, event[runlog.TIME],
                                                event[runlog.TIME], config, time_limit(config)))  # fmt: skip
            self._closed = False
            if self.config is None:
                self.config = config
                self.data = event.get("data")
        elif self.segment_records and not self._closed:
            self._extend(event[runlog.TIME])
            self._closed = name == runlog.RUN_STOP  # a segment ends at its run_stop; a killed one at its last event
            if self._closed:
                self.segment_records[-1].stop = event  # type: ignore[assignment]
        if name == runlog.MODEL_DONE:  # a task stopped before its first epoch is recorded, not trained
            model = event.get("model")
            self.models_trained += isinstance(model, dict) and model.get("status", UNRECORDED_STATUS) == "trained"
        elif name == runlog.MODEL_FAILED:
            self.models_failed += 1

    def _extend(self, time: float) -> None:
        """An event at ``time`` inside the open segment moves its end (a closed one stays at its run_stop)."""
        if self.segment_records and not self._closed:
            segment = self.segment_records[-1]
            if time > segment.end:
                segment.end = time

    def add_epoch(self, time: float, end: float, ops: int, accuracy: float | None) -> None:
        """One ``epoch`` event, from its fields."""
        row = epoch_values(end, ops, accuracy)  # checked whole before anything is kept: the arrays stay in step
        self._extend(time)
        self.epoch_end.append(row[0])
        self.epoch_ops.append(row[1])  # operations are whole numbers
        self.epoch_accuracy.append(row[2])

    def add_epochs(self, times: Sequence[float], ends: Sequence[float], ops: Sequence[int],
                   accuracies: Sequence[float]) -> None:  # fmt: skip
        """Consecutive ``epoch`` events at once, as columns (NaN: no accuracy).

        For readers that parse epochs in blocks.  The block must not straddle
        a ``run_start`` or ``run_stop``: the events in between count as they
        do one by one only inside one segment.  ``ops`` must hold the logged
        integers (a float column would round sums above 2**53).
        """
        if not len(ends):
            return
        times = np.asarray(times, dtype=float)
        if np.any(times == times):  # not all NaN
            self._extend(float(np.nanmax(times)))
        try:
            exact = array("q", [int(value) for value in ops])  # built whole first: a bad value changes nothing
        except (TypeError, OverflowError) as exc:  # a null, a string, a number beyond 64 bits: not an op count
            raise runlog.UnreadableLog(f"an epoch's ops is not a 64-bit integer ({exc})") from None
        self.epoch_end.frombytes(np.asarray(ends, dtype=float).tobytes())
        self.epoch_ops.extend(exact)
        self.epoch_accuracy.frombytes(np.asarray(accuracies, dtype=float).tobytes())

    def flush(self) -> None:
        """Bring epochs held back for a block into the columns (none here: :class:`RunModel` holds some)."""

    @property
    def segments(self) -> list[tuple[float, float]]:
        """(start, end) wall times of each segment, in order."""
        return [(s.start, s.end) for s in self.segment_records]

    @property
    def windows(self) -> list[float]:
        """Each segment's scored window in seconds (see :mod:`aiperf_mpi.results.score`)."""
        return [s.window for s in self.segment_records]

    def declared_end(self, windows: Sequence[float]) -> float:
        """The latest end on the active axis a segment declared: the windows before it plus its time limit."""
        end = before = 0.0
        for window, segment in zip(windows, self.segment_records, strict=True):
            if segment.limit is not None:
                end = max(end, before + segment.limit)
            before += window
        return end

    def active(self, times: np.ndarray) -> np.ndarray:
        """Wall times → the score's active time axis."""
        return active_times(times, self.segments, self.windows)


@dataclass(slots=True)
class Proposal:
    """A ``model_proposed`` event: the search's output for one task (its graph is where ``place`` says)."""

    task: int
    group: int
    time: float
    segment: int
    parent: int | None
    description: str
    hparams: dict
    search_seconds: float
    strategy: str
    place: dict | None
    """where the graph lies (``graph_file``, and ``graph_offset``, ``graph_bytes``, ``graph_sha256`` when
    logged): what :func:`aiperf_mpi.results.graphs.read_graph` reads; None when the event names no file"""
    line_offset: int = -1
    """the byte offset of its line in the log: where what the model does not keep is read back from"""


@dataclass(slots=True)
class Done:
    """A ``model_done`` event: one model's record, without its graph and its epochs."""

    task: int
    group: int
    id: int
    time: float
    status: str
    accuracy: float | None
    ops_total: float
    forward_per_sample: float | None
    params: int | None
    description: str
    hparams: dict
    train_seconds: float | None
    parent: object = None
    """the record's parent model id"""
    predicted_accuracy: object = None
    weights: str = ""
    """its weights file, relative to the run directory ('' when none was kept)"""
    stop: str = ""
    """why training stopped (``timings.stop``)"""
    weights_epoch: object = None
    """the epoch its saved weights come from (None: a log from before it was logged, the last epoch)"""
    weights_sha256: str = ""
    """the sha256 of its weights file as its training rank wrote it ('' : none saved, or a log from before it)"""
    inline_graph: str = ""
    """'' when the record carries no graph (it lies in the graphs file), else what it carries: 'text' (a
    non-empty graph), 'empty' ('' or '{}'), 'not a string' — runs from before the graph was logged once"""
    line_offset: int = -1
    """the byte offset of its line in the log: where an inline graph is read back from"""


@dataclass(slots=True)
class Failure:
    """A ``model_failed`` event, its traceback dropped (the log keeps it)."""

    task: int
    group: int
    time: float
    rank: int | None
    host: str
    reason: str
    """its first line, at most 300 characters"""
    model: object = None
    """the model id the failure took"""
    full_reason: str = ""
    graph_hash: object = None


@dataclass(slots=True)
class Task:
    """One task: its proposal, epochs, end or failure, as far as the log has them."""

    task: int
    proposal: Proposal | None = None
    done: Done | None = None
    failure: Failure | None = None
    status: str = ""
    """the last of ``model_done``'s status and ``failed``; '' while it never ended"""
    epochs: int = 0
    last_row: int = -1
    """its last epoch's row in the epoch columns (-1: none)"""
    best_row: int = -1
    """its earliest epoch of the highest finite validation accuracy (-1: none)"""

    @property
    def group(self) -> int:
        record = self.done or self.proposal or self.failure
        return record.group if record is not None else -1

    @property
    def hparams(self) -> dict:
        """The record's hyper-parameters, else the proposal's."""
        if self.done is not None and self.done.hparams:
            return self.done.hparams
        return self.proposal.hparams if self.proposal is not None else {}

    @property
    def kernel_size(self) -> object:
        """The kernel size it trained with (None: none logged): what ``graph.model.as_trained`` applies."""
        return self.hparams.get("kernel_size")

    @property
    def place(self) -> dict:
        """Where its graph lies; a log whose proposal names no file kept one file per model."""
        if self.proposal is not None and self.proposal.place:
            return self.proposal.place
        return {"graph_file": legacy_graph_file(self.task)}


@dataclass
class BestModel:
    """The model whose graph the report breaks down, with that graph."""

    task: int
    id: int
    accuracy: float | None
    forward_per_sample: float | None
    description: str
    why: str
    """'best validation accuracy' or, with no accuracy in the run, 'largest forward count'"""
    place: dict | None
    """where its ``model_proposed`` placed its graph; None when its ``model_done`` carries it (older runs)"""
    graph: str = ""
    """the graph's JSON; empty when it could not be read (``graph_error``)"""
    graph_error: str = ""

    @property
    def source(self) -> str:
        """Where the graph was taken from, for the report."""
        return f"`{graph_place(self.place)}`" if self.place else "its `model_done` record"


class RunModel(Timeline):
    """The whole run from one pass over its log (see the module's docstring for what it holds)."""

    def __init__(self, path: Path = Path(), keep_ended: bool = True) -> None:
        super().__init__()
        self.path = path
        """the event log"""
        self.keep_ended = keep_ended
        """False: each task is forgotten once it ended (:meth:`release`) and no epoch row is kept — for a reader
        that takes each model as it ends (``--resume``: 10⁵ tasks' records held at once would triple rank 0's
        memory at start-up); ``models``, ``failures``, ``proposals`` and ``tasks`` then hold the tasks still
        open, ``epochs`` nothing, and ``next_task`` stays whole"""
        self.epochs = np.empty((0, len(EPOCH_COLUMNS)))
        """shape (epochs, len(EPOCH_COLUMNS)), log order (complete once :meth:`finish` ran)"""
        self.monitor = np.empty((0, len(MONITOR_COLUMNS)))
        """shape (device samples, len(MONITOR_COLUMNS)), log order"""
        self.monitor_nodes: dict[int, dict] = {}
        """node → {'host', 'source', 'devices': {index: name}}"""
        self.tasks: dict[int, Task] = {}
        self.models: list[Done] = []
        """every ``model_done``, in log order"""
        self.proposals: dict[int, Proposal] = {}
        """task → its (last) ``model_proposed``"""
        self.failures: list[Failure] = []
        self.task_of_model: dict[int, int] = {}
        """model id → the task whose ``model_done`` named it"""
        self.peaks: dict[int, dict] = {}
        """group → its last ``peak`` event"""
        self.staging: list[dict] = []
        self.system: dict | None = None
        """the last ``system`` event"""
        self.layout: dict | None = None
        """the last ``layout`` event"""
        self.run_stops: list[dict] = []
        self.lost_groups: list[dict] = []
        """``group_lost`` events: groups taken out of the run by a dead or hung rank"""
        self.removed_files: set[str] = set()
        self.removed_models: set[int] = set()
        """what ``weights_removed`` events name: weights files, and the models they were"""
        self.logged_score: dict | None = None
        """the last ``score`` event: what the run itself printed"""
        self.next_task = 0
        """one past the highest task any event names"""
        self.events: Counter = Counter()
        self.proposed_kernels: Counter = Counter()
        """each ``model_proposed``'s kernel size → how many (a size that is no integer counts as None): the size the
        ops recount applies to every epoch of the task, whether it ends in ``model_done``, fails or is lost (a
        forger's review: counted at ``model_done``, a discarded task's raised kernel bought its epochs under no
        claim); what the trusted claim of the tuner's kernel sizes reads (``analysis/trusted.py``), kept when ended
        tasks are not"""
        self.lines = 0
        self.bytes = 0
        self.truncated_tail = False
        """the log's last line was cut off (a run killed mid-write) and skipped, as the score skips it"""
        self.truncated_line = ""
        self.truncated_bytes = 0
        self._pending: list[tuple] = []
        """epoch rows not yet converted (at most BLOCK)"""
        self._blocks: list[np.ndarray] = []
        self._monitor_values = array("d")
        self._hparams: dict[tuple, dict] = {}
        self._stream: runlog.EventStream | None = None
        """the stream being read (:func:`read_model`): where the current line starts"""

    # -- what readers ask

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def cut_tails(self) -> list[dict]:
        """The ``cut_tail`` of each resumed ``run_start``, with its segment's number as logged."""
        return [{"segment": s.logged_number, **s.cut_tail} for s in self.segment_records if s.cut_tail is not None]

    @property
    def provenances(self) -> list[dict]:
        """The ``provenance`` of each ``run_start`` (empty dict where a segment has none): each segment's code."""
        return [s.provenance for s in self.segment_records]

    @property
    def precision(self) -> object:
        return logged_precision(self.config or {})

    def latest(self, name: str) -> dict:
        """The last segment's non-empty ``config`` or ``provenance`` (a resumed run may change a few settings)."""
        found: dict = {}
        for segment in self.segment_records:
            found = getattr(segment, name) or found
        return found

    def segment_of(self, task: Task) -> Segment | None:
        """The segment a task was proposed in (None: no proposal, or a segment the log does not have)."""
        number = task.proposal.segment if task.proposal is not None else 0
        return self.segment_records[number - 1] if 0 < number <= len(self.segment_records) else None

    def column(self, name: str) -> np.ndarray:
        """One epoch column (a view)."""
        return self.epochs[:, EPOCH_COLUMNS.index(name)]

    def monitor_column(self, name: str) -> np.ndarray:
        return self.monitor[:, MONITOR_COLUMNS.index(name)]

    def epoch(self, row: int) -> dict:
        """The epoch of row ``row`` as logged: its line read again (the columns alone, as floats, for a model fed
        events without a file)."""
        values = self.epochs[row].tolist()
        offset = values[EPOCH_COLUMNS.index("line")]
        if offset != offset or offset < 0:
            return dict(zip(EPOCH_COLUMNS[:-1], values, strict=False))
        return self._event_at(int(offset))

    def proposed_event(self, task: Task) -> dict:
        """A task's ``model_proposed`` as logged, its line read again ({}: none, or a model fed events without a
        file): for a field the model does not keep (the lineage's ``seed`` and ``morphs``, which the audit reads)."""
        if task.proposal is None or task.proposal.line_offset < 0:
            return {}
        return self._event_at(task.proposal.line_offset)

    def _event_at(self, offset: int) -> dict:
        """The event whose line starts at byte ``offset`` of the log, parsed again."""
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            return loads(handle.readline().decode("utf-8"))

    def _offset(self) -> int:
        """Where the line being read starts in the log (-1: events fed without a stream)."""
        return self._stream.line_start if self._stream is not None else -1

    @property
    def groups(self) -> int:
        """Training groups: the layout's, else the highest group any event names, plus one."""
        if self.layout and self.layout.get("groups"):
            return len(self.layout["groups"])
        seen = [int(self.column("group").max()) if len(self.epochs) else -1]
        seen += [m.group for m in self.models] + [p.group for p in self.proposals.values()]
        seen += [f.group for f in self.failures]
        return max(seen) + 1 if max(seen) >= 0 else 0

    @property
    def ranks(self) -> int | None:
        if self.system and self.system.get("ranks"):
            return int(self.system["ranks"])
        if self.layout and self.layout.get("world_size"):
            return int(self.layout["world_size"])
        return None

    def best_trained(self) -> Task | None:
        """The best model by observed accuracy, ties to the earliest: the one the run's retention keeps."""
        best, best_accuracy = None, -math.inf
        for done in self.models:
            accuracy = done.accuracy
            if done.status == "trained" and accuracy is not None and math.isfinite(accuracy):
                if accuracy > best_accuracy:  # strictly: ties keep the earliest, as history.best_observed does
                    best, best_accuracy = self.tasks[done.task], accuracy
        return best

    @cached_property
    def best(self) -> BestModel | None:
        """The model the report breaks down: the best validation accuracy (ties: the earliest), else the largest
        forward count, among the models whose graph the log keeps (a record that carries a non-empty graph, as
        older runs logged it, or a proposal that placed one in a graphs file); its graph read once, here."""
        best: Done | None = None
        largest: Done | None = None
        for done in self.models:
            proposal = self.tasks[done.task].proposal
            if done.inline_graph not in ("", "text") or not (done.inline_graph or (proposal and proposal.place)):
                continue
            if done.accuracy is not None and (best is None or best.accuracy is None or done.accuracy > best.accuracy):
                best = done
            if largest is None or (done.forward_per_sample or 0.0) > (largest.forward_per_sample or 0.0):
                largest = done
        chosen, why = (best, "best validation accuracy") if best is not None else (
            largest, "largest forward count (no accuracy in the run)")  # fmt: skip
        if chosen is None:
            return None
        task = self.tasks[chosen.task]
        place = None if chosen.inline_graph else task.proposal.place  # type: ignore[union-attr]
        found = BestModel(chosen.task, chosen.id, chosen.accuracy, chosen.forward_per_sample, chosen.description,
                          why, place)  # fmt: skip
        try:
            found.graph = self.graph_text(task)
        except GraphFileError as exc:
            found.graph_error = str(exc)
        return found

    @property
    def best_epoch_accuracy(self) -> float | None:
        """The run's best finite epoch accuracy (the score's), which may belong to a task that never finished."""
        accuracy = self.column("val_accuracy")
        finite = accuracy[np.isfinite(accuracy)]
        return float(finite.max()) if len(finite) else None

    def graph_text(self, task: Task, checked: bool = True) -> str:
        """A task's stored graph as text, read now: from its ``model_done`` line, or where its proposal placed it.

        ``checked``: against the ``graph_sha256`` its proposal logged
        (:func:`~aiperf_mpi.results.graphs.read_logged_graph`); unchecked, a log from before the hash was
        logged reads too (the legacy one file per model).  Raises
        :class:`~aiperf_mpi.results.graphs.GraphFileError`, its message without the task.
        """
        done = task.done
        if done is not None and done.inline_graph:
            if done.inline_graph != "text" and done.inline_graph != "empty":
                raise GraphFileError(f"its model_done has a graph that is {done.inline_graph}")
            return self._inline_graph(done)
        if checked:
            if task.proposal is None or not task.proposal.place:
                raise GraphFileError("its model_proposed places no graph")
            return read_logged_graph(self.run_dir, task.proposal.place)
        try:
            return read_graph(self.run_dir, task.place).decode("utf-8")
        except UnicodeDecodeError:
            raise GraphFileError("its graph is not UTF-8 text") from None

    def _inline_graph(self, done: Done) -> str:
        record = self._event_at(done.line_offset).get("model") or {}
        graph = record.get("graph")
        if not isinstance(graph, str):
            raise GraphFileError("its model_done has a graph that is not a string")
        return graph

    # -- reading

    def parse(self, line: str) -> dict | None:
        """The stream's parser: epoch lines straight into the block (None: consumed), the rest as events.

        The epoch branch is :meth:`_epoch` and :func:`loads` written out: it
        runs half a million times, and the calls cost as much as the parse.
        """
        if line.startswith(_EPOCH_PREFIX):
            try:
                event = _fast_loads(line)
            except ValueError:
                event = json.loads(line)
            if type(event) is not dict or event.get(runlog.EVENT) != runlog.EPOCH:  # a later "event" key won
                return event
            pending = self._pending
            try:
                row = _ROW(event)
            except (KeyError, TypeError):  # a field missing: the careful way
                self._epoch(event)
                return None
            pending.append((*row, event.get("compile", math.nan), self._stream.line_start))  # type: ignore[union-attr]
            if len(pending) >= BLOCK:
                self.flush()
            return None
        return parse_line(line)

    def add(self, event: dict) -> None:
        """One event (in log order) that :meth:`parse` handed back, or any parsed event: into the model."""
        name = event.get(runlog.EVENT, "") if isinstance(event, dict) else ""
        if name == runlog.EPOCH:
            self._epoch(event)
            return
        if name in (runlog.RUN_START, runlog.RUN_STOP):
            self.flush()  # a block of epochs must not straddle a segment boundary
        self.events[name] += 1
        if not name or not isinstance(event, dict):  # valid JSON but no event: counted, nothing else
            return
        if runlog.TIME not in event:
            event[runlog.TIME] = math.nan
        self._count(name, event)
        task = event.get("task")
        if type(task) is int and task >= self.next_task:
            self.next_task = task + 1
        handler = getattr(self, f"_{name}", None)
        if handler is not None:
            handler(event)

    def judged(self, event: dict) -> None:
        """:meth:`add` for a judged log (:func:`read_model`'s ``admit``): what the model cannot read is left out, and
        only that: epochs held back for a block that cannot become columns (an ``ops`` past 64 bits) are dropped
        before the segment boundary that flushes them, and the boundary is still taken."""
        if event.get(runlog.EVENT) in (runlog.RUN_START, runlog.RUN_STOP):
            with suppress(*_UNREAD):
                self.flush()
        with suppress(*_UNREAD):
            self.add(event)

    def _shared(self, hparams: dict) -> dict:
        """One dict for equal hyper-parameters (a run tries a few settings on 10⁵ tasks): read, never changed."""
        try:
            key = tuple(hparams.items())
            return self._hparams.setdefault(key, hparams)
        except (TypeError, AttributeError):  # a value that does not hash, or not a dict: its own
            return hparams

    def _task(self, number: int) -> Task:
        task = self.tasks.get(number)
        if task is None:
            task = self.tasks[number] = Task(number)
        return task

    def _epoch(self, event: dict) -> None:
        """One epoch into the pending block, a missing field as its default (:meth:`parse` has the fast way)."""
        if not isinstance(event, dict):
            raise ValueError(f"an epoch line is not a JSON object: {str(event)[:80]}")
        self._pending.append((*(event.get(name, default) for name, default in zip(_ROW_NAMES[:-1], _ROW_DEFAULTS,
                                                                                   strict=False)), self._offset()))
        if len(self._pending) >= BLOCK:
            self.flush()

    def flush(self) -> None:
        """The pending epochs → one block of columns, and to the score's columns with their exact operations."""
        rows, self._pending = self._pending, []
        if not rows:
            return
        width = len(_ROW_NAMES)
        try:
            block = np.fromiter(chain.from_iterable(rows), dtype=float, count=len(rows) * width).reshape(-1, width)
        except (TypeError, ValueError, OverflowError):  # a None (no accuracy), a string, a list, 10**400: one by one
            block = np.array([[_number(value) for value in row] for row in rows], dtype=float)
        missing = np.isnan(block[:, _START])
        block[missing, _START] = block[missing, _END]  # no start logged: the epoch is a point at its end
        self.add_epochs(block[:, 0], block[:, _END], [row[_OPS] for row in rows], block[:, _ACCURACY])
        if self.keep_ended:
            self._blocks.append(block[:, 1:])
            return
        tasks = block[:, 1 + EPOCH_COLUMNS.index("task")]
        tasks = tasks[np.isfinite(tasks)]
        if len(tasks):  # what _task_epochs would have found from the kept rows
            self.next_task = max(self.next_task, int(tasks.max()) + 1)

    def release(self, event: dict) -> None:
        """Forget the task an ended event (``model_done``, ``model_failed``) closed, unless the model keeps ended
        tasks (:attr:`keep_ended`): called by :func:`read_model` once ``on_event`` has seen it."""
        if self.keep_ended or not isinstance(event, dict):
            return
        if event.get(runlog.EVENT) not in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            return
        for ended in chain(self.models, self.failures):
            self.tasks.pop(ended.task, None)
            self.proposals.pop(ended.task, None)
        self.models.clear()
        self.failures.clear()
        self.task_of_model.clear()

    def _model_done(self, event: dict) -> None:
        record = event.get("model")
        if not isinstance(record, dict):  # no record: a model of id -1 (--resume refuses it)
            record = {}
        ops = record.get("ops") or {}
        timings = record.get("timings") or {}
        accuracy = record.get("accuracy")
        graph = record.get("graph", None)
        inline = ""
        task = self._task(int(event.get("task", timings.get("task", -1))))
        proposal = task.proposal
        hparams, description = self._shared(record.get("hparams") or {}), str(record.get("description", ""))
        if proposal is not None:  # the same as proposed, mostly: one dict and one string for both (10⁵ tasks)
            hparams = proposal.hparams if hparams == proposal.hparams else hparams
            description = proposal.description if description == proposal.description else description
        if "graph" in record:
            inline = ("not a string" if not isinstance(graph, str) else "empty" if not graph or graph == "{}"
                      else "text")  # fmt: skip
        done = Done(
            task=task.task,
            group=int(event.get("group", timings.get("group", -1))),
            id=int(record.get("id", -1)),
            time=event[runlog.TIME],
            status=intern(str(record.get("status", UNRECORDED_STATUS))),
            accuracy=None if accuracy is None else float(accuracy),
            ops_total=_number(ops.get("total")),
            forward_per_sample=None if ops.get("forward_per_sample") is None else float(ops["forward_per_sample"]),
            params=ops.get("params"),
            description=description,
            hparams=hparams,
            train_seconds=timings.get("train"),
            parent=record.get("parent"),
            predicted_accuracy=record.get("predicted_accuracy"),
            weights=str(record.get("weights") or ""),
            stop=intern(str(timings.get("stop", ""))),
            weights_epoch=timings.get("weights_epoch"),
            weights_sha256=str(event.get(WEIGHTS_SHA256) or ""),
            inline_graph=inline,
            line_offset=self._offset(),
        )
        self.models.append(done)
        task.done, task.status = done, done.status
        self.task_of_model[done.id] = done.task

    def _model_proposed(self, event: dict) -> None:
        search = event.get("search") or {}
        number = int(event.get("task", -1))
        place = None
        if "graph_file" in event:
            place = {name: event[name] for name in _PLACE_FIELDS if name in event}
            if isinstance(place["graph_file"], str):  # one file per segment: one string, not one per task
                place["graph_file"] = intern(place["graph_file"])
        proposal = Proposal(
            task=number,
            group=int(event.get("group", -1)),
            time=event[runlog.TIME],
            segment=len(self.segment_records),
            parent=event.get("parent"),
            description=str(event.get("description", "")),
            hparams=self._shared(event.get("hparams") or {}),
            search_seconds=_number(search.get("search_seconds", 0.0)),
            strategy=intern(str(search.get("strategy", ""))),
            place=place,
            line_offset=self._offset(),
        )
        self.proposals[number] = proposal
        self._task(number).proposal = proposal
        kernel = proposal.hparams.get("kernel_size") if isinstance(proposal.hparams, dict) else None
        self.proposed_kernels[kernel if type(kernel) is int else None] += 1

    def _model_failed(self, event: dict) -> None:
        text = str(event.get("reason", ""))
        reason = text.strip().splitlines()
        failure = Failure(
            task=int(event.get("task", -1)),
            group=int(event.get("group", -1)),
            time=event[runlog.TIME],
            rank=event.get("rank"),
            host=str(event.get("host", "")),
            reason=(reason[0] if reason else "")[:300],
            model=event.get("model"),
            full_reason=text,
            graph_hash=event.get("graph_hash"),
        )
        self.failures.append(failure)
        task = self._task(failure.task)
        task.failure, task.status = failure, "failed"

    def _monitor(self, event: dict) -> None:
        node = int(event.get("node", event.get("group", -1)))
        info = self.monitor_nodes.setdefault(node, {"host": event.get("host", ""), "source": "", "devices": {}})
        info["source"] = str(event.get("source", ""))
        names, values = info["devices"], self._monitor_values
        head = (event[runlog.TIME], node, event.get("group", -1))
        for device in event.get("devices") or []:
            try:
                index, *readings = _DEVICE(device)
            except (KeyError, TypeError):  # a reading missing: NaN
                index, readings = device.get("index", 0), [device.get(name) for name in _DEVICE_FIELDS[1:]]
            if index not in names:
                names[index] = str(device.get("name", ""))
            row = (*head, index, *readings)
            before = len(values)
            try:
                values.extend(row)
            except TypeError:  # None or not a number
                del values[before:]
                values.extend(map(_number, row))

    def _peak(self, event: dict) -> None:
        if self.segment_records:
            self.segment_records[-1].peaks.append(event)
        self.peaks[int(event.get("group", -1))] = event

    def _staging(self, event: dict) -> None:
        self.staging.append(event)

    def _system(self, event: dict) -> None:
        self.system = event
        if self.segment_records:
            self.segment_records[-1].system = event

    def _layout(self, event: dict) -> None:
        self.layout = event
        if self.segment_records:
            self.segment_records[-1].layout = event
            self.segment_records[-1].group_sizes.update(_group_sizes(event.get("groups")))

    def _run_start(self, event: dict) -> None:
        segment = self.segment_records[-1]
        segment.logged_provenance = origin = event.get("provenance")
        segment.provenance = origin if isinstance(origin, dict) else {}
        segment.data = event.get("data")
        segment.logged_number = event.get(runlog.SEGMENT)
        if isinstance(event.get("cut_tail"), dict):
            segment.cut_tail = event["cut_tail"]

    def _group_lost(self, event: dict) -> None:
        self.lost_groups.append(event)

    def _weights_removed(self, event: dict) -> None:
        self.removed_files.update(event.get("files") or [])
        self.removed_models.update(model for model in event.get("models") or [] if type(model) is int)

    def _run_stop(self, event: dict) -> None:
        self.run_stops.append(event)

    def _score(self, event: dict) -> None:
        self.logged_score = event

    def finish(self, stream: runlog.EventStream | None = None) -> RunModel:
        """After the last event: the epoch columns joined, each task's epochs found, the stream's figures kept."""
        self.flush()
        self.epochs = np.concatenate(self._blocks) if self._blocks else np.empty((0, len(EPOCH_COLUMNS)))
        self._blocks.clear()
        self.monitor = np.frombuffer(self._monitor_values, dtype=float).reshape(-1, len(MONITOR_COLUMNS))
        self._task_epochs()
        self.events[runlog.EPOCH] = len(self.epoch_end)  # every epoch, whether its row is kept or not
        if stream is not None:
            self.lines = stream.lines
            self.bytes = self.path.stat().st_size
            self.truncated_tail, self.truncated_line = stream.truncated_tail, stream.truncated_line
            self.truncated_bytes = stream.truncated_bytes
        return self

    def _task_epochs(self) -> None:
        """Each task's epoch count, last epoch and earliest best epoch, from the columns at once."""
        if not len(self.epochs):
            return
        task_col = self.column("task")
        accuracy = self.column("val_accuracy")
        rows = np.arange(len(task_col))
        numbers, counts = np.unique(task_col, return_counts=True)
        last = len(task_col) - 1 - np.unique(task_col[::-1], return_index=True)[1]
        finite = np.isfinite(accuracy)
        order = np.lexsort((rows[finite], -accuracy[finite], task_col[finite]))  # per task: highest, then earliest
        best_tasks, first = np.unique(task_col[finite][order], return_index=True)
        best = dict(zip(best_tasks.tolist(), rows[finite][order][first].tolist(), strict=True))
        for number, count, row in zip(numbers.tolist(), counts.tolist(), last.tolist(), strict=True):
            if not math.isfinite(number):  # a task that is not a number: no task's epoch
                continue
            task = self._task(int(number))
            task.epochs, task.last_row, task.best_row = count, row, best.get(number, -1)
            self.next_task = max(self.next_task, int(number) + 1)


def read_timeline(run_dir: Path | str) -> tuple[Timeline, runlog.EventStream]:
    """Stream a run's event log into its :class:`Timeline` alone (the score's part of the model), and the stream
    (whether the last line was cut): what the run's own score reads at its end, in the memory of a few arrays."""
    stream = runlog.EventStream(Path(run_dir), parse=parse_line)
    timeline = Timeline()
    for event in stream:
        timeline.add(event)
    return timeline, stream


def read_model(run_dir: Path | str, on_event: Callable[[dict, RunModel], None] | None = None,
               require_start: bool = True, epochs_too: bool = False, keep_ended: bool = True,
               admit: Callable[[object], bool] | None = None) -> RunModel:  # fmt: skip
    """Stream a run directory's event log (or the file) into a :class:`RunModel`.

    ``on_event``: called with every event but the epochs once the model holds it (a reader's checks in
    step with the model: ``model.segment_records[-1]`` is the event's segment, ``model.tasks`` its task);
    with ``epochs_too`` with every epoch as well (slower: the epochs then take the generic path, a dict
    each).  A bad line before
    the last raises ``ValueError``; a cut last line is skipped and reported (``truncated_tail``);
    ``ValueError`` too for a log with no ``run_start`` (unless ``require_start`` is false: the score says so
    in its own words).  ``keep_ended`` false: each task is forgotten once ``on_event`` saw it end (its
    :class:`Done` is ``model.models[-1]``, its :class:`Failure` ``model.failures[-1]``, its task still in
    ``model.tasks``), and no epoch row is kept (:attr:`RunModel.keep_ended`).

    ``admit``: a judge of the log (verify) asked first about every parsed event, whatever it holds; one it
    refuses (its schema's problems: the judge names them) goes neither into the model nor to ``on_event``.
    Each line is then parsed whole by ``json.loads`` (a ``model_done`` with the epoch list it repeats): orjson
    reads an integer past 64 bits as a float, and a judge must see the number that was written.
    A judged log is hostile by assumption, so the model then reads past what it cannot take (a number of
    the wrong kind inside a record the schema does not type) rather than end the judging: the judge, which
    sees the event whole, says what is wrong with it.
    """
    stream = runlog.EventStream(Path(run_dir))
    model = RunModel(stream.path, keep_ended)
    parse = json.loads if admit is not None else parse_line if epochs_too else model.parse
    stream.parse, model._stream = parse, stream
    add = model.add if admit is None else model.judged
    for event in stream:
        if admit is not None and not admit(event):
            continue
        add(event)
        if on_event is not None:
            on_event(event, model)
        model.release(event)
    with suppress(*(_UNREAD if admit is not None else ())):
        model.flush()
    model.finish(stream)
    model._stream = None
    if require_start and not model.segment_records:
        raise ValueError(f"{stream.path}: the log has no run_start: not an aiperf_mpi event log")
    return model
