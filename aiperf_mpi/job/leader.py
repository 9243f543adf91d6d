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
:class:`~aiperf_mpi.train.runner.GroupRunner` (real Horovod training on the group) in a run; tests
substitute a fast simulated one — the loop, the search, the tuner and the
transport stay real.
"""

from __future__ import annotations

import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import networkx as nx

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.lineage import seed_record
from aiperf_mpi.graph.model import (
    DEFAULT_KERNEL_SIZE,
    activation_bytes_per_sample,
    as_trained,
    batch_within,
    from_json,
    to_json,
    tuner_batches,
)
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.job.messages import (
    Accepted,
    Duplicate,
    EpochDone,
    EpochStarted,
    Failed,
    Ready,
    Result,
    Stop,
    Work,
    epoch_done,
    proposed,
)
from aiperf_mpi.job.transport import LeaderChannel
from aiperf_mpi.results import runlog
from aiperf_mpi.results.timelimit import ends_after_limit
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import TRAINED, ModelRecord, graph_hash
from aiperf_mpi.search.hpo import WARMUP_ROUNDS, HParams
from aiperf_mpi.search.predict import predict_final_accuracy
from aiperf_mpi.search.registry import make_search, make_tuner
from aiperf_mpi.search.view import SearchView, ViewUpdate

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
    max_epochs: int | None = None
    """a warm-up round's shorter limit (``--search-warmup-epochs``); None: the run's ``max_epochs``"""
    deadline: float | None = None
    """the run's time limit on the leader's ``time.monotonic()`` (None: none given); the group's first rank,
    the leader's process, reads it: no epoch is begun, nor a first epoch finished, that would end after it"""


@dataclass
class Outcome:
    """How a task ended, on the leader."""

    epochs: list[dict]
    stop_reason: str
    weights_file: str = ""
    failure: dict | None = None
    timings: dict = field(default_factory=dict)
    weights_sha256: str = ""
    """the sha256 of ``weights_file`` as written ('' with no file): logged in ``model_done``"""


class Runner(Protocol):
    def run(self, task: Task, on_epoch: Callable[[dict], None], should_stop: Callable[[], bool],
            on_epoch_start: Callable[[int, float, int], None] | None = None) -> Outcome: ...

    def finish(self) -> None: ...


class GroupBroadcastRunner:
    """A runner whose group trains each task together: the leader broadcasts it, the others serve until None.

    ``comm`` is the group's communicator (any object with mpi4py's ``bcast``: this room loads no MPI);
    a subclass says what every rank does with a task in ``_execute`` (the leader gets the callbacks, the others
    none, and a ``should_stop`` that never asks).  The real trainer (``train/runner.py``) and the rehearsal's
    stand-in (``mpi/rehearsal.py``) share it.
    """

    comm: object

    def run(self, task: Task, on_epoch: Callable[[dict], None], should_stop: Callable[[], bool],
            on_epoch_start: Callable[[int, float, int], None] | None = None) -> Outcome:  # fmt: skip
        """On the leader: hand the task to the group and train it together."""
        self.comm.bcast(task, root=0)  # type: ignore[attr-defined]
        return self._execute(task, on_epoch, should_stop, on_epoch_start)

    def finish(self) -> None:
        self.comm.bcast(None, root=0)  # type: ignore[attr-defined]

    def serve(self) -> None:
        """On the other ranks of the group: train whatever the leader broadcasts, until None."""
        while True:
            task = self.comm.bcast(None, root=0)  # type: ignore[attr-defined]
            if task is None:
                return
            self._execute(task, None, lambda: False)  # the leader's reason to stop reaches them in a broadcast

    def _execute(self, task: Task, on_epoch, should_stop, on_epoch_start=None) -> Outcome:
        raise NotImplementedError


def leader_loop(
    channel: LeaderChannel,
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
    rank: int = 0,
) -> None:
    """Serve the master until it says Stop; ``view`` is the (empty) view to keep, for a caller to inspect.

    ``peak`` is the group's measured matrix-multiply throughput, reported
    with Ready so the master logs it before any work.  ``max_batch`` is the
    largest per-rank batch the data allows (training samples per rank): the
    tuner never proposes more, since such a trial could not take one step.
    ``search_config`` must be the master's (it decides which weights it keeps).
    ``rank`` is the leader's world rank, named in the failures it reports.
    """
    Leader(channel, group, config, seed_graph, runner, external_stop, view, max_batch, search_config, rank).serve(
        Ready(group, ranks, socket.gethostname(), peak)
    )


