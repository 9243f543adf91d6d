"""The side files against the event log: ``mllog.log``, ``best/``, and a bundle's ``verify.*`` and ``system.json``.

``events.jsonl`` is the record verify recomputes everything from; the side
files repeat parts of it for other readers (mlcommons' tools, a person
loading the best model, a reviewer opening a bundle).  A forger who edits
the log and rescores it consistently leaves them telling the old story, and
one who edits a side file leaves it disagreeing with the log; either way a
row here names the file, the event or task, and the rule.

Each row's rule in full is beside its name in
:data:`analysis.verify_registry.FAMILIES`.  What the rule cannot say:
``mllog.log`` (:mod:`aiperf_mpi.job.mllog`) is read streaming, line by line,
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

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.graph.model import GraphError, from_json, to_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import read_graph
from aiperf_mpi.results.logmodel import RunModel
from aiperf_mpi.results.mllog_format import (
    FLUSH_SECONDS,
    MLLOG_FILE,
    NotAnMLLogLine,
    logged_ms,
    read_line,
    true_time_ms,
)
from aiperf_mpi.results.precisions import logged_precision
from analysis.checks import MISMATCH, OK, Check, Lines, Run, Verification, is_regular_file, read_json, same, short

FLUSH_WINDOW = FLUSH_SECONDS + 0.25
"""seconds of a killed segment's last epochs that may lack their mllog lines: the writer's flush interval, and
0.25 s for the two clocks that time it (``time.monotonic`` for the flush, ``time.time`` for the events)"""
LOOKAHEAD_SECONDS = 60.0
"""how far (in the lines' time) mllog is read ahead of the event walk looking for an epoch's lines"""
MLLOG_RULE = "rule: mllog.log repeats the events"
BEST_RULE = "rule: best/ describes the run's best model"
BUNDLE_RULE = "rule: the bundle's verdict is the one verify recomputes"
SYSTEM_RULE = "rule: system.json is the log's system description"
BEST = "best"
BUNDLE_ROWS = ("bundle manifest", "bundle verify.txt/json", "bundle system.json")
"""rows only a bundle has: the verdict written into the bundle was made before they existed"""
VERDICT_FILES = ("verify.txt", "verify.json")
SYSTEM_FILE = "system.json"


def system_segments(model: RunModel | None) -> list[dict]:
    """Each segment's system, layout, peaks and provenance, as the run's model holds them: what the bundle writes
    as ``system.json`` (:func:`analysis.bundle.system_description`) and verify compares it with, one code for
    both."""
    return [{"segment": s.logged_number, "provenance": s.logged_provenance, runlog.SYSTEM: s.system,
             runlog.LAYOUT: s.layout, runlog.PEAK: s.peaks} for s in (model.segment_records if model else [])]


# --------------------------------------------------------------------------- mllog.log


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
        if found[1]["key"] == "run_start":
            self.held = found
            return None
        return found

    def _absorb(self, number: int, record: dict) -> None:
        key = record["key"]
        meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
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
        while self.held is None and not self.ended:
            found = self._next()
            if found is not None:
                self._absorb(*found)
        opened, self.held = self.held, None
        self.stop_line = None
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


class MLLogCheck:
    """``mllog.log`` against the events, streamed beside the verifier's walk (see the module's doc)."""

    def __init__(self, run: Run) -> None:
        self.check = Check("mllog.log")
        self.path = run.run_dir / MLLOG_FILE
        self.reader: _MLLogReader | None = None
        if is_regular_file(self.path):
            self.reader = _MLLogReader(self.path, self.check.problems)
        else:
            self.check.problems.append(f"mllog.log is missing: every run writes one ({MLLOG_RULE})")
        self.segment = 0
        self.stopped = False
        self.discarded: set[int] = set()
        self.open_epochs: dict[int, int] = {}
        """task → epochs logged, for the tasks still training in this segment"""
        self.cut_allowed: dict[int, int] = {}
        """task → the one epoch number that may have begun and been cut (no epoch event)"""
        self.missing = _Missing(Lines())
        self.compared = self.epochs = 0
        self.tolerated = 0

    def each(self, event: dict, _: int) -> bool:
        """Its events while mllog.log is open, those of a segment after its run_start."""
        return self.reader is not None and (self.segment > 0 or event[runlog.EVENT] == runlog.RUN_START)

    def run_start(self, event: dict, _: int) -> None:
        self._end_segment()
        self._start_segment(event)

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
        self.stopped = False
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
            lost_tail = (not self.stopped and not missing.matched_after
                         and missing.last_time - missing.first_time <= FLUSH_WINDOW)  # fmt: skip
            if lost_tail:
                self.tolerated += missing.count
                self.check.notes.append(f"segment {self.segment} was killed (no run_stop): its last "
                                        f"{missing.count} epoch(s), logged within {FLUSH_WINDOW:g} s, have no mllog "
                                        "lines (mllog.log is flushed once a second)")  # fmt: skip
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
        if reader.cut_tail:
            self.check.notes.append(f"mllog.log ends in a cut line ({reader.cut_tail} bytes): the run was killed "
                                    "while writing")  # fmt: skip
        tolerated = f", {self.tolerated} lost with a killed segment's last second" if self.tolerated else ""
        self.check.summary = (f"{reader.count} lines; {self.compared} of {self.epochs} epochs equal their events "
                              f"(start, stop, ops, samples, accuracy){tolerated}; {self.segment} segment(s)")
        return [self.check]


# --------------------------------------------------------------------------- best/


class BestCheck:
    """``best/metadata.json``, ``best/ops.json`` and ``best/graph.json`` against the log (see the module's doc)."""

    def __init__(self, run: Run) -> None:
        self.run_dir = run_dir = run.run_dir
        self.check = Check("best/ (exported model)")
        self.meta: dict | None = None
        self.tasks: set[int] = set()
        self.model_ids: set[int] = set()
        path = run_dir / BEST / "metadata.json"
        if not is_regular_file(path):
            self.check.notes.append("not present: the run published no best model (ended by a signal, synthetic "
                                    "data, --no-report, or an export that failed)")  # fmt: skip
            self.check.summary = "not present"
            return
        try:
            meta = read_json(path)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            self.check.problems.append(f"best/metadata.json is not readable: {' '.join(str(exc).split())[:160]} "
                                       f"({BEST_RULE})")  # fmt: skip
            return
        if not isinstance(meta, dict) or not isinstance(meta.get("task"), int):
            self.check.problems.append(f"best/metadata.json has no task ({BEST_RULE})")
            return
        self.meta = meta
        self.tasks.add(meta["task"])
        steps = meta.get("lineage") if isinstance(meta.get("lineage"), list) else []
        for step in steps:
            if isinstance(step, dict):
                if isinstance(step.get("task"), int):
                    self.tasks.add(step["task"])
                if isinstance(step.get("model_id"), int):
                    self.model_ids.add(step["model_id"])
        self.proposals: dict[int, dict] = {}
        self.records: dict[int, dict] = {}
        self.seen_ids: set[int] = set()
        self.best: tuple[float, int] | None = None
        self.best_at_stop: tuple[float, int] | None = None
        self.stopped = False
        self.config: dict = {}

    def each(self, event: dict, _: int) -> bool:
        """The events only when there is a best/metadata.json to hold them to."""
        return self.meta is not None

    def run_start(self, event: dict, _: int) -> None:
        self.config = event.get("config") if isinstance(event.get("config"), dict) else {}

    def model_proposed(self, event: dict, _: int) -> None:
        if event.get("task") in self.tasks:
            self.proposals[event["task"]] = event

    def model_done(self, event: dict, _: int) -> None:
        model = event.get("model") if isinstance(event.get("model"), dict) else {}
        if model.get("id") in self.model_ids:
            self.seen_ids.add(model["id"])
        if event.get("task") in self.tasks:
            self.records[event["task"]] = model
        accuracy = model.get("accuracy")
        if model.get("status") == "trained" and isinstance(accuracy, int | float) and math.isfinite(accuracy) \
                and (self.best is None or accuracy > self.best[0]):  # fmt: skip
            self.best = (accuracy, event.get("task"))

    def run_stop(self, event: dict, _: int) -> None:
        self.stopped, self.best_at_stop = True, self.best

    def finish(self) -> list[Check]:
        meta = self.meta
        if meta is None:
            return [self.check]
        problems = self.check.problems
        task = meta["task"]

        def wrong(field: str, theirs: object, mine: object, what: str = "the log") -> None:
            if not same(theirs, mine):
                problems.append(f"best/metadata.json: task {task}: {field} {short(theirs)}, {what} "
                                f"{short(mine)} ({BEST_RULE})")  # fmt: skip

        best = self.best_at_stop if self.stopped else self.best
        if best is None:
            problems.append(f"best/metadata.json: task {task}, but no model finished training in the log "
                            f"({BEST_RULE})")  # fmt: skip
        elif best[1] != task:
            problems.append(f"best/metadata.json: task {task}, the log's best model is task {best[1]} (accuracy "
                            f"{best[0]:g}) ({BEST_RULE})")  # fmt: skip
        record, proposal = self.records.get(task), self.proposals.get(task)
        if record is None or proposal is None:
            problems.append(f"best/metadata.json: task {task} has no model_proposed and model_done in the log "
                            f"({BEST_RULE})")  # fmt: skip
            return self._summary()
        wrong("model_id", meta.get("model_id"), record.get("id"))
        accuracy = meta.get("accuracy") if isinstance(meta.get("accuracy"), dict) else {}
        wrong("accuracy.best_epoch", accuracy.get("best_epoch"), record.get("accuracy"), "its model_done")
        epochs = [e for e in record.get("epochs") or [] if isinstance(e, dict)]
        saved = self._saved_epoch(record, epochs)
        for field, key in (("weights", "val_accuracy"), ("validation_samples", "validation_samples"),
                           ("epoch", "epoch")):  # fmt: skip
            wrong(f"accuracy.{field}", accuracy.get(field), saved.get(key), "its saved epoch")
        wrong("hparams", meta.get("hparams"), record.get("hparams"), "its model_done")
        training = meta.get("training") if isinstance(meta.get("training"), dict) else {}
        wrong("training.epochs", training.get("epochs"), len(epochs))
        wrong("training.precision", training.get("precision"), logged_precision(self.config), "the config")
        dataset = meta.get("dataset") if isinstance(meta.get("dataset"), dict) else {}
        wrong("dataset.name", dataset.get("name"), str(self.config.get("dataset", "")), "the config")
        self._lineage(meta, task)
        self._recount(meta, task, proposal, record)
        return self._summary()

    @staticmethod
    def _saved_epoch(record: dict, epochs: list[dict]) -> dict:
        """The epoch whose weights were saved: the logged ``weights_epoch``, else the last (as the export says)."""
        timings = record.get("timings") if isinstance(record.get("timings"), dict) else {}
        chosen = timings.get("weights_epoch")
        for epoch in epochs:
            if chosen is not None and epoch.get("epoch") == chosen:
                return epoch
        return epochs[-1] if epochs else {}

    def _lineage(self, meta: dict, task: int) -> None:
        problems = self.check.problems
        steps = meta.get("lineage")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
            problems.append(f"best/metadata.json: task {task}: no lineage ({BEST_RULE})")
            return
        if steps[-1].get("task") != task:
            problems.append(f"best/metadata.json: task {task}: its lineage ends at task "
                            f"{short(steps[-1].get('task'))} ({BEST_RULE})")  # fmt: skip
        for index, step in enumerate(steps):
            where = f"best/metadata.json: task {task}: lineage step {index + 1}"
            if index + 1 < len(steps) and steps[index + 1].get("parent_model_id") != step.get("model_id"):
                problems.append(f"{where} is model {short(step.get('model_id'))}, the next step's parent "
                                f"{short(steps[index + 1].get('parent_model_id'))} ({BEST_RULE})")  # fmt: skip
            if step.get("task") is None:  # the export's '(not in the log)': the log must indeed lack that model
                if index or step.get("model_id") in self.seen_ids:
                    problems.append(f"{where}: model {short(step.get('model_id'))} said not to be in the log, "
                                    f"which has it ({BEST_RULE})")  # fmt: skip
                continue
            proposal, record = self.proposals.get(step["task"]), self.records.get(step["task"])
            if proposal is None or record is None:
                problems.append(f"{where}: task {short(step['task'])} has no model_proposed and model_done in the "
                                f"log ({BEST_RULE})")  # fmt: skip
                continue
            logged = {"model_id": record.get("id"), "parent_model_id": proposal.get("parent"),
                      "description": str(proposal.get("description", "")), "accuracy": record.get("accuracy"),
                      "hparams": record.get("hparams")}  # fmt: skip
            for field, mine in logged.items():
                if not same(step.get(field), mine):
                    problems.append(f"{where} (task {step['task']}): {field} {short(step.get(field))}, the log "
                                    f"{short(mine)} ({BEST_RULE})")  # fmt: skip
        if steps[0].get("task") is not None and steps[0].get("parent_model_id") is not None:
            problems.append(f"best/metadata.json: task {task}: its lineage starts at a model with a parent "
                            f"({BEST_RULE})")  # fmt: skip

    def _recount(self, meta: dict, task: int, proposal: dict, record: dict) -> None:
        """Operations per sample and the graph, from the task's graph file as the trainer built it."""
        problems = self.check.problems
        try:
            graph = from_json(read_graph(self.run_dir, proposal))
            kernel = (record.get("hparams") or {}).get("kernel_size")
            graph = graph if kernel is None else with_kernel_size(graph, kernel)
            ops = count_ops(graph)
        except (ValueError, GraphError, KeyError, TypeError) as exc:  # GraphFileError is a ValueError
            problems.append(f"best/: task {task}: its graph file cannot be recounted: "
                            f"{' '.join(str(exc).split())[:160]} ({BEST_RULE})")  # fmt: skip
            return
        per_sample = meta.get("ops_per_sample") if isinstance(meta.get("ops_per_sample"), dict) else {}
        recounted = {"forward": ops.forward_eval, "forward_train": ops.forward_train, "backward": ops.backward,
                     "training": ops.forward_train + ops.backward, "update_per_step": ops.update, "macs": ops.macs}
        for field, mine in recounted.items():
            if not same(per_sample.get(field), mine):
                problems.append(f"best/metadata.json: task {task}: ops_per_sample.{field} "
                                f"{short(per_sample.get(field))}, recounted {mine} ({BEST_RULE})")  # fmt: skip
        params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
        if not same(params, {"total": ops.params, "trainable": ops.trainable_params}):
            problems.append(f"best/metadata.json: task {task}: params {short(params)}, recounted "
                            f"{ops.params} ({ops.trainable_params} trainable) ({BEST_RULE})")  # fmt: skip
        self._file_equals("ops.json", task, ops.to_dict(), json.loads)
        self._file_equals("graph.json", task, to_json(graph), lambda text: text.strip())

    def _file_equals(self, name: str, task: int, mine: object, read) -> None:
        path = self.run_dir / BEST / name
        if not is_regular_file(path):
            if name == "ops.json":  # written with metadata.json, always
                self.check.problems.append(f"best/ops.json is missing beside best/metadata.json ({BEST_RULE})")
            return
        try:
            theirs = read(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            theirs = None
        if not same(theirs, mine):
            self.check.problems.append(f"best/{name}: task {task}: not the recount of its graph file ({BEST_RULE})")

    def _summary(self) -> list[Check]:
        meta = self.meta or {}
        self.check.summary = (f"task {meta.get('task')}: metadata.json, ops.json and graph.json against the log and "
                              "the recount of its graph")  # fmt: skip
        return [self.check]


# --------------------------------------------------------------------------- a bundle's own files


def bundle_checks(root: Path, recomputed: Verification, mine_segments: list[dict]) -> list[Check]:
    """verify.txt/verify.json against ``recomputed``, system.json against the log's segments (a bundle only:
    :func:`system_segments`)."""
    verdict = Check("bundle verify.txt/json")
    rows = {c.name: c.verdict for c in recomputed.checks if c.name not in BUNDLE_ROWS}
    verified = all(v == OK for v in rows.values())
    try:
        recorded = read_json(root / "verify.json")
        if not isinstance(recorded, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        verdict.problems.append(f"verify.json is not readable: {' '.join(str(exc).split())[:160]} ({BUNDLE_RULE})")
        recorded = None
    if recorded is not None:
        # "valid_by_log": the run's rules as its log meets them ("valid", before issue 45, said the same; it now
        # says re-evaluated and audited too, which a bundle's verify cannot redo: no weights in a bundle)
        for field, mine in (("verified", verified), ("valid_by_log", recomputed.valid),
                            ("broken_rules", recomputed.broken_rules)):  # fmt: skip
            if field == "valid_by_log" and field not in recorded:
                field = "valid"  # a verify.json from before the field
            if not same(recorded.get(field), mine):
                verdict.problems.append(f"verify.json: {field} {short(recorded.get(field))}, recomputed "
                                        f"{short(mine)} ({BUNDLE_RULE})")  # fmt: skip
        made_by = recorded.get("rules_version")
        if made_by != recomputed.rules_version:  # the rows are compared all the same
            made_by = "no version (an older verifier)" if made_by is None else short(made_by)
            verdict.notes.append(f"verify.json was made by verify's rules {made_by}, these are "
                                 f"{recomputed.rules_version}")  # fmt: skip
        listed = recorded.get("checks") or []
        if not isinstance(listed, list):
            verdict.problems.append(f"verify.json: checks {short(listed)} is not a list of rows ({BUNDLE_RULE})")
            listed = []
        named = [c for c in listed if isinstance(c, dict) and isinstance(c.get("name"), str)]
        if len(named) != len(listed):
            verdict.problems.append(f"verify.json: {len(listed) - len(named)} of its checks are not rows with a name "
                                    f"({BUNDLE_RULE})")  # fmt: skip
        theirs = {c["name"]: c.get("verdict") for c in named}
        for name, mine in rows.items():
            if name not in theirs:
                verdict.notes.append(f"verify.json has no row {name!r} (made by an older verifier)")
            elif theirs[name] != mine:
                verdict.problems.append(f"verify.json: row {name!r} says {short(theirs[name])}, recomputed {mine} "
                                        f"({BUNDLE_RULE})")  # fmt: skip
    try:
        text = (root / "verify.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        verdict.problems.append(f"verify.txt is not readable: {exc.__class__.__name__} ({BUNDLE_RULE})")
        text = None
    if text is not None:
        lines = text.splitlines()
        shown = next((line for line in reversed(lines) if line.startswith("verdict: ")), None)
        mine = _verdict_line(verified, recomputed)
        if shown != mine:
            verdict.problems.append(f"verify.txt: {short(shown)}, recomputed {short(mine)} ({BUNDLE_RULE})")
        width = max(len(name) for name in rows) if rows else 0
        for line in lines:
            for name, row in rows.items():
                if line.startswith(name + " ") and len(line) > width + 2 and line[:width].rstrip() == name:
                    said = MISMATCH if line[width + 2:].startswith(MISMATCH) else (
                        OK if line[width + 2:].startswith(OK + " ") else line[width + 2:width + 14].strip())
                    if said != row:
                        verdict.problems.append(f"verify.txt: row {name!r} says {said}, recomputed {row} "
                                                f"({BUNDLE_RULE})")  # fmt: skip
    verdict.summary = f"the verdict written into the bundle against this one ({len(rows)} rows)"
    described = Check("bundle system.json")
    try:
        recorded_system = read_json(root / SYSTEM_FILE)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        described.problems.append(f"system.json is not readable: {' '.join(str(exc).split())[:160]} "
                                  f"({SYSTEM_RULE})")  # fmt: skip
        recorded_system = None
    if recorded_system is not None:
        theirs_segments = recorded_system.get("segments") if isinstance(recorded_system, dict) else None
        if not isinstance(theirs_segments, list) or len(theirs_segments) != len(mine_segments):
            described.problems.append(f"system.json: {short(len(theirs_segments) if isinstance(theirs_segments, list) else None)} segments, the log {len(mine_segments)} ({SYSTEM_RULE})")  # noqa: E501
        else:
            for index, (theirs, mine) in enumerate(zip(theirs_segments, mine_segments, strict=True), start=1):
                keys = ("provenance", runlog.SYSTEM, runlog.LAYOUT, runlog.PEAK, "segment")
                bad = [k for k in keys if not isinstance(theirs, dict) or not same(theirs.get(k), mine.get(k))]
                if bad:
                    described.problems.append(f"system.json: segment {index}: {', '.join(bad)} differ from the "
                                              f"log's events ({SYSTEM_RULE})")  # fmt: skip
    described.summary = f"{len(mine_segments)} segment(s): system, layout, peaks and provenance as in the log"
    return [verdict, described]


def _verdict_line(verified: bool, recomputed: Verification) -> str:
    """The verdict line the bundle's verify.txt shows, for the run's rows (not the bundle's own)."""
    rows = [Check("x")] if verified else [c for c in recomputed.checks if c.name not in BUNDLE_ROWS]
    return Verification(recomputed.source, rows, recomputed.valid, recomputed.broken_rules,
                        reevaluated=recomputed.reevaluated, audit=recomputed.audit).verdict_line()  # fmt: skip
