"""The family ``best``: ``best/`` against the event log and the graph files (its row:
:data:`analysis.verify.registry.FAMILIES`): the exported model is the run's best, as the log and a recount
of its graph say."""

from __future__ import annotations

import json
import math

from aiperf_mpi.graph.model import GraphError, from_json, to_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results.graphs import read_graph
from aiperf_mpi.results.precisions import logged_precision
from analysis.checks import Check, Run, is_regular_file, read_json, same, short

BEST_RULE = "rule: best/ describes the run's best model"
BEST = "best"


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
