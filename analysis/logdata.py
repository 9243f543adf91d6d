"""A run's event log in compact columns: the one input of every analysis.

The report must stay quick and small on the log of a long run on a large
machine — 10,000 models and 500,000 epochs is half a gigabyte of JSON, and a
list of the epochs' dicts alone would take more than a gigabyte — so the log
is streamed once (:class:`aiperf_mpi.results.runlog.EventStream`) and kept as:

* epochs: one row of :data:`EPOCH_COLUMNS` floats each, in a flat array;
* monitor samples: one row per device and sample, same idea;
* models, proposals, failures, peaks, staging: small records (thousands);
* the graph of the best model only (the others are dropped as they pass);
* what the score needs, gathered by the score module's own
  :class:`aiperf_mpi.results.score.ScoreInputs`, so the score is computed exactly as
  the run computed it.

A ``model_done`` record repeats every epoch of its model (the epochs are
also logged one by one); parsing that list is most of the cost of reading
the log, so :func:`parse_line` cuts it out before parsing — falling back to
a full parse if the cut does not give valid JSON.  Epoch lines go straight
into the columns without a detour through the generic event handling.
Lines are parsed with ``orjson`` (a dependency: six times faster than the
standard library on these lines, which is what keeps a 500,000-epoch report
within its 10 s) and again with ``json`` where ``orjson`` refuses one, so
what is accepted is exactly what ``json.loads`` accepts; without ``orjson``
installed the standard library does all of it, slower.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path

import numpy as np

try:
    import orjson

    _fast_loads = orjson.loads
except ImportError:  # optional at run time: the standard library gives the same events, slower
    orjson = None
    _fast_loads = json.loads

from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import LENGTH, OFFSET, GraphFileError, graph_place, read_logged_graph
from aiperf_mpi.results.score import ScoreInputs, active_times

EPOCH_COLUMNS = ("task", "group", "epoch", "start", "end", "ops", "val_accuracy", "data_wait", "compute", "evaluation",
                 "compile")
"""the fields of an epoch the analyses use (as float64: display only — the score keeps exact integers)"""
MONITOR_COLUMNS = ("time", "node", "group", "device", "utilization", "memory_used", "memory_total")
_HEAD = re.compile(r'\s*\{\s*"event"\s*:\s*"([A-Za-z_]+)"')
_EPOCH_PREFIX = '{"event":"epoch",'
"""how :class:`aiperf_mpi.results.runlog.EventLog` starts an epoch line (other spellings take the generic path)"""
_ROW = itemgetter(runlog.TIME, *EPOCH_COLUMNS)
"""an epoch's row while it waits in a block: its time, then the columns"""
_ROW_NAMES = (runlog.TIME, *EPOCH_COLUMNS)
_ROW_DEFAULTS = tuple(-1 if name in ("task", "group") else 0 if name == "epoch" else math.nan for name in _ROW_NAMES)
"""what a missing field reads as (a missing ``ops`` stays NaN and stops the score, as it stops the run's)"""
_START, _END = 1 + EPOCH_COLUMNS.index("start"), 1 + EPOCH_COLUMNS.index("end")
_OPS, _ACCURACY = 1 + EPOCH_COLUMNS.index("ops"), 1 + EPOCH_COLUMNS.index("val_accuracy")
_DEVICE_FIELDS = ("index", "utilization", "memory_used", "memory_total")
_DEVICE = itemgetter(*_DEVICE_FIELDS)
BLOCK = 8192
"""epochs parsed before they are converted to columns at once (1 MB of floats)"""
_EPOCH_LIST = re.compile(r'"epochs"\s*:\s*\[')


def loads(line: str) -> dict:
    """``json.loads``, faster: orjson first, the standard library where orjson refuses (and for the error)."""
    if orjson is not None:
        try:
            return orjson.loads(line)
        except ValueError:  # orjson.JSONDecodeError is one; json decides what the line really is
            pass
    return json.loads(line)


def parse_line(line: str) -> dict:
    """One log line → its event; a ``model_done`` line without its repeated epoch list.

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


def _number(value: object) -> float:
    """A logged value as a float (None, strings and the like → NaN)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


@dataclass
class Model:
    """One trained model (a ``model_done`` record, without its graph and epochs)."""

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


