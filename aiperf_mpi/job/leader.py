"""A group leader's loop: the search's view of the history, search, tuning, training, reporting.

The leader asks the master for work, applies the view update it receives
(:class:`~aiperf_mpi.search.view.SearchView`: the models its search reads,
not a replica of the history), chooses the child (the seed while nothing is
trained yet, else the search's ``ask()``), chooses the hyper-parameters (the
tuner's ``ask()``), proposes the child to the master and trains it once the
master accepts it (the master knows every graph of the run and answers
Duplicate for one seen before: the leader then asks its search again), has
its group train it (reporting every epoch as it completes) and sends the
result.  What trains is a *runner*:
:class:`GroupRunner` (real Horovod training on the group) in a run; tests
substitute a fast simulated one — the loop, the search, the tuner and the
transport stay real.
"""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import networkx as nx
from mpi4py import MPI

from aiperf_mpi.config import RunConfig, xla_enabled
from aiperf_mpi.graph.model import from_json, to_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.protocol import Accepted, Duplicate, EpochDone, Failed, Proposed, Ready, Result, Stop, Work
from aiperf_mpi.search.bayesian import BayesianSearch, RandomSearch, SearchConfig
from aiperf_mpi.search.history import graph_hash
from aiperf_mpi.search.hpo import WARMUP_ROUNDS, HParams, Tuner, batch_choices
from aiperf_mpi.search.predict import predict_final_accuracy
from aiperf_mpi.search.view import SearchView

PROPOSALS = 5
"""proposals per task at most: after this many Duplicate answers in a row the task fails"""


class ProtocolError(Exception):
    """The master sent what the protocol does not allow here: fatal, never a failed trial."""


@dataclass
class Task:
    """What a group trains in one round (broadcast from the leader to its group)."""

    task_id: int
    round: int
    graph: str
    hparams: HParams
    parent: int | None = None
    plan: list[dict] = field(default_factory=list)
    parent_weights: str = ""


@dataclass
class Outcome:
    """How a task ended, on the leader."""

    epochs: list[dict]
    stop_reason: str
    weights_file: str = ""
    failure: dict | None = None
    timings: dict = field(default_factory=dict)


class Runner(Protocol):
    def run(self, task: Task, on_epoch: Callable[[dict], None], should_stop: Callable[[], bool]) -> Outcome: ...

    def finish(self) -> None: ...


def leader_loop(
    channel,
    group: int,
    ranks: int,
    config: RunConfig,
    seed_graph: nx.DiGraph,
    runner: Runner,
    external_stop: Callable[[], str] = lambda: "",
    view: SearchView | None = None,
    peak: dict | None = None,
    max_batch: int | None = None,
    search_config: SearchConfig | None = None,
) -> None:
    """Serve the master until it says Stop; ``view`` is the (empty) view to keep, for a caller to inspect.

    ``peak`` is the group's measured matrix-multiply throughput, reported
    with Ready so the master logs it before any work.  ``max_batch`` is the
    largest per-rank batch the data allows (training samples per rank): the
    tuner never proposes more, since such a trial could not take one step.
    ``search_config`` must be the master's (it decides which weights it keeps).
    """
    search_config = search_config or SearchConfig()
    view = SearchView(search_config.view_bounds()) if view is None else view
    seed = config.seed * 100_003 + group
    if config.search == "bayesian":
        search = BayesianSearch(view, seed, search_config)
    else:
        search = RandomSearch(view, seed, search_config)
    batches = [b for b in batch_choices(seed_graph, int(config.device_memory_gb * 2**30))
               if max_batch is None or b <= max_batch]  # fmt: skip
    default = HParams(config.batch_size, 3)
    tuner = Tuner(config.hpo, sorted(set(batches) | {config.batch_size}), seed, default)
    channel.send(Ready(group, ranks, socket.gethostname(), peak))

    def should_stop() -> bool:
        return channel.stop_pending() or bool(external_stop())

    while True:
        message = channel.recv()
        if isinstance(message, Stop):
            view.apply(message.view)
            runner.finish()
            return
        if not isinstance(message, Work):
            raise RuntimeError(f"leader of group {group} got an unexpected {type(message).__name__}")
        view.apply(message.view)
        hparams = tuner.ask()
        started = time.monotonic()
        try:
            chosen = _choose(channel, message, view, search, seed_graph, hparams)
        except (RuntimeError, ValueError) as exc:  # no new architecture found, a bad morph: this task fails
            tuner.tell(hparams, None)
            channel.send(Failed(message.task_id, MPI.COMM_WORLD.Get_rank(), socket.gethostname(),
                                f"the search found no child: {type(exc).__name__}: {exc}",
                                traceback.format_exc()))  # fmt: skip
            continue
        graph_json, parent, plan, description, info = chosen
        search_time = time.monotonic() - started
        parent_weights = ""
        if parent is not None and config.inherit:
            parent_weights = view[parent].weights
        task = Task(message.task_id, message.round, graph_json, hparams, parent, plan, parent_weights)

        def report(epoch: dict, task_id: int = message.task_id) -> None:
            channel.send(EpochDone(task_id, epoch))

        outcome = runner.run(task, report, should_stop)
        timings = {**outcome.timings, "search": search_time}
        if outcome.failure is not None:
            tuner.tell(hparams, None)
            failure = outcome.failure
            channel.send(Failed(message.task_id, failure["rank"], failure["host"], failure["reason"],
                                failure.get("traceback", ""), parent, graph_json, hparams.to_dict(),
                                outcome.epochs))  # fmt: skip
            continue
        accuracies = [e["val_accuracy"] for e in outcome.epochs]
        accuracy = max(accuracies) if accuracies else None
        predicted = None
        if accuracies and message.round <= WARMUP_ROUNDS:
            predicted = predict_final_accuracy(accuracies, config.max_epochs)
        tuner.tell(hparams, accuracy)
        counts = count_ops(from_json(graph_json))
        ops = {
            "total": sum(e["ops"] for e in outcome.epochs),
            "forward_per_sample": counts.forward_eval,
            "backward_per_sample": counts.backward,
            "update_per_step": counts.update,
            "params": counts.params,
        }
        channel.send(Result(message.task_id, parent, graph_json, hparams.to_dict(), outcome.epochs, accuracy,
                            predicted, ops, timings, description, outcome.stop_reason, outcome.weights_file,
                            info))  # fmt: skip


