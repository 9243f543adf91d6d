"""Horovod data-parallel training of one model on one group, epoch by epoch.

One :class:`GroupTrainer` lives on every rank of a group for the whole run
and trains one model per round: the group's first rank builds the model
(inheriting its parent's weights through the transfer plan, the tuned kernel
size applied to the graph), the weights are broadcast on the group's
communicator, and every step averages gradients with Horovod's all-reduce
(a custom ``tf.function`` loop: with Keras 3, Horovod's Keras optimizer
wrapper silently does not average).  After each epoch the BN statistics are
averaged, the validation accuracy is computed over the whole group, and the
epoch — loss, accuracy, timestamps, time split, analytic operations — is
handed to ``on_epoch`` before the next epoch starts.

Failures: a NaN loss is seen by every rank at once (the loss is averaged),
and an exception raised on every rank (the same model does not fit in memory,
say) is agreed on the group communicator; both end the trial with
:class:`TrialFailed` on every rank and leave the group ready for the next
model.  An exception on one rank alone, while the others wait in an
all-reduce, cannot be recovered: after ``agree_timeout`` seconds it is
re-raised as fatal and the abort guard ends the job — never a hang.
"""

from __future__ import annotations

import math
import socket
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType

import keras
import networkx as nx
import numpy as np
import tensorflow as tf
from mpi4py import MPI

from aiperf_mpi.config import RunConfig, device_prefetch_enabled, xla_enabled
from aiperf_mpi.data.sources import DataSource
from aiperf_mpi.graph.model import as_trained
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.results.epochs import LEARNING_RATE_WARMUP_EPOCHS, TIME_LIMIT, EpochStop, stop_asked
from aiperf_mpi.results.timelimit import ends_after_limit
from aiperf_mpi.search.hpo import HParams
from aiperf_mpi.train.keras_model import build_keras_model
from aiperf_mpi.train.pipeline import Shard
from aiperf_mpi.train.steps import loss_function, make_evaluate, make_optimizer, make_train_step, precision_policy
from aiperf_mpi.train.transfer import Weights, model_weights, transfer_weights


def _train_device() -> str:
    """Where this rank's steps run: its GPU (one per rank, ``train.devices.pin_device``), else the CPU."""
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


GRADIENTS_NAME = "aiperf_gradients"
"""the name of every training step's all-reduces of the gradients (:func:`average_in_chunks`)"""
CHUNK = 64
"""gradients a grouped all-reduce takes (:func:`average_in_chunks`)"""


def average_in_chunks(hvd: ModuleType, grads: list) -> list:
    """The group's average of ``grads``: grouped all-reduces of :data:`CHUNK` tensors each, under names that do
    not change from model to model, the last chunk padded with one-element zeros.

    Horovod keys its response cache by each tensor's name, which a grouped all-reduce makes from its op's name,
    the tensor's place and the group's size (``NAME_3of161``).  Named after each model's own tensors and count, a
    run filled the cache (1,024 entries) with models it no longer trains, and Horovod warned at every eviction ("A
    response has been evicted from cache", twice in each ``make run``: issue 51).  Here the names are
    ``aiperf_gradients_C_IofCHUNK`` whatever the model: a new model's shapes replace the last model's entries (no
    eviction while a model has at most 1,024 gradients), and a step hits them.  Horovod fuses the chunks of one
    step as it fused the one group: measured on 2 ranks (Intel Xeon, 2 cores), ResNet-50 32²'s 161 gradients
    (23.5 M values) took a median 64.2 and 65.4 ms in chunks against 64.3 and 61.3 ms as one group, 20 steps
    each.  One flat all-reduce of the concatenated gradients did the same for the cache but cost 1.5× (100 ms:
    the concatenation's copy)."""
    dtype = grads[0].dtype
    if any(g.dtype != dtype for g in grads):
        return hvd.grouped_allreduce(grads, op=hvd.Average)  # mixed dtypes (none in this trainer): as before
    averaged: list = []
    for chunk, first in enumerate(range(0, len(grads), CHUNK)):
        part = list(grads[first:first + CHUNK])
        padding = CHUNK - len(part)
        part += [tf.zeros([1], dtype) for _ in range(padding)]
        reduced = hvd.grouped_allreduce(part, op=hvd.Average, name=f"{GRADIENTS_NAME}_{chunk}")
        averaged += reduced[:CHUNK - padding]
    return averaged