@dataclass
class Proposal:
    """A ``model_proposed`` event: the search's output for one task."""

    task: int
    group: int
    time: float
    parent: int | None
    description: str
    hparams: dict
    search_seconds: float
    strategy: str


@dataclass
class Failure:
    """A ``model_failed`` event, its traceback dropped (the log keeps it)."""

    task: int
    group: int
    time: float
    rank: int | None
    host: str
    reason: str


@dataclass
class BestModel:
    """The model whose graph the report breaks down, with that graph."""

    task: int
    id: int
    accuracy: float | None
    forward_per_sample: float | None
    description: str
    graph: str
    """the graph's JSON; empty until read from its graphs file (``place``), and if that failed (``graph_error``)"""
    why: str
    """'best validation accuracy' or, with no accuracy in the run, 'largest forward count'"""
    place: dict | None = None
    """where its ``model_proposed`` placed its graph, when its ``model_done`` carries none (runs since the
    graph is logged once): read for this one model when the log has been read"""
    graph_error: str = ""
    """why the graph at ``place`` could not be read"""

    @property
    def source(self) -> str:
        """Where the graph was taken from, for the report."""
        return f"`{graph_place(self.place)}`" if self.place else "its `model_done` record"


@dataclass
class RunLog:
    """Everything the analyses read from one event log."""

    path: Path
    score_inputs: ScoreInputs
    epochs: np.ndarray
    """shape (epochs, len(EPOCH_COLUMNS)), log order"""
    monitor: np.ndarray
    """shape (device samples, len(MONITOR_COLUMNS)), log order"""
    monitor_nodes: dict[int, dict] = field(default_factory=dict)
    """node → {'host', 'source', 'devices': {index: name}}"""
    models: list[Model] = field(default_factory=list)
    proposals: dict[int, Proposal] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    peaks: dict[int, dict] = field(default_factory=dict)
    """group → its last ``peak`` event"""
    staging: list[dict] = field(default_factory=list)
    system: dict | None = None
    layout: dict | None = None
    run_stops: list[dict] = field(default_factory=list)
    lost_groups: list[dict] = field(default_factory=list)
    """``group_lost`` events: groups taken out of the run by a dead or hung rank"""
    logged_score: dict | None = None
    """the last ``score`` event: what the run itself printed"""
    best: BestModel | None = None
    events: Counter = field(default_factory=Counter)
    lines: int = 0
    bytes: int = 0
    truncated_tail: bool = False
    """the log's last line was cut off (a run killed mid-write) and skipped, as the score skips it"""
    truncated_line: str = ""
    truncated_bytes: int = 0
    cut_tails: list[dict] = field(default_factory=list)
    """the ``cut_tail`` of each resumed ``run_start``: a cut end that ``--resume`` set aside
    (:func:`aiperf_mpi.results.runlog.repair_tail`), with its segment"""
    provenances: list[dict] = field(default_factory=list)
    """the ``provenance`` of each ``run_start`` (empty dict where a segment has none): the code of each segment"""

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def config(self) -> dict:
        return self.score_inputs.config or {}

    @property
    def segments(self) -> list[tuple[float, float]]:
        return self.score_inputs.segments

    def column(self, name: str) -> np.ndarray:
        """One epoch column (a view)."""
        return self.epochs[:, EPOCH_COLUMNS.index(name)]

    def monitor_column(self, name: str) -> np.ndarray:
        return self.monitor[:, MONITOR_COLUMNS.index(name)]

    def active(self, times: np.ndarray) -> np.ndarray:
        """Wall times → the score's active time axis."""
        return active_times(times, self.segments, self.score_inputs.windows)

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


