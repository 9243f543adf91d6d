"""The reviewer's re-execution of a serving run (issue 52, item 4): what ``serve check`` holds to the models.

:mod:`aiperf_mpi.serve.check` recounts every figure from the run's own records, which a forger writes too: a
hand-written ``serve.json``, serving log and predictions file for a run that never served passed it (100,000
samples/s, ×67 the measured peak, and an accuracy of 1.0 from labels stored in the very predictions file it
checked), and so did a bundle whose ``graph.json`` is a ResNet-50 beside a tiny ``model.keras`` (×63 the inference
operations).  So the check also runs the bundle:

* **the operations** — each member's ``model.keras`` is loaded and read back, layer by layer, into the ruler's
  graph (:func:`graph_of_model`: a layer the ruler has no count for, or one configured beyond what the graph can
  say, is a failure), and its forward operations are counted by the score's counter
  (:func:`aiperf_mpi.graph.ops.count_ops`) and compared with its ``graph.json``'s, layer by layer;
* **the predictions** — a sample of the input rows, drawn from a seed this machine makes fresh (printed, so a
  reviewer can repeat it; never one the log could predict), is re-predicted from the reviewer's own copy of the
  input (``--data``: the built-in sets are the package's own; a file is the reviewer's to name) and compared
  with the predictions file within :data:`PROBABILITY_TOLERANCE`;
* **the accuracy** — counted only against the labels of the input the reviewer names: the predictions file's
  own labels are the submitter's, and a mismatch with the reviewer's is a failure;
* **the rates** — the offline rate and the peak it is measured against are the run's own clocks: each is a
  trusted claim, printed with its factor over the run's measured peak (:func:`rate_claims`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from aiperf_mpi.graph.model import GraphError, from_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.inputs import Input
from aiperf_mpi.serve.servable import combine

PROBABILITY_TOLERANCE = 1e-4
"""the most a re-predicted probability may differ from the file's: the same machine gives the same bits
(servable.py); another processor's kernels (oneDNN's choice of algorithm) differ in float32's last places"""
SAMPLE_DEFAULT = 256
"""rows re-predicted by default: k forged rows of N escape the draw with a chance of about (1 − 256/N)^k (all of
them are drawn below 256 rows), and 256 rows of a tiny ResNet take about a second here"""
PREDICT_BATCH = 32
"""rows re-predicted in one call (the servable's traced function takes any batch)"""
TIE = 2e-6
"""two re-predicted probabilities nearer than this are a tie: another processor may order them either way"""
LABEL_CHUNK = 1024
"""rows of the reviewer's input read at a time when its labels are compared (only the labels are kept)"""


class Uncountable(Exception):
    """A loaded model the ruler cannot count: its text names the layer and why."""


def _square(value: object, what: str, layer: str) -> int:
    values = list(value) if isinstance(value, list | tuple) else [value]
    if not values or any(v != values[0] for v in values) or not isinstance(values[0], int):
        raise Uncountable(f"layer {layer}: its {what} {value!r} is not one square size (the graph has one)")
    return values[0]


def _require(config: Mapping, layer: str, **expected: object) -> None:
    for key, wanted in expected.items():
        found = config.get(key, wanted)
        if found != wanted:
            raise Uncountable(f"layer {layer}: {key} {found!r}, which the graph cannot say (it has {wanted!r})")


