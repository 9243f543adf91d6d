"""The family ``best``: ``best/`` against the event log and the graph files (its row:
:data:`analysis.verify.registry.FAMILIES`): the exported model is the run's best, as the log and a recount
of its graph say.

Its rule, :func:`best_export`, is a plain function of the run unit (:mod:`analysis.verify.units`).  What it needs of
the log's order the unit stream kept as it read the log (:class:`analysis.verify.units.BestLogged`): the export as
it was before the log was read, the latest proposal and model record of each task it names (its task and its
lineage's), which of its lineage's model ids a ``model_done`` logged, the latest ``run_start``'s configuration, and
the best trained model (ties: the earliest) as of the latest ``run_stop``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from aiperf_mpi.graph.model import GraphError, from_json, to_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results.graphs import read_graph
from aiperf_mpi.results.precisions import logged_precision
from analysis.checks import is_regular_file, same, short
from analysis.verify.units import END, BestLogged, Findings, RunUnit, note, problem, summary

BEST_RULE = "rule: best/ describes the run's best model"
BEST = "best"


def best_export(run: RunUnit) -> Findings:
    """`best/metadata.json`: its task is the best trained model (ties: the earliest) as of the log's last
    `run_stop`; model id, accuracy (the best epoch's), the saved epoch's accuracy, samples and number,
    hyper-parameters, epochs, data set, precision and each lineage step (task, model, parent, description, accuracy,
    hyper-parameters; each step's parent the previous step's model, the first without one) are the log's;
    `ops_per_sample`, `params`, `best/ops.json` and `best/graph.json` equal the recount of the task's graph file at
    its kernel size. No `best/` (a run ended by a signal, synthetic data, `--no-report`; `python -m aiperf_mpi.export
    --single-copy RUN_DIR` makes it later): *not present*, noted, not failed. A `best/` an earlier segment exported,
    left by a resume that ended by a signal or with `--no-report` (the run says so), describes that segment's best
    model and fails this row when a later segment trained a better one: export again. A run that meets every rule of
    its score is *valid* only with its `best/`: without it the verdict names the rule `best model` (a reviewer
    re-evaluates that model: `--reevaluate`)"""
    logged = run.best
    if logged is None:  # no log was read
        return
    exported = logged.exported
    if not exported.present:
        yield note(END, "not present: the run published no best model (ended by a signal, synthetic data, "
                        "--no-report, or an export that failed)")  # fmt: skip
        yield summary("not present")
        return
    if exported.unreadable:
        yield problem(END, f"best/metadata.json is not readable: {exported.unreadable[:160]} ({BEST_RULE})")
        return
    task = exported.task
    if task is None:
        yield problem(END, f"best/metadata.json has no task ({BEST_RULE})")
        return
    meta: dict = exported.meta  # type: ignore[assignment]
    yield from _against_the_log(run.run_dir, meta, task, logged)
    yield summary(f"task {task}: metadata.json, ops.json and graph.json against the log and the recount of its graph")


def _against_the_log(run_dir: Path, meta: dict, task: int, logged: BestLogged) -> Findings:
    def wrong(field: str, theirs: object, mine: object, what: str = "the log") -> Findings:
        if not same(theirs, mine):
            yield problem(END, f"best/metadata.json: task {task}: {field} {short(theirs)}, {what} {short(mine)} "
                               f"({BEST_RULE})")  # fmt: skip

    best = logged.best_at_stop if logged.stopped else logged.best
    if best is None:
        yield problem(END, f"best/metadata.json: task {task}, but no model finished training in the log ({BEST_RULE})")
    elif best[1] != task:
        yield problem(END, f"best/metadata.json: task {task}, the log's best model is task {best[1]} (accuracy "
                           f"{best[0]:g}) ({BEST_RULE})")  # fmt: skip
    record, proposal = logged.records.get(task), logged.proposals.get(task)
    if record is None or proposal is None:
        yield problem(END, f"best/metadata.json: task {task} has no model_proposed and model_done in the log "
                           f"({BEST_RULE})")  # fmt: skip
        return
    yield from wrong("model_id", meta.get("model_id"), record.get("id"))
    accuracy = meta.get("accuracy") if isinstance(meta.get("accuracy"), dict) else {}
    yield from wrong("accuracy.best_epoch", accuracy.get("best_epoch"), record.get("accuracy"), "its model_done")
    epochs = [e for e in record.get("epochs") or [] if isinstance(e, dict)]
    saved = _saved_epoch(record, epochs)
    for field, key in (("weights", "val_accuracy"), ("validation_samples", "validation_samples"),
                       ("epoch", "epoch")):  # fmt: skip
        yield from wrong(f"accuracy.{field}", accuracy.get(field), saved.get(key), "its saved epoch")
    yield from wrong("hparams", meta.get("hparams"), record.get("hparams"), "its model_done")
    training = meta.get("training") if isinstance(meta.get("training"), dict) else {}
    yield from wrong("training.epochs", training.get("epochs"), len(epochs))
    yield from wrong("training.precision", training.get("precision"), logged_precision(logged.config), "the config")
    dataset = meta.get("dataset") if isinstance(meta.get("dataset"), dict) else {}
    yield from wrong("dataset.name", dataset.get("name"), str(logged.config.get("dataset", "")), "the config")
    yield from _lineage(meta, task, logged)
    yield from _recount(run_dir, meta, task, proposal, record)


def _saved_epoch(record: dict, epochs: list[dict]) -> dict:
    """The epoch whose weights were saved: the logged ``weights_epoch``, else the last (as the export says)."""
    timings = record.get("timings") if isinstance(record.get("timings"), dict) else {}
    chosen = timings.get("weights_epoch")
    for epoch in epochs:
        if chosen is not None and epoch.get("epoch") == chosen:
            return epoch
    return epochs[-1] if epochs else {}


def _lineage(meta: dict, task: int, logged: BestLogged) -> Findings:
    steps = meta.get("lineage")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
        yield problem(END, f"best/metadata.json: task {task}: no lineage ({BEST_RULE})")
        return
    if steps[-1].get("task") != task:
        yield problem(END, f"best/metadata.json: task {task}: its lineage ends at task {short(steps[-1].get('task'))} "
                           f"({BEST_RULE})")  # fmt: skip
    for index, step in enumerate(steps):
        where = f"best/metadata.json: task {task}: lineage step {index + 1}"
        if index + 1 < len(steps) and steps[index + 1].get("parent_model_id") != step.get("model_id"):
            yield problem(END, f"{where} is model {short(step.get('model_id'))}, the next step's parent "
                               f"{short(steps[index + 1].get('parent_model_id'))} ({BEST_RULE})")  # fmt: skip
        if step.get("task") is None:  # the export's '(not in the log)': the log must indeed lack that model
            if index or step.get("model_id") in logged.seen_ids:
                yield problem(END, f"{where}: model {short(step.get('model_id'))} said not to be in the log, which "
                                   f"has it ({BEST_RULE})")  # fmt: skip
            continue
        proposal, record = logged.proposals.get(step["task"]), logged.records.get(step["task"])
        if proposal is None or record is None:
            yield problem(END, f"{where}: task {short(step['task'])} has no model_proposed and model_done in the log "
                               f"({BEST_RULE})")  # fmt: skip
            continue
        mine = {"model_id": record.get("id"), "parent_model_id": proposal.get("parent"),
                "description": str(proposal.get("description", "")), "accuracy": record.get("accuracy"),
                "hparams": record.get("hparams")}  # fmt: skip
        for field, value in mine.items():
            if not same(step.get(field), value):
                yield problem(END, f"{where} (task {step['task']}): {field} {short(step.get(field))}, the log "
                                   f"{short(value)} ({BEST_RULE})")  # fmt: skip
    if steps[0].get("task") is not None and steps[0].get("parent_model_id") is not None:
        yield problem(END, f"best/metadata.json: task {task}: its lineage starts at a model with a parent "
                           f"({BEST_RULE})")  # fmt: skip


def _recount(run_dir: Path, meta: dict, task: int, proposal: dict, record: dict) -> Findings:
    """Operations per sample and the graph, from the task's graph file as the trainer built it."""
    try:
        graph = from_json(read_graph(run_dir, proposal))
        kernel = (record.get("hparams") or {}).get("kernel_size")
        graph = graph if kernel is None else with_kernel_size(graph, kernel)
        ops = count_ops(graph)
    except (ValueError, GraphError, KeyError, TypeError) as exc:  # GraphFileError is a ValueError
        yield problem(END, f"best/: task {task}: its graph file cannot be recounted: "
                           f"{' '.join(str(exc).split())[:160]} ({BEST_RULE})")  # fmt: skip
        return
    per_sample = meta.get("ops_per_sample") if isinstance(meta.get("ops_per_sample"), dict) else {}
    recounted = {"forward": ops.forward_eval, "forward_train": ops.forward_train, "backward": ops.backward,
                 "training": ops.forward_train + ops.backward, "update_per_step": ops.update, "macs": ops.macs}
    for field, mine in recounted.items():
        if not same(per_sample.get(field), mine):
            yield problem(END, f"best/metadata.json: task {task}: ops_per_sample.{field} "
                               f"{short(per_sample.get(field))}, recounted {mine} ({BEST_RULE})")  # fmt: skip
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    if not same(params, {"total": ops.params, "trainable": ops.trainable_params}):
        yield problem(END, f"best/metadata.json: task {task}: params {short(params)}, recounted {ops.params} "
                           f"({ops.trainable_params} trainable) ({BEST_RULE})")  # fmt: skip
    yield from _file_equals(run_dir, "ops.json", task, ops.to_dict(), json.loads)
    yield from _file_equals(run_dir, "graph.json", task, to_json(graph), lambda text: text.strip())


def _file_equals(run_dir: Path, name: str, task: int, mine: object, read: Callable[[str], object]) -> Findings:
    path = run_dir / BEST / name
    if not is_regular_file(path):
        if name == "ops.json":  # written with metadata.json, always
            yield problem(END, f"best/ops.json is missing beside best/metadata.json ({BEST_RULE})")
        return
    try:
        theirs = read(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        theirs = None
    if not same(theirs, mine):
        yield problem(END, f"best/{name}: task {task}: not the recount of its graph file ({BEST_RULE})")
