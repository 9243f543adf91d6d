"""The master's scheduler: MPI-free, driven one message at a time.

:class:`Master` keeps the authoritative, append-only history, decides who
gets work, writes the event log, and knows when the run is over.  It never
blocks: :meth:`Master.handle` takes one message and returns the replies;
:meth:`Master.tick` is called between messages and starts the stop (time
limit, signal, model budget).  A transport (MPI or in-process) moves the
messages; :func:`master_loop` ties them together.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi import runlog
from aiperf_mpi.config import RunConfig
from aiperf_mpi.protocol import EpochDone, Failed, MonitorSample, Proposed, Ready, Result, Stop, Work
from aiperf_mpi.search.history import FAILED, TRAINED, History, ModelRecord


@dataclass
class GroupState:
    """What the master knows of one group."""

    index: int
    seen: int = 0
    """history entries already sent to this group's leader"""
    task: int | None = None
    rounds: int = 0
    stopped: bool = False
    ranks: int = 0
    host: str = ""


@dataclass
class Master:
    """The scheduler on rank 0."""

    config: RunConfig
    log: runlog.EventLog
    history: History
    groups: int
    run_dir: Path
    clock: Callable[[], float] = time.monotonic
    next_task: int = 0
    mllog: object | None = None
    state: dict[int, GroupState] = field(default_factory=dict)
    started: float = 0.0
    stopping: str = ""
    stop_started: float = 0.0
    tasks: dict[int, dict] = field(default_factory=dict)
    ops_done: int = 0
    epochs_done: int = 0
    failed: int = 0
    best_accuracy: float | None = None
    handled: int = 0

    def __post_init__(self) -> None:
        self.state = {g: GroupState(g) for g in range(self.groups)}
        self.started = self.clock()
        (self.run_dir / "graphs").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ messages

    def handle(self, group: int, message: object) -> list[tuple[int, object]]:
        """One message from ``group``'s leader → the replies to send."""
        self.handled += 1
        state = self.state[group]
        if isinstance(message, MonitorSample):
            self.log.write(runlog.MONITOR, time=message.time, group=group, host=message.host, node=message.node,
                           source=message.source, devices=message.devices)  # fmt: skip
            return []
        if isinstance(message, Ready):
            state.ranks, state.host = message.ranks, message.host
            if message.peak is not None:
                self.log.write(runlog.PEAK, sync=True, group=group, host=message.host, **message.peak)
            return self._next(state)
        if isinstance(message, Proposed):
            self._proposed(group, message)
            return []
        if isinstance(message, EpochDone):
            self._epoch(group, message)
            return []
        if isinstance(message, Result):
            self._result(group, message)
            state.task = None
            return self._next(state)
        if isinstance(message, Failed):
            self._failed(group, message)
            state.task = None
            return self._next(state)
        raise TypeError(f"the master cannot handle {type(message).__name__}")

    def tick(self, external_stop: str = "") -> list[tuple[int, object]]:
        """Between messages: start the stop when its time has come; Stop every group once."""
        if not self.stopping:
            elapsed = self.clock() - self.started
            if external_stop:
                self._begin_stop(external_stop)
            elif elapsed >= self.config.time_limit:
                self._begin_stop("time limit")
            elif self.config.max_models and len(self.history) >= self.config.max_models:
                self._begin_stop("max models")
            elif all(s.stopped for s in self.state.values()) and not self.busy:
                self._begin_stop("max models")
        if not self.stopping:
            return []
        replies = []
        for state in self.state.values():
            if not state.stopped:
                state.stopped = True
                replies.append((state.index, self._stop(state, self.stopping)))
        return replies

    def _stop(self, state: GroupState, reason: str) -> Stop:
        delta = self.history.since_wire(state.seen)
        state.seen = len(self.history)
        return Stop(reason, delta)

    @property
    def busy(self) -> list[int]:
        return [g for g, s in self.state.items() if s.task is not None]

    @property
    def done(self) -> bool:
        """Every group was told to stop and no task is still running."""
        return bool(self.stopping) and all(s.stopped for s in self.state.values()) and not self.busy

    @property
    def grace_expired(self) -> bool:
        return bool(self.stopping) and self.clock() - self.stop_started > self.config.grace

    # ------------------------------------------------------------------ internals

    def _begin_stop(self, reason: str) -> None:
        self.stopping = reason
        self.stop_started = self.clock()

    def _next(self, state: GroupState) -> list[tuple[int, object]]:
        budget_spent = bool(self.config.max_models) and self.next_task >= self.config.max_models
        if self.stopping or budget_spent:
            if state.stopped:
                return []
            state.stopped = True
            return [(state.index, self._stop(state, self.stopping or "max models"))]
        delta = self.history.since_wire(state.seen)
        state.seen = len(self.history)
        state.rounds += 1
        task = self.next_task
        self.next_task += 1
        state.task = task
        trained = any(r.status == TRAINED for r in self.history)
        self.tasks[task] = {"group": state.index, "round": state.rounds}
        return [(state.index, Work(task, delta, state.rounds, seed_model=not trained))]

    def _proposed(self, group: int, message: Proposed) -> None:
        graph_file = f"graphs/task-{message.task_id}.json"
        (self.run_dir / graph_file).write_text(message.graph)
        self.log.write(runlog.MODEL_PROPOSED, task=message.task_id, group=group, parent=message.parent,
                       hparams=message.hparams, description=message.description, graph_file=graph_file,
                       search=message.search_info)  # fmt: skip

    def _epoch(self, group: int, message: EpochDone) -> None:
        epoch = message.epoch
        self.log.write(runlog.EPOCH, sync=True, task=message.task_id, group=group, **epoch)
        self.ops_done += int(epoch["ops"])
        self.epochs_done += 1
        accuracy = epoch.get("val_accuracy")
        if accuracy is not None and math.isfinite(accuracy):
            self.best_accuracy = accuracy if self.best_accuracy is None else max(self.best_accuracy, accuracy)
        if self.mllog is not None:
            self.mllog.epoch(message.task_id, epoch)

    def _result(self, group: int, message: Result) -> None:
        record = ModelRecord(
            id=self.history.next_id,
            parent=message.parent,
            graph=message.graph,
            status=TRAINED if message.epochs else FAILED,
            hparams=message.hparams,
            epochs=message.epochs,
            accuracy=message.accuracy,
            predicted_accuracy=message.predicted_accuracy,
            ops=message.ops,
            timings={**message.timings, "task": message.task_id, "group": group, "stop": message.stop_reason},
            description=message.description,
            weights=message.weights_file,
        )
        self.history.append(record)
        self.log.write(runlog.MODEL_DONE, sync=True, model=record.to_dict(), task=message.task_id, group=group)

    def _failed(self, group: int, message: Failed) -> None:
        self.failed += 1
        record = ModelRecord(
            id=self.history.next_id, parent=message.parent, graph=message.graph or "{}", status=FAILED,
            hparams=message.hparams, epochs=message.epochs,
            timings={"task": message.task_id, "group": group, "error": message.reason},
        )  # fmt: skip
        self.history.append(record)
        self.log.write(runlog.MODEL_FAILED, sync=True, task=message.task_id, group=group, model=record.id,
                       rank=message.rank, host=message.host, reason=message.reason,
                       traceback=message.traceback)  # fmt: skip

    def progress_line(self) -> str:
        elapsed = self.clock() - self.started
        rate = self.ops_done / elapsed if elapsed > 0 else 0.0
        best = "-" if self.best_accuracy is None else f"{self.best_accuracy:.4f}"
        trained = sum(1 for r in self.history if r.status == TRAINED)
        return (
            f"[{_clock(elapsed)}] models {trained} done, {self.failed} failed, {len(self.busy)} running | "
            f"epochs {self.epochs_done} | OPS {rate / 1e9:.3f} G/s | best accuracy {best}"
            + (f" | stopping: {self.stopping}" if self.stopping else "")
        )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
