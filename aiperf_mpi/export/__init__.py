"""The best trained model of a run, published: ``python -m aiperf_mpi.export RUN_DIR [--task N] [--out DIR]``.

The export room: it sits above ``train/`` (it builds the Keras model with
:mod:`aiperf_mpi.train.keras_model` and reads weights with
:mod:`aiperf_mpi.train.transfer`) and reads the log through the run's model
(:mod:`aiperf_mpi.results.logmodel`), as ``analysis/`` does.

Writes, into ``RUN_DIR/best/`` (``RUN_DIR/export/task-N/`` with ``--task N``,
or ``--out DIR``):

* ``model.keras`` — the Keras model of the task's graph with its trained
  weights.  The graph builder (:mod:`aiperf_mpi.train.keras_model`) uses
  built-in Keras layers only (no ``Lambda``, no custom class), so plain
  ``keras.models.load_model("model.keras")`` loads it without aiperf_mpi;
* ``graph.json`` — the graph it was built from, as trained (the tuned kernel
  size applied);
* ``ops.json`` — its analytic operations per sample from the counter of
  ``docs/counting.md`` (forward, training, per layer);
* ``metadata.json`` — accuracy, hyper-parameters, the input the model expects
  (image size, channel order, scaling), the data set, the lineage of
  morphisms from the seed and the versions, for programs; and the weights
  file it was built from, and whether that file is gone (below), with the
  sha256 of that file (``weights_sha256``, the one its ``model_done`` logged)
  and of ``model.keras`` as written (``model_sha256``): what ties ``best/`` to
  the log for a reviewer (``python -m analysis.verify``);
* ``model_card.md`` — the same for a person.

Which model: the best by observed validation accuracy, ties going to the
earliest — exactly the model whose weights the run's retention never removes
(:mod:`aiperf_mpi.job.retention`, ``history.best_observed``).  Its weights are
its best epoch's (the trainer keeps the weights of the earliest epoch with the
highest validation accuracy and logs which, ``weights_epoch`` in the model's
``timings``), so the accuracy *these weights* give is the model's logged
accuracy, what the search and the score saw.  A log from before that (no
``weights_epoch``) saved the last epoch's weights; the card then names both.

The best model is stored once.  A run's end exports with ``single_copy``
(``--single-copy``; :func:`analysis.after_run.export_best` passes it): once
``best/model.keras`` reads back as exactly the arrays of the task's
``weights/task-N.npz`` (float32 both: every precision keeps float32
variables), the ``.npz`` is removed and ``metadata.json`` says so
(``weights_file``, ``weights_file_removed: true``).  The log is not told — to
the master's retention and ``--resume`` the file still exists — so every
reader asks :func:`aiperf_mpi.results.stored_weights.locate_weights` where a
task's weights are: a resumed run's training rank inherits from
``best/model.keras``, a re-export builds from it, and a master's sweep that
removes the gone file finds nothing to remove (harmless).  A re-export whose
best model is another task first writes the old one's ``.npz`` back from the
old ``model.keras`` (unless the log says it was removed), so replacing
``best/`` never loses weights a later segment may inherit.  By hand the
command keeps both copies unless ``--single-copy`` is given: a run that is
still going may be reading that ``.npz``; ``--single-copy`` is for a finished
run, and applies only to the best model into ``RUN_DIR/best`` (with
``--task`` or ``--out`` it is refused).

Reading the log streams it once into the run's model; TensorFlow is
imported only to build and save the one model, on the CPU.  The benchmark's
master runs the command at the end of a run (:func:`aiperf_mpi.job.finish.export_best`)
in a child process under a timeout, so an export can never fail or hang a
finished run.  Bad input — no such task, weights removed, no trained model —
is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.graph.model import GraphError, as_trained, from_json, infer_shapes, input_node, output_node, to_json
from aiperf_mpi.graph.ops import ModelOps, count_ops
from aiperf_mpi.results import logmodel, runlog, stored_weights
from aiperf_mpi.results.graphs import GraphFileError, graph_place, read_graph
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.precisions import logged_precision

FORMAT = "aiperf_mpi.export/1"
DIVIDE_BY = 127.5
SUBTRACT = 1.0
"""the input scaling every data set's pipeline applies (``aiperf_mpi.data.tfdata.normalise``): x / 127.5 − 1"""