def _node(class_name: str, config: Mapping, name: str) -> dict:
    """One Keras layer's configuration as the graph's node: its type and the attributes the ruler reads."""
    if class_name == "InputLayer":
        shape = config.get("batch_shape") or config.get("batch_input_shape")
        if not isinstance(shape, list | tuple) or len(shape) != 4:
            raise Uncountable(f"layer {name}: an input of shape {shape!r}, not a batch of images")
        return {"type": "input", "h": shape[1], "w": shape[2], "c": shape[3]}
    if class_name == "Conv2D":
        _require(config, name, activation="linear", groups=1, data_format="channels_last")
        if _square(config.get("dilation_rate", 1), "dilation", name) != 1:
            raise Uncountable(f"layer {name}: a dilated convolution, which the graph cannot say")
        return {"type": "conv", "filters": config["filters"], "kernel": _square(config["kernel_size"], "kernel", name),
                "stride": _square(config["strides"], "stride", name), "padding": config["padding"],
                "bias": bool(config["use_bias"])}  # fmt: skip
    if class_name == "BatchNormalization":
        _require(config, name, center=True, scale=True)
        if config.get("axis") not in (-1, 3, [-1], [3]):
            raise Uncountable(f"layer {name}: batch normalisation over axis {config.get('axis')!r}, not channels")
        return {"type": "bn", "epsilon": config["epsilon"], "momentum": config["momentum"]}
    if class_name == "ReLU":
        _require(config, name, max_value=None, negative_slope=0.0, threshold=0.0)
        return {"type": "relu"}
    if class_name == "Add":
        return {"type": "add"}
    if class_name == "Concatenate":
        _require(config, name, axis=-1)
        return {"type": "concat"}
    if class_name in ("MaxPooling2D", "AveragePooling2D"):
        _require(config, name, data_format="channels_last")
        return {"type": "maxpool" if class_name == "MaxPooling2D" else "avgpool",
                "pool": _square(config["pool_size"], "pool", name),
                "stride": _square(config["strides"], "stride", name), "padding": config["padding"]}  # fmt: skip
    if class_name == "GlobalAveragePooling2D":
        _require(config, name, keepdims=False, data_format="channels_last")
        return {"type": "gap"}
    if class_name == "Dense":
        _require(config, name, activation="linear")
        return {"type": "dense", "units": config["units"], "bias": bool(config["use_bias"])}
    if class_name == "Dropout":
        return {"type": "dropout", "rate": config["rate"]}
    if class_name == "Softmax":
        _require(config, name, axis=-1)
        return {"type": "softmax"}
    raise Uncountable(f"layer {name}: a {class_name}, which the ruler has no count for")


def _producers(arguments: object) -> Iterable[str]:
    """The layers whose outputs a layer's call takes, in argument order (Keras' ``keras_history`` entries)."""
    if isinstance(arguments, Mapping):
        history = (arguments.get("config") or {}).get("keras_history") if arguments.get("class_name") == \
            "__keras_tensor__" else None  # fmt: skip
        if history is not None:
            yield str(history[0])
            return
        for value in arguments.values():
            yield from _producers(value)
    elif isinstance(arguments, list | tuple):
        for value in arguments:
            yield from _producers(value)


def graph_of_model(config: Mapping) -> nx.DiGraph:
    """A functional Keras model's configuration (``model.get_config()``) read back into the ruler's graph.

    Each layer is one node of its name, each call's inputs its edges in slot order: what
    :func:`aiperf_mpi.train.keras_model.build_keras_model` builds, read the other way.  Raises
    :class:`Uncountable` for a layer the graph cannot express or one called more than once (a shared layer)."""
    graph = nx.DiGraph(name=str(config.get("name", "model")))
    layers = config.get("layers")
    if not isinstance(layers, list) or not layers:
        raise Uncountable("the model has no layers a functional model lists")
    for layer in layers:
        name = str(layer.get("name") or (layer.get("config") or {}).get("name"))
        graph.add_node(name, **_node(str(layer.get("class_name")), layer.get("config") or {}, name))
    for layer in layers:
        name = str(layer.get("name") or (layer.get("config") or {}).get("name"))
        calls = layer.get("inbound_nodes") or []
        if len(calls) > 1:
            raise Uncountable(f"layer {name}: called {len(calls)} times (a shared layer: the graph has one call)")
        for slot, producer in enumerate(_producers(calls[0]["args"] if calls else [])):
            if producer not in graph:
                raise Uncountable(f"layer {name}: its input {producer!r} is no layer of the model")
            graph.add_edge(producer, name, slot=slot)
    return graph


