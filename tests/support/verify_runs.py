"""A hand-made run directory that is right in every detail the verifier checks, and ways to spoil it.

:func:`consistent_run` writes what the benchmark writes — graph files and
their hashes, epochs counted by the package's counter for their group's
global batch, ``model_done`` records that repeat them, the score event and
``score.json`` from the score module, the provenance of this checkout — for
two small models on two groups, without TensorFlow or MPI, so the unit
tests can tamper with one thing at a time and see it named.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from aiperf_mpi import __version__
from aiperf_mpi.graph.model import as_trained, from_json, param_shapes, to_json, with_kernel_size
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter, task_details
from aiperf_mpi.results import provenance, runlog
from aiperf_mpi.results.graphs import LENGTH, OFFSET, append_graph, read_graph, segment_graph_file
from aiperf_mpi.results.score import compute_score
from aiperf_mpi.results.stored_weights import MODEL_SHA256, WEIGHTS_SHA256, file_sha256
from tests.support.event_logs import write_log

VERSIONS = {"python": "3.11.7", "tensorflow": "2.18.1", "horovod": "0.28.1", "mpi4py": "4.1.2",
            "mpi": {"vendor": "Open MPI", "version": "5.0.11", "library": "Open MPI v5.0.11"}}  # fmt: skip
RANKS = 2
"""ranks of each group: the global batch is batch_size × 2"""
PEAK = 2.0e15
"""each group's measured peak, ops/s: a full ImageNet epoch of the kernel-5 model in 8 s of compute is 0.56 of it,
and under the hardware table's bound of the group's two B200s (2.25e15 at fp32, 4.5e15 at fp16)"""
HOST = {"host": "h0", "cpu": "AMD EPYC 9575F", "cpu_vendor": "AuthenticAMD", "cores": 128,
        "cpu_flags": ["sse2", "avx", "fma", "avx2", "avx512f", "avx512_bf16"], "accelerators": ["NVIDIA B200"] * 4,
        "ranks": [0, 1, 2, 3, 4]}  # fmt: skip
"""the one node of the consistent run, as the system event describes it: the master and two groups of two"""
DATA_SHAPES = {"imagenet": (224, 3, 1000), "digits": (32, 3, 10)}
"""each data set's (image size, channels, classes): the graphs are built for the configured one"""
DATA_SPLITS = {"imagenet": (1_281_167, 50_000), "digits": (1_437, 360)}
"""each data set's (train, validation) samples as the data check counts them (ImageNet: the standard split)"""


