"""``--resume``: the master's state rebuilt from the run's model (its event log, read once).

MPI-free: the log is the only input, so a test (or a reviewer) can rebuild
exactly what a resumed master starts from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from aiperf_mpi.errors import UsageError
from aiperf_mpi.results.graphs import GraphFileError
from aiperf_mpi.results.logmodel import Done, Failure, RunModel, Task, read_model
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import FAILED, ModelRecord
from aiperf_mpi.search.view import MasterHistory, ViewBounds

GRAPHS_AT_ONCE = 1024
"""ended tasks whose graphs :func:`history_from_log` reads together (their records are held meanwhile)"""


@dataclass
class Resumed:
    """The master's state rebuilt from a run's log (``--resume``)."""

    history: MasterHistory
    next_task: int
    weights: dict[int, str]
    """model id → weights file the log says is still in the run directory"""


def history_from_log(run_dir: Path, bounds: ViewBounds | None = None) -> Resumed:
    """Rebuild the master's history, task count and kept weights files from the run's model, read streamed.

    The master's history holds what it holds in a run (the view, every graph
    hash): each model enters it soon after its task ends in the log, its
    graph read then, where its proposal placed it, and the model forgets the
    task (``keep_ended=False``): rank 0's memory at a resume of 10⁵ models is
    the history's, not the records'.  A weights file is still there unless a
    ``weights_removed`` event says otherwise; the master's first sweep
    removes the ones no longer inheritable (a resumed run has no task in
    flight and no group holding candidates).
    """
    history = MasterHistory(bounds or SearchConfig().view_bounds())
    weights: dict[int, str] = {}
    ended: list[tuple[Done | Failure, Task]] = []
    """tasks ended since the last ``enter``: their graphs are read in one burst, not between log lines (the
    interleaving costs a tenth more CPU at 10⁵ models)"""
    waiting: dict[int, tuple[ModelRecord, str | None]] = {}
    """records ahead of a model the log has not ended yet (none, normally: ids are taken in log order)"""

    def enter(model: RunModel) -> None:
        for end, task in ended:
            record, key = logged_record(run_dir, model, end, task)
            if record.id < history.next_id or record.id in waiting:
                raise UsageError(f"--resume {run_dir}: the log ends model {record.id} twice (task {end.task})")
            waiting[record.id] = (record, key)
        ended.clear()
        while history.next_id in waiting:
            record, key = waiting.pop(history.next_id)
            history.append(record, key)
            if record.weights:
                weights[record.id] = record.weights

    def take(event: dict, model: RunModel) -> None:
        ended.extend((end, model.tasks[end.task]) for end in chain(model.models, model.failures))
        if len(ended) >= GRAPHS_AT_ONCE:
            enter(model)

    model = read_model(run_dir, take, require_start=False, keep_ended=False)
    enter(model)
    if waiting:
        raise UsageError(f"--resume {run_dir}: the log has no model {history.next_id} but has model {min(waiting)}")
    kept = {model_id: name for model_id, name in weights.items() if model_id not in model.removed_models}
    return Resumed(history, model.next_task, kept)


def model_records(run_dir: Path, model: RunModel) -> Iterator[tuple[ModelRecord, str | None]]:
    """Every model of a whole model (read keeping its ended tasks), in id order, with its graph hash when the log
    gives one (:func:`logged_record`); UsageError (one line) when a model is missing."""
    ended: dict[int, Done | Failure] = {}
    for done in model.models:
        _check(run_dir, done)
        ended[done.id] = done
    for failure in model.failures:
        ended[failure.model] = failure  # type: ignore[index]
    for model_id in range(len(ended)):
        end = ended.get(model_id)
        if end is None:
            raise UsageError(f"--resume {run_dir}: the log has no model {model_id} but has model "
                             f"{min(i for i in ended if i > model_id)}")  # fmt: skip
        yield logged_record(run_dir, model, end, model.tasks[end.task])


def logged_record(run_dir: Path, model: RunModel, end: Done | Failure, task: Task) -> tuple[ModelRecord, str | None]:
    """A model as the history's record, with its graph hash when the log gives one.

    A finished model's graph is read where its task's ``model_proposed`` placed it (the bytes it hashed), or
    from its ``model_done`` record in a log from before the graph was logged once, one at a time (10⁵ graphs
    are not held at once); a failed model is a placeholder.  UsageError (one line) when its record or graph
    cannot be read.
    """
    if isinstance(end, Failure):
        return ModelRecord(end.model, None, "{}", status=FAILED, timings={"error": end.full_reason}), end.graph_hash  # type: ignore[arg-type]
    _check(run_dir, end)
    graph = _graph(run_dir, model, end, task)
    record = ModelRecord(end.id, end.parent, graph, status=end.status, accuracy=end.accuracy,  # type: ignore[arg-type]
                         predicted_accuracy=end.predicted_accuracy, weights=end.weights)  # type: ignore[arg-type]
    return record, None


def _check(run_dir: Path, done: Done) -> None:
    """A ``model_done`` the history can take: it has a model record, and a graph it carries is a string."""
    if done.id < 0:
        raise UsageError(f"--resume {run_dir}: a model_done of task {done.task} has no model record")
    if done.inline_graph == "not a string":
        raise UsageError(f"--resume {run_dir}: task {done.task}'s model_done has a graph that is not a string")


def _graph(run_dir: Path, model: RunModel, done: Done, task: Task) -> str:
    """A finished task's graph, read where its ``model_proposed`` placed it (the bytes it hashed)."""
    if not done.inline_graph and task.proposal is None:
        raise UsageError(f"--resume {run_dir}: task {done.task} has a model_done but no model_proposed")
    try:
        return model.graph_text(task)
    except GraphFileError as exc:
        raise UsageError(f"--resume {run_dir}: task {done.task}'s graph: {exc}") from None