class _Reader:
    """Accumulates one pass over the log (kept out of :func:`load_run` to name each event's handling)."""

    def __init__(self) -> None:
        self.inputs = ScoreInputs()
        self.pending: list[tuple] = []
        """epoch rows not yet converted (at most BLOCK)"""
        self.blocks: list[np.ndarray] = []
        self.monitor_values = array("d")
        self.run = RunLog(Path(), self.inputs, np.empty((0, len(EPOCH_COLUMNS))), np.empty((0, 7)))
        self.largest: BestModel | None = None
        self.places: dict[int, dict] = {}
        """task → where its graph lies, from its model_proposed until its end (the tasks in flight)"""

    def parse(self, line: str) -> dict | None:
        """The stream's parser: epoch lines straight into the block (None: consumed), the rest as events.

        The epoch branch is :meth:`_epoch` and :func:`loads` written out:
        it runs half a million times, and the calls cost as much as the parse.
        """
        if line.startswith(_EPOCH_PREFIX):
            try:
                event = _fast_loads(line)
            except ValueError:
                event = json.loads(line)
            if type(event) is not dict or event.get(runlog.EVENT) != runlog.EPOCH:  # a later "event" key won
                return event
            pending = self.pending
            try:
                pending.append(_ROW(event))
            except (KeyError, TypeError):  # a field missing, or not an object: the careful way
                self._epoch(event)
                return None
            if len(pending) >= BLOCK:
                self.flush()
            return None
        return parse_line(line)

    def add(self, event: dict) -> None:
        """One event that :meth:`parse` handed back: to the score's inputs and to its own handler."""
        name = event.get(runlog.EVENT, "") if isinstance(event, dict) else ""
        if name == runlog.EPOCH:
            self._epoch(event)
            return
        if name in (runlog.RUN_START, runlog.RUN_STOP):
            self.flush()  # a block of epochs must not straddle a segment boundary
        self.run.events[name] += 1
        if not name or not isinstance(event, dict):  # valid JSON but no event: counted, nothing else
            return
        if runlog.TIME not in event:
            event[runlog.TIME] = math.nan
        if name == runlog.MODEL_DONE:  # the score needs only when and whether it trained
            model = event.get("model") if isinstance(event.get("model"), dict) else {}
            self.inputs.add({runlog.EVENT: name, runlog.TIME: event[runlog.TIME],
                             "model": {"status": model.get("status", "trained")}})  # fmt: skip
        else:
            self.inputs.add(event)
        handler = getattr(self, f"_{name}", None)
        if handler is not None:
            handler(event)

    def _epoch(self, event: dict) -> None:
        """One epoch into the pending block, a missing field as its default (:meth:`parse` has the fast way)."""
        if not isinstance(event, dict):
            raise ValueError(f"an epoch line is not a JSON object: {str(event)[:80]}")
        self.pending.append(tuple(event.get(name, default) for name, default in zip(_ROW_NAMES, _ROW_DEFAULTS,
                                                                                    strict=True)))  # fmt: skip
        if len(self.pending) >= BLOCK:
            self.flush()

    def flush(self) -> None:
        """The pending epochs → one block of columns, and to the score's inputs with their exact operations."""
        rows, self.pending = self.pending, []
        if not rows:
            return
        width = len(_ROW_NAMES)
        try:
            block = np.fromiter(chain.from_iterable(rows), dtype=float, count=len(rows) * width).reshape(-1, width)
        except (TypeError, ValueError):  # a None (no accuracy), a string, a list: value by value
            block = np.array([[_number(value) for value in row] for row in rows], dtype=float)
        missing = np.isnan(block[:, _START])
        block[missing, _START] = block[missing, _END]  # no start logged: the epoch is a point at its end
        self.inputs.add_epochs(block[:, 0], block[:, _END], [row[_OPS] for row in rows], block[:, _ACCURACY])
        self.blocks.append(block[:, 1:])

    def _model_done(self, event: dict) -> None:
        record = event.get("model") or {}
        ops = record.get("ops") or {}
        timings = record.get("timings") or {}
        accuracy = record.get("accuracy")
        model = Model(
            task=int(event.get("task", timings.get("task", -1))),
            group=int(event.get("group", timings.get("group", -1))),
            id=int(record.get("id", -1)),
            time=event[runlog.TIME],
            status=str(record.get("status", "trained")),
            accuracy=None if accuracy is None else float(accuracy),
            ops_total=_number(ops.get("total")),
            forward_per_sample=None if ops.get("forward_per_sample") is None else float(ops["forward_per_sample"]),
            params=ops.get("params"),
            description=str(record.get("description", "")),
            hparams=record.get("hparams") or {},
            train_seconds=timings.get("train"),
        )
        self.run.models.append(model)
        place = self.places.pop(model.task, None)
        graph = record.get("graph")
        if "graph" in record:  # a run from before the graph was logged once: its record carries it
            place = None
            if not graph or graph == "{}":
                return
        elif place is None:
            return
        best = self.run.best
        if model.accuracy is not None and (best is None or best.accuracy is None or model.accuracy > best.accuracy):
            self.run.best = BestModel(model.task, model.id, model.accuracy, model.forward_per_sample,
                                      model.description, graph or "", "best validation accuracy", place)  # fmt: skip
        forward = model.forward_per_sample or 0.0
        if self.largest is None or forward > (self.largest.forward_per_sample or 0.0):
            why = "largest forward count (no accuracy in the run)"
            self.largest = BestModel(model.task, model.id, model.accuracy, model.forward_per_sample,
                                     model.description, graph or "", why, place)  # fmt: skip

    def _model_proposed(self, event: dict) -> None:
        search = event.get("search") or {}
        task = int(event.get("task", -1))
        if "graph_file" in event:
            self.places[task] = {name: event[name] for name in ("graph_file", OFFSET, LENGTH, "graph_sha256")
                                 if name in event}  # fmt: skip
        self.run.proposals[task] = Proposal(
            task=task,
            group=int(event.get("group", -1)),
            time=event[runlog.TIME],
            parent=event.get("parent"),
            description=str(event.get("description", "")),
            hparams=event.get("hparams") or {},
            search_seconds=_number(search.get("search_seconds", 0.0)),
            strategy=str(search.get("strategy", "")),
        )

    def _model_failed(self, event: dict) -> None:
        self.places.pop(int(event.get("task", -1)), None)
        reason = str(event.get("reason", "")).strip().splitlines()
        self.run.failures.append(
            Failure(
                task=int(event.get("task", -1)),
                group=int(event.get("group", -1)),
                time=event[runlog.TIME],
                rank=event.get("rank"),
                host=str(event.get("host", "")),
                reason=(reason[0] if reason else "")[:300],
            )
        )

    def _monitor(self, event: dict) -> None:
        node = int(event.get("node", event.get("group", -1)))
        info = self.run.monitor_nodes.setdefault(node, {"host": event.get("host", ""), "source": "", "devices": {}})
        info["source"] = str(event.get("source", ""))
        names, values = info["devices"], self.monitor_values
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
        self.run.peaks[int(event.get("group", -1))] = event

    def _staging(self, event: dict) -> None:
        self.run.staging.append(event)

    def _system(self, event: dict) -> None:
        self.run.system = event

    def _layout(self, event: dict) -> None:
        self.run.layout = event

    def _run_start(self, event: dict) -> None:
        origin = event.get("provenance")
        self.run.provenances.append(origin if isinstance(origin, dict) else {})
        if isinstance(event.get("cut_tail"), dict):
            self.run.cut_tails.append({"segment": event.get(runlog.SEGMENT), **event["cut_tail"]})

    def _group_lost(self, event: dict) -> None:
        self.run.lost_groups.append(event)

    def _run_stop(self, event: dict) -> None:
        self.run.run_stops.append(event)

    def _score(self, event: dict) -> None:
        self.run.logged_score = event

    def finish(self, path: Path, stream: runlog.EventStream) -> RunLog:
        self.flush()
        run = self.run
        run.path = path
        run.epochs = np.concatenate(self.blocks) if self.blocks else np.empty((0, len(EPOCH_COLUMNS)))
        self.blocks.clear()
        run.monitor = np.frombuffer(self.monitor_values, dtype=float).reshape(-1, len(MONITOR_COLUMNS))
        if run.best is None:
            run.best = self.largest
        if run.best is not None and not run.best.graph and run.best.place:
            try:
                run.best.graph = read_logged_graph(path.parent, run.best.place)
            except GraphFileError as exc:
                run.best.graph_error = str(exc)
        run.events[runlog.EPOCH] = len(run.epochs)
        run.lines = stream.lines
        run.bytes = path.stat().st_size
        run.truncated_tail, run.truncated_line = stream.truncated_tail, stream.truncated_line
        run.truncated_bytes = stream.truncated_bytes
        if not run.segments:
            raise ValueError(f"{path}: the log has no run_start: not an aiperf_mpi event log")
        return run


def load_run(run_dir: Path) -> RunLog:
    """Stream a run directory's event log (or the file) into a :class:`RunLog`."""
    reader = _Reader()
    stream = runlog.EventStream(Path(run_dir), parse=reader.parse)
    for event in stream:
        reader.add(event)
    return reader.finish(stream.path, stream)