def recount_members(bundle, manifest: Mapping, models: list) -> list[str]:
    """Each loaded member's forward operations, recounted from the model itself, against its ``graph.json``'s."""
    problems = []
    for member, model in zip(manifest["members"], models, strict=True):
        try:
            loaded = count_ops(graph_of_model(model.get_config()))
        except (Uncountable, GraphError) as exc:
            problems.append(f"{member['name']}: its model.keras cannot be counted: {exc}")
            continue
        graph = count_ops(from_json((bundle / member["graph"]).read_text(encoding="utf-8")))
        if loaded.forward_eval != graph.forward_eval:
            theirs = {layer.name: layer.forward_eval for layer in graph.layers}
            differ = [layer.name for layer in loaded.layers if theirs.get(layer.name) != layer.forward_eval]
            differ += sorted(set(theirs) - {layer.name for layer in loaded.layers})
            problems.append(f"{member['name']}: its loaded model counts {loaded.forward_eval:,} forward ops/sample, "
                            f"its graph.json {graph.forward_eval:,} (first differing layer: "
                            f"{differ[0] if differ else '?'}): the model served is not the graph counted")  # fmt: skip
    return problems


def fresh_seed() -> int:
    """A seed from this machine's entropy: a draw the run's files cannot predict or steer."""
    return int.from_bytes(os.urandom(8), "little")


def draw(count: int, sample: int, seed: int) -> np.ndarray:
    """``sample`` distinct rows of ``count`` (all of them when ``sample`` ≥ ``count``), in order."""
    if sample >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=sample, replace=False))


@dataclass
class Reexecution:
    """What the reviewer asked of the re-execution, and what it found (for the verdict's lines)."""

    spec: str | None = None
    """the reviewer's ``--data`` (None: the run's own input where the package holds it: :func:`reviewer_input`)"""
    sample: int = SAMPLE_DEFAULT
    seed: int = field(default_factory=fresh_seed)
    data_why: str = ""
    """where the input re-predicted came from, or why there is none"""
    found: list[str] = field(default_factory=list)
    """what it did, in words, for the verdict"""
    claims: list[str] = field(default_factory=list)
    """the trusted claims, in words"""


def repredict(servable, data: Input, found: Mapping, members: np.ndarray | None,
              reexecution: Reexecution) -> list[str]:  # fmt: skip
    """The drawn rows of the reviewer's input, predicted again by the loaded bundle (each member, and their
    mean), against the file's rows: the ensemble's probabilities within :data:`PROBABILITY_TOLERANCE`, its class
    the argmax of the re-predicted ones (a shift within the tolerance flipped near-ties and bought accuracy: a
    forger's review), and each member's class (``members``, the ``.npz``'s; None: the file holds none)."""
    rows = draw(data.count, reexecution.sample, reexecution.seed)
    probabilities, classes = found["probabilities"], np.asarray(found["classes"])
    worst, wrong, flipped, member_wrong = 0.0, [], [], []
    for first in range(0, len(rows), PREDICT_BATCH):
        chunk = rows[first:first + PREDICT_BATCH]
        images = np.concatenate([data.read(int(row), int(row) + 1)[0] for row in chunk])
        each = servable.member_predictions(images, PREDICT_BATCH)
        again = combine(each)
        for at, row in enumerate(chunk):
            difference = float(np.abs(again[at] - probabilities[row]).max())
            worst = max(worst, difference)
            if not difference <= PROBABILITY_TOLERANCE:
                wrong.append(int(row))
            top = again[at].argsort()[::-1]
            if classes[row] != top[0] and not again[at][top[0]] - again[at][classes[row]] <= TIE:
                flipped.append(int(row))
            if members is not None and any(members[m][row] != out[at].argmax() for m, out in enumerate(each)):
                member_wrong.append(int(row))
    reexecution.found.append(f"{len(rows)} of {data.count} rows re-predicted from {reexecution.data_why} (seed "
                             f"{reexecution.seed}), the largest difference {worst:.2g}")  # fmt: skip
    problems = []
    if wrong:
        problems.append(f"the predictions: {len(wrong)} of {len(rows)} re-predicted rows differ from the file by "
                        f"more than {PROBABILITY_TOLERANCE:g} (row {wrong[0]} first; seed {reexecution.seed}): not "
                        "what the bundle predicts")  # fmt: skip
    if flipped:
        problems.append(f"the predictions: {len(flipped)} of {len(rows)} re-predicted rows have another class than "
                        f"the file's (row {flipped[0]} first; seed {reexecution.seed})")  # fmt: skip
    if member_wrong:
        problems.append(f"the predictions: a member's class differs from the file's in {len(member_wrong)} of "
                        f"{len(rows)} re-predicted rows (row {member_wrong[0]} first; seed {reexecution.seed})")
    return problems


