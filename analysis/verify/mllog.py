"""The family ``mllog``: ``mllog.log`` against the event log (its row: :data:`analysis.verify.registry.FAMILIES`).

``events.jsonl`` is the record verify recomputes everything from; the side
files repeat parts of it for other readers (mlcommons' tools, a person
loading the best model, a reviewer opening a bundle).  A forger who edits
the log and rescores it consistently leaves them telling the old story, and
one who edits a side file leaves it disagreeing with the log; either way a
row here names the file, the event or task, and the rule (``best/``:
:mod:`analysis.verify.best`; a bundle's files: :mod:`analysis.verify.bundle`).

What the rule cannot say: ``mllog.log`` (:mod:`aiperf_mpi.job.mllog`) is read streaming, line by line,
beside the event walk, and its writer flushes at most once a second, so a
segment killed without ``run_stop`` may lack the lines written after its
last flush.  Missing epochs are tolerated then, and only then, when they
are the segment's last epochs (no epoch after the first missing one has its
lines) and were logged within :data:`FLUSH_WINDOW` seconds of each other;
they are noted, not failed: a forger can hide at most that last second.
Memory: the lines read ahead of the event walk are kept until their epoch
event comes, at most :data:`LOOKAHEAD_SECONDS` of log time, plus the
begun-and-cut epochs until their segment ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.graph.model import search_space
from aiperf_mpi.results import runlog
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
from analysis.checks import Check, Lines, Run, is_regular_file, same, short

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


# --------------------------------------------------------------------------- mllog.log


def _records_of(config: dict, system: dict, layout: dict, data: dict) -> dict[str, tuple | str]:
    """Key → each description line the writer makes of a segment (``mllog_format``'s :data:`PRELUDE` and
    :data:`DESCRIPTION`), or, for one the log's events cannot make (a field they lack, a value of the wrong type),
    why not, in words."""
    made: dict[str, tuple | str] = {}
    for kind, key, make in (*PRELUDE, *DESCRIPTION):
        try:
            made[key] = (kind, key, *make(config, system, layout, data, search_space))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            made[key] = f"{type(exc).__name__} {' '.join(str(exc).split())[:60]}"
    return made


@dataclass
class _Described:
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
class _MLEpoch:
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


class _MLLogReader:
    """``mllog.log`` one line at a time, read ahead of the event walk only as far as a question needs."""

    def __init__(self, path: Path, problems: Lines) -> None:
        self.path = path
        self.problems = problems
        self.lines = self._records(path)
        self.number = 0
        self.held: tuple[int, dict] | None = None
        """a ``run_start`` line read ahead: it opens the next segment, not the one being read"""
        self.pending: dict[tuple[int, int], _MLEpoch] = {}
        self.stop_line: tuple[int, dict] | None = None
        """the current segment's ``run_stop`` line"""
        self.ended = False
        self.cut_tail = 0
        self.count = 0
        self.opened = False
        """the current segment's ``run_start`` line has been taken: a prelude key after it is the next segment's"""
        self.described: dict[str, _Described] = {}
        """the current segment's description lines (before and right after its ``run_start``), by key"""
        self.upcoming: dict[str, _Described] = {}
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
                bucket[key] = _Described(number, record)
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
            entry = self.pending[(task, epoch)] = _MLEpoch(number)
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
class _Missing:
    """The epochs of one segment whose mllog lines are absent: a killed segment may lack its last second."""

    lines: Lines
    count: int = 0
    first_time: float = math.inf
    last_time: float = -math.inf
    matched_after: bool = False
    """an epoch after the first missing one has its lines: not a lost tail"""
    power: int = 0
    """of ``count``, the nodes' power steps (the rest are epochs)"""