def group_seed(run_seed: int, group: int) -> int:
    """The seed of one group's search and tuner: distinct per group, and below 2**32 as NumPy (Optuna's
    samplers) requires, whatever the run's seed (any 0 … 2**32 − 1, or a drawn one)."""
    return (run_seed * 100_003 + group) % 2**32


class Leader:
    """One group leader: each Work goes through three steps, :meth:`propose`, :meth:`train`, :meth:`report`."""

    def __init__(self, channel: LeaderChannel, group: int, config: RunConfig, seed_graph: nx.DiGraph, runner: Runner,
                 external_stop: Callable[[], str], view: SearchView | None, max_batch: int | None,
                 search_config: SearchConfig | None, rank: int) -> None:  # fmt: skip
        search_config = search_config or SearchConfig()
        self.channel, self.group, self.config, self.seed_graph, self.runner = channel, group, config, seed_graph, runner
        self.external_stop, self.rank = external_stop, rank
        self.view = SearchView(search_config.view_bounds()) if view is None else view
        seed = group_seed(config.seed, group)
        self.search = make_search(config.search, self.view, seed, search_config)
        batches = tuner_batches(seed_graph, int(config.device_memory_gb * 2**30), max_batch, config.batch_size)
        self.tuner = make_tuner(config.hpo, batches, seed, HParams(config.batch_size, DEFAULT_KERNEL_SIZE))
        self.activation_budget = activation_bytes_per_sample(seed_graph) * max(batches)
        """the seed's activations at the tuner's largest batch: what the start line counts a training rank to hold
        (``mpi/limits.py``); a deeper child trains at a batch within it (``graph.model.batch_within``)"""
        self.algorithms = {"search": config.search, "tuner": config.hpo}
        """what produced each proposal, in its search info (the seed's search is "seed"): what the verifier holds
        to the configuration and the validity rule ``algorithms``"""

    def serve(self, ready: Ready) -> None:
        """Say Ready, then take Work until Stop."""
        self.channel.send(ready)
        while True:
            message = self.channel.recv()
            if isinstance(message, Stop):
                self.apply(message.view)
                self.runner.finish()
                return
            if not isinstance(message, Work):
                raise RuntimeError(f"leader of group {self.group} got an unexpected {type(message).__name__}")
            self.apply(message.view)
            proposal = self.propose(message)
            if proposal is None:
                continue
            task, outcome = self.train(message, proposal)
            self.report(message, proposal, task, outcome)

    def apply(self, update: ViewUpdate) -> None:
        """The master's view update into this group's view; a record that does not decode is said, once an update."""
        before = self.view.unreadable
        self.view.apply(update)
        if self.view.unreadable > before:
            print(f"aiperf_mpi: warning: group {self.group}: {self.view.unreadable - before} view record(s) did not "
                  f"decode and were left out of its search ({self.view.last_unreadable})", flush=True)  # fmt: skip

    def should_stop(self) -> bool:
        return self.channel.stop_pending() or bool(self.external_stop())

    def propose(self, work: Work) -> _Proposal | None:
        """The child and its hyper-parameters, accepted by the master; None (reported) when none was found."""
        hparams = self.tuner.ask()
        started = time.monotonic()
        try:
            chosen = _choose(self.channel, work, self.view, self.search, self.seed_graph, hparams,
                             self.config.seed_model, self.algorithms, self.activation_budget)  # fmt: skip
        except (RuntimeError, ValueError) as exc:  # no new architecture found, a bad morph: this task fails
            self.tuner.tell(hparams, None)
            self.channel.send(Failed(work.task_id, self.rank, socket.gethostname(),
                                     f"the search found no child: {type(exc).__name__}: {exc}",
                                     traceback.format_exc()))  # fmt: skip
            return None
        return _Proposal(*chosen, search_seconds=time.monotonic() - started, asked=hparams)

    def train(self, work: Work, proposal: _Proposal) -> tuple[Task, Outcome]:
        """The group trains the proposal; every epoch is sent to the master as the next begins or the task ends.

        An epoch's report waits for the next epoch's start, which rides on
        it (:class:`~aiperf_mpi.job.messages.EpochDone`): the wait is the
        group's agreement between epochs.  It goes at once after the task's
        last allowed epoch and when the stop is decided; only after an early
        stop (patience) or a failure does it wait for the runner's return.
        """
        parent_weights = ""
        if proposal.parent is not None and self.config.inherit:
            parent_weights = self.view[proposal.parent].weights
        brief = work.round <= WARMUP_ROUNDS and self.config.search_warmup_epochs > 0
        limit = min(self.config.search_warmup_epochs, self.config.max_epochs) if brief else None
        deadline = None if work.seconds_left is None else time.monotonic() + work.seconds_left
        task = Task(work.task_id, work.round, proposal.graph_json, proposal.hparams, proposal.parent, proposal.plan,
                    parent_weights, limit, deadline)  # fmt: skip

        last_epoch: list[float] = []  # the task's latest epoch, in seconds, tracing and compilation left out
        held: list[EpochDone] = []  # the latest epoch, until the next one's start can ride on it (messages.py)
        epoch_limit = task.max_epochs or self.config.max_epochs

        def send_held(next_start: EpochStarted | None = None) -> None:
            if held:
                self.channel.send(held.pop() if next_start is None else replace(held.pop(), next_start=next_start))
            elif next_start is not None:
                self.channel.send(next_start)

        def report_epoch(epoch: dict, task_id: int = work.task_id) -> None:
            last_epoch[:] = [max(0.0, epoch["end"] - epoch["start"] - epoch.get("compile", 0.0))]
            held[:] = [epoch_done(task_id, epoch)]  # encoded here, not on rank 0 (messages.epoch_done)
            if epoch["epoch"] >= epoch_limit:  # no next epoch will begin: do not wait for the task's end
                send_held()

        def report_start(epoch: int, started: float, global_batch: int, task_id: int = work.task_id) -> None:
            send_held(EpochStarted(task_id, epoch, started, global_batch))

        budget_ends = None if not self.config.model_seconds else time.monotonic() + self.config.model_seconds

        def should_stop() -> str:
            """Why the model stops before its next epoch ('' : it goes on): a stop asked for, or the next epoch,
            as long as the last, would end after the time limit (``time limit``) or after the model's own
            budget of seconds (``model budget``, ``--model-seconds``)."""
            now = time.monotonic()
            if self.should_stop() or epoch_would_overrun(deadline, last_epoch, now):
                stop = "time limit"
            else:
                stop = MODEL_BUDGET if epoch_would_overrun(budget_ends, last_epoch, now) else ""
            if stop:  # no next epoch will begin: the held one goes now, before the weights are saved
                send_held()
            return stop

        outcome = self.runner.run(task, report_epoch, should_stop, on_epoch_start=report_start)
        send_held()  # an early stop (patience) or a failure: the epoch before it, ahead of the Result or Failed
        return task, outcome

    def report(self, work: Work, proposal: _Proposal, task: Task, outcome: Outcome) -> None:
        """Tell the tuner and the master how the task ended (Failed or Result)."""
        hparams, parent, graph_json, asked = proposal.hparams, proposal.parent, proposal.graph_json, proposal.asked
        timings = {**outcome.timings, "search": proposal.search_seconds}
        if outcome.failure is not None:
            self.tuner.tell(asked, None)
            failure = outcome.failure
            self.channel.send(Failed(work.task_id, failure["rank"], failure["host"], failure["reason"],
                                     failure.get("traceback", ""), parent, graph_json, hparams.to_dict(),
                                     outcome.epochs))  # fmt: skip
            return
        accuracies = [e["val_accuracy"] for e in outcome.epochs]
        accuracy = max(accuracies) if accuracies else None
        predicted = None
        if accuracies and work.round <= WARMUP_ROUNDS:
            predicted = predict_final_accuracy(accuracies, self.config.max_epochs)
        self.tuner.tell(asked, accuracy)
        counts = count_ops(from_json(graph_json))
        ops = {
            "total": sum(e["ops"] for e in outcome.epochs),
            "forward_per_sample": counts.forward_eval,
            "backward_per_sample": counts.backward,
            "update_per_step": counts.update,
            "params": counts.params,
        }
        # the epochs go as the log's text, encoded here: rank 0 logs it as it is (messages.Result.epochs_text);
        # the view's record of the model is compressed here too (messages.Result.view_record)
        view_record = b""
        if outcome.epochs:
            view_record = self.view.own_record(ModelRecord(id=-1, parent=parent, graph=graph_json, status=TRAINED,
                                                           accuracy=accuracy, predicted_accuracy=predicted,
                                                           weights=outcome.weights_file))  # fmt: skip
        self.channel.send(Result(work.task_id, parent, graph_json, hparams.to_dict(), [], accuracy, predicted, ops,
                                 timings, proposal.description, outcome.stop_reason, outcome.weights_file,
                                 proposal.info, runlog.value_text(outcome.epochs), view_record,
                                 outcome.weights_sha256))  # fmt: skip


