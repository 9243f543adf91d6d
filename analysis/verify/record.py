"""The family ``record``: the run's own record (its rows: :data:`analysis.verify.registry.FAMILIES`).

Each rule is a plain function of one finished unit of the run (:mod:`analysis.verify.units`), its row's text its
docstring: the segments (:func:`segments`, :func:`segments_closed`), each task's epochs (:func:`epochs_in_segments`,
:func:`stray_epochs`), its graph file (:func:`graph_files`) and its operations recounted by the package's own
counter (:func:`ops_recount`, :func:`aiperf_mpi.graph.ops.epoch_ops`), the model records (:func:`model_records`).
What needs the log's order — the model id the previous end implies, whose graph already lay at a place, which
graph the master had seen — the unit stream keeps and puts on the unit; the graphs read, parsed and counted once
are the shared view's (:mod:`analysis.verify.view`).  The lineage row (:func:`lineage`) reads each task's graph as
rebuilt once, when its proposal came (:func:`analysis.verify.lineage.rebuild_proposal`, which the unit stream calls:
the search family's repeated graphs row takes the rebuild's identity in the proposals' order).

The segments and their windows are the run's model's: events before the first ``run_start`` count in it as the
scorer counts them (the segments row fails each), and a segment ends at its first ``run_stop`` (a second is a
problem of the segments row, read no further).
"""

from __future__ import annotations

import math
from collections import Counter

from aiperf_mpi.graph.ops import epoch_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.results.resumable import RESUME_MAY_CHANGE, current_names
from analysis.checks import BadInput, differences, same, short
from analysis.verify.units import (
    END,
    EndLogged,
    Findings,
    Misplaced,
    RunUnit,
    SegmentUnit,
    StrayEvent,
    TaskUnit,
    count,
    missing,
    problem,
    summary,
)

EPOCH_OPS_FIELDS = ("ops", "ops_train", "ops_update", "ops_validation", "steps")


# ------------------------------------------------------------------------------------------------ segments


def segments(segment: SegmentUnit) -> Findings:
    """`run_start`s numbered 1, 2, … in time order, `resumed` only after the first; a resume changes no
    configuration but `time_limit`, `hardware_changed`, `run_dir`, the phases' deadlines, `hang_margin` and
    `ignore_limits` (`RESUME_MAY_CHANGE`: what belongs to the machine and the job, not the result; an option renamed
    since a segment was logged counts under its new name: `warmup_epochs` is `search_warmup_epochs`); each
    segment's one `run_stop` precedes its `score`; nothing but the `score` follows a `run_stop`; the last segment is
    closed and scored"""
    record, number = segment.record, segment.record.number
    for start in segment.run_starts:
        event, at = start.event, start.number
        if event["segment"] != number:
            yield problem(at, f"run_start of segment {event['segment']} is the log's run_start number {number}")
        if event["resumed"] != (number > 1):
            yield problem(at, f"segment {number}: resumed is {event['resumed']}")
        if number > 1:
            previous = segment.before[-1]
            if event[runlog.TIME] <= previous.start:
                yield problem(at, f"segment {number} starts before segment {previous.number}")
            before, now = current_names(previous.config), current_names(event["config"])  # resumed after a rename
            changed = sorted(k for k in set(before) | set(now) if k not in RESUME_MAY_CHANGE
                             and not same(before.get(k), now.get(k)))  # fmt: skip
            if changed:
                yield problem(at, f"segment {number} runs another configuration: {', '.join(changed)} changed")
    for stop in segment.run_stops:
        if record.stop is not stop.event:
            yield problem(stop.number, f"segment {number} has a second run_stop")
        if stop.event["segment"] != number:
            yield problem(stop.number, f"the run_stop of segment {number} says segment {stop.event['segment']}")
    for order, score in enumerate(segment.scores):
        if not score.stopped:
            yield problem(score.number, f"segment {number}: a score event without a run_stop before it (the "
                                        "run_stop was removed?)")  # fmt: skip
        if order:
            yield problem(score.number, f"segment {number} has a second score event")


def misplaced_events(event: Misplaced) -> Findings:
    """(segments) nothing before the first `run_start`, nothing but its `score` after a segment's `run_stop`"""
    name = event.event[runlog.EVENT]
    if event.after_stop_of is None:
        yield problem(event.number, f"event {event.number} ({name}) comes before the first run_start")
    else:
        task = f" of task {event.event['task']}" if "task" in event.event else ""
        yield problem(event.number, f"event {event.number} ({name}{task}) comes after segment "
                                    f"{event.after_stop_of}'s run_stop")  # fmt: skip


