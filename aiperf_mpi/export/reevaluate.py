"""The best model's accuracy, recounted from its published weights: ``python -m aiperf_mpi.export.reevaluate RUN_DIR``.

The regulated score rests on one number, the best model's validation
accuracy, and a verifier that reads only files cannot tell a logged accuracy
from a true one.  This loads ``RUN_DIR/best/model.keras`` (the export of
:mod:`aiperf_mpi.export`, written at the end of every run) and counts its
correct predictions on the run's validation split again, so a reviewer holding
the weights and the data can compare it with the count the log claims
(``python -m analysis.verify RUN_DIR --reevaluate``, which runs this in a child
process: ``analysis/`` loads no TensorFlow).

It evaluates what the trainer evaluated, the way the trainer evaluated it:

* the model the log calls best (highest logged accuracy, ties to the
  earliest, as the export chooses it), whose ``best/model.keras`` must be the
  graph the log records for that task — layer for layer, name, kind and
  weight shapes — so another model's weights cannot stand in;
* the weights of its saved epoch (``weights_epoch``, its best), compared with
  that epoch's count: the epoch's ``correct`` where the log has it, else
  ``round(val_accuracy × validation_samples)`` (exact: the accuracy is a count
  over that many samples, written as a double);
* the data through the trainer's own pipeline
  (:meth:`aiperf_mpi.train.pipeline.Shard.validation`): the same shard of the
  split for each rank of the task's group, in the same batches of the task's
  ``batch_size``, the same preprocessing (``x / 127.5 − 1``; ImageNet decoded
  and resized by the same tf.data code) and the same top-1 count;
* the model built by the trainer's builder at the run's precision (its Keras
  dtype policy: ``mixed_bfloat16`` for bf16), the weights copied from
  ``model.keras`` by layer name; ``--precision fp32`` evaluates in float32
  instead.  On the CPU (never an accelerator: a run's rank may hold it).

Output: one JSON line on stdout (:data:`FORMAT`) with the logged count, the
recount and how it was made; ``problem`` names a model that is not the
logged graph.  Bad input — no ``best/model.keras`` (a bundle leaves the
weights out), synthetic data (no accuracy), a data set read from disk without
``--data-path``, data whose validation split is not the one the run
validated (another size or image shape) — is one line and exit 2.

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

from aiperf_mpi.data.sources import DataError, DataSource, open_source
from aiperf_mpi.export import ExportError, RunFacts, Task, read_run, trained_graph
from aiperf_mpi.graph.model import GraphError, input_node
from aiperf_mpi.results import runlog
from aiperf_mpi.results.precisions import PRECISIONS, UNRECORDED_PRECISION, logged_precision

PROG = "aiperf_mpi.export.reevaluate"
FORMAT = "aiperf_mpi.reevaluate/1"
MODEL_FILE = Path("best") / "model.keras"


@dataclass
class Claim:
    """What the log says about the weights in ``best/``: the task, its saved epoch and that epoch's count."""

    task: int
    model_id: int | None
    epoch: int | None
    logged_correct: int
    logged_from: str
    """``correct`` (the epoch's own count) or ``val_accuracy × validation_samples``"""
    validation_samples: int
    val_accuracy: float
    batch_size: int
    ranks: int
    """the ranks of the task's group: ``train_samples ÷ (steps × batch_size)``, each validated its shard"""


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
    """empty, or why the model in best/ is not the logged model (then nothing was counted)"""
    seconds: float


def claim_of(facts: RunFacts) -> Claim:
    """The log's best model and the count its saved epoch claims; ExportError when the log names none."""
    if facts.config.get("dataset") == "synthetic":
        raise ExportError("a run on synthetic data has no accuracy to re-evaluate")
    if facts.best is None:
        raise ExportError(f"no model finished training in {facts.run_dir}: no best model to re-evaluate")
    task: Task = facts.tasks[facts.best]
    epoch = task.saved_epoch
    if epoch is None:
        raise ExportError(f"task {task.task} (the best model) has no epoch in the log")
    samples, accuracy = epoch.get("validation_samples"), epoch.get("val_accuracy")
    if not isinstance(samples, int) or samples < 1 or not isinstance(accuracy, int | float):
        raise ExportError(f"task {task.task} epoch {epoch.get('epoch')}: no validation count in the log")
    logged = epoch.get("correct")
    source = "correct"
    if not isinstance(logged, int) or isinstance(logged, bool):
        logged, source = round(accuracy * samples), "val_accuracy × validation_samples"
    batch = task.hparams.get("batch_size")
    if not isinstance(batch, int) or batch < 1:
        raise ExportError(f"task {task.task} has no batch_size in its hyper-parameters")
    steps, trained = epoch.get("steps"), epoch.get("train_samples")
    per_rank = steps * batch if isinstance(steps, int) and steps > 0 else 0
    ranks = trained // per_rank if isinstance(trained, int) and per_rank and trained % per_rank == 0 else 1
    return Claim(task.task, task.model_id, epoch.get("epoch"), int(logged), source, samples, float(accuracy), batch,
                 max(ranks, 1))  # fmt: skip


