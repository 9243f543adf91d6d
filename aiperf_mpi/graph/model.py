"""The model graph: a ``networkx.DiGraph`` whose nodes are typed layers.

Conventions (everything else derives from them):

* a node's ``type`` is one of :data:`LAYER_TYPES`; its other attributes are
  the layer's hyper-parameters, all JSON scalars (int, float, str, bool), so
  the JSON form round-trips exactly;
* an edge ``u → v`` is the tensor ``u`` produces, consumed by ``v``; its
  ``slot`` attribute is the input position (concat order matters);
* exactly one ``input`` node (attributes ``h``, ``w``, ``c``) and exactly one
  sink, the model's output;
* shapes exclude the batch dimension: ``(H, W, C)`` for images, ``(C,)``
  after global pooling or a dense layer.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx

Shape = tuple[int, ...]

JSON_FORMAT = "aiperf_mpi.graph/1"


@dataclass(frozen=True)
class LayerSpec:
    """What a layer type needs: its attributes (with defaults) and its arity."""

    required: tuple[str, ...]
    defaults: Mapping[str, object]
    min_inputs: int
    max_inputs: int


LAYER_TYPES: dict[str, LayerSpec] = {
    "input": LayerSpec(("h", "w", "c"), {}, 0, 0),
    "conv": LayerSpec(("filters", "kernel"), {"stride": 1, "padding": "same", "bias": False, "tunable": False}, 1, 1),
    "bn": LayerSpec((), {"epsilon": 1e-5, "momentum": 0.9}, 1, 1),
    "relu": LayerSpec((), {}, 1, 1),
    "add": LayerSpec((), {}, 2, 1 << 30),
    "concat": LayerSpec((), {}, 2, 1 << 30),
    "maxpool": LayerSpec(("pool",), {"stride": None, "padding": "valid"}, 1, 1),
    "avgpool": LayerSpec(("pool",), {"stride": None, "padding": "valid"}, 1, 1),
    "gap": LayerSpec((), {}, 1, 1),
    "dense": LayerSpec(("units",), {"bias": True}, 1, 1),
    "dropout": LayerSpec(("rate",), {}, 1, 1),
    "softmax": LayerSpec((), {}, 1, 1),
}

SPATIAL_INPUT_TYPES = {"conv", "bn", "maxpool", "avgpool", "gap", "add", "concat"}
PADDINGS = ("same", "valid")


class GraphError(ValueError):
    """An invalid graph; ``node`` names the offending layer (or ``None``)."""

    def __init__(self, message: str, node: str | None = None) -> None:
        super().__init__(f"node {node!r}: {message}" if node is not None else message)
        self.node = node


# --------------------------------------------------------------------------- structure


def inputs_of(graph: nx.DiGraph, node: str) -> list[str]:
    """The producers of ``node``'s inputs, in slot order."""
    preds = graph._pred[node]  # plain dict {producer: edge data}: the views cost 10× more
    return sorted(preds, key=lambda p: preds[p].get("slot", 0))


def input_node(graph: nx.DiGraph) -> str:
    """The single ``input`` node."""
    found = [n for n, t in graph.nodes(data="type") if t == "input"]
    if len(found) != 1:
        raise GraphError(f"a model has exactly one input node, found {len(found)}: {sorted(found)}")
    return found[0]


def output_node(graph: nx.DiGraph) -> str:
    """The single sink: the model's output."""
    sinks = [n for n, succ in graph._succ.items() if not succ]
    if len(sinks) != 1:
        raise GraphError(f"a model has exactly one output (sink), found {len(sinks)}: {sorted(sinks)[:10]}")
    return sinks[0]