MODEL_BUDGET = "model budget"
"""a model's stop reason when its next epoch would end after its ``--model-seconds`` from the start of its
training: the demo's plan (``make run``), so that a fixed number of models fits the time on any machine"""


def epoch_would_overrun(deadline: float | None, last_epoch: list[float], now: float) -> bool:
    """Whether an epoch begun ``now`` would end after ``deadline``, if it lasts as long as the task's last one.

    An epoch still running at the time limit finishes in the grace period
    while every other group waits (the run's active time grows by it, and
    ``make run`` by up to its length) or, past the grace, is lost.  The
    task's first epoch is not judged here: the master hands out a model
    only while one fits (:meth:`~aiperf_mpi.job.master.Master._next`).  The rule is the run's one
    :func:`~aiperf_mpi.results.timelimit.ends_after_limit`; this only says what it is given.
    """
    return ends_after_limit(None if deadline is None else deadline - now, last_epoch[0] if last_epoch else None)


@dataclass
class _Proposal:
    """A child the master accepted, with how it was found."""

    hparams: HParams
    """what the task trains (the tuner's batch, within the activation budget: :func:`_choose`)"""
    graph_json: str
    parent: int | None
    plan: list[dict]
    description: str
    info: dict
    search_seconds: float
    asked: HParams
    """what the tuner asked, which it is told the outcome of"""