def full_pass(dataset: str, batch: int) -> tuple[int, int]:
    """An epoch's (steps, validation samples): one pass over the train split, whole ranks' shares of whole
    batches (the pipeline's ``(train // ranks) // batch``), and the whole validation split."""
    train, validation = DATA_SPLITS[dataset]
    return (train // RANKS) // batch, validation


def data_check(dataset: str) -> dict:
    """``run_start``'s ``data`` for ``dataset``, as the session logs it."""
    size, channels, classes = DATA_SHAPES[dataset]
    train, validation = DATA_SPLITS[dataset]
    return {"dataset": dataset, "train": train, "validation": validation, "classes": classes,
            "image_shape": [size, size, channels]}  # fmt: skip


def _epoch(task: int, group: int, number: int, end: float, graph_json: str, batch: int, accuracy: float,
           dataset: str) -> dict:  # fmt: skip
    steps, validation = full_pass(dataset, batch)
    ops = epoch_ops(count_ops(from_json(graph_json)), steps * batch * RANKS, validation, batch * RANKS)
    correct = round(accuracy * validation)
    return {"event": runlog.EPOCH, "time": end + 0.5, "task": task, "group": group, "epoch": number,
            "train_loss": 1.0, "val_accuracy": correct / validation, "start": end - 10, "end": end, "ops": ops.total,
            "ops_train": ops.train, "ops_update": ops.update, "ops_validation": ops.validation, "steps": ops.steps,
            "train_samples": steps * batch * RANKS, "validation_samples": validation, "correct": correct,
            "data_wait": 0.1, "compute": 8.0, "evaluation": 1.0, "learning_rate": 0.1, "compile": 0.0,
            "xla": False}  # fmt: skip


def _done(task: int, group: int, t: float, graph_json: str, hparams: dict, epochs: list[dict]) -> dict:
    counts = count_ops(from_json(graph_json))
    record = {
        "id": task, "parent": None, "graph": graph_json, "status": "trained", "hparams": hparams,
        "epochs": [{k: v for k, v in e.items() if k not in ("event", "time", "task", "group")} for e in epochs],
        "accuracy": max(e["val_accuracy"] for e in epochs), "predicted_accuracy": None,
        "ops": {"total": sum(e["ops"] for e in epochs), "forward_per_sample": counts.forward_eval,
                "backward_per_sample": counts.backward, "update_per_step": counts.update, "params": counts.params},
        "timings": {"train": 20.0, "task": task, "group": group, "stop": "epoch limit"},
        "description": "seed", "weights": f"weights/task-{task}.npz",
    }  # fmt: skip
    return {"event": runlog.MODEL_DONE, "time": t, "model": record, "task": task, "group": group}


def consistent_run(run_dir: Path, dataset: str = "imagenet", precision: str = "fp16",
                   with_provenance: bool = True) -> Path:  # fmt: skip
    """Two groups, one model each (kernel 3 at batch 32, kernel 5 at batch 16), two epochs each, 100 s.

    Its times, rates and counts are those of a real run: epochs of 10 s (8 s of compute), one model at a
    time per group, each logged after it ended; graphs for the data set's images and classes.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"dataset": dataset, "precision": precision, "search": "bayesian", "hpo": "tpe", "score_step": 50.0,
              "seed_model": "tiny", "time_limit": 100.0, "run_dir": str(run_dir), "max_epochs": 2,
              "image_size": 0, "batch_size": 32, "device_memory_gb": 16.0}  # fmt: skip
    start = {"event": runlog.RUN_START, "time": 1000.0, "segment": 1, "resumed": False, "config": config,
             "data": data_check(dataset)}  # fmt: skip
    if with_provenance:
        start["provenance"] = provenance.collect(__version__, VERSIONS)
    events = [
        start,
        {"event": runlog.SYSTEM, "time": 1000.1, "ranks": 5, "nodes": 1, "hosts": [HOST], **VERSIONS,
         "aiperf_mpi": __version__},
        {"event": runlog.LAYOUT, "time": 1000.2, "world_size": 5, "master_rank": 0, "hosts": ["h0"] * 5,
         "nodes": [0] * 5, "groups": [{"index": 0, "node": 0, "host": "h0", "ranks": [1, 2], "leader": 1,
                                       "horovod_size": RANKS},
                                      {"index": 1, "node": 0, "host": "h0", "ranks": [3, 4], "leader": 3,
                                       "horovod_size": RANKS}]},
        *({"event": runlog.PEAK, "time": 1000.3 + group / 100, "group": group, "host": "h0", "precision": precision,
           "ranks": RANKS, "ops_per_second": PEAK} for group in (0, 1)),
    ]  # fmt: skip
    seed = tiny_resnet(*DATA_SHAPES[dataset])
    seed_record = dict(zip(("model", "image_size", "channels", "classes"), ("tiny", *DATA_SHAPES[dataset]),
                           strict=True))  # model_proposed's lineage record: the seed both models are
    graphs = {0: to_json(seed), 1: to_json(with_kernel_size(seed, 5))}
    hparams = {0: {"batch_size": 32, "kernel_size": 3}, 1: {"batch_size": 16, "kernel_size": 5}}
    for task, graph_json in graphs.items():  # appended to the segment's graphs file, as the master does
        events.append({"event": runlog.MODEL_PROPOSED, "time": 1001.0 + task, "task": task, "group": task,
                       "parent": None, "hparams": hparams[task], "description": "seed",
                       "search": {"strategy": "seed", "search": "seed", "tuner": "tpe"},  # both: no parent
                       "seed": seed_record,
                       **append_graph(run_dir, segment_graph_file(1), graph_json)})  # fmt: skip
    e01 = _epoch(0, 0, 1, 1030, graphs[0], 32, 0.5, dataset)
    e11 = _epoch(1, 1, 1, 1050, graphs[1], 16, 0.6, dataset)
    e02 = _epoch(0, 0, 2, 1070, graphs[0], 32, 0.75, dataset)
    e12 = _epoch(1, 1, 2, 1090, graphs[1], 16, 0.7, dataset)
    events += [e01, e11, e02, _done(0, 0, 1071, graphs[0], hparams[0], [e01, e02]), e12,
               _done(1, 1, 1091, graphs[1], hparams[1], [e11, e12]),
               {"event": runlog.RUN_STOP, "time": 1100.0, "reason": "time limit", "discarded_tasks": [],
                "segment": 1}]  # fmt: skip
    score = compute_score(events, step=50.0)
    events.append({"event": runlog.SCORE, "time": 1100.1,
                   **{k: v for k, v in score.to_dict().items() if k != "grid"}})  # fmt: skip
    write_log(run_dir, events)
    write_mllog(run_dir, events)
    (run_dir / "score.json").write_text(json.dumps(score.to_dict(), indent=2))
    return run_dir


MLLOG_DEFAULTS = {"seed": 0, "base_lr": 0.1, "time_limit": 3600.0, "grace": 120.0, "batch_size": 32}
"""what the master's mllog description needs of a configuration that a hand-made one may lack"""


def write_mllog(run_dir: Path, events) -> Path:
    """Write ``run_dir/mllog.log`` from ``events`` (an iterable, streamed) as the master's MLLogWriter does.

    The master writes an epoch's ``epoch_start`` when its leader reports the start; here it is written just
    before the epoch's stop, with the epoch's own start time (a late line, as the writer marks one), which
    says the same.  An existing ``mllog.log`` is replaced.
    """
    (run_dir / MLLOG_FILE).unlink(missing_ok=True)
    writer = MLLogWriter(run_dir)
    config: dict = {}
    start: dict = {}
    system: dict = {}
    ranks: dict[int, int] = {}
    batch: dict[int, int] = {}
    details: dict[int, str] = {}
    try:
        for event in events:
            name = event["event"]
            if name == runlog.LAYOUT:
                ranks = {g["index"]: g.get("horovod_size", len(g["ranks"])) for g in event["groups"]}
                writer.description(config, system, event, start.get("data") or {}, start["time"])
                for logged in (start, system):  # the power lines' start, as the session feeds them (issue 53)
                    writer.energy(logged)
            elif name == runlog.MONITOR:
                writer.energy(event)
            elif name == runlog.MODEL_PROPOSED:
                hparams = event["hparams"]
                batch[event["task"]] = hparams["batch_size"] * ranks.get(event["group"], 1)
                details[event["task"]] = task_details(event["group"], (hparams["batch_size"], hparams["kernel_size"]))
            elif name == runlog.RUN_START:
                config = {**MLLOG_DEFAULTS, **event["config"]}
                start = event
            elif name == runlog.SYSTEM:  # written after run_start in the log, before the mllog description
                hosts = [h for h in event.get("hosts") or [] if isinstance(h, dict)]  # as mpi/system.py counts them
                most = max((len(h["accelerators"]) for h in hosts if isinstance(h.get("accelerators"), list)),
                           default=0)  # fmt: skip
                system = {"accelerators_per_node": most, **event}
                writer.run_start(config, system, start["segment"], start["time"])
            elif name == runlog.EPOCH:
                writer.epoch_start(event["task"], event["epoch"], event["start"], batch.get(event["task"], 0),
                                   details.pop(event["task"], "") if event["epoch"] == 1 else "")  # fmt: skip
                writer.epoch_stop(event["task"], event)
            elif name == runlog.RUN_STOP:
                writer.run_stop(event["reason"], event["time"])
    finally:
        writer.close()
    return run_dir


def read_log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / runlog.EVENTS_FILE).read_text().splitlines() if line.strip()]