def reviewer_labels(data: Input) -> np.ndarray | None:
    """Every label of the reviewer's input, read a chunk at a time (None: it has none)."""
    if not data.labelled:
        return None
    parts = []
    for start in range(0, data.count, LABEL_CHUNK):
        _, labels = data.read(start, min(data.count, start + LABEL_CHUNK))
        parts.append(np.asarray(labels))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def accuracy_against(labels: np.ndarray, found: Mapping, members: np.ndarray | None, logged: Mapping) -> list[str]:
    """The logged accuracy recounted against the reviewer's ``labels`` (the file's own are only compared)."""
    problems = []
    classes = np.asarray(found["classes"])
    if found.get("labels") is not None and not np.array_equal(np.asarray(found["labels"]), labels):
        differ = int((np.asarray(found["labels"]) != labels).sum())
        problems.append(f"the predictions file's labels differ from the reviewer's data in {differ} of {len(labels)} "
                        "rows: the accuracy was counted against labels of its own")  # fmt: skip
    correct = int((classes == labels).sum())
    if correct != logged.get("correct") or logged.get("samples") != len(labels):
        problems.append(f"accuracy against the reviewer's labels: {correct} of {len(labels)} correct; the log says "
                        f"{logged.get('correct')} of {logged.get('samples')}")  # fmt: skip
    if members is not None:
        counted = [int((row == labels).sum()) for row in members]
        if counted != logged.get("member_correct"):
            problems.append(f"members' accuracy against the reviewer's labels: {counted}; the log says "
                            f"{logged.get('member_correct')}")  # fmt: skip
    return problems


def rate_claims(events: Mapping[str, list[dict]], here: Mapping | None = None) -> tuple[list[str], list[str]]:
    """The run's clocks as trusted claims, each with its factor over the run's own measured peak; the hardware the
    peak event names, with its factor over this machine's (``here``: its ``local_description``); and the problems:
    a rate or a peak that is no finite positive number (an absurd factor is a failed check), a host's measured
    peak above the hardware table's bound for it, or an offline rate above the table's bound for every host.

    The factor over the measured peak is printed, never held to a bound: the peak is the run's own probe, as
    noisy as its host (an honest run here served at ×2.47 the peak its 0.3 s probe measured beside a test's load,
    and at ×0.53 alone), and both are clocks the submitter writes.  A clock divided by 67 shows as a factor in the
    tens.  The table is not the submitter's: what it bounds is the hardware named, itself a claim."""
    offline = events["offline"][0]
    record = events["peak"][0] if events.get("peak") else {}
    peak = record.get("ops_per_second") if record else None
    rate = offline.get("ops_per_second")
    claims: list[str] = []
    if not _positive(rate):
        return claims, [f"the offline rate {rate!r} is no finite positive number of ops/s"]
    if not record:
        claims.append(f"the offline rate, {rate:.4g} ops/s: no peak was measured (--peak-seconds 0), so no factor; "
                      "serve run on the claimed hardware re-times it")  # fmt: skip
    elif not _positive(peak):
        return claims, [f"the measured peak {peak!r} is no finite positive number of ops/s"]
    else:
        claims.append(f"the offline rate, {rate:.4g} ops/s: ×{rate / peak:.3g} the ranks' own measured peak "
                      f"({peak:.4g} ops/s); both are the run's clocks, which no file proves: serve run on the "
                      "claimed hardware re-times them")  # fmt: skip
    hardware, problems = hardware_bounds(record, rate, here)
    claims += hardware
    for name in ("single_stream", "server"):
        if events.get(name):
            claims.append(f"the {name.replace('_', '-')} latencies: the run's clock, no factor this check can bound "
                          "(each summary is recomputed from them)")  # fmt: skip
    return claims, problems