DATASETS = {
    "digits": ("scikit-learn's 1,797 bundled 8×8 handwritten digits: each 0..16 pixel scaled to 0..255 (×255/16, "
               "rounded), each pixel repeated 4×4 to 32×32, the grey value copied into 3 channels; validation: 360 "
               "images chosen by a fixed permutation (numpy default_rng(0)), `aiperf_mpi.data.sources.digits_arrays`",
               "the digit 0..9"),
    "cifar10": ("CIFAR-10 (binary version), 32×32 RGB; validation: test_batch.bin",
                "CIFAR-10's order: airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck"),
    "hdf5": ("an HDF5 file in aiperf_mpi's layout: uint8 (N, H, W, C) images as stored; validation: /validation",
             "the file's labels, 0-based"),
    "imagenet": ("ImageNet TFRecord shards (the standard converter's): JPEG decoded to RGB, resized to the image size "
                 "(bilinear, antialiased, aspect ratio not kept, no crop), clipped to 0..255; validation: the "
                 "validation-*-of-* shards",
                 "the converter's label − 1: 0..999 in the order of its synset list"),
    "synthetic": ("random uint8 images and labels (no accuracy: the score ignores it)", "random"),
}  # fmt: skip
"""data set → (what the images are and which split validated, what a class index means)"""


class ExportError(ValueError):
    """Nothing (or not that) can be exported; the message is the one line the user sees."""


class Task:
    """One task as the export reads it: the run model's task, named as the metadata names its parts.

    A view: the log was read once, into :class:`~aiperf_mpi.results.logmodel.RunModel`; only its epochs are
    looked up here, once per task asked for.
    """

    def __init__(self, logged: logmodel.Task, model: RunModel) -> None:
        self.logged = logged
        self.task = logged.task
        proposal, done = logged.proposal, logged.done
        self.parent: int | None = proposal.parent if proposal is not None else None
        """the parent's model id (``model_proposed``), None for the seed"""
        self.description = proposal.description if proposal is not None else ""
        self.hparams = dict(logged.hparams)
        self.model_id: int | None = done.id if done is not None else None
        self.status = logged.status
        """``trained`` or ``failed`` once ``model_done`` / ``model_failed`` came; empty while it never ended"""
        self.accuracy = done.accuracy if done is not None else None
        """the model's logged accuracy: its best epoch's"""
        self.weights = done.weights if done is not None else ""
        self.stop = done.stop if done is not None else ""
        self.epochs = logged.epochs
        self.weights_epoch = done.weights_epoch if done is not None else None
        """the epoch its saved weights come from, as logged (None: a log from before it was, the last epoch)"""
        self.last_epoch = model.epoch(logged.last_row) if logged.last_row >= 0 else None
        """the task's last epoch"""
        self.best_epoch = model.epoch(logged.best_row) if logged.best_row >= 0 else None
        """the task's earliest epoch of the highest validation accuracy"""

    @property
    def saved_epoch(self) -> dict | None:
        """The epoch whose weights were saved: the logged ``weights_epoch`` (the best), else the last."""
        if self.weights_epoch is not None and self.best_epoch and self.best_epoch.get("epoch") == self.weights_epoch:
            return self.best_epoch
        return self.last_epoch


class _Tasks(Mapping):
    """The run's tasks as export :class:`Task` views, each made when first asked for (a log has 10⁵ of them)."""

    def __init__(self, model: RunModel) -> None:
        self._model = model
        self._made: dict[int, Task] = {}

    def __getitem__(self, number: int) -> Task:
        made = self._made.get(number)
        if made is None:
            made = self._made[number] = Task(self._model.tasks[number], self._model)
        return made

    def __iter__(self) -> Iterator[int]:
        return iter(self._model.tasks)

    def __len__(self) -> int:
        return len(self._model.tasks)


class RunFacts:
    """What the export reads of a run: its model, and the few choices the export makes from it."""

    def __init__(self, model: RunModel) -> None:
        self.model = model
        self.run_dir = model.run_dir
        self.config = model.latest("config")
        self.system = model.system or {}
        self.provenance = model.latest("provenance")
        self.tasks = _Tasks(model)
        self.task_of_model = model.task_of_model
        self.removed = model.removed_files
        """weights files a ``weights_removed`` event names"""
        best = model.best_trained()
        self.best = best.task if best is not None else None
        """the task of the best model by observed accuracy (ties: the earliest), as retention keeps it"""
        self.run_best_accuracy = model.best_epoch_accuracy
        """the run's best epoch accuracy (the score's), which may belong to a task that never finished"""


