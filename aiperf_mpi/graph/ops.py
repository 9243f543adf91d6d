"""The analytic operation count: the benchmark's ruler.

Counts, from the graph alone, the arithmetic operations the mathematics of
training and validating a model needs — never what a framework happens to
execute (no folding of batch normalisation into convolutions, no Winograd or
FFT convolutions, no skipped zero padding).  Conventions:

* a multiply-accumulate is **2** operations (:data:`OPS_PER_MAC`);
* convolution, per sample: ``2·K²·Cin·Cout·Ho·Wo`` (+ ``Ho·Wo·Cout`` for the
  bias); dense: ``2·Cin·Cout`` (+ ``Cout``);
* their backward pass is the input gradient (same matrix work as the forward)
  plus the weight gradient (same again) plus the bias gradient (one add per
  output element).  A layer needs an input gradient only when something
  upstream of it has parameters — so the first convolution has none;
* element-wise layers cost the per-element constants of
  :data:`ELEMENT_OPS`, the one table of such constants (also in docs/counting.md);
* a tensor consumed by *k* layers receives *k* gradients in the backward
  pass, summed with ``k − 1`` adds per element (:data:`GRADIENT_SUM_OPS`);
* the optimiser (SGD with momentum) runs once per **step**, not per sample:
  :data:`SGD_MOMENTUM_OPS` per trainable parameter, plus
  :data:`MOVING_AVERAGE_OPS` per batch-normalisation moving statistic;
* not counted: the loss value itself (one log per sample), per-channel scalar
  work of batch normalisation (O(C) per batch), random numbers for dropout,
  data augmentation, and gradient averaging across ranks (communication —
  the mathematics of the model is the same on one device).

Per epoch: ``train_samples × (forward_train + backward) + steps × update +
validation_samples × forward_eval``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import networkx as nx

from aiperf_mpi.graph.model import Analysis, Shape, analyse, attr, param_counts

OPS_PER_MAC = 2
GRADIENT_SUM_OPS = 1
SGD_MOMENTUM_OPS = 4
"""v ← μ·v − η·g (2 multiplies, 1 subtract), w ← w + v (1 add)."""
MOVING_AVERAGE_OPS = 3
"""m ← α·m + (1 − α)·x (2 multiplies, 1 add), for BN's moving mean and variance."""


@dataclass(frozen=True)
class ElementOps:
    """Per-element operation constants of one layer type.

    ``unit`` says what the constants multiply:
    ``out`` output elements; ``in`` input elements (summed over inputs);
    ``out*window`` output elements × pool window K²;
    ``out*(window-1)`` output elements × (K² − 1);
    ``out*(inputs-1)`` output elements × (number of inputs − 1).
    """

    unit: str
    forward_train: float
    forward_eval: float
    backward_input: float
    backward_params: float
    why: str


ELEMENT_OPS: dict[str, ElementOps] = {
    "input": ElementOps("out", 0, 0, 0, 0, "no arithmetic"),
    "bn": ElementOps(
        "out",
        7,
        4,
        5,
        3,
        "train: batch mean (1 add), x−μ (1), square (1), sum (1), ×1/σ (1), ×γ (1), +β (1); "
        "eval: x−μ, ×1/σ, ×γ, +β with the moving statistics; "
        "backward: dβ=Σdy (1), dγ=Σdy·x̂ (2) are the parameter gradients; "
        "dx=(γ/σN)·(N·dy − dβ − x̂·dγ) is 5 per element",
    ),
    "relu": ElementOps("out", 1, 1, 1, 0, "max(x, 0); backward masks dy"),
    "add": ElementOps("out*(inputs-1)", 1, 1, 0, 0, "n inputs need n−1 adds; the gradient passes through unchanged"),
    "concat": ElementOps("out", 0, 0, 0, 0, "a copy, no arithmetic"),
    "maxpool": ElementOps(
        "out*(window-1)",
        1,
        1,
        0,
        0,
        "K²−1 comparisons per output; backward routes dy to the arg-max (no arithmetic beyond the "
        "gradient sum counted at fan-out)",
    ),
    "avgpool": ElementOps("out*window", 1, 1, 1, 0, "K²−1 adds + 1 multiply per output; backward spreads dy/K² back"),
    "gap": ElementOps("in", 1, 1, 1, 0, "H·W−1 adds + 1 multiply per channel; backward: dy/(H·W) to every element"),
    "dropout": ElementOps(
        "out", 2, 0, 2, 0, "train: mask compare + scaled multiply; eval: identity; backward: same mask"
    ),
    "softmax": ElementOps(
        "out",
        5,
        5,
        1,
        0,
        "max (1), x−max (1), exp (1), sum (1), divide (1); backward fused with cross-entropy: p − y (1)",
    ),
}


@dataclass(frozen=True)
class LayerOps:
    """Operations of one layer, per sample (update: per step)."""

    name: str
    type: str
    output_shape: Shape
    params: int
    trainable_params: int
    forward_train: int
    forward_eval: int
    backward: int
    update: int
    macs: int
    """multiply-accumulates of conv/dense forward (0 for other layers)."""


