"""``--resume``: the master's state rebuilt from the run's model (its event log, read once).

MPI-free: the log is the only input, so a test (or a reviewer) can rebuild
exactly what a resumed master starts from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.errors import UsageError
from aiperf_mpi.results.graphs import GraphFileError
from aiperf_mpi.results.logmodel import Done, Failure, RunModel, read_model
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
    """Rebuild the master's history, task count and kept weights files from the run's model.

    The master's history holds what it holds in a run (the view, every graph
    hash); the model holds a few fields per task, not the records' epochs or
    graphs: each graph is read once, where its proposal placed it, as its
    model enters the history.  A weights file is still there unless a
    ``weights_removed`` event says otherwise; the master's first sweep removes
    the ones no longer inheritable (a resumed run has no task in flight and no
    group holding candidates).
    """
    model = read_model(run_dir, require_start=False)
    history = MasterHistory(bounds or SearchConfig().view_bounds())
    weights: dict[int, str] = {}
    for record, key in model_records(run_dir, model):
        history.append(record, key)
        if record.weights and record.id not in model.removed_models:
            weights[record.id] = record.weights
    return Resumed(history, model.next_task, weights)


def model_records(run_dir: Path, model: RunModel) -> Iterator[tuple[ModelRecord, str | None]]:
    """Every model of the log as the history's record, in id order, with its graph hash when the log gives one.

    A finished model's graph is read where its task's ``model_proposed`` placed it (the bytes it hashed), or
    from its ``model_done`` record in a log from before the graph was logged once, one at a time (10⁵ graphs
    are not held at once); a failed model is a placeholder.  UsageError (one line) when a model is missing or
    its record or graph cannot be read.
    """
    ended: dict[int, Done | Failure] = {}
    for done in model.models:
        if done.id < 0:
            raise UsageError(f"--resume {run_dir}: a model_done of task {done.task} has no model record")
        if done.inline_graph == "not a string":
            raise UsageError(f"--resume {run_dir}: task {done.task}'s model_done has a graph that is not a string")
        ended[done.id] = done
    for failure in model.failures:
        ended[failure.model] = failure  # type: ignore[index]
    for model_id in range(len(ended)):
        end = ended.get(model_id)
        if end is None:
            raise UsageError(f"--resume {run_dir}: the log has no model {model_id} but has model "
                             f"{min(i for i in ended if i > model_id)}")  # fmt: skip
        if isinstance(end, Failure):
            yield ModelRecord(model_id, None, "{}", status=FAILED, timings={"error": end.full_reason}), end.graph_hash
            continue
        graph = _graph(run_dir, model, end)
        record = ModelRecord(model_id, end.parent, graph, status=end.status, accuracy=end.accuracy,  # type: ignore[arg-type]
                             predicted_accuracy=end.predicted_accuracy, weights=end.weights)  # type: ignore[arg-type]
        yield record, None


def _graph(run_dir: Path, model: RunModel, done: Done) -> str:
    """A finished task's graph, read where its ``model_proposed`` placed it (the bytes it hashed)."""
    task = model.tasks[done.task]
    if not done.inline_graph and task.proposal is None:
        raise UsageError(f"--resume {run_dir}: task {done.task} has a model_done but no model_proposed")
    try:
        return model.graph_text(task)
    except GraphFileError as exc:
        raise UsageError(f"--resume {run_dir}: task {done.task}'s graph: {exc}") from None