def hardware_bounds(record: Mapping, rate: float, here: Mapping | None) -> tuple[list[str], list[str]]:
    """The peak event's hosts held to the hardware table (``results.hardware.host_bound``, fp32): each host's
    ranks' measured peaks, and the offline rate against every host's bound together.  A log from before the hosts
    were logged (or without a peak) names none: said, no bound."""
    from aiperf_mpi.results.hardware import host_bound

    hosts, rank_hosts, per_rank = record.get("hosts"), record.get("rank_hosts"), record.get("per_rank")
    if not (isinstance(hosts, list) and hosts and isinstance(rank_hosts, list) and isinstance(per_rank, list)
            and len(rank_hosts) == len(per_rank) and all(isinstance(h, dict) for h in hosts)):  # fmt: skip
        return ["the hardware: the serving log names no host description (a log from before they were logged, or "
                "no peak measured): no table holds its peak or its rate"], []  # fmt: skip
    claims, problems, total = [], [], 0.0
    for host in hosts:
        name = host.get("host")
        ranks = sum(1 for h in rank_hosts if h == name)
        bound = host_bound(host, ranks, "fp32").ops_per_second
        measured = sum(p for h, p in zip(rank_hosts, per_rank, strict=True) if h == name and _positive(p))
        if bound is None or not _positive(bound):  # hardware the table does not know: named, bounded by nothing
            claims.append(f"the hardware named: {_kind(host)} on host {str(name)[:40]!r}: the hardware table bounds "
                          "no such host, so neither its peak nor the rate is held to one")  # fmt: skip
            total = math.inf
            continue
        total += bound
        if measured > bound:
            problems.append(f"host {str(name)[:40]!r}: its ranks' measured peak {measured:.4g} ops/s is above the "
                            f"hardware table's bound for {_kind(host)}, {bound:.4g}: not physics")  # fmt: skip
        mine = host_bound(here, 1, "fp32").ops_per_second if here else None
        factor = f"×{bound / mine:.3g} this machine's bound" if mine else "no factor (this machine's bound unknown)"
        claims.append(f"the hardware named: {_kind(host)} on host {str(name)[:40]!r}: {factor}; no file proves it "
                      "ran there: serve run on that kind re-times it")  # fmt: skip
    if total and math.isfinite(total) and rate > total:
        problems.append(f"the offline rate {rate:.4g} ops/s is above the hardware table's bound for every host "
                        f"together, {total:.4g}: not physics")  # fmt: skip
    return claims, problems


def _kind(host: Mapping) -> str:
    devices = host.get("accelerators") if isinstance(host.get("accelerators"), list) else []
    if devices:
        return ", ".join(str(d)[:40] for d in devices[:4]) + (" …" if len(devices) > 4 else "")
    return f"{str(host.get('cpu'))[:60]} ({host.get('cores')} logical processors)"


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def reviewer_input(spec: str | None, logged: str, manifest: dict) -> tuple[Input | None, str]:
    """The input the re-execution reads: the reviewer's ``--data``, else the run's own when it is one the package
    holds (the digits, synthetic images, or ``run`` on a bundle trained on the digits), else none and why."""
    from aiperf_mpi.serve.bundle import input_spec
    from aiperf_mpi.serve.inputs import open_input

    shape = tuple(input_spec(manifest)["shape"][1:])
    if spec is not None:
        return open_input(spec, shape, manifest), f"the reviewer's --data {spec}"
    name = str(logged).partition(":")[0]
    built_in = name in ("digits", "synthetic") or (name == "run" and (manifest.get("source") or {}).get(
        "dataset") == "digits")  # fmt: skip
    if not built_in:
        return None, (f"the run served {logged!r}, a file the reviewer does not hold here: name your copy with "
                      "--data")  # fmt: skip
    try:
        return open_input(str(logged), shape, manifest), f"the package's own {logged} (as the run logged it)"
    except ServeError as exc:
        return None, f"the run's input {logged!r} cannot be made here ({exc})"


