"""MLPerf-style ``:::MLLOG`` lines, written with the ``mlperf-logging`` package.

The lines are mlperf-logging's (``:::MLLOG {json}``, its key names and
event types; its own parser reads them in the tests), composed here and
written to ``RUN_DIR/mllog.log`` only (not the console), by the master alone.

Beside mlperf-logging's keys, each segment logs right after its
``run_start`` what the compliance ruleset (aiperf_mpi/results/compliance)
needs to judge the file alone (:meth:`MLLogWriter.description`): the data
set and its counted splits (``aiperf_dataset``, and MLPerf's
``train_samples`` and ``eval_samples``), the time limit
(``aiperf_time_limit``), the tuner's space (``aiperf_search_space``) and the
hardware with each group's ranks on it (``aiperf_system``); a task's
``global_batch_size`` names its group, rank batch and kernel size.  The keys
of this project's own start with ``aiperf_`` (docs/verify.md lists them).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from mlperf_logging.mllog import constants

from aiperf_mpi.results.energy import ENERGY_EVENTS, EnergyLedger
from aiperf_mpi.results.jsonline import line_encoder
from aiperf_mpi.results.mllog_format import (
    DESCRIPTION,
    EVENT_TYPES,
    FLUSH_SECONDS,
    MLLOG_FILE,
    PRELUDE,
    late_members,
    line,
    line_middle,
    records,
    time_ms,
)

CUT_FILE = MLLOG_FILE + ".cut-{segment}"
EPOCH_NUM = f'"{constants.EPOCH_NUM}": '
TRAIN_SAMPLES = f'"{constants.TRAIN_SAMPLES}": '
EVAL_SAMPLES = f'"{constants.EVAL_SAMPLES}": '
"""metadata keys as their JSON text and separator (mlperf-logging's names are plain ASCII identifiers)"""


def repair_tail(run_dir: Path, segment: int) -> int:
    """Before a resumed segment appends: set a cut last line aside, as the event log's repair does.

    A kill mid-write can leave ``mllog.log`` without its last newline; the
    next segment's first line would be glued onto it, and a reader of
    ``:::MLLOG`` lines would refuse both.  The bytes after the last newline
    go to ``mllog.log.cut-SEGMENT`` (fsync'd) and the file is ended there.
    Returns the number of bytes set aside (0: nothing to do).
    """
    path = Path(run_dir) / MLLOG_FILE
    if not path.is_file():
        return 0
    with open(path, "r+b") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - 65536)
        handle.seek(start)
        tail = handle.read()
        if not tail or tail.endswith(b"\n"):
            return 0
        newline = tail.rfind(b"\n")
        keep = start + newline + 1 if newline >= 0 else (0 if start == 0 else size)
        if keep == size:  # a last line longer than we read: leave it (an MLLOG line is short)
            return 0
        side = Path(run_dir) / CUT_FILE.format(segment=segment)
        with open(side, "wb") as cut:
            cut.write(tail[keep - start :])
            cut.flush()
            os.fsync(cut.fileno())
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
        return size - keep


def _no_space(config: dict) -> dict:
    raise KeyError("the prelude states no search space")


def task_details(group: int | None, hparams: tuple[int, int] | None) -> str:
    """A task's ``global_batch_size`` members after its task: its group, rank batch and kernel size (MLLOG's text)."""
    text = f', "group": {number_text(group)}'
    if hparams is not None:
        text += f', "batch_size": {number_text(hparams[0])}, "kernel_size": {number_text(hparams[1])}'
    return text


def number_text(value: object) -> str:
    """A number's JSON text as json.dumps writes it (mlperf-logging's), without an encoder for an int or a finite
    float (their repr)."""
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):  # type: ignore[arg-type]
        return repr(value)
    return json.dumps(value)  # NaN, a bool, None: as json.dumps writes them


def epoch_stop_texts(task: int, epoch: dict) -> tuple[str, str, str]:
    """An epoch's stop line's metadata members, its accuracy's text and its eval line's members (MLLOG's text).

    Pure, so that whoever vets an epoch composes them (job/vetting.py): at 65,536 groups rank 0 writes two of
    these lines per epoch, and composing them there was a tenth of its handling of an epoch.
    """
    meta = f'"task": {number_text(task)}, {EPOCH_NUM}{number_text(epoch["epoch"])}'
    return (f'{meta}, "ops": {number_text(epoch["ops"])}, {TRAIN_SAMPLES}{number_text(epoch["train_samples"])}',
            number_text(epoch["val_accuracy"]), f"{meta}, {EVAL_SAMPLES}{number_text(epoch['validation_samples'])}")