def segments_closed(run: RunUnit) -> Findings:
    """(segments) the last segment closed by its `run_stop` and scored; every segment that stopped scored"""
    if not run.segments:
        raise BadInput(f"{run.run_dir / runlog.EVENTS_FILE}: no run_start: not an aiperf_mpi event log")
    scored = set(run.scored)
    last = run.segments[-1]
    if last.stop is None:
        yield problem(END, f"segment {last.number} has no run_stop: the run was killed or its run_stop was removed")
    elif last.number not in scored:
        yield problem(END, f"segment {last.number} has no score event after its run_stop")
    for segment in run.segments[:-1]:
        if segment.stop is not None and segment.number not in scored:
            yield problem(END, f"segment {segment.number} stopped without a score event")
    stops = sum(s.stop is not None for s in run.segments)
    yield summary(f"{len(run.segments)} segment(s), {stops} closed by run_stop, {sum(run.scored.values())} score "
                  "event(s)")


# ------------------------------------------------------------------------------------------------ epochs


def epochs_in_segments(task: TaskUnit) -> Findings:
    """every epoch follows its task's `model_proposed` in the same segment and group, is numbered 1, 2, … within
    its task, and none comes after the task's `model_done`/`model_failed`; a task ends once, and only a
    `model_failed` may end a task never proposed (its search found no child)"""
    for repeat in task.repeats:
        yield problem(repeat.number, f"task {task.task} proposed twice")
    for place, epoch in enumerate(task.epochs, start=1):
        event, segment = epoch.event, epoch.segment
        number = event["epoch"]
        where = f"task {task.task} epoch {number}"
        if task.open.segment != segment.number:
            yield problem(epoch.number, f"{where}: logged in segment {segment.number}, its task was proposed in "
                                        f"segment {task.open.segment}")  # fmt: skip
        if event["group"] != task.group:
            yield problem(epoch.number, f"{where}: group {event['group']}, its task was given to group {task.group}")
        if number != place:
            yield problem(epoch.number, f"{where}: follows epoch {place - 1} of its task")
        if event[runlog.TIME] < segment.start:
            yield problem(epoch.number, f"{where}: logged before its segment's run_start")
    if task.end is not None and task.end.event["group"] != task.group:
        end = task.end.event
        yield problem(task.end.number, f"task {task.task}: {end[runlog.EVENT]} from group {end['group']}, its task "
                                       f"was given to group {task.group}")  # fmt: skip


def stray_epochs(event: StrayEvent) -> Findings:
    """(epochs in segments) an epoch, an end or a proposal of a task that was not open"""
    logged, name = event.event, event.event[runlog.EVENT]
    task = logged["task"]
    if name == runlog.MODEL_PROPOSED:
        yield problem(event.number, f"task {task} proposed twice")
    elif name == runlog.EPOCH:
        why = "comes after its model_done/model_failed" if event.ended else "has no model_proposed before it"
        yield problem(event.number, f"task {task} epoch {logged['epoch']}: {why}")
    elif event.ended or name != runlog.MODEL_FAILED:  # a model_failed of a task never proposed: no child was found
        why = "after its end" if event.ended else "without a model_proposed"
        yield problem(event.number, f"task {task}: {name} {why}")


def epochs_counted(run: RunUnit) -> Findings:
    """(epochs in segments) what was judged"""
    yield summary(f"{run.epochs} epochs of {run.tasks} tasks: each inside its segment, after its proposal, none "
                  "after its model's end")  # fmt: skip


# ------------------------------------------------------------------------------------------------ graph files