def read_run(run_dir: Path) -> RunFacts:
    """The run's model, read in one streamed pass over its log (a cut last line is skipped, as the score skips it)."""
    return RunFacts(read_model(Path(run_dir), require_start=False))


def choose(facts: RunFacts, task: int | None) -> Task:
    """The task to export: ``task``, or the best model; ExportError (one line) when it cannot be exported."""
    if task is None:
        if facts.config.get("dataset") == "synthetic":
            raise ExportError("a run on synthetic data has no accuracy to choose the best model by; "
                              "--task N exports a given task")  # fmt: skip
        if facts.best is None:
            raise ExportError(f"no model finished training in {facts.run_dir}: nothing to export")
        chosen = facts.tasks[facts.best]
    else:
        if task not in facts.tasks:
            known = sorted(facts.tasks)
            span = f"tasks {known[0]}..{known[-1]}" if known else "no task"
            raise ExportError(f"task {task} is not in {facts.run_dir} (its log has {span})")
        chosen = facts.tasks[task]
        if chosen.status != "trained":
            state = "failed" if chosen.status == "failed" else "never finished training (the run ended first)"
            raise ExportError(f"task {task} {state}: it has no trained weights")
    weights_path(facts, chosen)
    return chosen


def weights_path(facts: RunFacts, task: Task) -> Path:
    """Where ``task``'s weights are: its ``.npz``, or ``best/model.keras`` once a single-copy export removed it."""
    if not task.weights:
        raise ExportError(f"task {task.task} has no weights file in the log (it trained no epoch)")
    path = stored_weights.locate_weights(facts.run_dir, task.weights)
    if path is None:
        if task.weights in facts.removed:
            raise ExportError(f"task {task.task}'s weights ({task.weights}) were removed during the run: a run "
                              "keeps only the weights a child may inherit and the best model's "
                              "(--keep-weights all keeps every one)")  # fmt: skip
        raise ExportError(f"task {task.task}'s weights file {facts.run_dir / task.weights} is missing")
    return path


def weights_sha256(facts: RunFacts, task: Task, source: Path) -> str | None:
    """The sha256 of the ``.npz`` ``task``'s model is built from (None: not known), refused (ExportError) when it
    is not the one the log records: the published model must be the weights the run saved.

    From ``best/model.keras`` (a single-copy export removed the ``.npz``): the sha256 that export recorded.
    """
    logged = task.logged.done.weights_sha256 if task.logged.done is not None else ""
    if source.suffix == ".keras":
        return (stored_weights.read_best_metadata(facts.run_dir) or {}).get(stored_weights.WEIGHTS_SHA256) or None
    found = stored_weights.file_sha256(source)
    if logged and found != logged:
        raise ExportError(f"{source} has sha256 {found}, the log records {logged} for task {task.task}'s weights: "
                          "not the file the run saved")  # fmt: skip
    return found


def trained_graph(facts: RunFacts, task: Task):
    """The graph the task trained: its stored graph, the tuned kernel size applied as the trainer applies it."""
    place = task.logged.place
    try:
        graph = from_json(read_graph(facts.run_dir, place))
    except GraphFileError as exc:
        raise ExportError(f"task {task.task}'s graph in {facts.run_dir}: {exc}") from None
    except GraphError as exc:
        raise ExportError(f"task {task.task}'s graph ({graph_place(place)} in {facts.run_dir}): {exc}") from None
    return as_trained(graph, task.logged.kernel_size)


def lineage(facts: RunFacts, task: Task) -> list[dict]:
    """The morphisms from the seed to ``task``, seed first: each step's task, model, description and accuracy."""
    steps, seen, current = [], set(), task
    while True:
        steps.append({"task": current.task, "model_id": current.model_id, "parent_model_id": current.parent,
                      "description": current.description, "accuracy": current.accuracy,
                      "hparams": current.hparams})  # fmt: skip
        seen.add(current.task)
        if current.parent is None:
            break
        parent_task = facts.task_of_model.get(current.parent)
        if parent_task is None or parent_task in seen:  # a log cut before the parent's model_done: say so
            steps.append({"task": None, "model_id": current.parent, "parent_model_id": None,
                          "description": "(not in the log)", "accuracy": None, "hparams": {}})  # fmt: skip
            break
        current = facts.tasks[parent_task]
    return steps[::-1]