@dataclass(frozen=True)
class ModelOps:
    """Per-layer and total counts of a model."""

    layers: tuple[LayerOps, ...]
    forward_train: int = field(init=False)
    forward_eval: int = field(init=False)
    backward: int = field(init=False)
    update: int = field(init=False)
    params: int = field(init=False)
    trainable_params: int = field(init=False)
    macs: int = field(init=False)

    def __post_init__(self) -> None:
        for name in ("forward_train", "forward_eval", "backward", "update", "params", "trainable_params", "macs"):
            object.__setattr__(self, name, sum(getattr(layer, name) for layer in self.layers))

    def train_step(self, batch: int) -> int:
        """Operations of one training step on ``batch`` samples (forward, backward, update)."""
        return batch * (self.forward_train + self.backward) + self.update

    def by_type(self) -> dict[str, dict[str, int]]:
        """Totals per layer type (for reports and for comparison with profilers)."""
        table: dict[str, dict[str, int]] = {}
        for layer in self.layers:
            row = table.setdefault(layer.type, {"layers": 0, "forward_eval": 0, "forward_train": 0, "backward": 0})
            row["layers"] += 1
            row["forward_eval"] += layer.forward_eval
            row["forward_train"] += layer.forward_train
            row["backward"] += layer.backward
        return table

    def to_dict(self) -> dict:
        data = {
            k: getattr(self, k)
            for k in ("forward_train", "forward_eval", "backward", "update", "params", "trainable_params", "macs")
        }
        data["layers"] = [asdict(layer) for layer in self.layers]
        return data


@dataclass(frozen=True)
class EpochOps:
    """Operations of one epoch, split by phase."""

    train: int
    update: int
    validation: int
    steps: int

    @property
    def total(self) -> int:
        return self.train + self.update + self.validation


def _elements(shape: Shape) -> int:
    return math.prod(shape)


def _element_units(graph: nx.DiGraph, node: str, unit: str, out: Shape, in_shapes: list[Shape]) -> int:
    if unit == "out":
        return _elements(out)
    if unit == "in":
        return sum(_elements(s) for s in in_shapes)
    if unit == "out*(inputs-1)":
        return _elements(out) * (len(in_shapes) - 1)
    window = attr(graph, node, "pool") ** 2
    if unit == "out*window":
        return _elements(out) * window
    if unit == "out*(window-1)":
        return _elements(out) * (window - 1)
    raise ValueError(f"unknown unit {unit!r}")


def count_ops(graph: nx.DiGraph, analysis: Analysis | None = None) -> ModelOps:
    """Count every layer's operations; validates the graph first (unless given its analysis)."""
    analysis = analyse(graph) if analysis is None else analysis
    shapes = analysis.shapes
    params = param_counts(graph, analysis)
    order = analysis.order

    # A tensor needs a gradient when its producer or anything upstream has parameters.
    needs_grad: dict[str, bool] = {}
    for node in order:
        needs_grad[node] = params[node][0] > 0 or any(needs_grad[p] for p in analysis.inputs[node])

    layers = []
    for node in order:
        kind = graph.nodes[node]["type"]
        out = shapes[node]
        ins = analysis.inputs[node]
        in_shapes = [shapes[p] for p in ins]
        input_grad = any(needs_grad[p] for p in ins)
        trainable, frozen = params[node]
        macs = 0
        if kind in ("conv", "dense"):
            cin = in_shapes[0][-1]
            cout = out[-1]
            window = attr(graph, node, "kernel") ** 2 if kind == "conv" else 1
            positions = _elements(out[:-1]) if kind == "conv" else 1
            macs = window * cin * cout * positions
            bias = _elements(out) if attr(graph, node, "bias") else 0
            forward = OPS_PER_MAC * macs + bias
            forward_train = forward_eval = forward
            backward = OPS_PER_MAC * macs + bias + (OPS_PER_MAC * macs if input_grad else 0)
        else:
            cost = ELEMENT_OPS[kind]
            units = _element_units(graph, node, cost.unit, out, in_shapes)
            forward_train = round(cost.forward_train * units)
            forward_eval = round(cost.forward_eval * units)
            backward = round(cost.backward_params * units) if trainable else 0
            if input_grad:
                backward += round(cost.backward_input * units)
        consumers = analysis.consumers[node]
        if needs_grad[node] and consumers > 1:
            backward += GRADIENT_SUM_OPS * (consumers - 1) * _elements(out)
        update = SGD_MOMENTUM_OPS * trainable + MOVING_AVERAGE_OPS * frozen
        layers.append(
            LayerOps(
                node,
                kind,
                tuple(out),
                trainable + frozen,
                trainable,
                forward_train,
                forward_eval,
                backward,
                update,
                macs,
            )
        )
    return ModelOps(tuple(layers))


def epoch_ops(model: ModelOps, train_samples: int, validation_samples: int, global_batch: int) -> EpochOps:
    """Operations of one epoch: every sample trained, one update per step, every validation sample evaluated.

    ``global_batch`` is the batch of one optimiser step across the whole group
    (per-rank batch × ranks); a last, partial batch is still a step.
    """
    if global_batch < 1 or train_samples < 0 or validation_samples < 0:
        raise ValueError("samples must be ≥ 0 and the batch ≥ 1")
    steps = math.ceil(train_samples / global_batch)
    return EpochOps(
        train=train_samples * (model.forward_train + model.backward),
        update=steps * model.update,
        validation=validation_samples * model.forward_eval,
        steps=steps,
    )