def graph_files(task: TaskUnit) -> Findings:
    """each model's graph is where its `model_proposed` says, inside the run directory: a whole line of its
    segment's appended file (`graph_file` `graphs/segment-N.jsonl`, `graph_offset`, `graph_bytes`; a file cut
    before the line's newline is named), no two models at the same line; or, in a run from before the appended
    file, the whole of `graphs/task-N.json`. Its sha256 equals the `graph_sha256` logged at `model_proposed`, it
    is the graph its `model_done` records when that carries one (runs logged before each graph was stored once;
    since then `model_done` carries none), and its tunable kernels are its hyper-parameters' `kernel_size`. No
    child (a proposal with a parent) has the graph of a proposal the master knew of — one of its segment, or of a
    model that had ended before it — since the master answers Duplicate to those; a seed may come twice"""
    at, graph, name = task.proposal.number, task.graph, task.task
    yield count("graphs")
    if graph.error:
        yield problem(at, f"task {name}: {graph.error}")
    if graph.data is not None:
        if task.place_owner is not None:
            yield problem(at, f"task {name}: {graph.place} is task {task.place_owner[0]}'s graph")
        logged = task.proposal.event.get("graph_sha256")
        if logged is None:
            yield count("unhashed")
        elif logged != graph.sha256:
            yield problem(at, f"task {name}: {graph.place} has sha256 {graph.sha256[:16]}…, the log recorded "
                              f"{str(logged)[:16]}… (the file was changed)")  # fmt: skip
        else:
            yield count("hashes")
        if graph.text is None:
            yield problem(at, f"task {name}: {graph.place} is not UTF-8 text")
        if task.seen_as is not None and task.proposal.event.get("parent") is not None:
            yield problem(at, f"task {name}: its graph is task {task.seen_as[0]}'s, which the master had seen: it "
                              "accepts no child twice (a duplicate)")  # fmt: skip
    if task.counted_at is not None:  # named once, at the event it was counted for
        state = task.open
        kernel, stored = state.kernel, state.stored_kernels
        if state.counts is not None and kernel is not None and stored not in ([], [kernel]):
            # the leader stores the graph it tuned
            yield problem(task.counted_at, f"task {name}: the graph file's tunable kernels are {stored}, its "
                                           f"hparams' kernel_size {kernel}")  # fmt: skip
        elif state.counts is None and graph.text is not None:
            yield problem(task.counted_at, f"task {name}: {state.count_error}")
    end = task.end
    if end is not None and end.event[runlog.EVENT] == runlog.MODEL_DONE:
        recorded = end.event["model"].get("graph")
        if isinstance(recorded, str) and graph.text is not None:
            yield count("cross-checked")
            if recorded != graph.text:
                yield problem(end.number, f"task {name}: {graph.place} is not the graph its model_done records")


def graph_files_counted(run: RunUnit, counted: Counter) -> Findings:
    """(graph files) what was judged, and what an older log does not record"""
    # a model_done carries no graph since the graph is logged once (in its graphs file); an older run's does, and
    # it must be the graph file's
    cross = counted["cross-checked"]
    yield summary(f"{counted['graphs']} graph files: {counted['hashes']} sha256 as logged"
                  + (f", {cross} equal to their model_done's graph" if cross else ""))  # fmt: skip
    if counted["unhashed"]:
        yield missing(END, f"{counted['unhashed']} of {counted['graphs']} model_proposed events have no graph_sha256 "
                           "(a log older than the field)")  # fmt: skip


def lineage(task: TaskUnit) -> Findings:
    """each graph file is its graph rebuilt from what its proposal logs ([below](#lineage)): the seed model (`seed`,
    which must be the configuration's `seed_model`) or its parent model's stored graph with the logged morphisms
    (`morphs`, 1 to 3 as the search chains them, each one the search could make), tuned to its `kernel_size`;
    layers, their attributes and edges equal; the parent logged before the child"""
    rebuilt = task.lineage  # rebuilt once, when its proposal came (analysis.verify.lineage.rebuild_proposal)
    yield count("proposals")
    if rebuilt.problem:
        yield problem(task.proposal.number, rebuilt.problem)
    if rebuilt.rebuilt:
        yield count("rebuilt")
    if rebuilt.unrecorded:
        yield count("unrecorded")


def lineage_counted(run: RunUnit, counted: Counter) -> Findings:
    """(lineage) what was judged, and what older logs do not record"""
    proposals = counted["proposals"]
    yield summary(f"{counted['rebuilt']} of {proposals} graph files rebuilt from the seed model, the logged "
                  "morphisms and kernel sizes")  # fmt: skip
    if counted["unrecorded"]:
        yield missing(END, f"{counted['unrecorded']} of {proposals} model_proposed events record neither a seed nor "
                           "morphisms (a log older than the fields): their graphs cannot be rebuilt")  # fmt: skip


# ------------------------------------------------------------------------------------------------ ops recount


