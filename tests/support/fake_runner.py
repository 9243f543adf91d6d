"""A fast stand-in for the *training* only: the scheduler, search, tuner and transport stay real.

Epochs take ``epoch_seconds`` (×``slow_factor`` on slow groups), report a
synthetic accuracy of the graph and a fixed operation count.  Tasks whose id
is in ``fail_tasks`` fail as a trial does (TrialFailed-shaped dict).  Given a
``run_dir``, a trained task writes a small weights file where the real runner
writes its own (``weights/task-N.npz``), and a task whose parent's file is
not there when it starts or ends is recorded in ``missing_parents``.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from aiperf_mpi.graph.model import from_json
from aiperf_mpi.job.leader import Outcome, Task
from aiperf_mpi.results.epochs import stop_asked
from aiperf_mpi.results.stored_weights import file_sha256
from tests.support.synthetic_objective import synthetic_accuracy


class FakeRunner:
    def __init__(self, group: int, epoch_seconds: float = 0.05, epochs: int = 2, slow_groups=(), fail_tasks=(),
                 run_dir: Path | None = None, rank: int = 0):  # fmt: skip
        self.group, self.epochs, self.fail_tasks, self.rank = group, epochs, set(fail_tasks), rank
        self.epoch_seconds = epoch_seconds * (5 if group in slow_groups else 1)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.missing_parents: list[str] = []
        self.loaded: list[str] = []

    def _check_parent(self, task: Task, when: str) -> None:
        if self.run_dir is not None and task.parent_weights:
            if (self.run_dir / task.parent_weights).is_file():
                self.loaded.append(task.parent_weights)
            else:
                self.missing_parents.append(f"task {task.task_id} {when}: {task.parent_weights}")

    def run(self, task: Task, on_epoch, should_stop, on_epoch_start=None) -> Outcome:
        if task.task_id in self.fail_tasks:
            failure = {"reason": f"injected failure in task {task.task_id}", "rank": self.rank,
                       "host": socket.gethostname(), "traceback": "Traceback: injected"}  # fmt: skip
            return Outcome([], "failed", failure=failure)
        self._check_parent(task, "at start")
        accuracy = synthetic_accuracy(from_json(task.graph))
        epochs, reason = [], "epoch limit"
        for epoch in range(1, min(self.epochs, task.max_epochs or self.epochs) + 1):
            stop = stop_asked(should_stop())  # as the real trainer reads it
            if stop:
                reason = stop
                break
            start = time.time()
            if on_epoch_start is not None:
                on_epoch_start(epoch, start, task.hparams.batch_size)
            time.sleep(self.epoch_seconds)
            ops = 1_000_000 * task.hparams.batch_size
            result = {"epoch": epoch, "train_loss": 1.0 / epoch, "val_accuracy": accuracy * epoch / self.epochs,
                      "start": start, "end": time.time(), "ops": ops, "ops_train": ops, "ops_update": 0,
                      "ops_validation": 0, "steps": 1, "train_samples": task.hparams.batch_size,
                      "validation_samples": 1, "data_wait": 0.0, "compute": self.epoch_seconds, "evaluation": 0.0,
                      "learning_rate": 0.1}  # every field a real epoch has (the log's schema)  # fmt: skip
            epochs.append(result)
            on_epoch(result)
        self._check_parent(task, "at end")
        weights_file, digest = "", ""
        if self.run_dir is not None and epochs:
            weights_file = f"weights/task-{task.task_id}.npz"
            (self.run_dir / "weights").mkdir(parents=True, exist_ok=True)
            (self.run_dir / weights_file).write_bytes(b"fake weights of task %d" % task.task_id)
            digest = file_sha256(self.run_dir / weights_file)  # as the real runner logs it
        return Outcome(epochs, reason, weights_file, timings={"train": self.epoch_seconds * len(epochs)},
                       weights_sha256=digest)

    def finish(self) -> None:
        pass

    def serve(self) -> None:
        pass