class MLLogWriter:
    """The master's MLLOG writer: every line in time order, with mlperf-logging's key names.

    A line's ``time_ms`` is when its event happened (an epoch's start and end
    on its leader, the run's start and stop as in ``events.jsonl``).  Events
    reach the master a little after they happen, and from several nodes, so a
    time can be earlier than a line already written; the line then keeps the
    previous line's ``time_ms`` (the file never goes back in time, as MLLOG
    readers expect) and carries the true time in ``metadata.event_time_ms``.
    """

    def __init__(self, run_dir: Path) -> None:
        # lines are composed here, in mlperf-logging's format and with its key names, not through its
        # MLLogger: that costs 33 µs a line (a LogRecord, the caller's frame, a flush per line) against 3 µs,
        # and at 65,536 groups the master writes thousands of lines a second (BENCHMARKS.md, bench master)
        # closed in close(); flushed once a second, so its buffer holds a second's lines (one write, not one per 8 kB)
        self._file = open(Path(run_dir) / MLLOG_FILE, "a", encoding="utf-8", buffering=1 << 20)
        self._last_ms = 0
        """the latest ``time_ms`` written: no line goes before it"""
        self._flushed = time.monotonic()
        self._encode = line_encoder()  # json.dumps's text (its spacing), without a new C encoder per line
        self._middles: dict[tuple[str, str], str] = {}
        self._energy = EnergyLedger()
        """the segment's energy readings as the event log holds them (issue 53): each node's steps are the
        ``power_reading`` lines, computed by the code that makes the score's figure and verify's"""
        self._measuring = False
        """a ``power_measurement_start`` line was written for the segment: its stop comes before ``run_stop``"""
        self._segment: object = None
        """the segment's number, as its ``run_start`` event logs it"""

    def _write(self, kind: str, key: str, when: float, value: object = None, metadata: dict | None = None) -> None:
        """One line at Unix time ``when`` (seconds), held at the last line's time if earlier (:meth:`_line`)."""
        self._line(kind, key, when, "null" if value is None else self._encode(value),
                   self._encode(metadata)[1:-1] if metadata else "")  # fmt: skip

    def _line(self, kind: str, key: str, when: float, value: str, members: str) -> None:
        """One line from its value's JSON text and its metadata's members' text (``"a": 1, "b": 2``).

        Flushed to the OS at most once a second (and at the run's start and stop), and only by
        :meth:`flush_due`, which the master calls when its event log has just gone to the OS: the event log is
        the record that is synced per epoch, and mllog.log, which repeats it, must never hold an epoch the event
        log lost (seen, issue 43: with rank 0's fsync stalled, the master went on taking epochs, this file went
        on being flushed, and after the kill it held epochs the event log did not; verify refused the log).
        """
        event_ms = time_ms(when)
        if event_ms < self._last_ms:
            members = late_members(members, event_ms)
        else:
            self._last_ms = event_ms
        # the line json.dumps makes (results/mllog_format.py), its constant middle made once per kind and key: the
        # master writes ten of these per model (tests/unit/test_mllog.py)
        middle = self._middles.get((kind, key))
        if middle is None:
            middle = self._middles[kind, key] = line_middle(self._encode(EVENT_TYPES[kind]), self._encode(key))
        self._file.write(line(self._last_ms, middle, value, members))

    def flush_due(self) -> None:
        """Flush if a second has passed since the last flush: call it right after the event log's own flush."""
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def _number(self, value: object) -> str:
        """A number's JSON text, without the encoder for the common cases (an int, a finite float: their repr)."""
        kind = type(value)
        if kind is int or (kind is float and math.isfinite(value)):  # type: ignore[arg-type]
            return repr(value)
        return self._encode(value)  # NaN, a numpy scalar, a bool, None: as json.dumps writes them

    def flush(self) -> None:
        self._file.flush()
        self._flushed = time.monotonic()

    def staging(self, report: dict) -> None:
        """A node's data staging, before the run starts (not part of the run's time)."""
        meta = {"host": report["host"], "bytes": report["bytes"], "files": report["files"]}
        started = report.get("start", time.time() - report["seconds"])
        self._write("start", constants.STAGING_START, started, metadata=meta)
        self._write("end", constants.STAGING_STOP, started + report["seconds"],
                    metadata={**meta, "seconds": report["seconds"]})  # fmt: skip

    def run_start(self, config: dict, system: dict, segment: int, when: float) -> None:
        """The run's description (:data:`PRELUDE`), then ``run_start`` at the time of the event log's
        ``run_start``."""
        for kind, key, value, metadata in records(PRELUDE, config, system, {}, {}, _no_space):
            self._write(kind, key, when, value, metadata)
        self._write("start", constants.RUN_START, when, metadata={"segment": segment})
        self.flush()

    def description(self, config: dict, system: dict, layout: dict, data: dict, when: float) -> None:
        """Right after ``run_start``: what the compliance ruleset judges the segment's lines by
        (:data:`DESCRIPTION`)."""
        # here, not at the top: a relay rank imports this module (epoch_stop_texts) and needs no graph library
        from aiperf_mpi.graph.model import search_space

        for kind, key, value, metadata in records(DESCRIPTION, config, system, layout, data, search_space):
            self._write(kind, key, when, value, metadata)
        self.flush()

    # an epoch's four lines are composed from their numbers' text (the same text as json.dumps of their dicts, as
    # tests/unit/test_mllog.py checks): at 65,536 groups the master writes them ≈ 4,000 times a second, and the
    # encoder's call on each small dict was ≈ 10 % of its loop (BENCHMARKS.md, the master)

    def epoch_start(self, task: int, epoch: int, when: float, global_batch: int, details: str = "") -> None:
        """An epoch began on its group; its task's batch is logged before the task's first epoch, with
        ``details`` (:func:`task_details`: its group, rank batch and kernel size)."""
        task_text = self._number(task)
        if epoch == 1:
            self._line("event", constants.GLOBAL_BATCH_SIZE, when, self._number(global_batch),
                       f'"task": {task_text}{details}')  # fmt: skip
        self._line("start", constants.EPOCH_START, when, "null",
                   f'"task": {task_text}, {EPOCH_NUM}{self._number(epoch)}')

    def epoch_stop(self, task: int, epoch: dict) -> None:
        """An epoch ended: its stop (with the operations it counted) and its validation accuracy."""
        self.epoch_stop_texts(epoch["end"], epoch_stop_texts(task, epoch))

    def epoch_stop_texts(self, end: float, texts: tuple[str, str, str]) -> None:
        """:meth:`epoch_stop` from :func:`epoch_stop_texts` made elsewhere (a relay rank: job/vetting.py)."""
        stop_members, accuracy, eval_members = texts
        self._line("end", constants.EPOCH_STOP, end, "null", stop_members)
        self._line("event", constants.EVAL_ACCURACY, end, accuracy, eval_members)

    def energy(self, event: dict) -> None:
        """An event of the log as written (``run_start``, ``system``, ``monitor``: :data:`ENERGY_EVENTS`), for
        MLPerf's power lines (issue 53): ``power_measurement_start`` at the segment's ``run_start`` when its
        ``system`` event has a node with readings, then one ``power_reading`` per node and monitor sample — the
        node's mean watts since its previous sample (:attr:`EnergyLedger.last_step`), at the later reading's
        time, ``host`` in its metadata as mlperf-logging's power example writes it — and
        ``power_measurement_stop`` at ``run_stop``.  mlcommons' result summarizer integrates one node's lines
        (``_compute_power_node``: each reading's watts over the time since the line before) from a file of that
        node's alone: split this file's by ``metadata.host`` first (fed every node's at once, it would integrate
        across them)."""
        if event.get("event") not in ENERGY_EVENTS:
            return
        self._energy.event(event)
        if event["event"] == "run_start":
            self._segment = event.get("segment")
        segment = self._energy.segments[-1] if self._energy.segments else None
        if event["event"] == "system" and segment is not None and segment.nodes and not self._measuring:
            self._measuring = True
            self._write("start", constants.POWER_MEASUREMENT_START, event["time"],
                        metadata={"segment": self._segment, "nodes": len(segment.nodes)})
            self.flush()  # with the description: a segment killed in its first second still has its start
        step = self._energy.last_step
        if step is not None:
            self._line("event", constants.POWER_READING, step.time, self._number(step.watts),
                       self._encode({"host": step.host})[1:-1])

    def run_stop(self, reason: str, when: float, rehearsal: bool = False, status: str = "success") -> None:
        """``run_stop`` at the time of the event log's ``run_stop``; a rehearsal's says so beside its ``status``
        (mlperf-logging's readers know ``success`` and ``aborted`` only; issue 45: a rehearsal's ``success`` must
        not read as a result's).  ``aborted``: a segment closed after its launch ended (job/close.py).  A segment
        whose power was measured ends it first (``power_measurement_stop``, same time)."""
        if self._measuring:
            self._measuring = False
            self._write("end", constants.POWER_MEASUREMENT_STOP, when)
        metadata = {"status": status, "reason": reason, **({"rehearsal": True} if rehearsal else {})}
        self._write("end", constants.RUN_STOP, when, metadata=metadata)
        self.flush()

    def close(self) -> None:
        self._file.close()
