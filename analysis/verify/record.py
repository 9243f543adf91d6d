"""The family ``record``: the run's own record (its rows: :data:`analysis.verify.registry.FAMILIES`).

Six rules, one a row (the registry's :class:`~analysis.verify.registry.Rule` entries): the segments
(:class:`SegmentsRule`), each task's epochs (:class:`EpochsRule`), its graph file (:class:`GraphFilesRule`) and
lineage (:class:`LineageRule`, :mod:`analysis.verify.lineage`), every epoch's operations recounted by the
package's own counter (:class:`OpsRule`, :func:`aiperf_mpi.graph.ops.epoch_ops`) and the model records
(:class:`RecordsRule`). Each is fed, in log order, the events its entry names (a method named after each)
and gives its row at the end (``finish``); what they share of the run — the open tasks, their graphs read,
parsed and counted once, the lineage — is the shared view's (:mod:`analysis.verify.view`), and none reads
another's state.

The segments and their windows are the run's model's (``run.model``: an event is in it before it is
judged): events before the first ``run_start`` count in it as the scorer counts them (the segments row
fails each), and a segment ends at its first ``run_stop`` (a second is a problem of the segments row,
read no further).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from aiperf_mpi.graph.ops import epoch_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import OFFSET
from aiperf_mpi.results.logmodel import Segment
from aiperf_mpi.results.resumable import RESUME_MAY_CHANGE, current_names
from analysis.checks import BadInput, Check, Run, differences, same, short
from analysis.verify.view import OpenTask, ProposedGraph, RunView

EPOCH_OPS_FIELDS = ("ops", "ops_train", "ops_update", "ops_validation", "steps")
AFTER_STOP = (runlog.RUN_START, runlog.SCORE)
"""what may follow a segment's run_stop: its score, then the next segment"""


class _RecordRule:
    """What the record's rules share, code and no state: the run, its segments (the model's) and the shared view;
    none reads an event before the first ``run_start`` (the segments row names each)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def view(self) -> RunView:
        """The walk's shared view (it has taken the event being judged)."""
        return self.run.view  # type: ignore[no-any-return]

    @property
    def segments(self) -> list[Segment]:
        """The segments so far (the run's model's)."""
        return self.run.model.segment_records if self.run.model is not None else []

    def each(self, event: dict, number: int) -> bool:
        return bool(self.segments)


