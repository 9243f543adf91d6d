"""The rule families that judge the run's own record (their rows: :data:`analysis.verify_registry.FAMILIES`).

:class:`Record`: the segments, each task's epochs, graph file and lineage
(:mod:`analysis.lineage_check`), every epoch's operations recounted by the
package's own counter (:func:`aiperf_mpi.graph.ops.epoch_ops`) and the model
records; :class:`ScoreRules`: the score recomputed by
:mod:`aiperf_mpi.results.score` against ``score.json`` and each ``score``
event, the scored window and the validity rules; :class:`Provenance`: the
code and software stack each segment records.  Each is fed, in log order,
the events its registry entry names (a method named after each) and gives
its rows at the end (``finish``).

The segments, their windows and the score's columns are the run's model's
(``run.model``: an event is in it before it is judged), so the score is the
one the run's own scorer makes of the same log: events before the first
``run_start`` count in it as the scorer counts them (the segments row fails
each), and a segment ends at its first ``run_stop``, whose reason the scored
window row judges (a second is a problem of the segments row, read no further).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiperf_mpi.graph.model import GraphError, from_json, with_kernel_size
from aiperf_mpi.graph.ops import ModelOps, count_ops, epoch_ops
from aiperf_mpi.results import provenance as provenance_module
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import OFFSET, GraphFileError, graph_place, read_graph
from aiperf_mpi.results.logmodel import Segment, Timeline, epoch_values, time_limit
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.resumable import RESUME_MAY_CHANGE, current_names
from aiperf_mpi.results.rules import shown_value
from aiperf_mpi.results.score import MAX_GRID_SAMPLES, Score, run_step, score_inputs, stopped_by_signal
from analysis.checks import BadInput, Check, Run, differences, is_hex, is_regular_file, read_json, same, short
from analysis.lineage_check import LineageCheck

if TYPE_CHECKING:
    from analysis.verify_rules import EvidenceRules

SCORE_FILE = "score.json"
EPOCH_OPS_FIELDS = ("ops", "ops_train", "ops_update", "ops_validation", "steps")
SCORE_FIELDS = ("score", "regulated_score", "active_time", "total_ops", "best_accuracy", "models_trained",
                "models_failed", "epochs", "segments", "valid", "rules", "truncated_log")  # fmt: skip
STABILITY_FIELDS = ("ops_cv_last_half", "ops_change_last_quarter")
"""how settled the score is (:mod:`aiperf_mpi.results.stability`): compared wherever the record has them (a run
older than these figures has not)"""
AFTER_STOP = (runlog.RUN_START, runlog.SCORE)
"""what may follow a segment's run_stop: its score, then the next segment"""
STRATEGIES = {"bayesian": {"seed", "explore", "gp-ucb"}, "random": {"seed", "random"}}
"""the search strategies a proposal may name under each ``--search``"""
STOP_REASONS = ("time limit", "max models", "done", "all groups lost", runlog.SIGNAL_REASON + "SIGTERM",
                runlog.SIGNAL_REASON + "SIGUSR1")
"""the reasons the master writes in a ``run_stop`` (job/master.py, signals.py)"""
WINDOW_RULE = "rule: the scored window is the time limit"
COUNT_CACHE = 64
"""distinct graphs whose counts the walk keeps (a real run's graphs all differ; a bound, not a hope)"""



@dataclass
class _Task:
    """What the walk keeps of a task until its model's record has been checked."""

    task: int
    group: int
    segment: int
    hparams: dict
    graph_file: str
    graph_text: str | None = None
    graph_sha256: str = ""
    """the sha256 of the graph file's bytes: the key of the walk's count cache"""
    counts: ModelOps | None = None
    count_error: str = ""
    epochs: list[dict] = field(default_factory=list)


