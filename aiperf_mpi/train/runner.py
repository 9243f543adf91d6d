"""Real training for a leader: the group's ranks train each task together with Horovod.

The leader loop (:mod:`aiperf_mpi.job.leader`) only needs a *runner*; this
one broadcasts each task to the group, loads the parent's weights on the
group's first rank, trains with :class:`~aiperf_mpi.train.trainer.GroupTrainer`
and writes the trained weights for children to inherit.  A parent's weights
are its ``.npz``, or ``best/model.keras`` when a finished segment published
it as the run's best and removed the ``.npz``
(:mod:`aiperf_mpi.results.stored_weights`): a resumed run inherits from it.  TensorFlow is
imported only when a runner is built.
"""

from __future__ import annotations

import time
from pathlib import Path

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.model import from_json
from aiperf_mpi.job.leader import GroupBroadcastRunner, Outcome, Task
from aiperf_mpi.results.stored_weights import file_sha256, locate_weights


def _has_gpu() -> bool:
    """Whether TensorFlow sees a GPU on this rank (after the rank was pinned to its own)."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


class GroupRunner(GroupBroadcastRunner):
    """Real training: the leader broadcasts each task to its group, and every rank trains it."""

    def __init__(self, hvd, group_comm, source, config: RunConfig, run_dir: Path) -> None:
        from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

        self.comm = group_comm
        self.run_dir = run_dir
        self.trainer = GroupTrainer(hvd, group_comm, source, TrainConfig.from_run(config, accelerator=_has_gpu()))

    def _execute(self, task: Task, on_epoch, should_stop, on_epoch_start=None) -> Outcome:
        from aiperf_mpi.train.trainer import TrialFailed
        from aiperf_mpi.train.transfer import save_weights

        started = time.monotonic()
        parent = None
        note = ""
        if self.comm.Get_rank() == 0 and task.parent_weights:
            weights, note = read_parent_weights(self.run_dir, task.parent_weights)
            if weights is not None:
                parent = (weights, task.plan)
        epochs: list[dict] = []

        def collect(result) -> None:
            epochs.append(result.to_dict())
            if on_epoch is not None:
                on_epoch(result.to_dict())

        try:
            result = self.trainer.train(from_json(task.graph), task.hparams, parent, collect, should_stop,
                                        max_epochs=task.max_epochs, on_epoch_start=on_epoch_start,
                                        deadline=task.deadline if self.comm.Get_rank() == 0 else None)  # fmt: skip
        except TrialFailed as failed:
            return Outcome(epochs, "failed", failure=failed.to_dict(), timings={"train": time.monotonic() - started})
        weights_file, weights_sha256 = "", ""
        if self.comm.Get_rank() == 0 and result.weights is not None and result.epochs:
            weights_file = f"weights/task-{task.task_id}.npz"
            (self.run_dir / "weights").mkdir(parents=True, exist_ok=True)
            save_weights(self.run_dir / weights_file, result.weights)
            weights_sha256 = file_sha256(self.run_dir / weights_file)  # logged: what ties the file to the run
        timings = {"train": time.monotonic() - started, "fresh_layers": len(result.fresh_layers)}
        if weights_file:
            timings["weights_epoch"] = result.weights_epoch  # the best epoch's weights (export, inheritance)
        if note:
            timings["note"] = note
        return Outcome(epochs, result.stop_reason, weights_file, None, timings, weights_sha256)


def read_parent_weights(run_dir: Path, name: str) -> tuple[dict | None, str]:
    """A parent's weights for its child (None: train from scratch) and a note for the model's timings.

    The ``.npz``, or ``best/model.keras`` once a previous segment's end exported the parent and removed its
    ``.npz``.  A file that is missing or cannot be read — truncated by a full disk, damaged, or not weights at
    all — costs the child its inheritance, not the run: this runs on the group's first rank alone, while the
    others wait in the trainer's first collective, so an exception here would leave them waiting until the
    whole job was aborted.
    """
    from aiperf_mpi.train.transfer import read_weights

    path = locate_weights(run_dir, name)
    if path is None:
        return None, f"parent weights {name} not readable here: trained from scratch"
    try:
        weights = read_weights(path)
    except Exception as exc:  # noqa: BLE001 — any reader's error: zipfile, numpy, Keras, the OS
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return None, f"parent weights {name} could not be read ({reason}): trained from scratch"
    if path.suffix == ".keras":
        return weights, f"parent weights {name} read from {path.relative_to(run_dir)}"
    return weights, ""