class TrialFailed(Exception):
    """One trial (one model) failed; the group carries on."""

    def __init__(self, reason: str, rank: int, host: str, trace: str = "") -> None:
        super().__init__(f"{reason} (rank {rank} on {host})")
        self.reason, self.rank, self.host, self.trace = reason, rank, host, trace

    def to_dict(self) -> dict:
        return {"reason": self.reason, "rank": self.rank, "host": self.host, "traceback": self.trace}


@dataclass(frozen=True)
class TrainConfig:
    """Per-round training rules (defaults are the benchmark's; all configurable)."""

    max_epochs: int = RunConfig.max_epochs
    patience: int = RunConfig.patience
    """stop after this many epochs without an improvement of at least ``min_delta``"""
    min_delta: float = RunConfig.min_delta
    base_lr: float = RunConfig.base_lr
    """learning rate per 256 samples of global batch (scaled linearly with the group's global batch)"""
    momentum: float = 0.9
    precision: str = "fp32"
    """a concrete precision (a run's ``auto`` is resolved before training: ``config.resolve_precision``)"""
    seed: int = RunConfig.seed
    xla: bool = False
    """compile the forward/backward maths with XLA; Horovod's all-reduce stays outside the compiled
    function.  The run decides per device (``config.xla_enabled``: on for GPUs, off for CPUs, where
    it trained ResNet-50 2.8–3.8× slower, BENCHMARKS.md)"""
    device_prefetch: bool = False
    """the input pipeline ends in ``prefetch_to_device`` (``config.device_prefetch_enabled``: on GPUs)"""
    agree_timeout: float = 60.0

    @classmethod
    def from_run(cls, config: RunConfig, accelerator: bool) -> TrainConfig:
        """The training rules of a run: the one place a :class:`RunConfig` becomes a TrainConfig."""
        return cls(max_epochs=config.max_epochs, patience=config.patience, min_delta=config.min_delta,
                   base_lr=config.base_lr, precision=config.precision, seed=config.seed,
                   xla=xla_enabled(config.xla, accelerator),
                   device_prefetch=device_prefetch_enabled(config.device_prefetch, accelerator))  # fmt: skip


PROBE_STEPS = 4
"""a new model's first epoch is judged against the deadline after this many steps: the first traces, the
next three give its step time"""


class _OutOfTime(Exception):
    """A new model's first epoch would end after the run's time limit: the group gives the model up."""


def _epoch_ends_late(deadline: float | None, step_seconds: list[float], steps_left: int,
                     validation_batches: int) -> bool:  # fmt: skip
    """Whether the epoch, ``steps_left`` steps and a validation from its end, would end after ``deadline``.

    A step's time is the median of those measured (without the first, which
    traced); a validation batch is costed at a third of a training step (a
    forward pass of the same batch).  Without this, a model handed out just
    before the limit with a slower batch or kernel than the last (seen:
    batch 16 and kernel 7 after batch 64, 84 s against 17 s) trains its
    first epoch into the grace period while every other group waits.  The
    rule is the run's one :func:`~aiperf_mpi.results.timelimit.ends_after_limit`.
    """
    needed = statistics.median(step_seconds) * (steps_left + validation_batches / 3) if step_seconds else None
    return ends_after_limit(None if deadline is None else deadline - time.monotonic(), needed)


@dataclass
class EpochResult:
    """One completed epoch."""

    epoch: int
    train_loss: float
    val_accuracy: float
    start: float
    end: float
    ops: int
    ops_train: int
    ops_update: int
    ops_validation: int
    steps: int
    train_samples: int
    validation_samples: int
    correct: int
    """the validation samples predicted right (top-1), over the whole group: ``val_accuracy`` is this count
    over ``validation_samples``, logged so that a reader checks the ratio instead of trusting it"""
    data_wait: float
    compute: float
    """seconds in training steps, tracing and compilation excluded"""
    evaluation: float
    """seconds validating, tracing excluded"""
    learning_rate: float
    xla: bool = False
    """the step was compiled with XLA (provenance: which path produced this epoch's time)"""
    compile: float = 0.0
    """seconds of the steps and validation batches that traced (and, with XLA, compiled) a function:
    a new model's first step, a validation batch of a new shape.  Apart from ``compute`` and
    ``evaluation`` so that neither is charged for it; the epoch's operations are counted as ever."""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrialResult:
    """The outcome of one model's training on a group."""

    epochs: list[EpochResult]
    best_accuracy: float
    stop_reason: str
    hparams: HParams
    fresh_layers: list[str] = field(default_factory=list)
    initial_accuracy: float | None = None
    """validation accuracy before the first epoch (with ``evaluate_first``): what inheritance gave"""
    weights: Weights | None = None
    """the weights of the best epoch (the earliest with the highest validation accuracy), on the group's
    first rank only: what the model's logged accuracy measured, so a child inherits, and ``best/``
    publishes, the model the search and the score saw"""
    weights_epoch: int | None = None
    """the epoch ``weights`` come from"""

    @property
    def total_ops(self) -> int:
        return sum(e.ops for e in self.epochs)


