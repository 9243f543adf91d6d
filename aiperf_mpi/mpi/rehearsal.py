"""The rehearsal's training backend: the stand-in arithmetic on a group's real communicator (``--rehearse``).

It takes the place of ``train.runner.GroupRunner`` behind the same
:class:`~aiperf_mpi.mpi.run.TrainingBackend`, and loads no TensorFlow and no
Horovod: what it stands in for, and why, is :mod:`aiperf_mpi.job.rehearsal`.
The leader broadcasts each task to its group as the real runner does, every
rank waits out each epoch's stated time and joins the epoch's all-reduce, and
the leader reports the epoch the stand-in counted.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.model import from_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.job.leader import GroupBroadcastRunner, Outcome, Task
from aiperf_mpi.job.rehearsal import all_reduce_chunks, all_reduce_floats, stand_in_epoch
from aiperf_mpi.results.epochs import TIME_LIMIT, EpochStop, stop_asked
from aiperf_mpi.results.hardware import STAND_IN_DEVICE

WAIT_SLICE = 0.5
"""seconds of an epoch's wait between two looks at the stop flag's deadline"""


class RehearsalRunner(GroupBroadcastRunner):
    """A group's ranks rehearsing: real broadcasts and all-reduces, stand-in time and accuracy."""

    def __init__(self, hvd, group_comm: MPI.Comm, source, config: RunConfig, run_dir: Path) -> None:
        del hvd, run_dir  # no Horovod (nothing to train), no weights written (nothing to inherit)
        self.comm, self.source, self.config = group_comm, source, config

    def _execute(self, task: Task, on_epoch, should_stop, on_epoch_start=None) -> Outcome:
        started = time.monotonic()
        config, ranks, leader = self.config, self.comm.Get_size(), self.comm.Get_rank() == 0
        counts = count_ops(with_kernel_size(from_json(task.graph), task.hparams.kernel_size))
        batch = task.hparams.batch_size
        chunks = all_reduce_chunks(all_reduce_floats(counts.params, config.rehearse_allreduce))
        buffer = np.ones(chunks[0], dtype=np.float32)  # one piece's size: the model's bytes go in pieces
        epochs: list[dict] = []
        policy = EpochStop(config.patience, config.min_delta)
        for epoch in range(1, (task.max_epochs or config.max_epochs) + 1):
            planned = stand_in_epoch(counts, self.source.sizes, batch, ranks, epoch, config.rehearse_rate)
            stop = ""
            if leader:  # the first rank's reason, the same on every rank (as the trainer's)
                stop = stop_asked(should_stop()) if should_stop is not None else ""
                ends = time.monotonic() + planned.train_seconds + planned.validation_seconds
                if not stop and task.deadline is not None and ends > task.deadline:
                    stop = TIME_LIMIT  # no epoch begun that would end after the deadline
            if policy.stopped(self.comm.bcast(stop, root=0)):
                break
            start = time.time()
            if on_epoch_start is not None:
                on_epoch_start(epoch, start, batch * ranks)
            compute = _wait(planned.train_seconds)
            for size in chunks:  # the epoch's gradient exchange, for real, a piece at a time
                self.comm.Allreduce(MPI.IN_PLACE, buffer[:size], op=MPI.SUM)
                buffer.fill(1.0)
            evaluation = _wait(planned.validation_seconds)
            self.comm.Barrier()  # the group ends the epoch together, as the trainer's last collective does
            result = {**planned.fields, "start": start, "end": time.time(), "compute": compute,
                      "evaluation": evaluation, "learning_rate": config.base_lr * batch * ranks / 256.0}  # fmt: skip
            epochs.append(result)
            if on_epoch is not None:
                on_epoch(result)
            if policy.after_epoch(result["val_accuracy"]):
                break
        return Outcome(epochs, policy.reason, "", timings={"train": time.monotonic() - started})


def _wait(seconds: float) -> float:
    """Wait the stand-in's ``seconds`` (a process asleep, as a rank waiting on its accelerator); the seconds spent."""
    began = time.perf_counter()
    end = began + max(0.0, seconds)
    while (left := end - time.perf_counter()) > 0:
        time.sleep(min(left, WAIT_SLICE))
    return time.perf_counter() - began


def rehearsal_peak(group_comm: MPI.Comm, precision: str, rate: float) -> dict | None:
    """The ``peak`` a rehearsing group logs: the stated rate on each rank, named as the stand-in it is."""
    ranks = group_comm.Get_size()
    if group_comm.Get_rank() != 0:
        return None
    return {"precision": precision, "ranks": ranks, "device": STAND_IN_DEVICE, "matrix_size": 0, "seconds": 0.0,
            "ops_per_second": rate * ranks, "per_rank": [rate] * ranks, "threads": []}  # fmt: skip