def _cpu_only() -> None:
    """Build on the CPU: the export must not take an accelerator a training rank on this node holds."""
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TensorFlow was initialised already (a caller's process): use what it has
        pass


def build_model(graph, weights_path: Path):
    """The Keras model of ``graph`` in float32 with the weights of ``weights_path``; every layer must match."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    _cpu_only()
    from aiperf_mpi.train.keras_model import build_keras_model
    from aiperf_mpi.train.transfer import read_weights

    model = build_keras_model(graph, dtype="float32")
    weights = read_weights(weights_path)  # an .npz, or the model.keras of an earlier single-copy export
    for layer in model.layers:
        if not layer.weights:
            continue
        arrays = weights.pop(layer.name, None)
        if arrays is None:
            raise ExportError(f"{weights_path} has no weights for layer {layer.name!r} of the graph")
        expected = [tuple(w.shape) for w in layer.weights]
        got = [tuple(a.shape) for a in arrays]
        if expected != got:
            raise ExportError(f"{weights_path}: layer {layer.name!r} has weights of shapes {got}, "
                              f"the graph's layer {expected}")  # fmt: skip
        layer.set_weights(arrays)
    if weights:
        raise ExportError(f"{weights_path} has weights for layers the graph lacks: {sorted(weights)[:5]}")
    return model


def metadata(facts: RunFacts, task: Task, graph, ops: ModelOps, selected: str) -> dict:
    """Everything a program loading the model elsewhere needs to know, as JSON."""
    data = graph.nodes[input_node(graph)]
    out = output_node(graph)
    classes = int(infer_shapes(graph)[out][-1])
    dataset = str(facts.config.get("dataset", ""))
    images, labels = DATASETS.get(dataset, ("(unknown data set)", "(unknown)"))
    last = task.saved_epoch or {}
    samples = last.get("validation_samples")
    final = last.get("val_accuracy")
    which = ("its best epoch, the model's logged accuracy" if task.weights_epoch is not None else
             "the task's last epoch (a log from before the trainer kept the best epoch's weights)")  # fmt: skip
    config = facts.config
    return {
        "format": FORMAT,
        "run_dir": str(facts.run_dir),
        "task": task.task,
        "model_id": task.model_id,
        "selected": selected,
        "dataset": {"name": dataset, "data_path": config.get("data_path", ""), "images": images,
                    "classes": classes, "class_index": labels},  # fmt: skip
        "input": {
            "shape": [int(data["h"]), int(data["w"]), int(data["c"])],
            "layout": "NHWC (batch, height, width, channels)",
            "dtype": "float32",
            "channels": "RGB" if int(data["c"]) == 3 else f"{data['c']} channel(s)",
            "from_uint8": f"x / {DIVIDE_BY:g} - {SUBTRACT:g} (range [-1, 1]); no per-channel mean or std",
            "divide_by": DIVIDE_BY,
            "subtract": SUBTRACT,
        },
        "output": {"classes": classes,
                   "kind": "probabilities (softmax)" if graph.nodes[out]["type"] == "softmax" else "logits",
                   "class": "argmax of the output"},  # fmt: skip
        "accuracy": {
            "weights": final,
            "weights_note": f"top-1 validation accuracy of the exported weights: {which}",
            "validation_samples": samples,
            "validation_correct": None if final is None or samples is None else round(final * samples),
            "epoch": last.get("epoch"),
            "best_epoch": task.accuracy,
            "best_epoch_note": "the task's logged accuracy (its best epoch): what the search and the score saw",
            "run_best": facts.run_best_accuracy,
        },
        "hparams": task.hparams,
        "training": {"epochs": task.epochs, "stop": task.stop, "precision": logged_precision(config),
                     "exported_dtype": "float32", "seed_model": config.get("seed_model", ""),
                     "train_samples_per_epoch": last.get("train_samples")},  # fmt: skip
        "params": {"total": ops.params, "trainable": ops.trainable_params},
        "ops_per_sample": {"forward": ops.forward_eval, "forward_train": ops.forward_train,
                           "backward": ops.backward, "training": ops.forward_train + ops.backward,
                           "update_per_step": ops.update, "macs": ops.macs},  # fmt: skip
        "lineage": lineage(facts, task),
        "weights_file": task.weights,
        "versions": _versions(facts),
    }


def _versions(facts: RunFacts) -> dict:
    import keras
    import tensorflow as tf

    ran = {k: facts.system.get(k) for k in ("aiperf_mpi", "tensorflow", "horovod", "python") if facts.system.get(k)}
    return {"run": ran, "provenance": facts.provenance, "exported_with": {"keras": keras.__version__,
            "tensorflow": tf.__version__, "python": sys.version.split()[0]}}  # fmt: skip


def _si(value: float) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}"
    return f"{value:.4g} "


def _fraction(value) -> str:
    return "–" if value is None else f"{value:.4f}"


def model_card(meta: dict) -> str:
    """A short markdown card from the metadata (nothing here that the metadata does not hold)."""
    data, inputs, accuracy, ops = meta["dataset"], meta["input"], meta["accuracy"], meta["ops_per_sample"]
    h, w, c = inputs["shape"]
    lines = [
        f"# Model card: task {meta['task']} of {Path(meta['run_dir']).name}",
        "",
        f"Chosen as: {meta['selected']}.  Produced by aiperf_mpi's network-morphism search; `model.keras` loads with "
        "plain `keras.models.load_model` (built-in Keras layers only, Keras 3).",
        "",
        "| | |",
        "|---|---|",
        f"| data set | {data['name']}: {data['images']} |",
        f"| image size | {h}×{w}×{c} ({inputs['channels']}, channels last) |",
        f"| classes | {data['classes']} ({data['class_index']}) |",
        f"| accuracy of these weights | {_fraction(accuracy['weights'])} top-1 on {accuracy['validation_samples']} "
        f"validation images (epoch {accuracy['epoch']}) |",
        f"| best epoch's accuracy | {_fraction(accuracy['best_epoch'])} (the task's logged accuracy; the run's best "
        f"epoch: {_fraction(accuracy['run_best'])}) |",
        f"| parameters | {meta['params']['total']:,} ({meta['params']['trainable']:,} trainable) |",
        f"| operations per sample | forward {_si(ops['forward'])}OP, training (forward + backward) "
        f"{_si(ops['training'])}OP; update {_si(ops['update_per_step'])}OP per step (docs/counting.md) |",
        f"| hyper-parameters | {', '.join(f'{k} {v}' for k, v in meta['hparams'].items())} |",
        f"| training | {meta['training']['epochs']} epoch(s), stopped by {meta['training']['stop'] or '–'}, "
        f"{meta['training']['precision']}; exported in {meta['training']['exported_dtype']} |",
        "",
        "## Input",
        "",
        f"A batch of float32 images, shape (N, {h}, {w}, {c}), channels last, {inputs['channels']}: from uint8 "
        f"pixels, `{inputs['from_uint8']}`.  The output is {meta['output']['kind']} over {data['classes']} classes; "
        "the class is its argmax.",
        "",
        "## Lineage (seed first)",
        "",
        "| task | model | accuracy | kernel | batch | morphism |",
        "|---|---|---|---|---|---|",
    ]
    for step in meta["lineage"]:
        hp = step["hparams"]
        lines.append(f"| {step['task'] if step['task'] is not None else '–'} | {step['model_id']} | "
                     f"{_fraction(step['accuracy'])} | {hp.get('kernel_size', '–')} | {hp.get('batch_size', '–')} | "
                     f"{step['description'] or '–'} |")  # fmt: skip
    lines += ["", "Files: `model.keras`, `graph.json` (aiperf_mpi graph), `ops.json` (operations per sample, per "
              "layer), `metadata.json` (all of the above for programs).", ""]  # fmt: skip
    return "\n".join(lines)


@dataclass
class Exported:
    """Where the export went and what it cost."""

    out: Path
    task: int
    accuracy: float | None
    model_bytes: int
    seconds: float
    removed: str = ""
    """the weights file the single-copy export removed ('' when none)"""
    only_copy: str = ""
    """the weights file whose only copy ``model.keras`` now is (removed now or by an earlier single-copy export)"""
    restored: str = ""
    """the previous best model's weights file, written back from its model.keras before ``best/`` was replaced"""


def _same_weights(model, saved: Path) -> bool:
    """Whether the model file ``saved`` reads back as exactly ``model``'s arrays (before the other copy goes)."""
    import numpy as np

    from aiperf_mpi.train.transfer import read_weights

    got = read_weights(saved)
    for layer in model.layers:  # a layer's arrays at a time: no second full copy of the model in memory
        if not layer.weights:
            continue
        expected, read = layer.get_weights(), got.pop(layer.name, [])
        if len(expected) != len(read) or not all(np.array_equal(a, b) for a, b in zip(expected, read, strict=True)):
            return False
    return not got


def _restore_replaced_best(facts: RunFacts, chosen: Task) -> str:
    """Write the old ``best/``'s weights back to their ``.npz`` when it held their only copy and another task
    replaces it; the file the log did not see removed, a later ``--resume`` may still hand a child.  Returns
    the file written ('' when there was nothing to keep)."""
    old = stored_weights.read_best_metadata(facts.run_dir) or {}
    weights_file = old.get(stored_weights.WEIGHTS_FILE)
    if not isinstance(weights_file, str) or weights_file == chosen.weights or weights_file in facts.removed:
        return ""
    if stored_weights.locate_weights(facts.run_dir, weights_file) != facts.run_dir / stored_weights.BEST_MODEL:
        return ""
    from aiperf_mpi.train.transfer import read_weights, save_weights

    save_weights(facts.run_dir / weights_file, read_weights(facts.run_dir / stored_weights.BEST_MODEL))
    return weights_file


def export(run_dir: Path | str, task: int | None = None, out: Path | str | None = None,
           single_copy: bool = False) -> Exported:
    """Write the model of ``task`` (default: the best) and its description to ``out`` (see the module).

    ``single_copy`` (the run's end asks for it; ``--single-copy``): the best model, into ``RUN_DIR/best/``
    only, and its ``weights/task-N.npz`` removed once ``model.keras`` reads back as the same arrays; the
    metadata says so and every reader then loads ``best/model.keras`` (:mod:`aiperf_mpi.results.stored_weights`).
    """
    started = time.monotonic()
    run_dir = Path(run_dir)
    if single_copy and (task is not None or out is not None):
        raise ExportError("--single-copy applies to the best model exported to RUN_DIR/best only "
                          "(not with --task or --out)")  # fmt: skip
    runlog.log_path(run_dir)  # FileNotFoundError: not a run directory
    facts = read_run(run_dir)
    chosen = choose(facts, task)
    graph = trained_graph(facts, chosen)
    ops = count_ops(graph)
    selected = "best validation accuracy of the run's models" if task is None else f"--task {task}"
    best_dir = run_dir / stored_weights.BEST_DIR
    default = best_dir if task is None else run_dir / "export" / f"task-{chosen.task}"
    out = Path(out) if out is not None else default
    into_best = os.path.abspath(out) == os.path.abspath(best_dir)
    source = weights_path(facts, chosen)
    source_sha256 = weights_sha256(facts, chosen, source)
    model = build_model(graph, source)
    meta = metadata(facts, chosen, graph, ops, selected)
    meta[stored_weights.WEIGHTS_SHA256] = source_sha256
    npz = run_dir / chosen.weights
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save(partial / "model.keras")
    meta[stored_weights.MODEL_SHA256] = stored_weights.file_sha256(partial / "model.keras")
    remove = single_copy and npz.is_file()
    if remove and not _same_weights(model, partial / "model.keras"):
        raise ExportError(f"{partial / 'model.keras'} does not read back as the weights of {npz}: "
                          "both kept, nothing published")  # fmt: skip
    # the truth once this export is done: the .npz is gone (removed now, or by an earlier single-copy export)
    meta[stored_weights.WEIGHTS_FILE_REMOVED] = remove or not npz.is_file()
    (partial / "graph.json").write_text(to_json(graph) + "\n", encoding="utf-8")
    (partial / "ops.json").write_text(json.dumps(ops.to_dict(), indent=1) + "\n", encoding="utf-8")
    (partial / "metadata.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (partial / "model_card.md").write_text(model_card(meta), encoding="utf-8")
    restored = _restore_replaced_best(facts, chosen) if into_best else ""
    if out.exists():  # a re-export (a resumed run found a better model): the old one goes only now
        shutil.rmtree(out)
    partial.rename(out)
    if remove:  # only now: best/ (whose metadata says the .npz is gone) is in place first
        npz.unlink(missing_ok=True)
    only_copy = chosen.weights if into_best and meta[stored_weights.WEIGHTS_FILE_REMOVED] else ""
    return Exported(out, chosen.task, meta["accuracy"]["weights"], (out / "model.keras").stat().st_size,
                    time.monotonic() - started, chosen.weights if remove else "", only_copy, restored)  # fmt: skip