def topological_order(graph: nx.DiGraph) -> list[str]:
    """Nodes in an order where every producer precedes its consumers.

    Deterministic (lexicographic among ready nodes) so that the JSON form and
    every table printed from a graph are stable.  Kahn's algorithm on the
    plain adjacency dicts: this runs on every count and every proposal, and
    NetworkX's generic version is several times slower.
    """
    succ = graph._succ
    waiting = {node: len(preds) for node, preds in graph._pred.items()}
    ready = [node for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for child in succ[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) != len(waiting):
        cycle = nx.find_cycle(graph.subgraph(n for n in waiting if n not in set(order)))
        raise GraphError(f"the graph has a cycle through {[u for u, _ in cycle]}", cycle[0][0])
    return order


def attr(graph: nx.DiGraph, node: str, name: str) -> object:
    """A node attribute, falling back to its layer type's default."""
    data = graph.nodes[node]
    if name in data:
        return data[name]
    return LAYER_TYPES[data["type"]].defaults[name]


# --------------------------------------------------------------------------- shapes


def _window_out(size: int, window: int, stride: int, padding: str) -> int:
    """Output length of a conv/pool along one axis (TensorFlow's padding rules)."""
    if padding == "same":
        return math.ceil(size / stride)
    return (size - window) // stride + 1


def _positive_int(graph: nx.DiGraph, node: str, name: str) -> int:
    value = attr(graph, node, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphError(f"{name} must be a positive integer, got {value!r}", node)
    return value


def _padding(graph: nx.DiGraph, node: str) -> str:
    padding = attr(graph, node, "padding")
    if padding not in PADDINGS:
        raise GraphError(f"padding must be one of {PADDINGS}, got {padding!r}", node)
    return padding


def layer_output_shape(graph: nx.DiGraph, node: str, in_shapes: list[Shape]) -> Shape:
    """The output shape of ``node`` given its input shapes; checks its attributes.

    Works on graphs under construction (used by builders and morphisms to
    check one layer at a time); :func:`infer_shapes` checks whole graphs.
    """
    kind = graph.nodes[node]["type"]
    if kind == "input":
        return (_positive_int(graph, node, "h"), _positive_int(graph, node, "w"), _positive_int(graph, node, "c"))
    first = in_shapes[0]
    if kind in SPATIAL_INPUT_TYPES and any(len(s) != 3 for s in in_shapes):
        raise GraphError(f"{kind} needs image-shaped inputs (H, W, C), got {in_shapes}", node)
    if kind == "conv":
        filters = _positive_int(graph, node, "filters")
        kernel = _positive_int(graph, node, "kernel")
        stride = _positive_int(graph, node, "stride")
        padding = _padding(graph, node)
        h, w = (_window_out(d, kernel, stride, padding) for d in first[:2])
        if h < 1 or w < 1:
            raise GraphError(f"a {kernel}×{kernel} 'valid' conv does not fit a {first[0]}×{first[1]} input", node)
        return (h, w, filters)
    if kind in ("maxpool", "avgpool"):
        pool = _positive_int(graph, node, "pool")
        stride = attr(graph, node, "stride")
        stride = pool if stride is None else _positive_int(graph, node, "stride")
        padding = _padding(graph, node)
        h, w = (_window_out(d, pool, stride, padding) for d in first[:2])
        if h < 1 or w < 1:
            raise GraphError(f"a {pool}×{pool} 'valid' pool does not fit a {first[0]}×{first[1]} input", node)
        return (h, w, first[2])
    if kind == "add":
        if any(s != first for s in in_shapes):
            raise GraphError(f"add needs inputs of one shape, got {in_shapes}", node)
        return first
    if kind == "concat":
        if any(s[:2] != first[:2] for s in in_shapes):
            raise GraphError(f"concat needs inputs of one height and width, got {in_shapes}", node)
        return (first[0], first[1], sum(s[2] for s in in_shapes))
    if kind == "gap":
        return (first[2],)
    if kind == "dense":
        if len(first) != 1:
            raise GraphError(f"dense needs a flat input (C,), got {first}: add a gap before it", node)
        return (_positive_int(graph, node, "units"),)
    if kind == "dropout":
        rate = attr(graph, node, "rate")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate < 1:
            raise GraphError(f"rate must be in [0, 1), got {rate!r}", node)
        return first
    if kind == "softmax":
        if len(first) != 1:
            raise GraphError(f"softmax needs a flat input (C,), got {first}", node)
        return first
    return first  # bn, relu: shape-preserving


@dataclass(frozen=True)
class Analysis:
    """A validated graph's structure, computed once and shared by the counters."""

    order: list[str]
    inputs: dict[str, list[str]]
    consumers: dict[str, int]
    shapes: dict[str, Shape]


def analyse(graph: nx.DiGraph) -> Analysis:
    """Validate ``graph``; return its order, inputs, fan-out and every output shape.

    Raises :class:`GraphError` naming the first offending node: an unknown
    layer type, a missing attribute, a wrong number of inputs, mismatched
    shapes into an add/concat, a cycle, a dangling node (one not fed from the
    input, or whose output is never used), several inputs or outputs, or a
    softmax that is not the output.
    """
    if graph.number_of_nodes() == 0:
        raise GraphError("the graph is empty")
    inputs: dict[str, list[str]] = {}
    for node, data in graph.nodes(data=True):
        kind = data.get("type")
        if kind not in LAYER_TYPES:
            raise GraphError(f"unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)})", node)
        spec = LAYER_TYPES[kind]
        missing = [a for a in spec.required if a not in data]
        if missing:
            raise GraphError(f"{kind} is missing attribute(s) {missing}", node)
        preds = graph._pred[node]
        n_in = len(preds)
        if n_in == 0 and kind != "input":
            raise GraphError(f"dangling node: nothing feeds this {kind} (it is not connected to the input)", node)
        if not spec.min_inputs <= n_in <= spec.max_inputs:
            want = str(spec.min_inputs) if spec.min_inputs == spec.max_inputs else f"at least {spec.min_inputs}"
            raise GraphError(f"{kind} takes {want} input(s), has {n_in}", node)
        slots = {p: preds[p].get("slot", 0) for p in preds}
        if sorted(slots.values()) != list(range(n_in)):
            raise GraphError(f"input slots must be 0..{n_in - 1}, got {sorted(slots.values())}", node)
        inputs[node] = sorted(preds, key=slots.__getitem__)
    input_node(graph)  # exactly one; with every other node fed, all are reachable from it
    order = topological_order(graph)
    sink = output_node(graph)
    consumers = {node: len(succ) for node, succ in graph._succ.items()}
    for node in order:
        if graph.nodes[node]["type"] == "softmax" and node != sink:
            raise GraphError("softmax is only allowed as the output (its gradient is fused with the loss)", node)

    shapes: dict[str, Shape] = {}
    for node in order:
        shapes[node] = layer_output_shape(graph, node, [shapes[p] for p in inputs[node]])
    return Analysis(order=order, inputs=inputs, consumers=consumers, shapes=shapes)


def infer_shapes(graph: nx.DiGraph) -> dict[str, Shape]:
    """Validate ``graph`` and return every node's output shape (see :func:`analyse`)."""
    return analyse(graph).shapes


# --------------------------------------------------------------------------- parameters


def param_shapes(graph: nx.DiGraph, analysis: Analysis | None = None) -> dict[str, list[Shape]]:
    """``{node: [array shapes]}`` of every node with parameters, in Keras' weight order and layout.

    What the trainer's Keras model holds for each layer (:mod:`aiperf_mpi.train.keras_model`) and so what a
    ``weights/task-N.npz`` must hold: conv ``[kernel (k, k, cin, cout), bias (cout,)?]``, dense
    ``[kernel (cin, units), bias (units,)?]``, batch normalisation ``[γ, β, moving mean, moving variance]``,
    each ``(c,)``.  Known without TensorFlow, so a verifier can hold a weights file to its graph.
    """
    analysis = analyse(graph) if analysis is None else analysis
    shapes = analysis.shapes
    found: dict[str, list[Shape]] = {}
    for node, data in graph.nodes(data=True):
        kind = data["type"]
        out = shapes[node][-1]
        if kind in ("conv", "dense"):
            cin = shapes[analysis.inputs[node][0]][-1]
            kernel = (data["kernel"], data["kernel"], cin, out) if kind == "conv" else (cin, out)
            found[node] = [kernel, (out,)] if attr(graph, node, "bias") else [kernel]
        elif kind == "bn":
            found[node] = [(out,)] * 4
    return found


def param_counts(graph: nx.DiGraph, analysis: Analysis | None = None) -> dict[str, tuple[int, int]]:
    """``{node: (trainable, non_trainable)}`` for every node.

    Batch normalisation has γ and β (trainable) and the moving mean and
    variance (non-trainable); Keras' ``count_params()`` counts all four.
    """
    shapes = param_shapes(graph, analysis)
    counts: dict[str, tuple[int, int]] = {}
    for node, data in graph.nodes(data=True):
        sizes = [math.prod(shape) for shape in shapes.get(node, [])]
        frozen = 2 if data["type"] == "bn" else 0  # the moving mean and variance
        counts[node] = (sum(sizes[: len(sizes) - frozen]), sum(sizes[len(sizes) - frozen :]))
    return counts


def total_params(graph: nx.DiGraph) -> int:
    """All parameters, trainable or not: what Keras' ``count_params()`` reports."""
    return sum(t + n for t, n in param_counts(graph).values())


# --------------------------------------------------------------------------- JSON


def to_json(graph: nx.DiGraph) -> str:
    """The stable, compact node-link JSON form.

    Nodes appear in topological order, attributes and keys sorted, no
    whitespace: equal graphs give equal strings, so the string can be hashed,
    compared and shipped in an MPI message.
    """
    order = topological_order(graph)
    nodes = [{"id": n, **{k: graph.nodes[n][k] for k in sorted(graph.nodes[n])}} for n in order]
    edges = sorted([u, v, graph.edges[u, v].get("slot", 0)] for u, v in graph.edges)
    position = {n: i for i, n in enumerate(order)}
    edges.sort(key=lambda e: (position[e[1]], e[2]))
    data = {"format": JSON_FORMAT, "graph": dict(sorted(graph.graph.items())), "nodes": nodes, "edges": edges}
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def from_json(text: str | bytes) -> nx.DiGraph:
    """Rebuild a graph written by :func:`to_json` (and validate it)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"not a graph JSON document: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise GraphError(f"not a {JSON_FORMAT} document")
    graph = nx.DiGraph(**data.get("graph", {}))
    try:
        for entry in data["nodes"]:
            attrs = dict(entry)
            node = attrs.pop("id")
            if node in graph:
                raise GraphError("duplicate node id", node)
            graph.add_node(node, **attrs)
        for u, v, slot in data["edges"]:
            for end in (u, v):
                if end not in graph:
                    raise GraphError(f"edge {u!r} → {v!r} names an unknown node", end)
            graph.add_edge(u, v, slot=slot)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, GraphError):
            raise
        raise GraphError(f"malformed graph JSON: {exc!r}") from None
    infer_shapes(graph)
    return graph


def graphs_equal(a: nx.DiGraph, b: nx.DiGraph) -> bool:
    """Same nodes, attributes, edges, slots and graph attributes."""
    return (
        dict(a.nodes(data=True)) == dict(b.nodes(data=True))
        and {(u, v): d.get("slot", 0) for u, v, d in a.edges(data=True)}
        == {(u, v): d.get("slot", 0) for u, v, d in b.edges(data=True)}
        and a.graph == b.graph
    )


# --------------------------------------------------------------------------- building


class GraphBuilder:
    """Build a graph layer by layer; each method returns the new node's name.

    Names are given or generated (``conv_3``); they become the Keras layer
    names, so the op-count table, the Keras model and TensorFlow's profiler
    all talk about the same layers.
    """

    def __init__(self, h: int, w: int, c: int, name: str = "model", bn_momentum: float = 0.9) -> None:
        self.graph = nx.DiGraph(name=name)
        self.bn_momentum = bn_momentum
        self._counter: dict[str, int] = {}
        self.input = self.layer("input", [], name="input", h=h, w=w, c=c)

    def layer(self, kind: str, inputs: Iterable[str], name: str | None = None, **attrs: object) -> str:
        """Add a node of type ``kind`` fed by ``inputs`` (in slot order)."""
        if name is None:
            number = self._counter.get(kind, 0) + 1
            self._counter[kind] = number
            name = f"{kind}_{number}"
            while name in self.graph:
                number += 1
                self._counter[kind] = number
                name = f"{kind}_{number}"
        if name in self.graph:
            raise GraphError("duplicate layer name", name)
        inputs = list(inputs)
        if len(set(inputs)) != len(inputs):
            raise GraphError(f"the same tensor twice among the inputs {inputs} (a graph has one edge per pair)", name)
        self.graph.add_node(name, type=kind, **attrs)
        for slot, source in enumerate(inputs):
            if source not in self.graph:
                raise GraphError(f"input {source!r} does not exist", name)
            self.graph.add_edge(source, name, slot=slot)
        return name

    def conv(
        self,
        x: str,
        filters: int,
        kernel: int,
        stride: int = 1,
        padding: str = "same",
        bias: bool = False,
        tunable: bool = False,
        name: str | None = None,
    ) -> str:
        """A 2-D convolution; ``tunable`` marks it as following the tuned kernel size."""
        return self.layer(
            "conv",
            [x],
            name,
            filters=filters,
            kernel=kernel,
            stride=stride,
            padding=padding,
            bias=bias,
            tunable=tunable,
        )

    def bn(self, x: str, epsilon: float = 1e-5, momentum: float | None = None, name: str | None = None) -> str:
        """Batch normalisation; ``momentum`` defaults to the builder's ``bn_momentum``."""
        return self.layer("bn", [x], name, epsilon=epsilon, momentum=self.bn_momentum if momentum is None else momentum)

    def relu(self, x: str, name: str | None = None) -> str:
        return self.layer("relu", [x], name)

    def add(self, xs: Iterable[str], name: str | None = None) -> str:
        return self.layer("add", list(xs), name)

    def concat(self, xs: Iterable[str], name: str | None = None) -> str:
        return self.layer("concat", list(xs), name)

    def maxpool(
        self, x: str, pool: int, stride: int | None = None, padding: str = "valid", name: str | None = None
    ) -> str:
        return self.layer("maxpool", [x], name, pool=pool, stride=stride if stride else pool, padding=padding)

    def avgpool(
        self, x: str, pool: int, stride: int | None = None, padding: str = "valid", name: str | None = None
    ) -> str:
        return self.layer("avgpool", [x], name, pool=pool, stride=stride if stride else pool, padding=padding)

    def gap(self, x: str, name: str | None = None) -> str:
        return self.layer("gap", [x], name)

    def dense(self, x: str, units: int, bias: bool = True, name: str | None = None) -> str:
        return self.layer("dense", [x], name, units=units, bias=bias)

    def dropout(self, x: str, rate: float, name: str | None = None) -> str:
        return self.layer("dropout", [x], name, rate=rate)

    def softmax(self, x: str, name: str | None = None) -> str:
        return self.layer("softmax", [x], name)

    def conv_bn_relu(self, x: str, filters: int, kernel: int, stride: int = 1, tunable: bool = False) -> str:
        """The common conv → BN → ReLU triple."""
        return self.relu(self.bn(self.conv(x, filters, kernel, stride, tunable=tunable)))

    def build(self) -> nx.DiGraph:
        """Validate and return the graph."""
        infer_shapes(self.graph)
        return self.graph


# --------------------------------------------------------------------------- tuning

KERNEL_SIZES = (3, 5, 7)
"""the kernel sizes the tuner may give a model's tunable convolutions"""
DEFAULT_KERNEL_SIZE = 3
"""the tunable convolutions' size until the tuner proposes another (warm-up rounds, the seed model, a deeper
morphism's new block): ResNet-50's own 3×3"""
SMALLEST_BATCH, LARGEST_BATCH = 16, 512
"""the per-rank batch sizes the tuner chooses among: powers of two from the smallest to the largest that fits"""
BYTES_PER_ACTIVATION = 4
"""one float32 per activation kept for the backward pass (a rough lower bound: frameworks keep more)"""


def widest_batch_space(default: int) -> list[int]:
    """Every per-rank batch any group's tuner may propose: the powers of two of the range and the default (its
    warm-up rounds' batch); a group's own space is the part of it its memory and its data allow."""
    powers = [SMALLEST_BATCH << shift for shift in range((LARGEST_BATCH // SMALLEST_BATCH).bit_length())]
    return sorted(set(powers) | {default})


def search_space(config: Mapping) -> dict:
    """The tuner's widest space for a run's configuration, as ``mllog.log``'s ``aiperf_search_space`` states it
    (its writer and verify make it with this; KeyError: a configuration without ``batch_size``)."""
    return {"batch_sizes": widest_batch_space(config["batch_size"]), "kernel_sizes": list(KERNEL_SIZES)}


def batch_choices(graph: nx.DiGraph, memory_bytes: int, smallest: int = SMALLEST_BATCH,
                  largest: int = LARGEST_BATCH) -> list[int]:  # fmt: skip
    """The tuner's per-rank batch sizes: powers of two from ``smallest`` to what fits in half ``memory_bytes``.

    Activation memory per sample is estimated from the graph's output shapes
    (every layer's output kept for the backward pass); half the memory is left
    for weights, optimiser state and the framework.  In the graph room, beside
    the kernel sizes, so that the verifier recomputes the tuner's space from the
    logged configuration and seed with the leader's own code.
    """
    per_sample = activation_bytes_per_sample(graph)
    fits = max(smallest, (memory_bytes // 2) // max(per_sample, 1))
    choices = []
    batch = smallest
    while batch <= min(largest, fits):
        choices.append(batch)
        batch *= 2
    return choices or [smallest]


def activation_bytes_per_sample(graph: nx.DiGraph) -> int:
    """Every layer's output for one sample as float32: what :func:`batch_choices` sizes the batch by, and what the
    start line's memory figure scales a training rank's batch by (``mpi/limits.py``, ``ACTIVATION_FACTOR``)."""
    return sum(math.prod(shape) for shape in analyse(graph).shapes.values()) * BYTES_PER_ACTIVATION


def tuner_batches(graph: nx.DiGraph, memory_bytes: int, max_batch: int | None, default: int) -> list[int]:
    """A group's tuner's batches: :func:`batch_choices` up to ``max_batch`` (the training samples a rank holds:
    None, no bound), and the configured ``default`` (its warm-up rounds').  The one definition, for the leader
    (what it tunes among) and the start line (a training rank's memory at the largest of them)."""
    batches = [b for b in batch_choices(graph, memory_bytes) if max_batch is None or b <= max_batch]
    return sorted(set(batches) | {default})


def batch_within(graph: nx.DiGraph, batch: int, budget_bytes: int, smallest: int = SMALLEST_BATCH) -> int:
    """``batch``, halved until ``graph``'s activations at it (:func:`activation_bytes_per_sample` × the batch) fit
    ``budget_bytes``, never below ``smallest``.

    A leader's budget is its seed's activations at its tuner's largest batch: what the start line counts in a
    training rank's memory (``mpi/limits.py``).  A child deeper than the seed holds more a sample, so at the
    batch the tuner asked it could hold more than the start line said (issue 50: a tiny leader at 512 grew
    ≈ 9.5 MiB a model, to 1,862 MiB against a figure of 1,822); halved, it holds no more than the seed did.  Each
    halving stays a power of two of the tuner's space (or the configured batch halved, when that is no power)."""
    per_sample = activation_bytes_per_sample(graph)
    while batch > smallest and per_sample * batch > budget_bytes:
        batch = max(smallest, batch // 2)
    return batch


def as_trained(graph: nx.DiGraph, kernel_size: object) -> nx.DiGraph:
    """The graph a model trained: ``graph`` as stored, with its tuned kernel size applied (None: as it is).

    The one definition of "the graph as trained", for the leader (what it stores), the trainer (what it
    builds) and every reader of a run (the export, verify, lineage): a log records the kernel size in the
    task's hyper-parameters, and a log from before the stored graph carried it tuned has none applied in the
    file, so a reader applies the logged one; applying it again to a graph that has it changes nothing.
    """
    return graph if kernel_size is None else with_kernel_size(graph, kernel_size)  # type: ignore[arg-type]


def with_kernel_size(graph: nx.DiGraph, kernel: int) -> nx.DiGraph:
    """A copy of ``graph`` whose tunable convolutions use ``kernel``×``kernel``.

    This is how a tuned kernel size reaches the model: the graph changes, so
    the Keras model built from it, the op count and the parameter count all
    change together — a kernel size can never be counted without being built.
    Tunable convolutions use 'same' padding, so shapes are unchanged.
    """
    if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
        raise GraphError(f"a tuned kernel size must be a positive odd integer, got {kernel!r}")
    tuned = graph.copy()
    for node, data in tuned.nodes(data=True):
        if data["type"] == "conv" and data.get("tunable", False):
            if attr(tuned, node, "padding") != "same":
                raise GraphError("a tunable conv must use 'same' padding", node)
            data["kernel"] = kernel
    infer_shapes(tuned)
    return tuned