def open_data(facts: RunFacts, data_path: Path | None, claim: Claim, graph) -> DataSource:
    """The run's data set read from ``data_path``, refused (DataError) when it cannot be the split the run validated."""
    config = facts.config
    name = str(config.get("dataset", ""))
    if name in ("digits", "synthetic") and data_path is not None:
        raise DataError(f"{name}: the data set is embedded or generated: --data-path does not apply")
    if data_path is not None and not data_path.exists():
        raise DataError(f"{name}: --data-path {data_path} does not exist")
    if name in ("cifar10", "imagenet", "hdf5") and data_path is None:
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


def _layers(model) -> list[tuple[str, str, list[tuple[int, ...]]]]:
    return [(layer.name, type(layer).__name__, [tuple(w.shape) for w in layer.weights]) for layer in model.layers]


def evaluation_model(model_file: Path, graph, policy: str):
    """The logged graph built as the trainer builds it at ``policy``, with ``model_file``'s weights; or a problem.

    The model file must be that graph, layer for layer (name, kind, weight shapes): a forger's weights of
    another model, or another task's export, are named instead of evaluated.
    """
    import keras

    from aiperf_mpi.export import _cpu_only
    from aiperf_mpi.train.keras_model import build_keras_model

    _cpu_only()
    try:
        published = keras.models.load_model(model_file, compile=False)
    except Exception as exc:  # noqa: BLE001 - any file Keras cannot read is the same answer: not a model
        reason = " ".join(str(exc).split())[:200]
        raise ExportError(f"{model_file}: not a Keras model Keras can load: {reason}") from None
    model = build_keras_model(graph, dtype=policy)
    theirs, ours = _layers(published), _layers(model)
    if theirs != ours:
        differ = next((f"{a} ≠ {b}" for a, b in zip(theirs, ours, strict=False) if a != b),
                      f"{len(theirs)} layers, the graph has {len(ours)}")  # fmt: skip
        return None, f"{model_file} is not the logged graph of the best model ({differ[:200]})"
    for layer in model.layers:
        if layer.weights:
            layer.set_weights(published.get_layer(layer.name).get_weights())
    return model, ""


def count_correct(model, source: DataSource, claim: Claim) -> tuple[int, int]:
    """Top-1 correct predictions and images seen over every rank's validation shard, in the trainer's batches."""
    import tensorflow as tf

    from aiperf_mpi.train.pipeline import Shard

    # as the trainer evaluates (aiperf_mpi.train.trainer: one trace for the full batches and the short last one)
    evaluate = tf.function(lambda x: model(x, training=False), reduce_retracing=True,
                           input_signature=[tf.TensorSpec([None, *model.input_shape[1:]], model.input.dtype)])
    hits = images = 0
    for rank in range(claim.ranks):
        for x, y in Shard(source, rank, claim.ranks).validation(claim.batch_size):
            guesses = tf.argmax(evaluate(x), axis=-1, output_type=tf.int32)
            hits += int(tf.reduce_sum(tf.cast(tf.equal(guesses, y), tf.int32)))
            images += int(y.shape[0])
    return hits, images


def reevaluate(run_dir: Path, data_path: Path | None, precision: str | None = None) -> Recount:
    """Recount the best model's correct predictions (see the module); ExportError/DataError for bad input."""
    started = time.monotonic()
    run_dir = Path(run_dir)
    runlog.log_path(run_dir)  # FileNotFoundError: not a run directory
    facts = read_run(run_dir)
    claim = claim_of(facts)
    model_file = run_dir / MODEL_FILE
    if not model_file.is_file():
        raise ExportError(f"{model_file} is missing: re-evaluation needs the run's published weights (a "
                          "bundle leaves them out; python -m aiperf_mpi.export RUN_DIR writes them from weights/)")
    graph = trained_graph(facts, facts.tasks[claim.task])
    source = open_data(facts, data_path, claim, graph)
    run_precision = str(logged_precision(facts.config) or UNRECORDED_PRECISION)
    chosen = precision or run_precision
    if chosen not in PRECISIONS:
        raise ExportError(f"the run's precision {chosen!r} is none of {', '.join(PRECISIONS)}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    model, problem = evaluation_model(model_file, graph, PRECISIONS[chosen].keras_policy)
    correct = seen = None
    if model is not None:
        correct, seen = count_correct(model, source, claim)
    accelerators = facts.system.get("accelerators_per_node")
    trained_on = "accelerators" if isinstance(accelerators, int) and accelerators > 0 else "cpus"
    return Recount(FORMAT, str(run_dir), source.name, chosen, run_precision, trained_on, claim, correct, seen,
                   problem, round(time.monotonic() - started, 3))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the recount as one JSON line; bad input is one line ``PROG: error: …`` and exit 2."""
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory (with best/model.keras)")
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