def rewrite_log(run_dir: Path, change: Callable[[list[dict]], list[dict] | None]) -> None:
    """Apply ``change`` to the list of events (in place, or returning a new list) and write the log again."""
    events = read_log(run_dir)
    events = change(events) or events
    write_log(run_dir, events)


def find(events: list[dict], name: str, **fields: object) -> dict:
    """The first event named ``name`` whose fields have the values given."""
    return next(e for e in events if e["event"] == name and all(e.get(k) == v for k, v in fields.items()))


def forge(run_dir: Path, change: Callable[[list[dict]], list[dict] | None], step: float = 50.0,
          mllog: bool = True) -> None:  # fmt: skip
    """Change the log as a careful forger would: then rescore it with the package's own score code.

    Every ``score`` event is recomputed from the events before it, and ``score.json`` from the whole log,
    so the checks that recompute the score agree with the forgery: only the rules it breaks can name it.
    ``mllog``: write ``mllog.log`` again from the forged log too (False: leave the honest one, for the
    side-file checks to find).
    """
    events = read_log(run_dir)
    events = change(events) or events
    for index, event in enumerate(events):
        if event["event"] == runlog.SCORE:
            score = compute_score([e for e in events[:index] if e["event"] != runlog.SCORE], step=step)
            event.update({k: v for k, v in score.to_dict().items() if k != "grid"})
    write_log(run_dir, events)
    if mllog:
        write_mllog(run_dir, events)
    score = compute_score([e for e in events if e["event"] != runlog.SCORE], step=step)
    (run_dir / "score.json").write_text(json.dumps(score.to_dict(), indent=2))