def _flatten(variables, dtype) -> np.ndarray:
    """All ``variables`` in one contiguous array (one MPI call instead of one per variable)."""
    return np.concatenate([np.asarray(v.numpy(), dtype).ravel() for v in variables])


def _assign_flat(variables, flat: np.ndarray) -> None:
    """The inverse of :func:`_flatten`: give each variable its slice back."""
    offset = 0
    for variable in variables:
        count = int(np.prod(variable.shape))
        variable.assign(flat[offset : offset + count].reshape(variable.shape).astype(variable.dtype))
        offset += count


class _WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from a tenth of the peak to the peak, then constant."""

    def __init__(self, peak: float, warmup_steps: int) -> None:
        self.peak, self.warmup_steps = peak, max(1, warmup_steps)

    def __call__(self, step):
        progress = tf.minimum(tf.cast(step, tf.float32) / self.warmup_steps, 1.0)
        return self.peak * (0.1 + 0.9 * progress)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps}


class GroupTrainer:
    """Trains models on one group: one instance per rank, reused across rounds."""

    def __init__(self, hvd: ModuleType, comm: MPI.Comm, source: DataSource, config: TrainConfig) -> None:
        precision_policy(config.precision)
        self.hvd, self.comm, self.source, self.config = hvd, comm, source, config
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.host = socket.gethostname()
        self.shard = Shard(source, self.rank, self.size, device=_train_device() if config.device_prefetch else None)

    # ------------------------------------------------------------------ public

    def train(
        self,
        graph: nx.DiGraph,
        hparams: HParams,
        parent: tuple[Weights, list[dict]] | None = None,
        on_epoch: Callable[[EpochResult], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        max_epochs: int | None = None,
        evaluate_first: bool = False,
        on_epoch_start: Callable[[int, float, int], None] | None = None,
        deadline: float | None = None,
    ) -> TrialResult:
        """Train ``graph`` with ``hparams``; raise :class:`TrialFailed` if the trial fails.

        ``parent`` (weights and transfer plan) is needed on the group's first
        rank only.  ``should_stop`` is polled between epochs (time limit);
        its answer is taken from the group's first rank, so all ranks stop
        together.  ``on_epoch_start(epoch, start, global_batch)`` is called as
        each epoch begins, with the ``start`` its result will carry (the
        leader tells the master, for MLLOG's ``epoch_start``).  ``deadline``
        (``time.monotonic()`` on the group's first rank, the only one that
        reads it) is when the run's time limit falls: a few steps into the
        first epoch, the group gives the model up (stop reason ``time limit``,
        no epoch) if that epoch would end after it (:data:`PROBE_STEPS`).
        """
        try:
            return self._train(graph, hparams, parent, on_epoch, should_stop, max_epochs, evaluate_first,
                               on_epoch_start, deadline)  # fmt: skip
        except TrialFailed:
            raise
        except Exception as exc:  # agree with the group, then fail the trial everywhere
            self._agree_failure(exc)
            raise AssertionError("unreachable") from exc

    # ------------------------------------------------------------------ internals

    def _agree(self, failure: dict | None, timeout: float | None = None) -> None:
        """The group's agreement at an epoch boundary (or after a failure): did any rank fail?

        A barrier (polled, so a failed rank can give up after ``timeout``)
        then an all-gather of each rank's failure or ``None``; if any rank
        failed, every rank raises the same :class:`TrialFailed`.
        """
        request = self.comm.Ibarrier()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not request.Test():
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(
                    f"a trial failed on rank {failure['rank']} alone ({failure['reason']}) while the rest of its "
                    "group waited in an all-reduce; this cannot be recovered"
                )
            time.sleep(0.002)
        reported = [f for f in self.comm.allgather(failure) if f is not None]
        if reported:
            first = reported[0]
            raise TrialFailed(first["reason"], first["rank"], first["host"], first["traceback"])

    def _agree_failure(self, exc: BaseException) -> None:
        failure = {
            "reason": " ".join(f"{type(exc).__name__}: {exc}".split())[:500],
            "rank": MPI.COMM_WORLD.Get_rank(),
            "host": self.host,
            "traceback": traceback.format_exc(),
        }
        self._agree(failure, timeout=self.config.agree_timeout)

    def _train(self, graph, hparams, parent, on_epoch, should_stop, max_epochs, evaluate_first,
               on_epoch_start=None, deadline=None) -> TrialResult:
        config = self.config
        tuned = as_trained(graph, hparams.kernel_size)
        counts = count_ops(tuned)
        keras.utils.set_random_seed(config.seed)
        model = build_keras_model(tuned, dtype=precision_policy(config.precision))
        fresh: list[str] = []
        if self.rank == 0 and parent is not None:
            try:
                fresh = transfer_weights(parent[0], model, parent[1])
            except Exception as exc:  # noqa: BLE001 — arrays that do not fit: a damaged, forged or foreign file
                # on this rank alone, while the others wait in the broadcast below: failing the trial here left
                # them there until the agreement's timeout ended the run.  The child starts from scratch instead
                # (a transfer may have set some layers before it failed), every layer counted fresh
                print(f"aiperf_mpi: warning: rank {MPI.COMM_WORLD.Get_rank()}: the parent's weights do not fit "
                      f"this child ({type(exc).__name__}: {str(exc)[:200]}); it trains from scratch", flush=True)
                keras.utils.set_random_seed(config.seed)
                model = build_keras_model(tuned, dtype=precision_policy(config.precision))
                fresh = [layer.name for layer in model.layers if layer.weights]
        self._broadcast(model)

        batch = hparams.batch_size
        steps = self.shard.steps(batch)
        global_batch = batch * self.size
        peak = config.base_lr * global_batch / 256.0
        schedule = _WarmupSchedule(peak, LEARNING_RATE_WARMUP_EPOCHS * steps)
        optimizer = make_optimizer(config.precision, schedule, config.momentum)
        # its slots (momentum) made now: created inside the first step instead, they make tf.function trace the
        # whole step twice (the variable-creation protocol), seconds per model
        optimizer.build(model.trainable_variables)
        train_step = self._make_step(model, optimizer, loss_function(tuned))
        evaluate = make_evaluate(model)  # any batch size: one trace serves the full batches and the short last one
        initial = self._validate(evaluate, batch)[0] if evaluate_first else None

        limit = max_epochs or config.max_epochs
        epochs: list[EpochResult] = []
        policy = EpochStop(config.patience, config.min_delta)
        kept_accuracy, kept_weights, kept_epoch = -math.inf, None, None  # the best epoch's weights (first rank)
        for epoch in range(1, limit + 1):
            asked = stop_asked(should_stop()) if should_stop is not None else ""
            if policy.stopped(self.comm.bcast(asked, root=0)):  # the first rank's reason, the same on every rank
                break
            try:
                result = self._epoch(epoch, model, train_step, evaluate, optimizer, counts, batch, steps,
                                     on_epoch_start, deadline, probe=epoch == 1)  # fmt: skip
            except _OutOfTime:
                policy.stopped(TIME_LIMIT)
                break
            epochs.append(result)
            if on_epoch is not None:
                on_epoch(result)
            if self.rank == 0 and result.val_accuracy > kept_accuracy:  # a copy in host memory, one model's size
                kept_accuracy, kept_weights, kept_epoch = result.val_accuracy, model_weights(model), epoch
            if policy.after_epoch(result.val_accuracy):
                break
        reason = policy.reason
        best_accuracy = max((e.val_accuracy for e in epochs), default=float("nan"))
        if self.rank == 0 and kept_weights is None:  # no epoch (stopped at once): the model as built
            kept_weights = model_weights(model)
        return TrialResult(epochs, best_accuracy, reason, hparams, fresh, initial, kept_weights, kept_epoch)

    def _broadcast(self, model: keras.Model) -> None:
        """All ranks take the first rank's weights (one flat MPI broadcast)."""
        if self.size == 1:
            return
        flat = _flatten(model.variables, np.float32)
        self.comm.Bcast(flat, root=0)
        _assign_flat(model.variables, flat)

    def _average_statistics(self, model: keras.Model) -> None:
        """BN moving statistics averaged over the group, so every rank evaluates the same model."""
        variables = model.non_trainable_variables
        if self.size == 1 or not variables:
            return
        flat = _flatten(variables, np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        _assign_flat(variables, flat / self.size)

    def _make_step(self, model, optimizer, loss_fn):
        hvd = self.hvd
        allreduce = (lambda grads: average_in_chunks(hvd, grads)) if self.size > 1 else None
        return make_train_step(model, optimizer, loss_fn, self.config.precision == "fp16", self.config.xla, allreduce)

    def _validate(self, evaluate, batch: int) -> tuple[float, int, float, int]:
        """Top-1 accuracy over the whole group's validation split, the samples it covered, the seconds of
        batches that traced ``evaluate`` (the first batch, and a short last one), and the correct count."""
        correct = seen = 0
        tracing = 0.0
        for x, y in self.shard.validation(batch):
            traces = evaluate.experimental_get_tracing_count()
            started = time.perf_counter()
            predicted = tf.argmax(evaluate(x), axis=-1, output_type=tf.int32)
            correct += int(tf.reduce_sum(tf.cast(predicted == y, tf.int32)))
            if evaluate.experimental_get_tracing_count() != traces:
                tracing += time.perf_counter() - started
            seen += int(y.shape[0])
        totals = self.comm.allreduce(np.array([correct, seen], dtype=np.int64), op=MPI.SUM)
        return float(totals[0]) / max(int(totals[1]), 1), int(totals[1]), tracing, int(totals[0])

    def _epoch(self, epoch, model, train_step, evaluate, optimizer, counts, batch, steps,
               on_start=None, deadline=None, probe=False) -> EpochResult:
        start = time.time()
        if on_start is not None:
            on_start(epoch, start, batch * self.size)
        data_wait = compute = 0.0
        losses = []
        iterator = iter(self.shard.train(batch, self.config.seed, epoch))
        compiling = 0.0
        # every rank reaches the broadcast (only the first knows the deadline); a model's later epochs are judged
        # before they begin (the leader's should_stop), this one once its step time is known
        probe_at = PROBE_STEPS if probe and (deadline is not None or self.size > 1) else -1
        step_times: list[float] = []
        for index in range(steps):
            if index == probe_at and steps > probe_at + 1:  # the same step on every rank: one small broadcast
                late = self.rank == 0 and _epoch_ends_late(deadline, step_times[1:], steps - index,
                                                           self.shard.validation_batches(batch))  # fmt: skip
                if self.comm.bcast(late, root=0):
                    raise _OutOfTime()
            t0 = time.perf_counter()
            x, y = next(iterator)
            t1 = time.perf_counter()
            traces = train_step.traces()
            losses.append(float(train_step(x, y)))
            t2 = time.perf_counter()
            data_wait += t1 - t0
            step_times.append(t2 - t0)
            if train_step.traces() != traces:  # this step traced (and compiled) the step function
                compiling += t2 - t1
            else:
                compute += t2 - t1
        self._agree(None)  # every rank reached the end of the epoch
        loss_sum = self.comm.allreduce(float(np.sum(losses)), op=MPI.SUM)
        mean_loss = loss_sum / (steps * self.size)
        if not math.isfinite(mean_loss):
            raise TrialFailed(f"non-finite training loss ({mean_loss}) in epoch {epoch}", self.rank, self.host)
        self._average_statistics(model)

        t3 = time.perf_counter()
        accuracy, validated, eval_compile, correct = self._validate(evaluate, batch)
        evaluation = time.perf_counter() - t3 - eval_compile
        train_samples = steps * batch * self.size
        ops = epoch_ops(counts, train_samples, validated, batch * self.size)
        return EpochResult(
            epoch=epoch,
            train_loss=mean_loss,
            val_accuracy=accuracy,
            start=start,
            end=time.time(),
            ops=ops.total,
            ops_train=ops.train,
            ops_update=ops.update,
            ops_validation=ops.validation,
            steps=steps,
            train_samples=train_samples,
            validation_samples=validated,
            correct=correct,
            data_wait=data_wait,
            compute=compute,
            evaluation=evaluation,
            compile=compiling + eval_compile,
            learning_rate=float(keras.ops.convert_to_numpy(optimizer.learning_rate)),
            xla=self.config.xla,
        )