class MLLogCheck:
    """``mllog.log`` against the events, streamed beside the verifier's walk (see the module's doc)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("mllog.log")
        self.path = run.run_dir / MLLOG_FILE
        self.reader: _MLLogReader | None = None
        if is_regular_file(self.path):
            self.reader = _MLLogReader(self.path, self.check.problems)
        else:
            self.check.problems.append(f"mllog.log is missing: every run writes one ({MLLOG_RULE})")
        self.segment = 0
        self.stopped = False
        self.closed_after = False
        """the segment's run_stop is the job script's, written after its launch ended (job/close.py): its tail is a
        killed segment's"""
        self.discarded: set[int] = set()
        self.open_epochs: dict[int, int] = {}
        """task → epochs logged, for the tasks still training in this segment"""
        self.cut_allowed: dict[int, int] = {}
        """task → the one epoch number that may have begun and been cut (no epoch event)"""
        self.missing = _Missing(Lines())
        self.compared = self.epochs = 0
        self.tolerated = 0
        self.started: dict | None = None
        """the open segment's ``run_start`` event, and its first ``system`` and ``layout``: what its description
        lines are recomputed from"""
        self.first_system: dict | None = None
        self.first_layout: dict | None = None
        self.described = self.description_lines = 0
        self.measured: dict | None = None
        """the open segment's ``system`` event, where a node of it has readings: its power lines begin there"""
        self.power_compared = self.power_steps = 0
        self.stop_time: object = None
        """the open segment's ``run_stop`` time, once it has one"""
        self.latest = -math.inf
        """the latest time of an event (monitor samples apart) before the one judged: a sample logged after it was
        handled, and its power line written, no earlier (the master may get a sample late)"""
        self.segment_steps = 0
        """the open segment's power lines matched"""
        self.expected: dict[tuple, tuple] = {}
        """the open segment's power steps whose line has not been read yet: (host, ms) → (step, the sample's time)"""
        self.measured_nodes = 0
        """the open segment's nodes with readings at its start line (its start line's ``nodes``)"""

    def each(self, event: dict, _: int) -> bool:
        """Its events while mllog.log is open, those of a segment after its run_start."""
        when = event.get(runlog.TIME)
        if isinstance(when, int | float) and not isinstance(when, bool) and event[runlog.EVENT] != runlog.MONITOR:
            self.latest = max(self.latest, when)  # a sample logged after this event was handled after it
        return self.reader is not None and (self.segment > 0 or event[runlog.EVENT] == runlog.RUN_START)

    def run_start(self, event: dict, _: int) -> None:
        self._end_segment()
        self._start_segment(event)

    def system(self, event: dict, _: int) -> None:
        if self.first_system is None:
            self.first_system = event
            segments = self.run.model.energy.segments if self.run.model is not None else []
            if segments and segments[-1].nodes:  # the ledger read this event first (the walk's model)
                self.measured, self.measured_nodes = event, len(segments[-1].nodes)

    def monitor(self, event: dict, _: int) -> None:
        """A node's sample: the mean power since its previous one that the log's readings give
        (:attr:`~aiperf_mpi.results.energy.EnergyLedger.last_step`, the writer's code) is its ``power_reading``
        line, at the later reading's time, for that host; a sample that gives none has no line."""
        step = self.run.model.energy.last_step if self.run.model is not None else None
        if step is None:
            return
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
        self._match_power()

    def _match_power(self) -> None:
        """Each expected step whose line has been read, compared (a sample the master got late has its line later
        than the read-ahead: it is matched when read, or named missing at its segment's end)."""
        power = self.reader.power
        for key in [key for key in self.expected if key in power]:
            step, _ = self.expected.pop(key)
            number, watts = power.pop(key)
            self.segment_steps += 1
            try:
                equal = same(watts, step.watts)
                said = short(watts)
            except RecursionError:  # a value nested past what a comparison can walk
                equal, said = False, "a value nested too deeply to compare"
            if not equal:
                self.check.problems.append(f"mllog.log line {number}: power_reading of {short(step.host)} "
                                           f"{said} W, the log's readings give {step.watts!r} W "
                                           f"({MLLOG_RULE}: a node's power is its counters' step)")  # fmt: skip
            else:
                self.power_compared += 1

    def _missing_step(self, key: tuple, step, logged: object) -> None:
        missing = self.missing
        missing.count += 1
        missing.power += 1
        missing.lines.append(f"mllog.log: no power_reading for {short(step.host)} at {key[1]} ms (its monitor "
                             f"sample logged at {short(logged)}: {step.watts:.6g} W) ({MLLOG_RULE}: every "
                             "step of a node's readings has its power line)")  # fmt: skip
        if isinstance(logged, int | float):
            missing.first_time = min(missing.first_time, logged)
            missing.last_time = max(missing.last_time, logged)

    def _power_marks(self) -> None:
        """The segment's ``power_measurement_start`` (at its ``system`` event's time, where a node was measured)
        and ``power_measurement_stop`` (at its ``run_stop``'s, when the run stopped it), once each; none where no
        node was measured; and no ``power_reading`` line that no sample of the log makes."""
        reader, where = self.reader, f"segment {self.segment}"
        for (host, ms), (number, _) in sorted(reader.power.items(), key=lambda item: item[1][0])[:KEPT_REPEATS]:
            self.check.problems.append(f"mllog.log line {number}: a power_reading of {short(host)} at {short(ms)} ms "
                                       f"that no monitor sample of {where} gives ({MLLOG_RULE})")  # fmt: skip
        if len(reader.power) > KEPT_REPEATS:
            self.check.problems.append(f"mllog.log: {len(reader.power) - KEPT_REPEATS} more power_reading lines of "
                                       f"{where} that no sample gives ({MLLOG_RULE})")  # fmt: skip
        # the stop is written with run_stop, and flushed with it: a killed or closed segment has none
        expected = {"power_measurement_start": self.measured.get(runlog.TIME) if self.measured else None,
                    "power_measurement_stop": self.stop_time if self.measured and self.stopped
                    and not self.closed_after else None}  # fmt: skip
        for key in POWER_MARKS:
            lines = reader.power_marks.get(key, [])
            when = expected[key]
            if when is None:
                why = "whose system event measured no node" if self.measured is None else "which the run did not stop"
                for number, _ in lines:
                    self.check.problems.append(f"mllog.log line {number}: {key} in {where}, {why} ({MLLOG_RULE})")
                continue
            if not lines and key == POWER_MARKS[0] and not self.stopped and not self.segment_steps:
                self.check.notes.append(f"{where} was killed before its power_measurement_start line was flushed "
                                        "(no power line of it follows)")  # fmt: skip
                continue
            if not lines:
                self.check.problems.append(f"mllog.log: no {key} line in {where}, whose nodes were measured "
                                           f"({MLLOG_RULE})")  # fmt: skip
            elif key == POWER_MARKS[0]:
                meta = lines[0][1].get("metadata") or {}
                made = {"segment": self.started.get("segment") if self.started else None, "nodes": self.measured_nodes}
                if lines[0][1].get("value") is not None or any(meta.get(k) != v for k, v in made.items()):
                    self.check.problems.append(f"mllog.log line {lines[0][0]}: {key} of {where}: value "
                                               f"{short(lines[0][1].get('value'))}, metadata {short(meta)}; the log's "
                                               f"{made} ({MLLOG_RULE})")  # fmt: skip
            elif lines[0][1].get("value") is not None:
                self.check.problems.append(f"mllog.log line {lines[0][0]}: {key} of {where} with a value "
                                           f"({MLLOG_RULE})")  # fmt: skip
            for number, _ in lines[1:]:
                self.check.problems.append(f"mllog.log line {number}: a second {key} in {where} ({MLLOG_RULE})")
            if lines and true_time_ms(lines[0][1]) != logged_ms(when):
                self.check.problems.append(f"mllog.log line {lines[0][0]}: {key} at {true_time_ms(lines[0][1])} ms, "
                                           f"the log's at {logged_ms(when)} ms ({MLLOG_RULE})")  # fmt: skip
        reader.power, reader.power_marks = {}, {}

    def layout(self, event: dict, _: int) -> None:
        if self.first_layout is None:
            self.first_layout = event

    def _description(self) -> None:
        """The segment's description lines (the hardware, the data, the time limit, the space) against what the
        writer makes of the segment's ``run_start``, ``system`` and ``layout`` events (issue 52: ``mllog.log``
        claiming 64 nodes of 8 B200 over a one-host run verified).  A line the file lacks claims nothing; a
        second one, or one that differs, is a problem."""
        found, self.reader.described = self.reader.described, {}
        where = f"segment {self.segment}"
        started, system, layout = self.started, self.first_system, self.first_layout
        if started is None or system is None or layout is None:
            return  # the segments and inventory rows name the missing event; nothing to recompute from
        config = started.get("config") if isinstance(started.get("config"), dict) else {}
        data = started.get("data") if isinstance(started.get("data"), dict) else {}
        hosts = [host for host in system.get("hosts") or [] if isinstance(host, dict)]
        most = max((len(host["accelerators"]) for host in hosts if isinstance(host.get("accelerators"), list)),
                   default=0)  # fmt: skip
        # the hardware lines are always made: a log without these two fields (one written by hand) has their
        # values in its hosts, as the run's system description counts them (mpi/system.py; the fields and
        # inventory rows hold the fields to the hosts where the log has them)
        system = {"nodes": len(hosts), "accelerators_per_node": most, **system}
        expected = _records_of(config, system, layout, data)
        unmade: list[str] = []
        for key in sorted(found, key=lambda name: found[name].number):
            lines = found[key]
            for number in lines.later:
                self.check.problems.append(f"mllog.log line {number}: a second {key} line in {where} "
                                           f"({MLLOG_RULE})")  # fmt: skip
            if lines.more:
                self.check.problems.append(f"mllog.log: {lines.more} more {key} lines in {where} ({MLLOG_RULE})")
            number, record = lines.number, lines.record
            self.description_lines += 1
            made = expected.get(key)
            if isinstance(made, str):
                unmade.append(f"{key} ({made})")
                continue
            kind, _, value, metadata = made
            theirs = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
            theirs = {name: item for name, item in theirs.items() if name != EVENT_TIME_MS}
            try:
                wrong = [f"{what} {short(mine_)}, the log's {short(logged)}" for what, mine_, logged in (
                    ("event type", record.get("event_type"), EVENT_TYPES[kind]),
                    ("value", record.get("value"), value),
                    ("metadata", theirs, metadata or {}),
                ) if not same(mine_, logged)]  # fmt: skip
            except RecursionError:  # a value nested past what JSON's encoder or a comparison can walk
                wrong = ["a value nested too deeply to compare"]
            if wrong:
                self.check.problems.append(f"mllog.log line {number}: {key} of {where}: {'; '.join(wrong)} "
                                           f"({MLLOG_RULE}: a segment's description is its run_start's, system's "
                                           "and layout's)")  # fmt: skip
            else:
                self.described += 1
        if unmade:
            self.check.notes.append(f"{where}: not compared: {', '.join(unmade)}: a configuration written by hand "
                                    "lacks what makes it (a run's always has it; none of these lines bounds a rate)")

    def model_done(self, event: dict, _: int) -> None:
        """A model's end: the epoch after its last may have begun and been cut if it failed or trained none."""
        task = event.get("task")
        done = self.open_epochs.pop(task, 0)
        model = event.get("model") if isinstance(event.get("model"), dict) else {}
        if event[runlog.EVENT] == runlog.MODEL_FAILED or model.get("status") == "failed" or not done:
            self.cut_allowed[task] = done + 1

    model_failed = model_done

    def group_lost(self, event: dict, _: int) -> None:
        if isinstance(event.get("task"), int):
            task = event["task"]  # its running epoch, begun and never ended, went with the group
            self.cut_allowed[task] = self.open_epochs.pop(task, 0) + 1

    def _start_segment(self, event: dict) -> None:
        self.segment += 1
        self.started, self.first_system, self.first_layout = event, None, None
        self.stopped = self.closed_after = False
        self.measured, self.stop_time, self.segment_steps, self.measured_nodes = None, None, 0, 0
        self.expected = {}
        self.discarded, self.open_epochs, self.cut_allowed = set(), {}, {}
        self.missing = _Missing(Lines())
        opened = self.reader.enter_segment()
        where = f"segment {self.segment}'s run_start"
        if opened is None:
            self.check.problems.append(f"mllog.log: no run_start line for {where} ({MLLOG_RULE})")
            return
        number, record = opened
        meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        if meta.get("segment") != event.get("segment"):
            self.check.problems.append(f"mllog.log line {number}: run_start of segment {short(meta.get('segment'))}"
                                       f", the event log's {where} is segment {event.get('segment')} "
                                       f"({MLLOG_RULE})")  # fmt: skip
        if true_time_ms(record) != logged_ms(event.get(runlog.TIME)):
            self.check.problems.append(f"mllog.log line {number}: run_start at {true_time_ms(record)} ms, {where} at "
                                       f"{logged_ms(event.get(runlog.TIME))} ms ({MLLOG_RULE})")  # fmt: skip

    def epoch(self, event: dict, _: int) -> None:
        self.epochs += 1
        task, number = event.get("task"), event.get("epoch")
        self.open_epochs[task] = self.open_epochs.get(task, 0) + 1
        key = (task, number)
        pending = self.reader.pending
        logged = event.get(runlog.TIME)
        times = [t for t in (logged, event.get("end")) if isinstance(t, int | float) and not isinstance(t, bool)]
        limit = (max(times) + LOOKAHEAD_SECONDS) * 1000 if times else math.inf
        self.reader.read_until(lambda: key in pending and pending[key].complete, limit)
        entry = pending.pop(key, None)
        where = f"task {task} epoch {number}"
        if entry is None or not entry.complete:
            what = "no lines" if entry is None else ("no epoch_stop" if entry.stop_ms is None else "no eval_accuracy")
            missing = self.missing
            missing.count += 1
            missing.lines.append(f"mllog.log: {where} (event logged at {short(logged)}): {what} ({MLLOG_RULE}: "
                                 "every epoch event has its mllog lines)")  # fmt: skip
            if isinstance(logged, int | float):
                missing.first_time = min(missing.first_time, logged)
                missing.last_time = max(missing.last_time, logged)
            return
        if self.missing.count:
            self.missing.matched_after = True
        wrong = []
        for label, theirs, mine in (
            ("epoch_start time", entry.start_ms, logged_ms(event.get("start"))),
            ("epoch_stop time", entry.stop_ms, logged_ms(event.get("end"))),
            ("ops", entry.ops, event.get("ops")),
            ("train_samples", entry.train_samples, event.get("train_samples")),
            ("eval_accuracy", entry.accuracy, event.get("val_accuracy")),
            ("eval_samples", entry.eval_samples, event.get("validation_samples")),
        ):
            if not same(theirs, mine):
                wrong.append(f"{label} {short(theirs)}, the epoch event {short(mine)}")
        if wrong:
            self.check.problems.append(f"mllog.log line {entry.line}: {where}: {'; '.join(wrong)} ({MLLOG_RULE})")
        else:
            self.compared += 1

    def run_stop(self, event: dict, _: int) -> None:
        self.stopped = True
        self.stop_time = event.get(runlog.TIME)
        self.closed_after = event.get("reason") == runlog.CLOSED_REASON
        tasks = event.get("discarded_tasks")
        for task in tasks if isinstance(tasks, list) else ():
            self.cut_allowed[task] = self.open_epochs.get(task, 0) + 1
        reader = self.reader
        reader.read_until(lambda: reader.stop_line is not None)
        where = f"segment {self.segment}'s run_stop"
        if reader.stop_line is None:
            self.check.problems.append(f"mllog.log: no run_stop line for {where} ({MLLOG_RULE})")
            return
        number, record = reader.stop_line
        meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
        if true_time_ms(record) != logged_ms(event.get(runlog.TIME)):
            self.check.problems.append(f"mllog.log line {number}: run_stop at {true_time_ms(record)} ms, {where} at "
                                       f"{logged_ms(event.get(runlog.TIME))} ms ({MLLOG_RULE})")  # fmt: skip
        if meta.get("reason") != event.get("reason"):
            self.check.problems.append(f"mllog.log line {number}: run_stop reason {short(meta.get('reason'))}, "
                                       f"{where} {short(event.get('reason'))} ({MLLOG_RULE})")  # fmt: skip

    def _end_segment(self) -> None:
        """The segment's remaining lines: epochs of mllog without their event, and the lost tail of a kill."""
        if self.segment == 0:
            return
        reader = self.reader
        reader.read_until(lambda: False)
        self._description()
        self._match_power()
        for key, (step, logged) in self.expected.items():
            self._missing_step(key, step, logged)
        self.expected = {}
        self._power_marks()
        if not self.stopped and reader.stop_line is not None:
            self.check.problems.append(f"mllog.log line {reader.stop_line[0]}: a run_stop for segment {self.segment},"
                                       f" which the event log does not stop ({MLLOG_RULE})")  # fmt: skip
        for (task, number), entry in sorted(reader.pending.items()):
            where = f"mllog.log line {entry.line}: task {task} epoch {number}"
            if entry.stop_ms is not None or entry.has_eval:
                self.check.problems.append(f"{where}: an epoch_stop/eval_accuracy without an epoch event "
                                           f"({MLLOG_RULE}: no mllog epoch without its event)")  # fmt: skip
            elif self.cut_allowed.get(task) == number or (not self.stopped and
                                                          self.open_epochs.get(task, 0) + 1 == number):  # fmt: skip
                continue  # begun and cut: discarded at run_stop, failed, given up, lost, or killed while training
            else:
                self.check.problems.append(f"{where}: an epoch_start without an epoch event, and its task was "
                                           "neither discarded at run_stop, failed, given up at the time limit, "
                                           "lost with its group nor training when its segment was killed "
                                           f"({MLLOG_RULE})")  # fmt: skip
        reader.pending.clear()
        missing = self.missing
        if missing.count:
            lost_tail = ((not self.stopped or self.closed_after) and not missing.matched_after
                         and missing.last_time - missing.first_time <= FLUSH_WINDOW)  # fmt: skip
            if lost_tail:
                self.tolerated += missing.count
                how = "closed after its launch ended" if self.closed_after else "no run_stop"
                steps = f" and {missing.power} power step(s)" if missing.power else ""
                self.check.notes.append(f"segment {self.segment} was killed ({how}): its last "
                                        f"{missing.count - missing.power} epoch(s){steps}, logged within "
                                        f"{FLUSH_WINDOW:g} s, have no mllog lines (mllog.log is flushed once a "
                                        "second)")  # fmt: skip
            else:
                self.check.problems += missing.lines
                if missing.lines.dropped:
                    self.check.problems.dropped += missing.lines.dropped

    def finish(self) -> list[Check]:
        if self.reader is None:
            return [self.check]
        self._end_segment()
        reader = self.reader
        if reader.held is not None:
            self.check.problems.append(f"mllog.log line {reader.held[0]}: a run_start of a segment the event log "
                                       f"does not have ({MLLOG_RULE})")  # fmt: skip
        elif not reader.ended:
            reader.read_until(lambda: False)
        for key, lines in sorted(reader.upcoming.items(), key=lambda item: item[1].number):
            for number in [lines.number, *lines.later]:
                self.check.problems.append(f"mllog.log line {number}: {key} after segment {self.segment}'s "
                                           f"{'run_stop' if key in DESCRIPTION_KEYS else 'run_start'}, which no "
                                           f"segment follows ({MLLOG_RULE}: a segment's description comes before "
                                           "its run_start, or right after it)")  # fmt: skip
        reader.upcoming = {}
        if reader.cut_tail and self.stopped and not self.closed_after:
            self.check.problems.append(f"mllog.log ends in a cut line ({reader.cut_tail} bytes) after segment "
                                       f"{self.segment}'s run_stop: a segment that stopped wrote whole lines, and "
                                       f"mlcommons' checker reads the cut one ({MLLOG_RULE})")  # fmt: skip
        elif reader.cut_tail:
            self.check.notes.append(f"mllog.log ends in a cut line ({reader.cut_tail} bytes): the run was killed "
                                    "while writing")  # fmt: skip
        tolerated = f", {self.tolerated} lost with a killed segment's last second" if self.tolerated else ""
        self.check.summary = (f"{reader.count} lines; {self.compared} of {self.epochs} epochs equal their events "
                              f"(start, stop, ops, samples, accuracy){tolerated}; {self.described} of "
                              f"{self.description_lines} description lines equal the log's (hardware, data, time "
                              f"limit, space); {self.segment} segment(s)"
                              + (f"; {self.power_compared} of {self.power_steps} power steps equal their nodes' "
                                 "readings" if self.power_steps else ""))  # fmt: skip
        return [self.check]