def recount(events: list[dict], epoch: dict, train_samples: int | None = None, ranks: int = RANKS) -> None:
    """Set an epoch's samples (default: as they are) and recount its ops and steps, in its model record too."""
    proposal = find(events, runlog.MODEL_PROPOSED, task=epoch["task"])
    graph = with_kernel_size(from_json(_graph_text(events, epoch["task"])), proposal["hparams"]["kernel_size"])
    samples = epoch["train_samples"] if train_samples is None else train_samples
    ops = epoch_ops(count_ops(graph), samples, epoch["validation_samples"], proposal["hparams"]["batch_size"] * ranks)
    epoch.update(train_samples=samples, ops=ops.total, ops_train=ops.train, ops_update=ops.update,
                 ops_validation=ops.validation, steps=ops.steps)  # fmt: skip
    sync_record(events, epoch["task"])


def to_file_per_model(run_dir: Path) -> None:
    """Rewrite a run's graphs in the layout of the runs before the appended file: ``graphs/task-N.json`` each.

    The graphs are read where the log says and written one file a task; the events lose ``graph_offset`` and
    ``graph_bytes`` (``graph_sha256`` is the same bytes' hash), and the appended files are removed.
    """
    events = read_log(run_dir)
    for event in events:
        if event["event"] == runlog.MODEL_PROPOSED and OFFSET in event:
            name = f"graphs/task-{event['task']}.json"
            (run_dir / name).write_bytes(read_graph(run_dir, event))
            event.pop(OFFSET)
            event.pop(LENGTH)
            event["graph_file"] = name
    for path in (run_dir / "graphs").glob("segment-*.jsonl"):
        path.unlink()
    write_log(run_dir, events)