def reexecute(bundle, folder, events: Mapping[str, list[dict]], reexecution: Reexecution) -> list[str]:
    """The bundle loaded and run against the records (the module's list); its findings and claims are kept in
    ``reexecution``.  Every disagreement, in words: a check that could not re-execute what the run claims (no
    input to re-predict from, no labels for a claimed accuracy) fails, saying what to name."""
    from aiperf_mpi.serve.bundle import read_manifest
    from aiperf_mpi.serve.check import largest_predictions
    from aiperf_mpi.serve.predictions import read_predictions
    from aiperf_mpi.serve.servable import Servable

    manifest = read_manifest(bundle)
    unlisted = [str(m.get("name")) for m in manifest["members"] if m.get("keras") not in manifest["files"]]
    if unlisted:  # never load a model the bundle's hashes do not cover (the records' check names it)
        return [f"not re-executed: the model of {', '.join(unlisted)} is not one of the bundle's listed files"]
    servable = Servable(bundle)
    problems = recount_members(bundle, servable.manifest, servable.models)
    reexecution.found.append(f"{len(servable.models)} member(s) loaded, their forward operations recounted from "
                             "the loaded models")  # fmt: skip
    from aiperf_mpi.results.machine import local_description

    claims, unphysical = rate_claims(events, local_description())
    reexecution.claims += claims
    problems += unphysical
    if problems:  # a model the ruler cannot count, or not the graph counted: never run (its cost is the forger's)
        return problems
    logged = events["predictions"][0]
    path = folder / logged["file"]
    classes = int(servable.manifest["signature"]["outputs"][0]["classes"])
    if not path.is_file() or path.stat().st_size > largest_predictions(int(logged["rows"]), classes):
        return ["the predictions file is missing or larger than its rows can be (the records' check says which): "
                "not re-executed"]  # fmt: skip
    found = read_predictions(path)
    members = None
    if path.suffix == ".npz":
        with np.load(path) as arrays:
            members = arrays["member_classes"] if "member_classes" in arrays else None
    accuracy = events["accuracy"][0] if events.get("accuracy") else None
    data, reexecution.data_why = reviewer_input(reexecution.spec, events["serve_start"][0].get("data"),
                                                servable.manifest)  # fmt: skip
    if data is None:
        return [f"the predictions were not re-executed: {reexecution.data_why}"]
    if data.count != len(found["probabilities"]):
        return [f"the reviewer's input ({reexecution.data_why}) has {data.count} rows, the predictions file "
                f"{len(found['probabilities'])}: not the input served"]  # fmt: skip
    servable.check_shape((1, *data.shape), "the reviewer's input")
    if reexecution.sample < 1:
        reexecution.found.append("the predictions not re-executed: --sample 0")
    else:
        problems += repredict(servable, data, found, members, reexecution)
    if accuracy is None:
        return problems
    labels = reviewer_labels(data)
    if labels is None:
        return [*problems, f"the run claims an accuracy, and the input ({reexecution.data_why}) has no labels to "
                "count it against: name the labelled input with --data"]  # fmt: skip
    problems += accuracy_against(labels, found, members, accuracy)
    reexecution.found.append(f"the accuracy counted against the labels of {reexecution.data_why}")
    if members is None and accuracy.get("member_correct"):
        reexecution.claims.append("the members' accuracies: the predictions file (.csv) holds no member's classes, "
                                  "so they are the submitter's figures, not recounted")  # fmt: skip
    return problems