class Record:
    """The run's own record, one event at a time: its segments, each task's epochs, graph file and lineage, the
    ops recount and the model records (their rows in :data:`analysis.verify_registry.FAMILIES`); of its own it
    keeps what only verify needs: each open task's graph, counts and epoch events, the ended tasks, the scored
    segments."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.run_dir = run.run_dir
        self.segments_check = Check("segments")
        self.epochs_check = Check("epochs in segments")
        self.graphs = Check("graph files")
        self.lineage = LineageCheck(run.run_dir, Check("lineage"))
        self.ops = Check("ops recount")
        self.records = Check("model records")
        self.tasks: dict[int, _Task] = {}
        self.finished: set[int] = set()
        """tasks whose model record was checked (their state is dropped)"""
        self.epoch_count = self.recounted = self.records_checked = 0
        self.graph_count = self.graph_hashes = self.graph_unhashed = 0
        self.graph_cross_checked = 0
        self.graph_places: dict[tuple[str, int], int] = {}
        """(appended graphs file, offset) → the task whose graph lies there: a line belongs to one model"""
        self.graph_owners: dict[str, tuple[int, int]] = {}
        """a graph's identity (its sha256's first 20 hex digits, the master's duplicate key) → (task, segment) of
        its first proposal the master knew of: a child with the same graph is a duplicate it would have refused"""
        self.scored: set[int] = set()
        """the segments with a score event"""
        self.score_events = 0
        self.next_model_id = 0
        self.strategies: dict[str, int] = {}
        self.count_cache: OrderedDict[tuple[str, str], tuple] = OrderedDict()
        """(graph file sha256, kernel size) → (graph, counts, stored kernels, passed the graph rules), last used last"""

    @property
    def segments(self) -> list[Segment]:
        """The segments so far (the run's model's)."""
        return self.run.model.segment_records if self.run.model is not None else []

    def each(self, event: dict, number: int) -> bool:
        """Every event: none before the first run_start, nothing but a score and the next segment after a run_stop."""
        name = event[runlog.EVENT]
        if name == runlog.RUN_START:
            return True
        if not self.segments:
            self.segments_check.problems.append(f"event {number} ({name}) comes before the first run_start")
            return False
        segment = self.segments[-1]
        if segment.stop is not None and segment.stop is not event and name not in AFTER_STOP:
            self.segments_check.problems.append(f"event {number} ({name}{_task_of(event)}) comes after "
                                                f"segment {segment.number}'s run_stop")  # fmt: skip
        return True

    # -- segments

    def run_start(self, event: dict, _: int) -> None:
        number = len(self.segments)
        if event["segment"] != number:
            self.segments_check.problems.append(f"run_start of segment {event['segment']} is the log's "
                                                f"run_start number {number}")  # fmt: skip
        if event["resumed"] != (number > 1):
            self.segments_check.problems.append(f"segment {number}: resumed is {event['resumed']}")
        if number > 1:
            previous = self.segments[-2]
            if event[runlog.TIME] <= previous.start:
                self.segments_check.problems.append(f"segment {number} starts before segment {previous.number}")
            before, now = current_names(previous.config), current_names(event["config"])  # a run resumed after a rename
            changed = sorted(k for k in set(before) | set(now) if k not in RESUME_MAY_CHANGE
                             and not same(before.get(k), now.get(k)))  # fmt: skip
            if changed:
                self.segments_check.problems.append(f"segment {number} runs another configuration: "
                                                    f"{', '.join(changed)} changed")  # fmt: skip

    def run_stop(self, event: dict, _: int) -> None:
        segment = self.segments[-1]
        if segment.stop is not event:
            self.segments_check.problems.append(f"segment {segment.number} has a second run_stop")
        if event["segment"] != segment.number:
            self.segments_check.problems.append(f"the run_stop of segment {segment.number} says segment "
                                                f"{event['segment']}")  # fmt: skip

    def score(self, event: dict, _: int) -> None:
        segment = self.segments[-1]
        self.score_events += 1
        if segment.stop is None:
            self.segments_check.problems.append(f"segment {segment.number}: a score event without a run_stop "
                                                "before it (the run_stop was removed?)")  # fmt: skip
        if segment.number in self.scored:
            self.segments_check.problems.append(f"segment {segment.number} has a second score event")
        self.scored.add(segment.number)

    # -- tasks and epochs

    def model_proposed(self, event: dict, _: int) -> None:
        segment = self.segments[-1]
        task = event["task"]
        if task in self.tasks or task in self.finished:
            self.epochs_check.problems.append(f"task {task} proposed twice")
            return
        state = _Task(task, event["group"], segment.number, event["hparams"], graph_place(event))
        self.tasks[task] = state
        strategy = str((event.get("search") or {}).get("strategy", "?"))
        self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
        self.graph_count += 1
        name = event.get("graph_file")
        if isinstance(name, str) and name and not Path(name).is_absolute() and ".." not in Path(name).parts:
            is_regular_file(self.run_dir / name)  # a FIFO is bad input, not a missing graph (outside: named below)
        try:
            data = read_graph(self.run_dir, event)
        except GraphFileError as exc:
            self.graphs.problems.append(f"task {task}: {exc}")
            data = None
        if data is not None:
            self._graph_bytes(event, state, data)
            self._duplicate(event, state, segment.number)
        self.lineage.proposed(event, state.graph_text, segment.config)

    def _duplicate(self, event: dict, state: _Task, segment: int) -> None:
        """A child must be a graph the master had not seen: it answers Duplicate to any it holds the hash of.

        It holds every graph accepted in its segment, and those of the models that ended before (a resume
        rebuilds them from their records); a seed (no parent) is always accepted.  A forger who sends a
        digest that is not the graph's to pass a duplicate off fails the sha256 row; one who sends the true
        digest past the master's check fails here.
        """
        key = state.graph_sha256[:20]
        owner = self.graph_owners.get(key)
        known = owner is not None and (owner[1] == segment or owner[0] in self.finished)
        if known and event.get("parent") is not None:
            self.graphs.problems.append(f"task {state.task}: its graph is task {owner[0]}'s, which the master had "
                                        "seen: it accepts no child twice (a duplicate)")  # fmt: skip
        if not known:  # the first, or the first since a resume forgot a task that never ended
            self.graph_owners[key] = (state.task, segment)

    def _graph_bytes(self, event: dict, state: _Task, data: bytes) -> None:
        """Check a graph's stored bytes against the log: its logged sha256, and its place in an appended file."""
        task = state.task
        if event.get(OFFSET) is not None:  # an appended file: one line a model, never another model's
            place = (os.path.normpath(str(event["graph_file"])), event[OFFSET])
            other = self.graph_places.setdefault(place, task)
            if other != task:
                self.graphs.problems.append(f"task {task}: {state.graph_file} is task {other}'s graph")
        digest = hashlib.sha256(data).hexdigest()
        state.graph_sha256 = digest
        logged = event.get("graph_sha256")
        if logged is None:
            self.graph_unhashed += 1
        elif logged != digest:
            self.graphs.problems.append(f"task {task}: {state.graph_file} has sha256 {digest[:16]}…, the log "
                                        f"recorded {str(logged)[:16]}… (the file was changed)")  # fmt: skip
        else:
            self.graph_hashes += 1
        try:
            state.graph_text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.graphs.problems.append(f"task {task}: {state.graph_file} is not UTF-8 text")

    def _counts(self, state: _Task) -> ModelOps | None:
        """The task's per-sample counts, from its graph file, as the trainer built it (once per task).

        Parsing, shape inference and counting cost ~2 ms a graph; the last :data:`COUNT_CACHE` distinct
        (file sha256, kernel size) are kept, so tasks that share a graph file's bytes are counted once
        (a byte-identical file parses to the identical graph, so nothing is skipped but the repetition).
        """
        if state.counts is None and not state.count_error:
            if state.graph_text is None:
                state.count_error = "its graph file could not be read"
                return None
            kernel = state.hparams.get("kernel_size")
            key = (state.graph_sha256, json.dumps(kernel)) if state.graph_sha256 else None
            cached = self.count_cache.get(key) if key is not None else None
            evidence: EvidenceRules = self.run.judges["evidence"]  # the configuration row holds each graph's shape
            try:
                if cached is None:
                    graph = from_json(state.graph_text)
                    before = len(evidence.configuration.problems)
                    evidence.graph(state.task, graph, state.graph_file)
                    clean = len(evidence.configuration.problems) == before
                    counts = count_ops(graph if kernel is None else with_kernel_size(graph, kernel))
                    stored = sorted({data.get("kernel") for _, data in graph.nodes(data=True) if data.get("tunable")})
                    cached = (graph, counts, stored, clean)
                    if key is not None:
                        self.count_cache[key] = cached
                        if len(self.count_cache) > COUNT_CACHE:
                            self.count_cache.popitem(last=False)
                else:
                    self.count_cache.move_to_end(key)
                    graph, counts, stored, clean = cached
                    if clean:
                        evidence.graphs += 1  # the same bytes pass the same way: counted, not redone
                    else:  # a problem: named for this task too
                        evidence.graph(state.task, graph, state.graph_file)
                state.counts = counts
                if kernel is not None and stored not in ([], [kernel]):  # the leader stores the graph it tuned
                    self.graphs.problems.append(f"task {state.task}: the graph file's tunable kernels are "
                                                f"{stored}, its hparams' kernel_size {kernel}")  # fmt: skip
            except (GraphError, ValueError, KeyError, TypeError) as exc:
                state.count_error = f"its graph cannot be counted: {' '.join(str(exc).split())[:200]}"
                self.graphs.problems.append(f"task {state.task}: {state.count_error}")
        return state.counts

    def epoch(self, event: dict, _: int) -> None:
        segment = self.segments[-1]
        self.epoch_count += 1
        task, number = event["task"], event["epoch"]
        where = f"task {task} epoch {number}"
        state = self.tasks.get(task)
        if state is None:
            ended = task in self.finished
            self.epochs_check.problems.append(f"{where}: " + ("comes after its model_done/model_failed" if ended
                                                             else "has no model_proposed before it"))  # fmt: skip
            return
        if state.segment != segment.number:
            self.epochs_check.problems.append(f"{where}: logged in segment {segment.number}, its task was "
                                              f"proposed in segment {state.segment}")  # fmt: skip
        if event["group"] != state.group:
            self.epochs_check.problems.append(f"{where}: group {event['group']}, its task was given to group "
                                              f"{state.group}")  # fmt: skip
        if number != len(state.epochs) + 1:
            self.epochs_check.problems.append(f"{where}: follows epoch {len(state.epochs)} of its task")
        if event[runlog.TIME] < segment.start:
            self.epochs_check.problems.append(f"{where}: logged before its segment's run_start")
        state.epochs.append(event)
        self.recount(event, state, segment, where)

    def recount(self, event: dict, state: _Task, segment: Segment, where: str) -> None:
        counts = self._counts(state)
        if counts is None:
            self.ops.problems.append(f"{where}: not recounted: {state.count_error}")
            return
        batch = state.hparams.get("batch_size")
        ranks = segment.group_sizes.get(state.group)
        if not isinstance(batch, int) or ranks is None:
            known = "not in its segment's layout" if segment.layout is not None else "its segment has no layout"
            self.ops.problems.append(f"{where}: the global batch is unknown (batch_size {batch!r}, group "
                                     f"{state.group}: {known})")  # fmt: skip
            return
        try:
            recounted = epoch_ops(counts, event["train_samples"], event["validation_samples"], batch * ranks)
        except ValueError as exc:
            self.ops.problems.append(f"{where}: {exc}")
            return
        expected = {"ops": recounted.total, "ops_train": recounted.train, "ops_update": recounted.update,
                    "ops_validation": recounted.validation, "steps": recounted.steps}  # fmt: skip
        wrong = differences(event, expected, EPOCH_OPS_FIELDS)
        if wrong:
            self.ops.problems.append(f"{where}: " + "; ".join(wrong))
        else:
            self.recounted += 1

    def model_done(self, event: dict, _: int) -> None:
        task, model = event["task"], event["model"]
        state = self._end(task, event, "model_done")
        self._model_id(model.get("id"), task)
        if state is None:
            return
        where = f"task {task} (model {model.get('id')})"
        problems = []
        epochs = model.get("epochs")
        epochs = [e for e in epochs if isinstance(e, dict)] if isinstance(epochs, list) else []
        logged = state.epochs
        if len(epochs) != len(logged):
            problems.append(f"its record lists {len(epochs)} epochs, the log has {len(logged)}")
        for recorded, epoch in zip(epochs, logged, strict=False):
            shared = [k for k in recorded if k in epoch]
            wrong = [k for k in shared if not same(epoch[k], recorded[k])]
            lost = [k for k in ("val_accuracy", "ops", "end") if k not in recorded]
            if wrong or lost:
                problems.append(f"epoch {epoch['epoch']}: the epoch event and the model record differ in "
                                f"{', '.join(wrong + lost)}")  # fmt: skip
        accuracies = [e["val_accuracy"] for e in logged]
        if not same(model.get("accuracy"), max(accuracies) if accuracies else None):
            problems.append(f"accuracy {model.get('accuracy')} is not the best of its epochs "
                            f"({max(accuracies) if accuracies else None})")  # fmt: skip
        predicted = model.get("predicted_accuracy")
        if predicted is not None and not (isinstance(predicted, int | float) and not isinstance(predicted, bool)
                                          and math.isfinite(predicted)):  # fmt: skip
            problems.append(f"predicted_accuracy {short(predicted)} is neither none nor a number (the search ranks "
                            "models by it)")  # fmt: skip
        if model.get("status") != ("trained" if logged else "failed"):
            problems.append(f"status {model.get('status')!r} with {len(logged)} epochs")
        if not same(model.get("hparams"), state.hparams):
            problems.append("its hparams differ from its proposal's")
        ops = model.get("ops") if isinstance(model.get("ops"), dict) else {}
        if ops and not same(ops.get("total"), sum(e["ops"] for e in logged)):
            problems.append(f"ops total {ops.get('total')} is not the sum of its epochs' "
                            f"({sum(e['ops'] for e in logged)})")  # fmt: skip
        counts = self._counts(state)
        if counts is not None and ops:
            expected = {"forward_per_sample": counts.forward_eval, "backward_per_sample": counts.backward,
                        "update_per_step": counts.update, "params": counts.params}  # fmt: skip
            problems += [f"ops {line}" for line in differences(ops, expected, tuple(expected))]
        graph = model.get("graph")
        if "graph" in model and not isinstance(graph, str):  # an older run's record carries its graph as text
            problems.append(f"its graph is {type(graph).__name__}, not the graph's JSON text")
        if isinstance(graph, str) and state.graph_text is not None:
            self.graph_cross_checked += 1
            if graph != state.graph_text:
                self.graphs.problems.append(f"task {task}: {state.graph_file} is not the graph its model_done "
                                            "records")  # fmt: skip
        if problems:
            self.records.problems += [f"{where}: {p}" for p in problems]
        else:
            self.records_checked += 1

    def model_failed(self, event: dict, _: int) -> None:
        self._model_id(event["model"], event["task"])
        self._end(event["task"], event, "model_failed")

    def _model_id(self, model_id: object, task: int) -> None:
        self.lineage.ended(task, model_id)
        if model_id != self.next_model_id:
            self.records.problems.append(f"task {task}: model id {model_id}, the next id is {self.next_model_id}")
        self.next_model_id = (model_id if isinstance(model_id, int) else self.next_model_id) + 1

    def _end(self, task: int, event: dict, name: str) -> _Task | None:
        state = self.tasks.pop(task, None)
        if state is None and name == "model_failed" and task not in self.finished:
            self.finished.add(task)  # its search found no child: a task handed out, failed before any proposal
            return None
        if state is None:
            self.epochs_check.problems.append(f"task {task}: {name} " + ("after its end" if task in self.finished
                                                                          else "without a model_proposed"))  # fmt: skip
            return None
        if event["group"] != state.group:
            self.epochs_check.problems.append(f"task {task}: {name} from group {event['group']}, its task was "
                                              f"given to group {state.group}")  # fmt: skip
        self.finished.add(task)
        return state

    # -- after the walk

    def finish(self) -> list[Check]:
        if not self.segments:
            raise BadInput(f"{self.run_dir / runlog.EVENTS_FILE}: no run_start: not an aiperf_mpi event log")
        last = self.segments[-1]
        if last.stop is None:
            self.segments_check.problems.append(f"segment {last.number} has no run_stop: the run was killed or "
                                                "its run_stop was removed")  # fmt: skip
        elif last.number not in self.scored:
            self.segments_check.problems.append(f"segment {last.number} has no score event after its run_stop")
        for segment in self.segments[:-1]:
            if segment.stop is not None and segment.number not in self.scored:
                self.segments_check.problems.append(f"segment {segment.number} stopped without a score event")
        stops = sum(s.stop is not None for s in self.segments)
        self.segments_check.summary = (f"{len(self.segments)} segment(s), {stops} closed by run_stop, "
                                       f"{self.score_events} score event(s)")  # fmt: skip
        self.epochs_check.summary = (f"{self.epoch_count} epochs of {len(self.finished) + len(self.tasks)} tasks: "
                                     "each inside its segment, after its proposal, none after its model's end")
        # a model_done carries no graph since the graph is logged once (in its graphs file); an older run's does,
        # and it must be the graph file's
        self.graphs.summary = (f"{self.graph_count} graph files: {self.graph_hashes} sha256 as logged"
                               + (f", {self.graph_cross_checked} equal to their model_done's graph"
                                  if self.graph_cross_checked else ""))  # fmt: skip
        if self.graph_unhashed:
            self.graphs.missing.append(f"{self.graph_unhashed} of {self.graph_count} model_proposed events have no "
                                       "graph_sha256 (a log older than the field)")  # fmt: skip
        self.ops.summary = (f"{self.recounted} of {self.epoch_count} epochs recounted exactly "
                            f"({', '.join(EPOCH_OPS_FIELDS)})")  # fmt: skip
        self.records.summary = (f"{self.records_checked} model_done records equal their epochs, hparams and counts"
                                + (f"; {self.graph_cross_checked} carry their graph too (an older log: compared "
                                   "in the graphs row)" if self.graph_cross_checked else ""))  # fmt: skip
        self.lineage.finish()
        return [self.segments_check, self.epochs_check, self.graphs, self.lineage.check, self.ops, self.records]