class SegmentsRule(_RecordRule):
    """The row ``segments``: numbered in time order, one configuration, each closed by one run_stop and scored;
    nothing before the first run_start, nothing but the score after a run_stop."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.segments_check = Check("segments")
        self.scored: set[int] = set()
        """the segments with a score event"""
        self.score_events = 0

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

    def finish(self) -> list[Check]:
        if not self.segments:
            raise BadInput(f"{self.run.run_dir / runlog.EVENTS_FILE}: no run_start: not an aiperf_mpi event log")
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
        return [self.segments_check]


class EpochsRule(_RecordRule):
    """The row ``epochs in segments``: each task proposed once, its epochs numbered in its segment and group after
    its proposal, ended once (the open tasks are the shared view's)."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.epochs_check = Check("epochs in segments")
        self.finished: set[int] = set()
        """the tasks ended (a model_done or model_failed of an open task, or a model_failed of one never proposed)"""
        self.epoch_count = 0

    def model_proposed(self, event: dict, _: int) -> None:
        task = event["task"]
        if not _first_proposal(self.view, event):
            self.epochs_check.problems.append(f"task {task} proposed twice")

    def epoch(self, event: dict, _: int) -> None:
        segment = self.segments[-1]
        self.epoch_count += 1
        task, number = event["task"], event["epoch"]
        where = f"task {task} epoch {number}"
        state = self.view.tasks.get(task)  # the view has added this epoch to its epochs
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
        if number != len(state.epochs):
            self.epochs_check.problems.append(f"{where}: follows epoch {len(state.epochs) - 1} of its task")
        if event[runlog.TIME] < segment.start:
            self.epochs_check.problems.append(f"{where}: logged before its segment's run_start")

    def model_done(self, event: dict, _: int) -> None:
        self._end(event["task"], event, "model_done")

    def model_failed(self, event: dict, _: int) -> None:
        self._end(event["task"], event, "model_failed")

    def _end(self, task: int, event: dict, name: str) -> None:
        state = self.view.ended  # the task this event ended (the view no longer holds it open)
        if state is None and name == "model_failed" and task not in self.finished:
            self.finished.add(task)  # its search found no child: a task handed out, failed before any proposal
            return
        if state is None:
            self.epochs_check.problems.append(f"task {task}: {name} " + ("after its end" if task in self.finished
                                                                          else "without a model_proposed"))  # fmt: skip
            return
        if event["group"] != state.group:
            self.epochs_check.problems.append(f"task {task}: {name} from group {event['group']}, its task was "
                                              f"given to group {state.group}")  # fmt: skip
        self.finished.add(task)

    def finish(self) -> list[Check]:
        self.epochs_check.summary = (f"{self.epoch_count} epochs of {len(self.finished) + len(self.view.tasks)} "
                                     "tasks: each inside its segment, after its proposal, none after its model's end")
        return [self.epochs_check]


class GraphFilesRule(_RecordRule):
    """The row ``graph files``: each proposed graph's file where and as logged, no child a duplicate the master
    would have refused, its tunable kernels its hyper-parameters', the same as an older record's graph."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.graphs = Check("graph files")
        self.graph_count = self.graph_hashes = self.graph_unhashed = 0
        self.graph_cross_checked = 0
        self.graph_places: dict[tuple[str, int], int] = {}
        """(appended graphs file, offset) → the task whose graph lies there: a line belongs to one model"""
        self.graph_owners: dict[str, tuple[int, int]] = {}
        """a graph's identity (its sha256's first 20 hex digits, the master's duplicate key) → (task, segment) of
        its first proposal the master knew of: a child with the same graph is a duplicate it would have refused"""

    def model_proposed(self, event: dict, _: int) -> None:
        if not _first_proposal(self.view, event):
            return  # the epochs row names it
        segment, task = self.segments[-1], event["task"]
        state = self.view.tasks[task]
        self.graph_count += 1
        graph = state.graph  # read by the walk's view, for this proposal
        if graph.error:
            self.graphs.problems.append(f"task {task}: {graph.error}")
        if graph.data is not None:
            self._graph_bytes(event, state, graph)
            self._duplicate(event, state, segment.number)

    def _duplicate(self, event: dict, state: OpenTask, segment: int) -> None:
        """A child must be a graph the master had not seen: it answers Duplicate to any it holds the hash of.

        It holds every graph accepted in its segment, and those of the models that ended before (a resume
        rebuilds them from their records); a seed (no parent) is always accepted.  A forger who sends a
        digest that is not the graph's to pass a duplicate off fails the sha256 row; one who sends the true
        digest past the master's check fails here.
        """
        key = state.graph.sha256[:20]
        owner = self.graph_owners.get(key)
        known = owner is not None and (owner[1] == segment or self.view.has_ended(owner[0]))
        if known and event.get("parent") is not None:
            self.graphs.problems.append(f"task {state.task}: its graph is task {owner[0]}'s, which the master had "
                                        "seen: it accepts no child twice (a duplicate)")  # fmt: skip
        if not known:  # the first, or the first since a resume forgot a task that never ended
            self.graph_owners[key] = (state.task, segment)

    def _graph_bytes(self, event: dict, state: OpenTask, graph: ProposedGraph) -> None:
        """Check a graph's stored bytes against the log: its logged sha256, and its place in an appended file."""
        task = state.task
        if event.get(OFFSET) is not None:  # an appended file: one line a model, never another model's
            place = (os.path.normpath(str(event["graph_file"])), event[OFFSET])
            other = self.graph_places.setdefault(place, task)
            if other != task:
                self.graphs.problems.append(f"task {task}: {graph.place} is task {other}'s graph")
        digest = graph.sha256
        logged = event.get("graph_sha256")
        if logged is None:
            self.graph_unhashed += 1
        elif logged != digest:
            self.graphs.problems.append(f"task {task}: {graph.place} has sha256 {digest[:16]}…, the log "
                                        f"recorded {str(logged)[:16]}… (the file was changed)")  # fmt: skip
        else:
            self.graph_hashes += 1
        if graph.text is None:
            self.graphs.problems.append(f"task {task}: {graph.place} is not UTF-8 text")

    def epoch(self, event: dict, _: int) -> None:
        self._counted()

    def _counted(self) -> None:
        """What the walk's view found counting a task's graph, named once: at the event it counted it for (its
        first epoch, else its model_done)."""
        state = self.view.counted
        if state is None:
            return
        kernel, stored = state.kernel, state.stored_kernels
        if state.counts is not None and kernel is not None and stored not in ([], [kernel]):
            # the leader stores the graph it tuned
            self.graphs.problems.append(f"task {state.task}: the graph file's tunable kernels are "
                                        f"{stored}, its hparams' kernel_size {kernel}")  # fmt: skip
        elif state.counts is None and state.graph.text is not None:
            self.graphs.problems.append(f"task {state.task}: {state.count_error}")

    def model_done(self, event: dict, _: int) -> None:
        state = self.view.ended
        if state is None:
            return
        self._counted()
        graph = event["model"].get("graph")
        if isinstance(graph, str) and state.graph.text is not None:
            self.graph_cross_checked += 1
            if graph != state.graph.text:
                self.graphs.problems.append(f"task {event['task']}: {state.graph.place} is not the graph its "
                                            "model_done records")  # fmt: skip

    def finish(self) -> list[Check]:
        # a model_done carries no graph since the graph is logged once (in its graphs file); an older run's does,
        # and it must be the graph file's
        self.graphs.summary = (f"{self.graph_count} graph files: {self.graph_hashes} sha256 as logged"
                               + (f", {self.graph_cross_checked} equal to their model_done's graph"
                                  if self.graph_cross_checked else ""))  # fmt: skip
        if self.graph_unhashed:
            self.graphs.missing.append(f"{self.graph_unhashed} of {self.graph_count} model_proposed events have no "
                                       "graph_sha256 (a log older than the field)")  # fmt: skip
        return [self.graphs]


class LineageRule(_RecordRule):
    """The row ``lineage``: each proposed graph rebuilt from its seed or its parent's stored graph and the logged
    morphisms, as the shared view rebuilt it when the proposal came (:class:`analysis.verify.lineage.LineageCheck`)."""

    def finish(self) -> list[Check]:
        lineage = self.view.lineage
        lineage.finish()
        return [lineage.check]


class OpsRule(_RecordRule):
    """The row ``ops recount``: every epoch's operations recounted from its graph, as the view counted it."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.ops = Check("ops recount")
        self.epoch_count = self.recounted = 0

    def epoch(self, event: dict, _: int) -> None:
        self.epoch_count += 1
        state = self.view.tasks.get(event["task"])
        if state is None:
            return  # the epochs row names it
        self.recount(event, state, self.segments[-1], f"task {event['task']} epoch {event['epoch']}")

    def recount(self, event: dict, state: OpenTask, segment: Segment, where: str) -> None:
        counts = state.counts
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

    def finish(self) -> list[Check]:
        self.ops.summary = (f"{self.recounted} of {self.epoch_count} epochs recounted exactly "
                            f"({', '.join(EPOCH_OPS_FIELDS)})")  # fmt: skip
        return [self.ops]


class RecordsRule(_RecordRule):
    """The row ``model records``: each model_done's record equal to its epochs, proposal and counts; model ids
    0, 1, 2, … in order."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.records = Check("model records")
        self.records_checked = self.graph_cross_checked = 0
        self.next_model_id = 0

    def model_done(self, event: dict, _: int) -> None:
        task, model = event["task"], event["model"]
        state = self.view.ended  # the task this event ended (the epochs row names one that was not open)
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
        counts = state.counts
        if counts is not None and ops:
            expected = {"forward_per_sample": counts.forward_eval, "backward_per_sample": counts.backward,
                        "update_per_step": counts.update, "params": counts.params}  # fmt: skip
            problems += [f"ops {line}" for line in differences(ops, expected, tuple(expected))]
        graph = model.get("graph")
        if "graph" in model and not isinstance(graph, str):  # an older run's record carries its graph as text
            problems.append(f"its graph is {type(graph).__name__}, not the graph's JSON text")
        if isinstance(graph, str) and state.graph.text is not None:
            self.graph_cross_checked += 1  # compared in the graph files row
        if problems:
            self.records.problems += [f"{where}: {p}" for p in problems]
        else:
            self.records_checked += 1

    def model_failed(self, event: dict, _: int) -> None:
        self._model_id(event["model"], event["task"])

    def _model_id(self, model_id: object, task: int) -> None:
        if model_id != self.next_model_id:
            self.records.problems.append(f"task {task}: model id {model_id}, the next id is {self.next_model_id}")
        self.next_model_id = (model_id if isinstance(model_id, int) else self.next_model_id) + 1

    def finish(self) -> list[Check]:
        self.records.summary = (f"{self.records_checked} model_done records equal their epochs, hparams and counts"
                                + (f"; {self.graph_cross_checked} carry their graph too (an older log: compared "
                                   "in the graphs row)" if self.graph_cross_checked else ""))  # fmt: skip
        return [self.records]


def _first_proposal(view: RunView, event: dict) -> bool:
    """Whether ``event`` is its task's first proposal: the view opened the task at it (a second is not)."""
    state = view.tasks.get(event["task"])
    return state is not None and state.proposal is event


def _task_of(event: Mapping) -> str:
    return f" of task {event['task']}" if "task" in event else ""
