"""The run's claimed accuracy, recounted from its saved weights: ``python -m aiperf_mpi.export.reevaluate RUN_DIR``.

The regulated score rests on one number, the run's best epoch accuracy, and
a verifier that reads only files cannot tell a logged accuracy from a true
one.  This counts the correct predictions of the weights saved at that epoch
on the run's validation split again, so a reviewer holding the weights and
the data can compare it with the count the log claims
(``python -m analysis.verify RUN_DIR --reevaluate``, which runs this in a child
process: ``analysis/`` loads no TensorFlow).

It evaluates what the trainer evaluated, the way the trainer evaluated it:

* the *claimed* best epoch (:func:`aiperf_mpi.results.best_claim.claimed_best`:
  the highest logged validation accuracy, the score's), which must be the
  epoch whose weights the best model saved (``weights_epoch``) — an epoch
  whose accuracy no kept weights can back fails the claim;
* those weights, where :mod:`aiperf_mpi.results.stored_weights` says they are
  (``weights/task-N.npz``, or ``best/model.keras`` once a single-copy export
  removed the ``.npz``), and only once tied to the log by the sha256 its
  ``model_done`` recorded; their layers must be the logged graph's, name for
  name and shape for shape, so another model's weights cannot stand in;
* the claimed epoch's count: its ``correct`` where the log has it, else
  ``round(val_accuracy × validation_samples)`` (exact: the accuracy is a count
  over that many samples, written as a double);
* the data through the trainer's own pipeline
  (:meth:`aiperf_mpi.train.pipeline.Shard.validation`): the same shard of the
  split for each rank of the task's group, in the same batches of the task's
  ``batch_size``, the same preprocessing (``x / 127.5 − 1``; ImageNet decoded
  and resized by the same tf.data code) and the same top-1 count;
* the model built by the trainer's builder at the run's precision (its Keras
  dtype policy: ``mixed_bfloat16`` for bf16), the weights set by layer name;
  ``--precision fp32`` evaluates in float32 instead.  On the CPU (never an
  accelerator: a run's rank may hold it).

Output: one JSON line on stdout (:data:`FORMAT`) with the logged count, the
recount and how it was made; when the claim cannot be recounted — no weights
saved at the claimed epoch, weights missing or not the logged file or graph,
the reviewer's data missing or not the split the run validated — ``problem``
says why in one line and ``rule`` names the rule it breaks
(:mod:`aiperf_mpi.results.best_claim`), and nothing was counted: the claim
fails, it is never taken on trust.  Bad input alone — not a run directory, a
run that claims no accuracy (synthetic data), ``--data-path`` for a data set
that is embedded — is one line and exit 2.

Where the two counts may differ, and by how much, is ``docs/verify.md``'s
section "Re-evaluating the best model".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from aiperf_mpi.data.sources import DataError, DataSource, open_source
from aiperf_mpi.export import ExportError, RunFacts, read_run, trained_graph
from aiperf_mpi.graph.model import GraphError, input_node
from aiperf_mpi.results import runlog
from aiperf_mpi.results.best_claim import CLAIM_RULE, DATA_RULE, WEIGHTS_RULE, BestClaim, claimed_best
from aiperf_mpi.results.precisions import PRECISIONS, UNRECORDED_PRECISION, logged_precision
from aiperf_mpi.results.stored_weights import trusted_weights

PROG = "aiperf_mpi.export.reevaluate"
FORMAT = "aiperf_mpi.reevaluate/2"
EMBEDDED = ("digits", "synthetic")
"""data sets no --data-path applies to"""


@dataclass
class Claim:
    """What the log claims: the run's best epoch, its task and count, and how the task's group validated it."""

    task: int
    model_id: int | None
    epoch: int | None
    logged_correct: int | None
    logged_from: str
    """``correct`` (the epoch's own count) or ``val_accuracy × validation_samples``"""
    validation_samples: int | None
    val_accuracy: float
    batch_size: int | None
    ranks: int
    """the ranks of the task's group: ``train_samples ÷ (steps × batch_size)``, each validated its shard"""
    weights_file: str = ""
    """the file the weights were read from, relative to the run directory ('' : none was)"""


@dataclass
class Recount:
    """The whole answer, printed as one JSON line."""

    format: str
    run_dir: str
    dataset: str
    precision: str
    """the precision evaluated at (the run's, or fp32 with ``--precision fp32``)"""
    run_precision: str
    trained_on: str
    """``cpus`` or ``accelerators`` (the ``system`` event's ``accelerators_per_node``); the recount runs on the CPU"""
    claim: Claim
    correct: int | None
    seen: int | None
    problem: str
    """empty, or why the claim cannot be recounted (then nothing was counted)"""
    rule: str
    """the rule ``problem`` breaks (:mod:`aiperf_mpi.results.best_claim`), '' with none"""
    seconds: float


class Unbacked(Exception):
    """The claim cannot be recounted: its message is the one line, ``rule`` the rule it breaks."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


def the_claim(facts: RunFacts) -> BestClaim:
    """The run's claimed best epoch; ExportError (bad input: exit 2) when the run claims no accuracy."""
    if facts.config.get("dataset") == "synthetic":
        raise ExportError("a run on synthetic data has no accuracy to re-evaluate")
    claim = claimed_best(facts.model)
    if claim is None:
        raise ExportError(f"no epoch of {facts.run_dir} has a validation accuracy: no claim to re-evaluate")
    return claim


def claim_of(facts: RunFacts, best: BestClaim) -> Claim:
    """The claimed epoch's logged count and how its group validated it (what is known of it, if it is odd)."""
    model = facts.model
    rows = np.flatnonzero((model.column("task") == best.task) & (model.column("epoch") == best.epoch))
    epoch = model.epoch(int(rows[0])) if len(rows) else {}
    task = facts.tasks[best.task] if best.task in facts.tasks else None
    samples = epoch.get("validation_samples")
    samples = samples if isinstance(samples, int) and not isinstance(samples, bool) and samples > 0 else None
    logged, source = epoch.get("correct"), "correct"
    if not isinstance(logged, int) or isinstance(logged, bool):
        logged = round(best.accuracy * samples) if samples else None
        source = "val_accuracy × validation_samples"
    batch = task.hparams.get("batch_size") if task is not None else None
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None
    steps, trained = epoch.get("steps"), epoch.get("train_samples")
    per_rank = steps * batch if isinstance(steps, int) and steps > 0 and batch else 0
    ranks = trained // per_rank if isinstance(trained, int) and per_rank and trained % per_rank == 0 else 1
    return Claim(best.task, task.model_id if task is not None else None, best.epoch, logged, source, samples,
                 best.accuracy, batch, max(ranks, 1))  # fmt: skip


def refuse_data_path(facts: RunFacts, data_path: Path | None) -> None:
    """Bad input (DataError, exit 2): ``--data-path`` for a data set the package embeds or generates."""
    name = str(facts.config.get("dataset", ""))
    if name in EMBEDDED and data_path is not None:
        raise DataError(f"{name}: the data set is embedded or generated: --data-path does not apply")


def open_data(facts: RunFacts, data_path: Path | None, claim: Claim, graph) -> DataSource:
    """The run's data set read from ``data_path``; DataError when it is missing or cannot be the split the run
    validated (the claim then fails: :data:`DATA_RULE`)."""
    config = facts.config
    name = str(config.get("dataset", ""))
    if data_path is not None and not data_path.exists():
        raise DataError(f"{name}: --data-path {data_path} does not exist")
    if name not in EMBEDDED and data_path is None:
        raise DataError(f"{name}: the run's data is read from disk: give its location with --data-path "
                        f"(the run read {config.get('data_path') or 'an unrecorded path'})")  # fmt: skip
    source = open_source(name, str(data_path) if data_path is not None else None, config.get("image_size") or None)
    source.check()
    node = graph.nodes[input_node(graph)]
    wanted = (int(node["h"]), int(node["w"]), int(node["c"]))
    if tuple(source.image_shape) != wanted:
        raise DataError(f"{name}: {data_path or 'the data'} holds {source.image_shape} images; the model takes "
                        f"{wanted}: not the run's data")  # fmt: skip
    if source.sizes["validation"] != claim.validation_samples:
        raise DataError(f"{name}: {data_path or 'the data'}'s validation split holds {source.sizes['validation']} "
                        f"images; the run validated {claim.validation_samples}: not the run's data")  # fmt: skip
    return source


def evaluation_model(weights_file: Path, graph, policy: str):
    """The logged graph built as the trainer builds it at ``policy``, with the weights of ``weights_file`` (an
    ``.npz`` or a ``.keras`` model); :class:`Unbacked` when they are not that graph's, layer for layer (name and
    shapes): a forger's weights of another model, or another task's, are named instead of evaluated.
    """
    from aiperf_mpi.export import _cpu_only
    from aiperf_mpi.train.keras_model import build_keras_model
    from aiperf_mpi.train.transfer import read_weights

    _cpu_only()
    try:
        weights = read_weights(weights_file)
    except Exception as exc:  # noqa: BLE001 - any file NumPy or Keras cannot read is the same answer: not weights
        reason = " ".join(str(exc).split())[:200]
        raise Unbacked(f"{weights_file.name}: not weights NumPy or Keras can read: {reason}", WEIGHTS_RULE) from None
    model = build_keras_model(graph, dtype=policy)
    for layer in model.layers:
        if not layer.weights:
            continue
        arrays = weights.pop(layer.name, None)
        expected, got = [tuple(w.shape) for w in layer.weights], [tuple(a.shape) for a in arrays or []]
        if expected != got:
            raise Unbacked(f"{weights_file.name} is not the logged graph of the task: layer {layer.name!r} has "
                           f"weights of shapes {got}, the graph's {expected}", WEIGHTS_RULE)  # fmt: skip
        layer.set_weights(arrays)
    if weights:
        raise Unbacked(f"{weights_file.name} is not the logged graph of the task: it has weights for layers the "
                       f"graph lacks ({sorted(weights)[:5]})", WEIGHTS_RULE)  # fmt: skip
    return model


def count_correct(model, source: DataSource, claim: Claim) -> tuple[int, int]:
    """Top-1 correct predictions and images seen over every rank's validation shard, in the trainer's batches."""
    import tensorflow as tf

    from aiperf_mpi.train.pipeline import Shard
    from aiperf_mpi.train.steps import make_evaluate

    evaluate = make_evaluate(model)  # as the trainer evaluates: one trace for the full batches and the short last one
    hits = images = 0
    assert claim.batch_size is not None  # checked before
    for rank in range(claim.ranks):
        for x, y in Shard(source, rank, claim.ranks).validation(claim.batch_size):
            guesses = tf.argmax(evaluate(x), axis=-1, output_type=tf.int32)
            hits += int(tf.reduce_sum(tf.cast(tf.equal(guesses, y), tf.int32)))
            images += int(y.shape[0])
    return hits, images


def _recount(facts: RunFacts, best: BestClaim, claim: Claim, data_path: Path | None, policy: str) -> tuple[int, int]:
    """The count of the weights saved at the claimed epoch; :class:`Unbacked` when the claim cannot be recounted."""
    if best.problem:
        raise Unbacked(best.problem, CLAIM_RULE)
    if claim.logged_correct is None or claim.validation_samples is None or claim.batch_size is None:
        raise Unbacked(f"task {claim.task} epoch {claim.epoch}: the log has no validation count or batch size to "
                       "recount", CLAIM_RULE)  # fmt: skip
    path, problem = trusted_weights(facts.run_dir, best.weights, best.weights_sha256)
    if path is None:
        raise Unbacked(problem, WEIGHTS_RULE)
    claim.weights_file = str(path.relative_to(facts.run_dir))
    try:
        graph = trained_graph(facts, facts.tasks[best.task])
    except ExportError as exc:
        raise Unbacked(str(exc), WEIGHTS_RULE) from None
    try:
        source = open_data(facts, data_path, claim, graph)
    except DataError as exc:
        raise Unbacked(str(exc), DATA_RULE) from None
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    model = evaluation_model(path, graph, policy)
    try:
        return count_correct(model, source, claim)
    except DataError as exc:  # a file of the data set that cannot be read as it is reached
        raise Unbacked(str(exc), DATA_RULE) from None


def reevaluate(run_dir: Path, data_path: Path | None, precision: str | None = None) -> Recount:
    """Recount the claimed best epoch's correct predictions (see the module); ExportError/DataError for bad input."""
    started = time.monotonic()
    run_dir = Path(run_dir)
    runlog.log_path(run_dir)  # FileNotFoundError: not a run directory
    facts = read_run(run_dir)
    best = the_claim(facts)
    refuse_data_path(facts, data_path)
    run_precision = str(logged_precision(facts.config) or UNRECORDED_PRECISION)
    chosen = precision or run_precision
    if chosen not in PRECISIONS:
        raise ExportError(f"the run's precision {chosen!r} is none of {', '.join(PRECISIONS)}")
    claim = claim_of(facts, best)
    correct = seen = None
    problem = rule = ""
    try:
        correct, seen = _recount(facts, best, claim, data_path, PRECISIONS[chosen].keras_policy)
    except Unbacked as exc:
        problem, rule = " ".join(str(exc).split()), exc.rule
    except GraphError as exc:
        problem, rule = f"task {claim.task}'s graph: {' '.join(str(exc).split())}", WEIGHTS_RULE
    accelerators = facts.system.get("accelerators_per_node")
    trained_on = "accelerators" if isinstance(accelerators, int) and accelerators > 0 else "cpus"
    return Recount(FORMAT, str(run_dir), str(facts.config.get("dataset", "")), chosen, run_precision, trained_on,
                   claim, correct, seen, problem, rule, round(time.monotonic() - started, 3))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the recount as one JSON line; bad input is one line ``PROG: error: …`` and exit 2."""
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory (with its weights: weights/ or best/)")
    parser.add_argument("--data-path", type=Path, default=None,
                        help="the run's data set (cifar10, imagenet, hdf5; digits is embedded)")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                        help="evaluate at this precision (default: the run's)")
    options = parser.parse_args(argv)
    try:
        recount = reevaluate(options.run_dir, options.data_path, options.precision)
    except (ExportError, DataError, FileNotFoundError, GraphError) as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(recount), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