def ops_recount(task: TaskUnit) -> Findings:
    """each epoch recounted with the package's counter ([counting.md](counting.md)): the task's graph at its
    `kernel_size`, the epoch's logged `train_samples` and `validation_samples`, and the global batch = `batch_size`
    × the ranks of its group in the segment's `layout`; `ops`, `ops_train`, `ops_update`, `ops_validation` and
    `steps` equal as integers"""
    counts, batch = task.open.counts, task.hparams.get("batch_size")
    for epoch in task.epochs:
        event, at = epoch.event, epoch.number
        where = f"task {event['task']} epoch {event['epoch']}"
        if counts is None:
            yield problem(at, f"{where}: not recounted: {task.open.count_error}")
            continue
        ranks = epoch.ranks  # the layouts as of the epoch
        if not isinstance(batch, int) or ranks is None:
            known = "not in its segment's layout" if epoch.laid_out else "its segment has no layout"
            yield problem(at, f"{where}: the global batch is unknown (batch_size {batch!r}, group {task.group}: "
                              f"{known})")  # fmt: skip
            continue
        try:
            recounted = epoch_ops(counts, event["train_samples"], event["validation_samples"], batch * ranks)
        except ValueError as exc:
            yield problem(at, f"{where}: {exc}")
            continue
        expected = {"ops": recounted.total, "ops_train": recounted.train, "ops_update": recounted.update,
                    "ops_validation": recounted.validation, "steps": recounted.steps}  # fmt: skip
        wrong = differences(event, expected, EPOCH_OPS_FIELDS)
        if wrong:
            yield problem(at, f"{where}: " + "; ".join(wrong))
        else:
            yield count("recounted")


def ops_counted(run: RunUnit, counted: Counter) -> Findings:
    """(ops recount) what was judged"""
    yield summary(f"{counted['recounted']} of {run.epochs} epochs recounted exactly ({', '.join(EPOCH_OPS_FIELDS)})")


# ------------------------------------------------------------------------------------------------ model records


def model_records(task: TaskUnit) -> Findings:
    """each `model_done` lists exactly its task's epoch events (field by field), its `accuracy` is the best of
    them, its `ops.total` their sum, its per-sample counts the recount's, its `hparams` its proposal's; model ids
    run 0, 1, 2, …"""
    end = task.end
    if end is None:
        return
    yield from _model_id(end)
    if end.event[runlog.EVENT] != runlog.MODEL_DONE:
        return
    model = end.event["model"]
    problems = []
    epochs = model.get("epochs")
    epochs = [e for e in epochs if isinstance(e, dict)] if isinstance(epochs, list) else []
    logged = task.open.epochs
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
    if not same(model.get("hparams"), task.hparams):
        problems.append("its hparams differ from its proposal's")
    ops = model.get("ops") if isinstance(model.get("ops"), dict) else {}
    if ops and not same(ops.get("total"), sum(e["ops"] for e in logged)):
        problems.append(f"ops total {ops.get('total')} is not the sum of its epochs' "
                        f"({sum(e['ops'] for e in logged)})")  # fmt: skip
    counts = task.open.counts
    if counts is not None and ops:
        expected = {"forward_per_sample": counts.forward_eval, "backward_per_sample": counts.backward,
                    "update_per_step": counts.update, "params": counts.params}  # fmt: skip
        problems += [f"ops {line}" for line in differences(ops, expected, tuple(expected))]
    graph = model.get("graph")
    if "graph" in model and not isinstance(graph, str):  # an older run's record carries its graph as text
        problems.append(f"its graph is {type(graph).__name__}, not the graph's JSON text")
    if isinstance(graph, str) and task.graph.text is not None:
        yield count("graph carried")  # compared in the graph files row
    where = f"task {task.task} (model {model.get('id')})"
    for line in problems:
        yield problem(end.number, f"{where}: {line}")
    if not problems:
        yield count("checked")


def stray_model_ids(event: StrayEvent) -> Findings:
    """(model records) an end of a task that was not open still takes the next model id"""
    if isinstance(event.next_id, int):
        yield from _model_id(event)


def _model_id(end: EndLogged | StrayEvent) -> Findings:
    logged = end.event["model"].get("id") if end.event[runlog.EVENT] == runlog.MODEL_DONE else end.event["model"]
    if logged != end.next_id:
        yield problem(end.number, f"task {end.event['task']}: model id {logged}, the next id is {end.next_id}")


def records_counted(run: RunUnit, counted: Counter) -> Findings:
    """(model records) what was judged"""
    carried = counted["graph carried"]
    yield summary(f"{counted['checked']} model_done records equal their epochs, hparams and counts"
                  + (f"; {carried} carry their graph too (an older log: compared in the graphs row)"
                     if carried else ""))  # fmt: skip