class Provenance:
    """Each segment's provenance (its run_start's), against its system event (its last, as the model keeps it) and
    the first segment's: judged once the segment is whole, at the next run_start or the end of the log."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("provenance")
        self.first: Mapping | None = None
        """the first segment's provenance that was recorded"""

    def run_start(self, _: dict, __: int) -> None:
        segments = self.run.model.segment_records  # type: ignore[union-attr]
        if len(segments) > 1:
            self._judge(segments[-2])

    def _judge(self, segment: Segment) -> None:
        check, record, system, name = self.check, segment.logged_provenance, segment.system, f"segment {segment.number}"
        if record is None:
            check.missing.append(f"{name}'s run_start has no provenance (a log older than the field): a "
                                 "submission must record its code and software stack")  # fmt: skip
            return
        absent = [k for k in provenance_module.REQUIRED if record.get(k) is None]
        if absent:
            check.problems.append(f"{name}: provenance lacks {', '.join(absent)}")
        if not is_hex(record.get("source_sha256"), 64):
            check.problems.append(f"{name}: source_sha256 {record.get('source_sha256')!r} is not a sha256")
        commit = record.get("git_commit")
        if commit != provenance_module.UNKNOWN and not is_hex(commit, 40):
            check.problems.append(f"{name}: git_commit {commit!r} is neither a commit nor 'unknown'")
        system = system or {}
        for key in ("python", "tensorflow", "horovod", "mpi", "aiperf_mpi"):
            if key in system and system[key] is not None and not same(system[key], record.get(key)):
                check.problems.append(f"{name}: provenance {key} {short(record.get(key))}, its system event "
                                      f"{short(system[key])}")  # fmt: skip
        if record.get("git_dirty"):
            check.notes.append(f"{name}: the git checkout had local changes (the source hash says which "
                               "code ran)")  # fmt: skip
        if self.first is None:
            self.first = record
        elif record.get("source_sha256") != self.first.get("source_sha256"):
            check.problems.append(f"{name} ran other source code than segment 1 (source_sha256 differs)")

    def finish(self) -> list[Check]:
        check = self.check
        if self.run.model is not None and self.run.model.segment_records:
            self._judge(self.run.model.segment_records[-1])
        first = self.first
        if first is None:
            check.summary = "none recorded"
            return [check]
        commit = first.get("git_commit")
        check.summary = (f"aiperf_mpi {first.get('aiperf_mpi')}, commit {str(commit)[:12]}, source "
                         f"{str(first.get('source_sha256'))[:12]}…, Python {first.get('python')}, "
                         f"TensorFlow {first.get('tensorflow')}, Horovod {first.get('horovod')}, "
                         f"MPI {_mpi_name(first.get('mpi'))}")  # fmt: skip
        mine, _ = provenance_module.source_sha256()
        if mine == first.get("source_sha256"):
            check.notes.append("this verifier runs the same aiperf_mpi source as the run")
        else:
            check.notes.append(f"this verifier runs other aiperf_mpi source ({mine[:12]}…): its counter may "
                               "differ from the run's")  # fmt: skip
        return [check]