def _graph_text(events: list[dict], task: int) -> str:
    return find(events, runlog.MODEL_DONE, task=task)["model"]["graph"]


def sync_record(events: list[dict], task: int) -> None:
    """Make a task's model_done repeat its epoch events again (epochs, best accuracy, ops total)."""
    epochs = [e for e in events if e["event"] == runlog.EPOCH and e["task"] == task]
    record = find(events, runlog.MODEL_DONE, task=task)["model"]
    record["epochs"] = [{k: v for k, v in e.items() if k not in ("event", "time", "task", "group")} for e in epochs]
    record["accuracy"] = max(e["val_accuracy"] for e in epochs)
    record["ops"]["total"] = sum(e["ops"] for e in epochs)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A consistent run, made once per test module (import this fixture where it is used)."""
    return consistent_run(tmp_path_factory.mktemp("verify") / "run")


@pytest.fixture
def run(pristine, tmp_path) -> Path:
    """A fresh copy of :func:`pristine` to tamper with."""
    return Path(shutil.copytree(pristine, tmp_path / "run"))


def write_best(run_dir: Path) -> Path:
    """Write ``best/`` as the export room does (metadata.json, ops.json, graph.json), without TensorFlow.

    The model file is :func:`write_keras_file`'s (zeros, in Keras' layout, with h5py); the versions need TensorFlow
    and are left out; every field the verifier compares is
    built by the export room's own functions (:func:`aiperf_mpi.export.read_run`, ``choose``'s rule, ``lineage``,
    ``trained_graph``) from the log as it stands.
    """
    from aiperf_mpi import export

    facts = export.read_run(run_dir)
    task = facts.tasks[facts.best]
    graph = export.trained_graph(facts, task)
    ops = count_ops(graph)
    saved = task.saved_epoch or {}
    meta = {
        "format": export.FORMAT, "task": task.task, "model_id": task.model_id,
        "dataset": {"name": str(facts.config.get("dataset", ""))},
        "accuracy": {"weights": saved.get("val_accuracy"), "validation_samples": saved.get("validation_samples"),
                     "epoch": saved.get("epoch"), "best_epoch": task.accuracy, "run_best": facts.run_best_accuracy},
        "hparams": task.hparams,
        "training": {"epochs": task.epochs, "stop": task.stop, "precision": facts.config.get("precision", "fp32")},
        "params": {"total": ops.params, "trainable": ops.trainable_params},
        "ops_per_sample": {"forward": ops.forward_eval, "forward_train": ops.forward_train, "backward": ops.backward,
                           "training": ops.forward_train + ops.backward, "update_per_step": ops.update,
                           "macs": ops.macs},
        "lineage": export.lineage(facts, task),
    }  # fmt: skip
    best = run_dir / "best"
    best.mkdir(exist_ok=True)
    model = write_keras_file(best / "model.keras", param_shapes(graph))
    done = find(read_log(run_dir), runlog.MODEL_DONE, task=task.task)
    meta.update({"weights_file": done["model"].get("weights", ""), MODEL_SHA256: file_sha256(model),
                 WEIGHTS_SHA256: done.get(WEIGHTS_SHA256, "")})  # fmt: skip
    (best / "metadata.json").write_text(json.dumps(meta, indent=2))
    (best / "ops.json").write_text(json.dumps(ops.to_dict(), indent=1) + "\n")
    (best / "graph.json").write_text(to_json(graph) + "\n")
    return best


def write_keras_file(path: Path, shapes: dict) -> Path:
    """A ``.keras`` file as Keras 3 writes one (a zip of config.json, metadata.json and model.weights.h5 with each
    layer's arrays under ``layers/<name>/vars/<i>``), of zeros of ``shapes`` (``{layer: [shapes]}``), without
    TensorFlow: what verify reads of a best model (its arrays' shapes)."""
    import io
    import zipfile

    import h5py

    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as weights:
        for name, layer in shapes.items():
            for index, shape in enumerate(layer):
                weights.create_dataset(f"layers/{name}/vars/{index}", data=np.zeros(shape, np.float32))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3"}))
        archive.writestr("config.json", json.dumps({"class_name": "Functional"}))
        archive.writestr("model.weights.h5", buffer.getvalue())
    return path


def write_weights(run_dir: Path, task: int, shapes: dict | None = None) -> Path:
    """Write a task's ``weights/task-N.npz`` in the trainer's layout (``layer::index`` arrays, as
    ``aiperf_mpi.train.transfer.save_weights`` writes them; zeros, with NumPy alone) and log its sha256 in the
    task's ``model_done``, as the run does.  ``shapes``: ``{layer: [shapes]}`` instead of its graph's."""
    events = read_log(run_dir)
    proposal = find(events, runlog.MODEL_PROPOSED, task=task)
    graph = as_trained(from_json(read_graph(run_dir, proposal)), proposal["hparams"].get("kernel_size"))
    path = run_dir / "weights" / f"task-{task}.npz"
    path.parent.mkdir(exist_ok=True)
    arrays = param_shapes(graph) if shapes is None else shapes
    np.savez(path, **{f"{name}::{index}": np.zeros(shape, np.float32) for name, layer in arrays.items()
                      for index, shape in enumerate(layer)})  # fmt: skip
    find(events, runlog.MODEL_DONE, task=task)[WEIGHTS_SHA256] = file_sha256(path)
    write_log(run_dir, events)
    return path


def as_rehearsal(events: list[dict]) -> None:
    """Mark the log a rehearsal's (``rehearse``) at a stated rate its epochs keep: the fastest rate a rank that any
    epoch's phase shows (the stand-in waits each phase out at the stated rate, so at this one no phase is shorter
    than its stand-in's).  Returns nothing, as a ``forge`` change may."""
    from aiperf_mpi.results.inventory import group_ranks_by_host

    system, layout = find(events, runlog.SYSTEM), find(events, runlog.LAYOUT)
    ranks = {group: sum(hosts.values()) for group, hosts in group_ranks_by_host(layout, system).items()}
    rates = []
    for epoch in (e for e in events if e["event"] == runlog.EPOCH):
        for ops, seconds in ((epoch["ops_train"] + epoch["ops_update"], epoch["compute"]),
                             (epoch["ops_validation"], epoch["evaluation"])):  # fmt: skip
            if ops and seconds > 0:
                rates.append(ops / (seconds * ranks[epoch["group"]]))
    find(events, runlog.RUN_START)["config"].update(rehearse=True, rehearse_rate=max(rates))


def resumed_events(events: list[dict], run_dir: Path, second: Callable[[list[dict]], None]) -> list[dict]:
    """The log with a second segment: the first one's events again 200 s later (tasks renumbered, graphs appended to
    ``graphs/segment-2.jsonl``), changed by ``second``."""
    tasks = sum(e["event"] == runlog.MODEL_PROPOSED for e in events)
    again = []
    for event in events:
        copied = copy.deepcopy(event)
        for key in ("time", "start", "end"):
            if isinstance(copied.get(key), int | float):
                copied[key] += 200.0
        if copied["event"] == runlog.RUN_START:
            copied.update(segment=2, resumed=True)
        elif copied["event"] == runlog.RUN_STOP:
            copied["segment"] = 2
        elif copied["event"] == runlog.MODEL_PROPOSED:
            copied.update(append_graph(run_dir, segment_graph_file(2), read_graph(run_dir, event).decode()))
        elif copied["event"] == runlog.MODEL_DONE:
            copied["model"]["id"] += tasks
            copied["model"]["timings"]["task"] += tasks
        if "task" in copied:
            copied["task"] += tasks
        again.append(copied)
    second(again)
    out = events + again
    for task in range(tasks, 2 * tasks):
        sync_record(out, task)
    return out
