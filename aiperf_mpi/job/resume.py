"""``--resume``: the master's state rebuilt from a run's event log, streamed.

MPI-free: the log is the only input, so a test (or a reviewer) can rebuild
exactly what a resumed master starts from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.errors import UsageError
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import GraphFileError, read_logged_graph
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import FAILED, ModelRecord
from aiperf_mpi.search.view import MasterHistory, ViewBounds


@dataclass
class Resumed:
    """The master's state rebuilt from a run's log (``--resume``)."""

    history: MasterHistory
    next_task: int
    weights: dict[int, str]
    """model id → weights file the log says is still in the run directory"""


def history_from_log(run_dir: Path, bounds: ViewBounds | None = None) -> Resumed:
    """Rebuild the master's history, task count and kept weights files by streaming the log.

    Memory is what the master holds in a run (the view, every graph hash),
    not the records: the log of a long run has 10⁵ models.  A weights file
    is still there unless a ``weights_removed`` event says otherwise; the
    master's first sweep removes the ones no longer inheritable (a resumed
    run has no task in flight and no group holding candidates).
    """
    history = MasterHistory(bounds or SearchConfig().view_bounds())
    weights: dict[int, str] = {}
    waiting: dict[int, tuple[ModelRecord, str | None]] = {}  # a record ahead of its predecessor (none, normally)
    placed: dict[int, dict] = {}
    """task → its model_proposed, until its end: where its graph lies (the tasks in flight, not the run's)"""
    next_task = 0
    for event in runlog.EventStream(run_dir):
        kind = event.get(runlog.EVENT)
        if "task" in event:
            next_task = max(next_task, int(event["task"]) + 1)
        if kind == runlog.MODEL_PROPOSED:
            placed[event.get("task")] = event
        elif kind == runlog.MODEL_DONE:
            record = logged_record(run_dir, event, placed.pop(event.get("task"), None))
            waiting[record.id] = (record, None)
        elif kind == runlog.MODEL_FAILED:
            placed.pop(event.get("task"), None)
            record = ModelRecord(event["model"], None, "{}", status=FAILED, timings={"error": event["reason"]})
            waiting[record.id] = (record, event.get("graph_hash"))
        elif kind == runlog.WEIGHTS_REMOVED:
            for model_id in event.get("models", []):
                weights.pop(model_id, None)
        while history.next_id in waiting:
            record, key = waiting.pop(history.next_id)
            history.append(record, key)
            if record.weights:
                weights[record.id] = record.weights
    if waiting:
        raise UsageError(f"--resume {run_dir}: the log has no model {history.next_id} but has model {min(waiting)}")
    return Resumed(history, next_task, weights)


def logged_record(run_dir: Path, done: dict, proposed: dict | None) -> ModelRecord:
    """The record of a ``model_done`` event, its graph read where the task's ``model_proposed`` placed it.

    A run's log carries each graph once, in its segment's graphs file; a
    ``model_done`` logged before that change carries its graph itself.
    """
    fields = done.get("model")
    if not isinstance(fields, dict):
        raise UsageError(f"--resume {run_dir}: a model_done of task {done.get('task')} has no model record")
    if "graph" not in fields:
        fields = {**fields, "graph": _graph(run_dir, done.get("task"), proposed)}
    elif not isinstance(fields["graph"], str):
        raise UsageError(f"--resume {run_dir}: task {done.get('task')}'s model_done has a graph that is not a string")
    return ModelRecord.from_dict(fields)


def _graph(run_dir: Path, task: object, proposed: dict | None) -> str:
    """A finished task's graph, read where its ``model_proposed`` placed it (the bytes it hashed)."""
    if proposed is None:
        raise UsageError(f"--resume {run_dir}: task {task} has a model_done but no model_proposed")
    try:
        return read_logged_graph(run_dir, proposed)
    except GraphFileError as exc:
        raise UsageError(f"--resume {run_dir}: task {task}'s graph: {exc}") from None
