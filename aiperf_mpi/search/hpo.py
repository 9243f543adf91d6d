"""Hyper-parameter tuning of per-rank batch size and kernel size: TPE, GP or random.

Per group, rounds 1–3 (the warm-up) train with the defaults; from round four
the tuner proposes (``ask``) and learns from the outcome (``tell``).  TPE is
Optuna's ``TPESampler`` through its ask/tell interface; ``gp`` is
scikit-optimize's Gaussian-process optimiser; ``random`` is the baseline.
The batch range is scaled to the device memory (see :func:`batch_choices`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from aiperf_mpi.graph.model import analyse

KERNEL_SIZES = (3, 5, 7)
HPO_KINDS = ("tpe", "gp", "random")
WARMUP_ROUNDS = 3
BYTES_PER_ACTIVATION = 4
"""one float32 per activation kept for the backward pass (a rough lower bound: frameworks keep more)"""


@dataclass(frozen=True)
class HParams:
    batch_size: int
    kernel_size: int

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "kernel_size": self.kernel_size}


def batch_choices(graph: nx.DiGraph, memory_bytes: int, smallest: int = 16, largest: int = 512) -> list[int]:
    """Powers of two from ``smallest`` up to what fits in half of ``memory_bytes``.

    Activation memory per sample is estimated from the graph's output shapes
    (every layer's output kept for the backward pass); half the memory is left
    for weights, optimiser state and the framework.
    """
    per_sample = sum(math.prod(shape) for shape in analyse(graph).shapes.values()) * BYTES_PER_ACTIVATION
    fits = max(smallest, (memory_bytes // 2) // max(per_sample, 1))
    choices = []
    batch = smallest
    while batch <= min(largest, fits):
        choices.append(batch)
        batch *= 2
    return choices or [smallest]


class Tuner:
    """Ask/tell tuner over (batch size, kernel size) for one group."""

    def __init__(self, kind: str, batches: list[int], seed: int, default: HParams) -> None:
        if kind not in HPO_KINDS:
            raise ValueError(f"unknown tuner {kind!r} (known: {', '.join(HPO_KINDS)})")
        self.kind, self.batches, self.default = kind, list(batches), default
        self.round = 0
        self._pending: dict[HParams, object] = {}
        if kind in ("tpe", "random"):
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            sampler = (optuna.samplers.TPESampler(seed=seed) if kind == "tpe"
                       else optuna.samplers.RandomSampler(seed=seed))  # fmt: skip
            self._study = optuna.create_study(direction="maximize", sampler=sampler)
        else:
            from skopt import Optimizer
            from skopt.space import Categorical

            self._skopt = Optimizer([Categorical(self.batches), Categorical(list(KERNEL_SIZES))],
                                    base_estimator="GP", random_state=seed, n_initial_points=3)  # fmt: skip

    def ask(self) -> HParams:
        """The next round's hyper-parameters (the defaults during the warm-up rounds)."""
        self.round += 1
        if self.round <= WARMUP_ROUNDS:
            return self.default
        if self.kind == "gp":
            batch, kernel = self._skopt.ask()
            params = HParams(int(batch), int(kernel))
            self._pending[params] = (batch, kernel)
            return params
        trial = self._study.ask()
        params = HParams(
            int(trial.suggest_categorical("batch_size", self.batches)),
            int(trial.suggest_categorical("kernel_size", list(KERNEL_SIZES))),
        )
        self._pending[params] = trial
        return params

    def tell(self, params: HParams, accuracy: float | None) -> None:
        """The outcome of ``params`` (``None`` for a failed trial)."""
        handle = self._pending.pop(params, None)
        if handle is None:
            return  # a warm-up round: nothing was asked of the optimiser
        if self.kind == "gp":
            self._skopt.tell(list(handle), -(accuracy if accuracy is not None else 0.0))
        else:
            import optuna

            if accuracy is None:
                self._study.tell(handle, state=optuna.trial.TrialState.FAIL)
            else:
                self._study.tell(handle, accuracy)