def _choose(channel, work: Work, view: SearchView, search, seed_graph: nx.DiGraph, hparams: HParams,
            seed_name: str, algorithms: dict, budget: int | None = None) -> tuple:  # fmt: skip
    """The task's model, accepted by the master: (its hyper-parameters, graph JSON, parent, plan, description,
    search info).

    The hyper-parameters are the tuner's, its batch halved where the model's activations at it exceed
    ``budget`` bytes (:func:`~aiperf_mpi.graph.model.batch_within`; None: as asked), so that no child holds more
    than the start line counted; the proposal logs what the task trains.

    Each proposal carries its lineage for the verifier: the seed's record
    (``seed_name`` and its sizes) or the morphisms from the parent's graph.

    Each proposal goes to the master, which answers Accepted or Duplicate;
    a duplicate's hash is remembered so the search skips it, and the search
    is asked again, :data:`PROPOSALS` times at most.  Raises RuntimeError
    when every proposal was a duplicate (the task fails, the run goes on).
    """
    started = time.monotonic()
    duplicates = 0
    for _ in range(PROPOSALS):
        if work.seed_model or not view.best(1):
            graph, parent, plan, description = seed_graph, None, [], "seed"
            info = {"strategy": "seed", "search": "seed"}
            lineage = {"seed": seed_record(seed_name, seed_graph)}
        else:
            proposal = search.ask(kernel=hparams.kernel_size)
            graph, parent, plan, description, info = (
                proposal.graph, proposal.parent, proposal.plan, proposal.description, proposal.info
            )  # fmt: skip
            lineage = {"morphs": list(proposal.steps)}
        trained = as_trained(graph, hparams.kernel_size)
        graph_json = to_json(trained)
        fitted = hparams if budget is None else \
            HParams(batch_within(trained, hparams.batch_size, budget), hparams.kernel_size)  # fmt: skip
        info = {**algorithms, **info, "search_seconds": time.monotonic() - started}
        if duplicates:
            info["duplicates"] = duplicates
        channel.send(proposed(work.task_id, parent, graph_json, fitted.to_dict(), description, info, **lineage))
        if isinstance(_answer(channel, work.task_id), Accepted):
            view.remember(graph_hash(graph_json))
            return fitted, graph_json, parent, plan, description, info
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
