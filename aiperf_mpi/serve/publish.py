"""``serve publish RUN_DIR OUT [--top K]``: a run's best model, or its best K as an ensemble, as a servable bundle.

The members are chosen as the export chooses its one model (:mod:`aiperf_mpi.export`): highest observed
validation accuracy first, the earliest model among equals, only trained models whose weights the run still
holds (its ``.npz``, or ``best/model.keras`` once a single-copy export removed it).  Each is built by the
export's code from the weights the log names (their sha256 checked against it), saved as ``model.keras`` and,
for serving stacks, as a TensorFlow SavedModel (Keras 3 ``model.export``: a ``serve`` endpoint taking the
float32 NHWC batch), with its graph, its operation counts (the counter the score uses) and the export's
metadata (lineage, hyper-parameters, versions).  The bundle is written to ``OUT.partial`` and renamed, so an
interrupted publish leaves no half bundle under ``OUT``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

from aiperf_mpi import export as exporter
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.bundle import COMBINE, FORMAT, MEMBERS_DIR, write_manifest
from aiperf_mpi.serve.card import model_card


def ranked_tasks(facts: exporter.RunFacts) -> list[exporter.Task]:
    """Trained tasks with a finite accuracy and weights still on disk, best first (ties: the earliest model)."""
    ranked = []
    for done in facts.model.models:
        accuracy = done.accuracy
        if done.status != "trained" or accuracy is None or not math.isfinite(accuracy):
            continue
        task = facts.tasks[done.task]
        try:
            exporter.weights_path(facts, task)
        except exporter.ExportError:
            continue  # retention removed it: not servable
        ranked.append((-accuracy, done.id, task))
    return [task for _, _, task in sorted(ranked, key=lambda row: row[:2])]


def choose_members(facts: exporter.RunFacts, top: int) -> list[exporter.Task]:
    """The ``top`` best servable tasks; one line when the run has none or fewer than asked for."""
    if facts.config.get("dataset") == "synthetic":
        raise ServeError("a run on synthetic data has no accuracy to choose its best models by")
    ranked = ranked_tasks(facts)
    if not ranked:
        raise ServeError(f"no trained model of {facts.run_dir} still has its weights: nothing to publish")
    if len(ranked) < top:
        raise ServeError(
            f"--top {top}: {facts.run_dir} holds the weights of only {len(ranked)} trained model(s) "
            "(a run keeps the best model's and its children's parents'; --keep-weights all keeps every "
            "one)"
        )
    return ranked[:top]


def write_member(facts: exporter.RunFacts, task: exporter.Task, folder: Path) -> tuple[dict, dict]:
    """One member's files under ``folder``: its manifest entry (paths relative to the bundle) and export metadata."""
    graph = exporter.trained_graph(facts, task)
    ops = count_ops(graph)
    source = exporter.weights_path(facts, task)
    exporter.weights_sha256(facts, task, source)  # refuses weights other than the ones the log records
    model = exporter.build_model(graph, source)
    meta = exporter.metadata(facts, task, graph, ops, "one of the run's best by validation accuracy")
    folder.mkdir(parents=True)
    model.save(folder / "model.keras")
    model.export(str(folder / "savedmodel"), format="tf_saved_model", verbose=False)
    (folder / "graph.json").write_text(to_json(graph) + "\n", encoding="utf-8")
    (folder / "ops.json").write_text(json.dumps(ops.to_dict(), indent=1) + "\n", encoding="utf-8")
    (folder / "metadata.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    base = folder.relative_to(folder.parents[1]).as_posix()
    return {
        "name": folder.name,
        "task": task.task,
        "model_id": task.model_id,
        "keras": f"{base}/model.keras",
        "savedmodel": f"{base}/savedmodel",
        "graph": f"{base}/graph.json",
        "ops": f"{base}/ops.json",
        "metadata": f"{base}/metadata.json",
        "forward_ops_per_sample": ops.forward_eval,
        "params": ops.params,
        "output_kind": "probabilities" if meta["output"]["kind"].startswith("probabilities") else "logits",
        "validation_accuracy": meta["accuracy"]["weights"],
        "validation_samples": meta["accuracy"]["validation_samples"],
        "hparams": task.hparams,
        "lineage_length": len(meta["lineage"]),
    }, meta


def manifest_of(facts: exporter.RunFacts, members: list[dict], metas: list[dict]) -> dict:
    """The contract (:mod:`aiperf_mpi.serve.bundle`) from the members' entries and their export metadata."""
    first = metas[0]
    h, w, c = first["input"]["shape"]
    classes = first["output"]["classes"]
    for meta in metas[1:]:
        if meta["input"]["shape"] != first["input"]["shape"] or meta["output"]["classes"] != classes:
            raise ServeError("the chosen models differ in input shape or classes: they cannot form one ensemble")
    dataset = first["dataset"]
    kind = "ensemble" if len(members) > 1 else "model"
    name = f"{Path(facts.run_dir).name}-{'top' + str(len(members)) if kind == 'ensemble' else members[0]['name']}"
    return {
        "format": FORMAT,
        "servable": {
            "name": name,
            "type": kind,
            "version": 1,
            "platform": "keras3 / tensorflow_savedmodel",
            "members": len(members),
            "created_unix": round(time.time(), 3),
        },
        "signature": {
            "method": "predict",
            "methods": {"predict": "class probabilities (N, classes)", "classify": "argmax of predict (N,)"},
            "inputs": [
                {
                    "name": "images",
                    "dtype": "float32",
                    "shape": [-1, h, w, c],
                    "layout": "NHWC",
                    "channels": first["input"]["channels"],
                    "preprocessing": {
                        "from": "uint8 pixels",
                        "divide_by": first["input"]["divide_by"],
                        "subtract": first["input"]["subtract"],
                        "text": first["input"]["from_uint8"],
                    },
                    "stored_as": "uint8 (N, H, W, C)",
                }
            ],
            "outputs": [
                {
                    "name": "probabilities",
                    "dtype": "float32",
                    "shape": [-1, classes],
                    "classes": classes,
                    "class_index": dataset["class_index"],
                    "class": "argmax",
                }
            ],
        },
        "combine": {
            "how": COMBINE if kind == "ensemble" else "the one member's softmax probabilities",
            "weights": [1.0 / len(members)] * len(members),
        },
        "members": members,
        "forward_ops_per_sample": sum(m["forward_ops_per_sample"] for m in members),
        "card": {
            "model_details": f"{kind} of {len(members)} network(s) found by aiperf_mpi's network-morphism search "
            f"in run {Path(facts.run_dir).name}",
            "intended_use": f"image classification of {dataset['name']}-like images ({h}×{w}×{c})",
            "training_data": dataset["images"],
            "evaluation_data": f"the run's validation split ({first['accuracy']['validation_samples']} images)",
            "metrics": {m["name"]: m["validation_accuracy"] for m in members},
            "limitations": "accuracies are the search's validation accuracies (the split also chose the models); "
            "an ensemble's accuracy is measured when it is served on labelled data",
        },
        "source": {
            "run_dir": str(facts.run_dir),
            "dataset": dataset["name"],
            "data_path": dataset["data_path"],
            "run_best_accuracy": facts.run_best_accuracy,
        },
    }


def publish(run_dir: Path | str, out: Path | str, top: int = 1) -> dict:
    """Write the bundle of ``run_dir``'s ``top`` best models to ``out``; returns its manifest."""
    run_dir, out = Path(run_dir), Path(out)
    if top < 1:
        raise ServeError(f"--top must be at least 1, got {top}")
    try:
        runlog.log_path(run_dir)
    except FileNotFoundError as exc:
        raise ServeError(str(exc)) from None
    if out.exists():
        raise ServeError(f"{out} exists: give a new directory (a bundle is never written over another)")
    facts = exporter.read_run(run_dir)
    chosen = choose_members(facts, top)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    members, metas = [], []
    for task in chosen:
        member, meta = write_member(facts, task, partial / MEMBERS_DIR / f"task-{task.task}")
        members.append(member)
        metas.append(meta)
    manifest = manifest_of(facts, members, metas)
    (partial / "model_card.md").write_text(model_card(manifest), encoding="utf-8")
    manifest = write_manifest(partial, manifest)
    partial.rename(out)
    return manifest
