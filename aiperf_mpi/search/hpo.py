"""Hyper-parameter tuning of per-rank batch size and kernel size: TPE, GP or random.

Per group, rounds 1–3 (the warm-up) train with the defaults; from round four
the tuner proposes (``ask``) and learns from the outcome (``tell``).  TPE is
Optuna's ``TPESampler`` through its ask/tell interface; ``gp`` is
scikit-optimize's Gaussian-process optimiser; ``random`` is the baseline.
The batch range is scaled to the device memory (:func:`~aiperf_mpi.graph.model.batch_choices`, in the graph
room beside the kernel sizes: the verifier recomputes the space with the same code).  A child deeper than the
seed trains at the asked batch halved until its activations fit the seed's at the largest
(:func:`~aiperf_mpi.graph.model.batch_within`, the leader's); the tuner is told the outcome of what it asked.
One class per backend; a run picks one by name through
:mod:`aiperf_mpi.search.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass

# widest_batch_space's home is graph/model.py, beside the range; the compliance rulesets 1.1.0 and 1.2.0 call it as
# hpo.widest_batch_space (a published ruleset keeps its names)
from aiperf_mpi.graph.model import KERNEL_SIZES, widest_batch_space  # noqa: F401

WARMUP_ROUNDS = 3


@dataclass(frozen=True)
class HParams:
    batch_size: int
    kernel_size: int

    def to_dict(self) -> dict:
        return {"batch_size": self.batch_size, "kernel_size": self.kernel_size}


class _Tuner:
    """What every tuner shares: the warm-up rounds answer the defaults, later rounds ask the backend.

    A backend implements :meth:`_ask` (new hyper-parameters and the handle
    its ``tell`` needs back) and :meth:`_tell` (that handle and the
    accuracy, ``None`` for a failed trial).
    """

    def __init__(self, batches: list[int], default: HParams) -> None:
        self.batches, self.default = list(batches), default
        self.round = 0
        self._pending: dict[HParams, object] = {}

    def ask(self) -> HParams:
        """The next round's hyper-parameters (the defaults during the warm-up rounds)."""
        self.round += 1
        if self.round <= WARMUP_ROUNDS:
            return self.default
        params, handle = self._ask()
        self._pending[params] = handle
        return params

    def tell(self, params: HParams, accuracy: float | None) -> None:
        """The outcome of ``params`` (``None`` for a failed trial)."""
        handle = self._pending.pop(params, None)
        if handle is None:
            return  # a warm-up round: nothing was asked of the optimiser
        self._tell(handle, accuracy)

    def _ask(self) -> tuple[HParams, object]:
        raise NotImplementedError

    def _tell(self, handle: object, accuracy: float | None) -> None:
        raise NotImplementedError


class _OptunaTuner(_Tuner):
    """A tuner on an Optuna sampler, through Optuna's ask/tell interface."""

    def __init__(self, batches: list[int], default: HParams, sampler) -> None:
        import optuna

        super().__init__(batches, default)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._study = optuna.create_study(direction="maximize", sampler=sampler)

    def _ask(self) -> tuple[HParams, object]:
        trial = self._study.ask()
        params = HParams(
            int(trial.suggest_categorical("batch_size", self.batches)),
            int(trial.suggest_categorical("kernel_size", list(KERNEL_SIZES))),
        )
        return params, trial

    def _tell(self, handle: object, accuracy: float | None) -> None:
        import optuna

        if accuracy is None:
            self._study.tell(handle, state=optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(handle, accuracy)


class TPETuner(_OptunaTuner):
    """The benchmark's tuner: Optuna's tree-structured Parzen estimator."""

    def __init__(self, batches: list[int], seed: int, default: HParams) -> None:
        import optuna

        super().__init__(batches, default, optuna.samplers.TPESampler(seed=seed))


class RandomTuner(_OptunaTuner):
    """The baseline: hyper-parameters drawn uniformly (Optuna's random sampler)."""

    def __init__(self, batches: list[int], seed: int, default: HParams) -> None:
        import optuna

        super().__init__(batches, default, optuna.samplers.RandomSampler(seed=seed))


class GPTuner(_Tuner):
    """scikit-optimize's Gaussian-process optimiser (it minimises: it is told the negated accuracy)."""

    def __init__(self, batches: list[int], seed: int, default: HParams) -> None:
        from skopt import Optimizer
        from skopt.space import Categorical

        super().__init__(batches, default)
        self._skopt = Optimizer([Categorical(self.batches), Categorical(list(KERNEL_SIZES))],
                                base_estimator="GP", random_state=seed, n_initial_points=3)  # fmt: skip

    def _ask(self) -> tuple[HParams, object]:
        batch, kernel = self._skopt.ask()
        return HParams(int(batch), int(kernel)), (batch, kernel)

    def _tell(self, handle: object, accuracy: float | None) -> None:
        self._skopt.tell(list(handle), -(accuracy if accuracy is not None else 0.0))