def _choose(channel, work: Work, view: SearchView, search, seed_graph: nx.DiGraph, hparams: HParams) -> tuple:
    """The task's model, accepted by the master: (graph JSON, parent, plan, description, search info).

    Each proposal goes to the master, which answers Accepted or Duplicate;
    a duplicate's hash is remembered so the search skips it, and the search
    is asked again, :data:`PROPOSALS` times at most.  Raises RuntimeError
    when every proposal was a duplicate (the task fails, the run goes on).
    """
    started = time.monotonic()
    duplicates = 0
    for _ in range(PROPOSALS):
        if work.seed_model or not view.best(1):
            graph, parent, plan, description, info = seed_graph, None, [], "seed", {"strategy": "seed"}
        else:
            proposal = search.ask(kernel=hparams.kernel_size)
            graph, parent, plan, description, info = (
                proposal.graph, proposal.parent, proposal.plan, proposal.description, proposal.info
            )  # fmt: skip
        graph_json = to_json(with_kernel_size(graph, hparams.kernel_size))
        info = {**info, "search_seconds": time.monotonic() - started}
        if duplicates:
            info["duplicates"] = duplicates
        channel.send(Proposed(work.task_id, parent, graph_json, hparams.to_dict(), description, info))
        if isinstance(_answer(channel, work.task_id), Accepted):
            view.remember(graph_hash(graph_json))
            return graph_json, parent, plan, description, info
        duplicates += 1
        view.remember(graph_hash(graph_json))  # the tuned graph the master refused
        view.remember(graph_hash(to_json(graph)))  # and the search's untuned form of it, which it checks
    raise RuntimeError(f"no new architecture: the master had seen all {PROPOSALS} proposals for this task")


def _answer(channel, task_id: int) -> Accepted | Duplicate:
    """The master's answer to our proposal; a Stop that comes first is held for the loop to find."""
    held = []
    while True:
        message = channel.recv()
        if isinstance(message, Accepted | Duplicate) and message.task_id == task_id:
            channel.hold(held)
            return message
        if not isinstance(message, Stop):
            raise ProtocolError(f"a leader waiting for the answer to task {task_id} got {type(message).__name__}")
        held.append(message)


def _has_gpu() -> bool:
    """Whether TensorFlow sees a GPU on this rank (after the rank was pinned to its own)."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


class GroupRunner:
    """Real training: the leader broadcasts each task to its group, and every rank trains it."""

    def __init__(self, hvd, group_comm, source, config: RunConfig, run_dir: Path) -> None:
        from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

        self.comm = group_comm
        self.run_dir = run_dir
        self.trainer = GroupTrainer(
            hvd, group_comm, source,
            TrainConfig(max_epochs=config.max_epochs, patience=config.patience, min_delta=config.min_delta,
                        base_lr=config.base_lr, precision=config.precision, seed=config.seed,
                        xla=xla_enabled(config.xla, _has_gpu())),
        )  # fmt: skip

    def run(self, task: Task, on_epoch: Callable[[dict], None], should_stop: Callable[[], bool]) -> Outcome:
        """On the leader: hand the task to the group and train it together."""
        self.comm.bcast(task, root=0)
        return self._execute(task, on_epoch, should_stop)

    def finish(self) -> None:
        self.comm.bcast(None, root=0)

    def serve(self) -> None:
        """On the other ranks of the group: train whatever the leader broadcasts, until None."""
        while True:
            task = self.comm.bcast(None, root=0)
            if task is None:
                return
            self._execute(task, None, lambda: False)

    def _execute(self, task: Task, on_epoch, should_stop) -> Outcome:
        from aiperf_mpi.train.trainer import TrialFailed
        from aiperf_mpi.train.transfer import load_weights, save_weights

        started = time.monotonic()
        parent = None
        note = ""
        if self.comm.Get_rank() == 0 and task.parent_weights:
            path = self.run_dir / task.parent_weights
            if path.is_file():
                parent = (load_weights(path), task.plan)
            else:
                note = f"parent weights {task.parent_weights} not readable here: trained from scratch"
        epochs: list[dict] = []

        def collect(result) -> None:
            epochs.append(result.to_dict())
            if on_epoch is not None:
                on_epoch(result.to_dict())

        try:
            result = self.trainer.train(from_json(task.graph), task.hparams, parent, collect, should_stop)
        except TrialFailed as failed:
            return Outcome(epochs, "failed", failure=failed.to_dict(), timings={"train": time.monotonic() - started})
        weights_file = ""
        if self.comm.Get_rank() == 0 and result.weights is not None and result.epochs:
            weights_file = f"weights/task-{task.task_id}.npz"
            (self.run_dir / "weights").mkdir(parents=True, exist_ok=True)
            save_weights(self.run_dir / weights_file, result.weights)
        timings = {"train": time.monotonic() - started, "fresh_layers": len(result.fresh_layers)}
        if note:
            timings["note"] = note
        return Outcome(epochs, result.stop_reason, weights_file, None, timings)