def _task_of(event: Mapping) -> str:
    return f" of task {event['task']}" if "task" in event else ""


def _mpi_name(mpi: object) -> str:
    if isinstance(mpi, Mapping):
        return f"{mpi.get('vendor', '?')} {mpi.get('version', '?')}"
    return str(mpi)


# --------------------------------------------------------------------------- the score file and the rules


class ScoreRules:
    """The score recomputed from the log, against ``score.json`` and each ``score`` event; the scored window; one
    row per validity rule, with what the log's evidence says against its claims (precision, search): all of
    it from the run's model (:mod:`aiperf_mpi.results.score` of its :class:`~aiperf_mpi.results.logmodel.Timeline`).
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("score")
        self.open_end = math.nan
        """the open segment's end in the model as of the event before (what a score event there is compared at)"""
        self.score: Score | None = None
        """the recomputed score, once the walk has ended (None: the log cannot be scored)"""

    @property
    def model(self) -> Timeline:
        return self.run.model if self.run.model is not None else Timeline()

    def each(self, event: dict, _: int) -> bool:
        """Every event of a segment is in the score; a score event is compared with the events before it, an epoch
        must be one the score can add up (else the log cannot be scored: :class:`runlog.UnreadableLog`)."""
        name, segments = event[runlog.EVENT], self.model.segment_records
        if name == runlog.RUN_START:  # a limit past the floats' range: a number too large to read, as the scorer says
            time_limit(event.get("config", {}))
        if not segments:
            return False
        if name == runlog.EPOCH:
            epoch_values(event["end"], event["ops"], event.get("val_accuracy"))
        elif name == runlog.SCORE:
            self._score_event(event, segments[-1])
        self.open_end = segments[-1].end
        return True

    def _score_event(self, event: dict, segment: Segment) -> None:
        """The score as of the event before: in a segment still open, the model moved its end to this event."""
        moved, segment.end = segment.end, (segment.end if segment.stop is not None else self.open_end)
        try:
            score = score_inputs(self.model, run_step(self.model.config))
        except ValueError as exc:
            self.check.problems.append(f"segment {segment.number}'s score event: {exc}")
            return
        finally:
            segment.end = max(segment.end, moved)
        fields = tuple(f for f in SCORE_FIELDS if f != "truncated_log")  # added to the event later than the score
        fields += tuple(f for f in STABILITY_FIELDS if f in event)
        for line in differences(event, score.to_dict(), fields):
            self.check.problems.append(f"segment {segment.number}'s score event: {line}")

    def _evidence(self) -> list[str]:
        """What the log says against its own validity claims: the precision the probe ran at, the searches named."""
        evidence = []
        config = self.model.config or {}
        precision = logged_precision(config)
        precision = precision if isinstance(precision, str) else short(precision)
        probed = {peak["precision"] for segment in self.model.segment_records for peak in segment.peaks}
        if probed - {precision}:
            evidence.append(f"precision: the configuration says {precision}, the peak probe ran at "
                            f"{', '.join(sorted(probed))}")  # fmt: skip
        search = config.get("search", "bayesian")
        allowed = STRATEGIES.get(search) if isinstance(search, str) else None
        strategies = self.run.judges["record"].strategies
        foreign = {s: n for s, n in strategies.items() if allowed is not None and s not in allowed}
        if foreign:
            evidence.append(f"algorithms: the configuration says {search}, proposals name "
                            + ", ".join(f"{s} ({n})" for s, n in sorted(foreign.items())))  # fmt: skip
        return evidence

    def finish(self) -> list[Check]:
        """The score against score.json, the scored window, then one row per validity rule."""
        check = self.check
        score = None
        try:
            score = score_inputs(self.model, run_step(self.model.config), self.run.truncated)
        except ValueError as exc:
            check.problems.append(f"the log cannot be scored: {exc}")
        self.score = score
        path = self.run.run_dir / SCORE_FILE
        recorded: dict | None = None
        if not is_regular_file(path):
            check.problems.append(f"{SCORE_FILE} is missing (a run that did not finish has no score to submit)")
        else:
            try:
                recorded = read_json(path)
                if not isinstance(recorded, dict):
                    raise ValueError("not a JSON object")
            except (ValueError, UnicodeDecodeError) as exc:
                check.problems.append(f"{SCORE_FILE} is not readable: {' '.join(str(exc).split())[:200]}")
                recorded = None
        if score is not None and recorded is not None:
            recomputed = score.to_dict()
            fields = tuple(f for f in SCORE_FIELDS if f != "rules")  # the rules have a row each
            fields += tuple(f for f in STABILITY_FIELDS if f in recorded)
            check.problems += [f"{SCORE_FILE}: {line}" for line in differences(recorded, recomputed, fields)]
            grid = recorded.get("grid")
            if not isinstance(grid, list) or len(grid) != len(recomputed["grid"]):
                check.problems.append(f"{SCORE_FILE}: its grid has {len(grid) if isinstance(grid, list) else 'no'} "
                                      f"samples, recomputed {len(recomputed['grid'])}")  # fmt: skip
            else:  # one line for the grid: a changed epoch moves every sample after it
                pairs = enumerate(zip(recomputed["grid"], grid, strict=True))
                wrong = [(index, differences(theirs, mine, tuple(mine)) if isinstance(theirs, dict)
                          else ["not an object"]) for index, (mine, theirs) in pairs]  # fmt: skip
                wrong = [(index, lines) for index, lines in wrong if lines]
                if wrong:
                    index, lines = wrong[0]
                    check.problems.append(f"{SCORE_FILE}: {len(wrong)} of {len(grid)} grid samples differ, the "
                                          f"first at t = {recomputed['grid'][index]['active_time']:.1f} s: "
                                          f"{'; '.join(lines)}")  # fmt: skip
        if score is not None:
            regulated = "–" if score.regulated_score is None else f"{score.regulated_score / 1e9:.4f} GOPS"
            check.summary = (f"recomputed: {score.score / 1e9:.4f} GOPS, regulated {regulated}, {score.total_ops:,} "
                             f"operations in {score.active_time:.1f} s; compared with {SCORE_FILE} and the log's "
                             "score event(s)")  # fmt: skip
        rows = [check, self._window(score, recorded)]
        evidence = {line.split(":", 1)[0]: line for line in self._evidence()}
        for name, rule in (score.rules if score is not None else {}).items():
            row = Check(f"rule {name}")
            met = "met" if rule["ok"] else "not met"
            row.summary = f"{shown_value(rule['value'])} (needs {rule['need']}): {met}"
            rules = (recorded or {}).get("rules")
            theirs = rules.get(name) if isinstance(rules, dict) else None
            if recorded is not None and not same(theirs, rule):
                row.problems.append(f"{SCORE_FILE} says {short(theirs)}, recomputed {short(rule)}")
            if name in evidence:
                row.problems.append(evidence.pop(name))
            rows.append(row)
        for line in evidence.values():  # a rule the score no longer has: still a problem
            check.problems.append(line)
        return rows

    def _window(self, score: Score | None, recorded: Mapping | None) -> Check:
        """The scored window: each segment the run ended itself counts its whole time limit (one line per breach).

        A ``run_stop`` reason decides whether a segment's window is its time
        limit (the run ended it: the limit, every group stopped because no new
        model fits, the model budget) or its wall span (a signal); so the reason
        must be one the master writes and agree with what else the log says.
        The run's window is never less than the latest end a segment declared
        (its start on the active axis plus its time limit: results/score.py), so
        a signal shortens no run; ``score.json`` must be over that window.
        """
        check = Check("scored window")
        windows = self.model.windows
        parts = []
        for segment, window in zip(self.model.segment_records, windows, strict=True):
            name, limit = f"segment {segment.number}", segment.limit
            if limit is None:
                check.problems.append(f"{name}: its run_start's configuration has no positive time_limit, so its "
                                      f"scored window cannot be known ({WINDOW_RULE})")  # fmt: skip
            stop = segment.stop
            if stop is None:
                parts.append(f"{name} {window:.1f} s (killed: on the axis as it ran)")
                continue
            reason = stop.get("reason")
            groups, early = len(segment.group_sizes), stop.get("groups_stopped_early")
            if reason not in STOP_REASONS:
                check.problems.append(f"{name}: run_stop reason {short(reason)} is none the run writes "
                                      f"({', '.join(STOP_REASONS)}) ({WINDOW_RULE})")  # fmt: skip
            elif stopped_by_signal(reason) and isinstance(early, int) and groups and early >= groups:
                check.problems.append(f"{name}: run_stop says {reason!r}, but all {groups} group(s) had stopped "
                                      f"because no new model fit before the time limit: the run ended itself "
                                      f"({WINDOW_RULE})")  # fmt: skip
            elif reason == "max models" and not segment.config.get("max_models"):
                check.problems.append(f"{name}: run_stop says 'max models', but the configuration sets no "
                                      f"max_models ({WINDOW_RULE})")  # fmt: skip
            how = "a signal: on the axis as it ran" if stopped_by_signal(reason) else f"ended itself: {reason}"
            parts.append(f"{name} {window:.1f} s (ran {segment.end - segment.start:.1f} s of its {_limit(limit)} "
                         f"limit, {how})")
        if score is not None and score.active_time > sum(windows) and not same(score.active_time, sum(windows)):
            parts.insert(0, f"the run {score.active_time:.1f} s, what its segments declared (they ran "
                            f"{sum(windows):.1f} s: a signal or a kill shortens no run)")  # fmt: skip
        if score is not None and recorded is not None:
            theirs = recorded.get("active_time")
            if isinstance(theirs, int | float) and not isinstance(theirs, bool) and theirs < score.active_time and \
                    not same(theirs, score.active_time):  # fmt: skip
                check.problems.append(f"{SCORE_FILE} is scored over {theirs:g} s, the run's window is "
                                      f"{score.active_time:g} s ({WINDOW_RULE})")  # fmt: skip
        if score is not None and score.grid_capped:
            check.notes.append(f"grid capped: the step {run_step(self.model.config):g} s would give more than "
                               f"{MAX_GRID_SAMPLES:,} samples; sampled every {score.grid_step:g} s (the score is "
                               "the same)")  # fmt: skip
        check.summary = "; ".join(parts[:4]) + (f"; … and {len(parts) - 4} more" if len(parts) > 4 else "")
        return check


def _limit(limit: float | None) -> str:
    return "unrecorded" if limit is None else f"{limit:g} s"

