"""The rehearsal's stand-in for the training arithmetic, and nothing else (``--rehearse``).

A rehearsal runs the job a command line would get, on the same allocation,
without accelerators and without TensorFlow: MPI, the layout, relays,
staging, the master, the search, the tuner, the log, the score, the report,
signals, fault tolerance and resume are the real code.  Only what a group's
ranks do with a model is replaced, by this arithmetic:

- **time**: an epoch lasts the time its analytic operations (the count every
  real epoch logs, :func:`aiperf_mpi.graph.ops.epoch_ops`, with the tuned
  kernel size applied) take at the stated rate, ``rehearse_rate`` operations
  per second per rank: training ``(train + update) / (rate × ranks)``,
  validation ``validation / (rate × ranks)``;
- **gradient exchange**: a real all-reduce over the group's communicator of
  the model's parameter bytes (float32) × ``rehearse_allreduce``, once per
  epoch (not once per step: the time is the stated rate's, the all-reduce
  proves the communicator), in pieces of at most :data:`ALL_REDUCE_CHUNK`
  values (:func:`all_reduce_chunks`): the bytes on the wire are the model's,
  a rank's memory is not (a ResNet-50 child's whole buffer at once, with the
  MPI library's copy of it, held a rehearsal rank at 130–490 MB);
- **accuracy**: the stand-in curve :func:`stand_in_accuracy`, a saturating
  curve in the epoch whose ceiling grows with the model's parameters, so that
  the search and the tuner see models that differ.

Every file the run writes says it was a rehearsal: the logged configuration
(``rehearse``), the ``peak`` events (device ``rehearsal stand-in``), and the
validity rule ``training`` in ``score.json``, which a rehearsal never passes:
it is never valid and never comparable with a run that trained.

Pure: no MPI, no TensorFlow (the runner that uses it is :mod:`aiperf_mpi.mpi.rehearsal`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from aiperf_mpi.graph.ops import ModelOps, epoch_ops
from aiperf_mpi.results.epochs import rank_batches

CURVE_EPOCHS = 2.0
"""the stand-in curve's time constant: 1 − 1/e of its ceiling after this many epochs"""


def stand_in_accuracy(params: int, epoch: int) -> float:
    """The stand-in's validation accuracy after ``epoch`` epochs of a model with ``params`` parameters.

    ``ceiling × (1 − exp(−epoch / CURVE_EPOCHS))``, the ceiling ``0.30 + 0.05 × log2(1 + params / 10⁵)`` at
    most 0.95: ResNet-50's 25.6 M parameters reach 0.70, a wider child a little more.  Documented so that a
    reader of a rehearsal's report knows its accuracies are made, not measured.
    """
    ceiling = min(0.95, 0.30 + 0.05 * math.log2(1 + params / 1e5))
    return ceiling * (1 - math.exp(-epoch / CURVE_EPOCHS))


@dataclass(frozen=True)
class StandInEpoch:
    """One epoch of the stand-in: what a real epoch would log, and how long each phase lasts."""

    fields: dict
    """every field of a real epoch but its clock (start, end, compute, evaluation: the runner's)"""
    train_seconds: float
    validation_seconds: float


def stand_in_epoch(counts: ModelOps, sizes: Mapping[str, int], batch: int, ranks: int, epoch: int,
                   rate: float) -> StandInEpoch:  # fmt: skip
    """The epoch a group of ``ranks`` at ``rate`` operations per second each would log, as the trainer counts it.

    The samples are the trainer's: every rank takes ``train // ranks // batch`` whole steps of ``batch``, and
    the whole validation split is evaluated; the correct count is the curve's accuracy × that split, so the
    logged accuracy is a count over a whole pass, as a real one is.
    """
    steps = rank_batches(sizes["train"], ranks, batch)
    train_samples = steps * batch * ranks
    validated = sizes["validation"]
    ops = epoch_ops(counts, train_samples, validated, batch * ranks)
    correct = round(stand_in_accuracy(counts.params, epoch) * validated)
    accuracy = correct / max(validated, 1)
    fields = {"epoch": epoch, "train_loss": -math.log(max(accuracy, 1e-6)), "val_accuracy": accuracy,
              "ops": ops.total, "ops_train": ops.train, "ops_update": ops.update, "ops_validation": ops.validation,
              "steps": steps, "train_samples": train_samples, "validation_samples": validated, "correct": correct,
              "data_wait": 0.0, "learning_rate": 0.0, "xla": False, "compile": 0.0}  # fmt: skip
    group_rate = rate * ranks
    return StandInEpoch(fields, (ops.train + ops.update) / group_rate, ops.validation / group_rate)


ALL_REDUCE_CHUNK = 1 << 20
"""float32 values the stand-in all-reduces at a time (4 MiB): the rank's buffer, which the MPI library's
all-reduce doubles with a buffer of its own; what a real rank holds for its gradients is the accelerator's"""


def all_reduce_chunks(floats: int, chunk: int = ALL_REDUCE_CHUNK) -> list[int]:
    """The sizes of the all-reduces that move ``floats`` values, each at most ``chunk``: the same bytes in all."""
    return [min(chunk, floats - start) for start in range(0, floats, chunk)]


def all_reduce_floats(params: int, fraction: float) -> int:
    """How many float32 values the stand-in all-reduces once an epoch: the parameters × ``fraction``, at least one."""
    return max(1, int(params * fraction))
