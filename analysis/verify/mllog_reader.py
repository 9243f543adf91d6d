"""``mllog.log`` read beside the event walk, for the family ``mllog`` (:mod:`analysis.verify.mllog`).

The side file is a stream over another file: :class:`MLLogFollower`, owned by the unit stream
(:class:`analysis.verify.units.UnitStream`), is given each event after the run's model has read it and reads the
file ahead only as far as the event's question needs (an epoch's lines, a node's power line: at most
:data:`LOOKAHEAD_SECONDS` of log time), exactly as the walk's reader always did, so the lines it has read at each
event are the same.  What it read and matched at an event it hands back as a unit finished at once (an epoch's
lines, the power lines matched at a ``monitor`` sample, a ``run_stop``'s line, a segment's end and the next one's
start), with the problems of the lines themselves it met while reading (a line that is no mllog line, a key
aiperf_mpi never writes, a power line not as the writer makes it); the rules of :mod:`analysis.verify.mllog` judge
those units and keep nothing.  What needs the walk's order stays here: which epochs were begun and may be cut,
the epochs and power steps still lacking their lines (a killed segment may lack its last second of them), the
power steps waiting for a line read later.

Memory: the lines read ahead of the event walk are kept until their epoch event comes, at most
:data:`LOOKAHEAD_SECONDS` of log time, plus the begun-and-cut epochs until their segment ends; the power steps
waiting for their line, at most :data:`MAX_EXPECTED`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.energy import PowerStep
from aiperf_mpi.results.logmodel import RunModel
from aiperf_mpi.results.mllog_format import (
    DESCRIPTION,
    EVENT_TIME_MS,
    EVENT_TYPES,
    FLUSH_SECONDS,
    MLLOG_FILE,
    PRELUDE,
    NotAnMLLogLine,
    logged_ms,
    read_line,
    true_time_ms,
)
from analysis.checks import Lines, is_regular_file, short

FLUSH_WINDOW = FLUSH_SECONDS + 0.25
"""seconds of a killed segment's last epochs that may lack their mllog lines: the writer's flush interval, and
0.25 s for the two clocks that time it (``time.monotonic`` for the flush, ``time.time`` for the events)"""
LOOKAHEAD_SECONDS = 60.0
"""how far (in the lines' time) mllog is read ahead of the event walk looking for an epoch's lines"""
MAX_EXPECTED = 65_536
"""power steps kept waiting for their line at once (a node's sample a few seconds apart, at 65,536 nodes): past it
the oldest is named missing"""
MLLOG_RULE = "rule: mllog.log repeats the events"
KEPT_REPEATS = 10
"""a key's repeated description lines named one by one in a segment; the rest counted"""
PRELUDE_KEYS = frozenset(key for _, key, _ in PRELUDE)
"""the keys of a segment's lines before its ``run_start`` (:data:`aiperf_mpi.results.mllog_format.PRELUDE`)"""
DESCRIPTION_KEYS = frozenset(key for _, key, _ in DESCRIPTION)
"""the keys of a segment's lines right after its ``run_start`` (:data:`aiperf_mpi.results.mllog_format.DESCRIPTION`)"""
POWER_MARKS = ("power_measurement_start", "power_measurement_stop")
"""MLPerf's power keys that open and close a segment's readings (issue 53)"""
POWER_READING = "power_reading"
WRITTEN_KEYS = PRELUDE_KEYS | DESCRIPTION_KEYS | frozenset((
    "run_start", "run_stop", "epoch_start", "epoch_stop", "eval_accuracy", "global_batch_size", "staging_start",
    "staging_stop", *POWER_MARKS, POWER_READING))
"""every key aiperf_mpi writes into mllog.log (:class:`aiperf_mpi.job.mllog.MLLogWriter`): a line of another key
is a claim no run made (issue 52: a hand-added line is what an mlcommons reader believes)"""




@dataclass
class Described:
    """One key's description lines in a segment: the first whole, the others by their line numbers (a few kept,
    all counted), so a file of a million repeated lines costs no more memory than one."""

    number: int
    record: dict
    later: list[int] = field(default_factory=list)
    more: int = 0

    def again(self, number: int) -> None:
        if len(self.later) < KEPT_REPEATS:
            self.later.append(number)
        else:
            self.more += 1


@dataclass
class MLEpoch:
    """What mllog says of one epoch (only what is compared)."""

    line: int
    start_ms: int | None = None
    stop_ms: int | None = None
    ops: object = None
    train_samples: object = None
    has_eval: bool = False
    accuracy: object = None
    eval_samples: object = None

    @property
    def complete(self) -> bool:
        return self.stop_ms is not None and self.has_eval


class MLLogReader:
    """``mllog.log`` one line at a time, read ahead of the event walk only as far as a question needs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems = Lines()
        """the problems of the lines read since the last :meth:`take` (a few kept, the rest counted)"""
        self.lines = self._records(path)
        self.number = 0
        self.held: tuple[int, dict] | None = None
        """a ``run_start`` line read ahead: it opens the next segment, not the one being read"""
        self.pending: dict[tuple[int, int], MLEpoch] = {}
        self.stop_line: tuple[int, dict] | None = None
        """the current segment's ``run_stop`` line"""
        self.ended = False
        self.cut_tail = 0
        self.count = 0
        self.opened = False
        """the current segment's ``run_start`` line has been taken: a prelude key after it is the next segment's"""
        self.described: dict[str, Described] = {}
        """the current segment's description lines (before and right after its ``run_start``), by key"""
        self.upcoming: dict[str, Described] = {}
        """the next segment's, read ahead while the current one ended (left over at the end: lines of no segment)"""
        self.power: dict[tuple[object, int | None], tuple[int, object]] = {}
        """the segment's ``power_reading`` lines read ahead of their monitor sample: (host, true time in ms) →
        (line number, watts)"""
        self.power_marks: dict[str, list[tuple[int, dict]]] = {}
        """the segment's ``power_measurement_start`` and ``_stop`` lines, by key"""
        self.line_ms: object = None
        self.prior_ms: object = None
        """the ``time_ms`` of the line just read and of the one before it: a power line's is the writer's, the
        later of the line before's and its own true time (:class:`aiperf_mpi.job.mllog.MLLogWriter`)"""
        self.early_power: list[int] = []
        """power lines read before the segment's ``run_start`` (none belongs there): the first line numbers"""
        self.early_more = 0
        """and how many more"""

    def take(self) -> Lines:
        """The problems of the lines read since the last call, in the order met: the unit of the event that read
        them carries them."""
        taken, self.problems = self.problems, Lines()
        return taken

    def _records(self, path: Path) -> Iterator[tuple[int, dict]]:
        with open(path, encoding="utf-8", errors="replace") as handle:
            number = 0
            for text in handle:
                number += 1
                if not text.endswith("\n"):  # the last line, cut by a kill mid-write
                    self.cut_tail = len(text)
                    return
                if not text.strip():
                    continue
                try:
                    record = read_line(text)
                except NotAnMLLogLine as exc:
                    self.problems.append(f"mllog.log line {number}: {exc} ({MLLOG_RULE})")
                    continue
                yield number, record

    def _next(self) -> tuple[int, dict] | None:
        """The next line of the current segment; None at its end (the next run_start, held) or the file's."""
        if self.held is not None or self.ended:
            return None
        found = next(self.lines, None)
        if found is None:
            self.ended = True
            return None
        self.count += 1
        self.prior_ms, self.line_ms = self.line_ms, found[1].get("time_ms")
        if found[1]["key"] == "run_start":
            self.held = found
            return None
        return found

    def _absorb(self, number: int, record: dict) -> None:
        key = record["key"]
        meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        if key not in WRITTEN_KEYS:
            self.problems.append(f"mllog.log line {number}: a line of key {short(key)}, which aiperf_mpi never writes "
                                 f"({MLLOG_RULE}: nothing but what the run logged)")  # fmt: skip
            return
        if key in PRELUDE_KEYS or key in DESCRIPTION_KEYS:
            later = self.opened if key in PRELUDE_KEYS else self.stop_line is not None
            bucket = self.upcoming if later else self.described
            if key in bucket:
                bucket[key].again(number)
            else:
                bucket[key] = Described(number, record)
            return
        if key in POWER_MARKS or key == POWER_READING:
            if not self.opened:  # a few named, the rest counted: a file of such lines costs no more memory
                if len(self.early_power) < KEPT_REPEATS:
                    self.early_power.append(number)
                else:
                    self.early_more += 1
                return
            wrong = self._power_shape(key, record, meta)
            if wrong:
                self.problems.append(f"mllog.log line {number}: {key}: {wrong} ({MLLOG_RULE}: a power line as the "
                                     "writer makes it)")  # fmt: skip
                return
        if key == POWER_READING:
            where = (meta["host"], true_time_ms(record))
            if where in self.power:  # a second line for one sample: only one can be its step
                self.problems.append(f"mllog.log line {number}: a second power_reading of {short(where[0])} at "
                                     f"{where[1]} ms (line {self.power[where][0]}) ({MLLOG_RULE})")  # fmt: skip
            else:
                self.power[where] = (number, record.get("value"))
            return
        if key == POWER_MARKS[1] and self.stop_line is not None:
            self.problems.append(f"mllog.log line {number}: {key} after its segment's run_stop line (the writer "
                                 f"writes it just before) ({MLLOG_RULE})")  # fmt: skip
            return
        if key in POWER_MARKS:
            marks = self.power_marks.setdefault(key, [])
            if len(marks) <= KEPT_REPEATS:  # the first, and a few of its repeats named: each one is a problem
                marks.append((number, record))
            return
        if key == "run_stop":
            if self.stop_line is not None:
                self.problems.append(f"mllog.log line {number}: a second run_stop in one segment ({MLLOG_RULE})")
            self.stop_line = (number, record)
            return
        if key not in ("epoch_start", "epoch_stop", "eval_accuracy"):
            return
        task, epoch = meta.get("task"), meta.get("epoch_num")
        if not isinstance(task, int) or not isinstance(epoch, int):
            self.problems.append(f"mllog.log line {number}: {key} without its task and epoch_num ({MLLOG_RULE})")
            return
        entry = self.pending.get((task, epoch))
        if entry is None:
            entry = self.pending[(task, epoch)] = MLEpoch(number)
        if key == "epoch_start":
            entry.start_ms = true_time_ms(record)
        elif key == "epoch_stop":
            entry.stop_ms = true_time_ms(record)
            entry.ops, entry.train_samples = meta.get("ops"), meta.get("train_samples")
        elif key == "eval_accuracy":
            entry.has_eval, entry.accuracy, entry.eval_samples = True, record.get("value"), meta.get("eval_samples")

    def _power_shape(self, key: str, record: dict, meta: dict) -> str:
        """What a power line has that its writer never makes (empty: nothing): its event type, a metadata member
        beyond the writer's, a reading without its host, and a ``time_ms`` other than the writer's (the later of the
        line before's and its own true time: mlcommons' summarizer integrates by ``time_ms``)."""
        kind = "event" if key == POWER_READING else "start" if key == POWER_MARKS[0] else "end"
        members = {POWER_READING: {"host"}, POWER_MARKS[0]: {"segment", "nodes"}, POWER_MARKS[1]: set()}[key]
        if record.get("event_type") != EVENT_TYPES[kind]:
            return f"event type {short(record.get('event_type'))}, the writer's {EVENT_TYPES[kind]}"
        if not isinstance(record.get("metadata"), dict) or set(meta) - members - {EVENT_TIME_MS}:
            return f"metadata {short(record.get('metadata'))}: the writer's holds {sorted(members)} only"
        if key == POWER_READING and not isinstance(meta.get("host"), str):
            return "no host"
        true, logged, prior = true_time_ms(record), record.get("time_ms"), self.prior_ms
        prior = prior if isinstance(prior, int) and not isinstance(prior, bool) else 0
        if true is None or logged != max(prior, true):
            return f"time_ms {short(logged)}, the writer's {short(None if true is None else max(prior, true))}"
        return ""

    def read_until(self, done, limit_ms: float = math.inf) -> None:
        """Read lines of the current segment until ``done()``, a line later than ``limit_ms``, or its end."""
        while not done():
            found = self._next()
            if found is None:
                return
            self._absorb(*found)
            time_ms = found[1].get("time_ms")
            if isinstance(time_ms, int | float) and time_ms > limit_ms:
                return

    def enter_segment(self) -> tuple[int, dict] | None:
        """Skip to the next segment's ``run_start`` line (its staging and description lines before it)."""
        self.described, self.upcoming, self.opened = self.upcoming, {}, False
        while self.held is None and not self.ended:
            found = self._next()
            if found is not None:
                self._absorb(*found)
        opened, self.held = self.held, None
        self.stop_line = None
        for number in self.early_power:
            self.problems.append(f"mllog.log line {number}: a power line before its segment's run_start "
                                 f"({MLLOG_RULE})")  # fmt: skip
        if self.early_more:
            self.problems.append(f"mllog.log: {self.early_more} more power lines before a segment's run_start "
                                 f"({MLLOG_RULE})")  # fmt: skip
        self.early_power, self.early_more = [], 0
        self.power, self.power_marks = {}, {}
        self.opened = True
        return opened


@dataclass
class Missing:
    """The epochs of one segment whose mllog lines are absent: a killed segment may lack its last second."""

    lines: Lines
    count: int = 0
    first_time: float = math.inf
    last_time: float = -math.inf
    matched_after: bool = False
    """an epoch after the first missing one has its lines: not a lost tail"""
    power: int = 0
    """of ``count``, the nodes' power steps (the rest are epochs)"""




# ------------------------------------------------------------------------------------------------------ the units


@dataclass
class MLLogRead:
    """What ``mllog.log`` said at one event (``at``: its number in the log; the log's end: ``math.inf``), finished
    at once: the problems of the lines read at it, in the order met."""

    at: float
    read: Lines


@dataclass
class EpochLines(MLLogRead):
    """An epoch event of a segment and its mllog lines (None: none read whole within the read-ahead: named among
    its segment's missing)."""

    event: dict
    entry: MLEpoch | None


@dataclass
class PowerLines(MLLogRead):
    """A ``monitor`` sample that stepped a node's readings, and each power step whose ``power_reading`` line was
    read by then (this sample's, or an earlier one's read late): (step, line number, watts)."""

    matched: list[tuple[PowerStep, int, object]]


@dataclass
class RunStopLine(MLLogRead):
    """A ``run_stop`` event of a segment and its segment's ``run_stop`` line (None: none before the next
    ``run_start`` line or the file's end)."""

    segment: int
    event: dict
    line: tuple[int, dict] | None


@dataclass
class SegmentStarted(MLLogRead):
    """A ``run_start`` event (its segment's number as mllog counts them: ``run_start`` events) and the file's next
    ``run_start`` line (None: none), skipped to past the segment's prelude."""

    segment: int
    event: dict
    line: tuple[int, dict] | None


@dataclass
class SegmentEnded(MLLogRead):
    """A segment of mllog's count, once the next ``run_start`` event or the log's end came: its lines read to its
    end, what its events were, and what of its lines found no event."""

    segment: int
    started: dict | None
    """its ``run_start`` event, and its first ``system`` and ``layout``: what its description is made of"""
    system: dict | None
    layout: dict | None
    described: dict[str, Described]
    """its description lines by key"""
    matched: list[tuple[PowerStep, int, object]]
    """power steps whose line was read at its end"""
    power: dict[tuple[object, int | None], tuple[int, object]]
    """``power_reading`` lines no sample gave: (host, ms) → (line number, watts)"""
    power_marks: dict[str, list[tuple[int, dict]]]
    measured: dict | None
    """its ``system`` event where a node of it had readings"""
    measured_nodes: int
    stopped: bool
    closed_after: bool
    """its ``run_stop`` is the job script's, after its launch ended: its tail is a killed segment's"""
    stop_time: object
    steps: int
    """its power lines matched"""
    stop_line: tuple[int, dict] | None
    pending: dict[tuple[int, int], MLEpoch]
    """its mllog epochs that no epoch event took"""
    cut_allowed: dict[int, int]
    """task → the one epoch number that may have begun and been cut (no epoch event)"""
    open_epochs: dict[int, int]
    """task → epochs logged, for the tasks still training at its end"""
    missing: Missing
    """its epochs and power steps without lines"""


@dataclass
class MLLogEnded(MLLogRead):
    """The file once the log has ended: what follows its last segment, and the counts of the summary."""

    held: tuple[int, dict] | None
    """a ``run_start`` line of a segment the event log lacks"""
    upcoming: dict[str, Described]
    """description lines after the last segment's ``run_start`` or ``run_stop``"""
    cut_tail: int
    stopped: bool
    closed_after: bool
    segments: int
    lines: int
    epochs: int
    power_steps: int


# ------------------------------------------------------------------------------------------------------ the follower

READS = (runlog.RUN_START, runlog.SYSTEM, runlog.LAYOUT, runlog.MONITOR, runlog.EPOCH, runlog.MODEL_DONE,
         runlog.MODEL_FAILED, runlog.GROUP_LOST, runlog.RUN_STOP)  # fmt: skip
"""the events whose lines mllog.log repeats, or that say which of its epochs may be cut"""


class MLLogFollower:
    """``mllog.log`` read in step with the walk: :meth:`see` each event (the run's model has read it), :meth:`end`
    at the log's end; each returns the units it finished (see the module's doc)."""

    def __init__(self, path: Path) -> None:
        self.reader = MLLogReader(path)
        self.segment = 0
        self.stopped = False
        self.closed_after = False
        self.open_epochs: dict[int, int] = {}
        self.cut_allowed: dict[int, int] = {}
        self.missing = Missing(Lines())
        self.epochs = 0
        self.started: dict | None = None
        self.first_system: dict | None = None
        self.first_layout: dict | None = None
        self.measured: dict | None = None
        self.measured_nodes = 0
        self.power_steps = 0
        self.stop_time: object = None
        self.latest = -math.inf
        """the latest time of an event (monitor samples apart) before the one judged: a sample logged after it was
        handled, and its power line written, no earlier (the master may get a sample late)"""
        self.segment_steps = 0
        self.expected: dict[tuple, tuple] = {}
        """the open segment's power steps whose line has not been read yet: (host, ms) → (step, the sample's time)"""

    @classmethod
    def of(cls, run_dir: Path) -> MLLogFollower | None:
        """The follower of ``run_dir``'s ``mllog.log`` (None: it is no regular file)."""
        path = run_dir / MLLOG_FILE
        return cls(path) if is_regular_file(path) else None

    def see(self, event: dict, number: int, model: RunModel | None) -> list[MLLogRead]:
        name = event[runlog.EVENT]
        if name not in READS:
            return []
        when = event.get(runlog.TIME)
        if isinstance(when, int | float) and not isinstance(when, bool) and name != runlog.MONITOR:
            self.latest = max(self.latest, when)  # a sample logged after this event was handled after it
        if self.segment == 0 and name != runlog.RUN_START:
            return []
        if name == runlog.RUN_START:
            return [*self._end_segment(number), self._start_segment(event, number)]
        if name == runlog.SYSTEM:
            self._system(event, model)
        elif name == runlog.LAYOUT:
            self.first_layout = self.first_layout if self.first_layout is not None else event
        elif name == runlog.MONITOR:
            return self._monitor(event, number, model)
        elif name == runlog.EPOCH:
            return [self._epoch(event, number)]
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self._model_done(event)
        elif name == runlog.GROUP_LOST:
            if isinstance(event.get("task"), int):
                task = event["task"]  # its running epoch, begun and never ended, went with the group
                self.cut_allowed[task] = self.open_epochs.pop(task, 0) + 1
        elif name == runlog.RUN_STOP:
            return [self._run_stop(event, number)]
        return []

    def _system(self, event: dict, model: RunModel | None) -> None:
        if self.first_system is None:
            self.first_system = event
            segments = model.energy.segments if model is not None else []
            if segments and segments[-1].nodes:  # the ledger read this event first (the walk's model)
                self.measured, self.measured_nodes = event, len(segments[-1].nodes)

    def _monitor(self, event: dict, number: int, model: RunModel | None) -> list[MLLogRead]:
        """A node's sample: the step the log's readings give it waits for its ``power_reading`` line, read ahead
        of the walk until it comes or the lines pass the sample's time by :data:`LOOKAHEAD_SECONDS`."""
        step = model.energy.last_step if model is not None else None
        if step is None:
            return []
        self.power_steps += 1
        key = (step.host, logged_ms(step.time))
        logged = event.get(runlog.TIME)
        self.expected[key] = (step, logged)
        if len(self.expected) > MAX_EXPECTED:  # a file that lacks its lines: the oldest is missing, not kept
            old = next(iter(self.expected))
            self._missing_step(old, *self.expected.pop(old))
        power = self.reader.power
        handled = max(logged, self.latest) if isinstance(logged, int | float) else self.latest
        limit = (handled + LOOKAHEAD_SECONDS) * 1000 if math.isfinite(handled) else math.inf
        self.reader.read_until(lambda: key in power, limit)
        if key in power and self.missing.count:
            self.missing.matched_after = True
        matched = self._match_power()
        read = self.reader.take()
        return [PowerLines(number, read, matched)] if matched or read or read.dropped else []

    def _match_power(self) -> list[tuple[PowerStep, int, object]]:
        """Each expected step whose line has been read (a sample the master got late has its line later than the
        read-ahead: it is matched when read, or named missing at its segment's end)."""
        power, matched = self.reader.power, []
        for key in [key for key in self.expected if key in power]:
            step, _ = self.expected.pop(key)
            number, watts = power.pop(key)
            self.segment_steps += 1
            matched.append((step, number, watts))
        return matched

    def _missing_step(self, key: tuple, step: PowerStep, logged: object) -> None:
        missing = self.missing
        missing.count += 1
        missing.power += 1
        missing.lines.append(f"mllog.log: no power_reading for {short(step.host)} at {key[1]} ms (its monitor "
                             f"sample logged at {short(logged)}: {step.watts:.6g} W) ({MLLOG_RULE}: every "
                             "step of a node's readings has its power line)")  # fmt: skip
        if isinstance(logged, int | float):
            missing.first_time = min(missing.first_time, logged)
            missing.last_time = max(missing.last_time, logged)

    def _epoch(self, event: dict, number: int) -> EpochLines:
        """An epoch's lines, read ahead until they are whole or pass its end by :data:`LOOKAHEAD_SECONDS`."""
        self.epochs += 1
        task, epoch = event.get("task"), event.get("epoch")
        self.open_epochs[task] = self.open_epochs.get(task, 0) + 1
        key = (task, epoch)
        pending = self.reader.pending
        logged = event.get(runlog.TIME)
        times = [t for t in (logged, event.get("end")) if isinstance(t, int | float) and not isinstance(t, bool)]
        limit = (max(times) + LOOKAHEAD_SECONDS) * 1000 if times else math.inf
        self.reader.read_until(lambda: key in pending and pending[key].complete, limit)
        entry = pending.pop(key, None)
        if entry is None or not entry.complete:
            what = "no lines" if entry is None else ("no epoch_stop" if entry.stop_ms is None else "no eval_accuracy")
            missing = self.missing
            missing.count += 1
            missing.lines.append(f"mllog.log: task {task} epoch {epoch} (event logged at {short(logged)}): {what} "
                                 f"({MLLOG_RULE}: every epoch event has its mllog lines)")  # fmt: skip
            if isinstance(logged, int | float):
                missing.first_time = min(missing.first_time, logged)
                missing.last_time = max(missing.last_time, logged)
            return EpochLines(number, self.reader.take(), event, None)
        if self.missing.count:
            self.missing.matched_after = True
        return EpochLines(number, self.reader.take(), event, entry)

    def _model_done(self, event: dict) -> None:
        """A model's end: the epoch after its last may have begun and been cut if it failed or trained none."""
        task = event.get("task")
        done = self.open_epochs.pop(task, 0)
        model = event.get("model") if isinstance(event.get("model"), dict) else {}
        if event[runlog.EVENT] == runlog.MODEL_FAILED or model.get("status") == "failed" or not done:
            self.cut_allowed[task] = done + 1

    def _run_stop(self, event: dict, number: int) -> RunStopLine:
        self.stopped = True
        self.stop_time = event.get(runlog.TIME)
        self.closed_after = event.get("reason") == runlog.CLOSED_REASON
        tasks = event.get("discarded_tasks")
        for task in tasks if isinstance(tasks, list) else ():
            self.cut_allowed[task] = self.open_epochs.get(task, 0) + 1
        reader = self.reader
        reader.read_until(lambda: reader.stop_line is not None)
        return RunStopLine(number, reader.take(), self.segment, event, reader.stop_line)

    def _start_segment(self, event: dict, number: int) -> SegmentStarted:
        self.segment += 1
        self.started, self.first_system, self.first_layout = event, None, None
        self.stopped = self.closed_after = False
        self.measured, self.stop_time, self.segment_steps, self.measured_nodes = None, None, 0, 0
        self.expected = {}
        self.open_epochs, self.cut_allowed = {}, {}
        self.missing = Missing(Lines())
        opened = self.reader.enter_segment()
        return SegmentStarted(number, self.reader.take(), self.segment, event, opened)

    def _end_segment(self, at: float) -> list[SegmentEnded]:
        """The segment's remaining lines read, and what of it is judged at its end, handed over."""
        if self.segment == 0:
            return []
        reader = self.reader
        reader.read_until(lambda: False)
        read = reader.take()
        described, reader.described = reader.described, {}
        matched = self._match_power()
        for key, (step, logged) in self.expected.items():
            self._missing_step(key, step, logged)
        self.expected = {}
        ended = SegmentEnded(at, read, self.segment, self.started, self.first_system, self.first_layout, described,
                             matched, reader.power, reader.power_marks, self.measured, self.measured_nodes,
                             self.stopped, self.closed_after, self.stop_time, self.segment_steps, reader.stop_line,
                             reader.pending, self.cut_allowed, self.open_epochs, self.missing)  # fmt: skip
        reader.power, reader.power_marks, reader.pending = {}, {}, {}
        return [ended]

    def end(self) -> tuple[list[SegmentEnded], MLLogEnded]:
        """The last segment's end, and the file's after it."""
        ended = self._end_segment(math.inf)
        reader = self.reader
        if reader.held is None and not reader.ended:
            reader.read_until(lambda: False)
        upcoming, reader.upcoming = reader.upcoming, {}
        return ended, MLLogEnded(math.inf, reader.take(), reader.held, upcoming, reader.cut_tail, self.stopped,
                                 self.closed_after, self.segment, reader.count, self.epochs,
                                 self.power_steps)  # fmt: skip
