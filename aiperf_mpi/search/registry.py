"""Every architecture search and hyper-parameter tuner a run can choose, by the name the configuration uses.

Each name maps to ``"module:Class"``, imported on first use (as DeepHyper
names its evaluators), and to the libraries that first use loads: choosing a
tuner loads only its backend (Optuna or scikit-optimize), and a new backend
is one class and one line here.  The configuration validates ``search`` and
``hpo`` against these names; the leader builds its search and tuner through
:func:`make_search` and :func:`make_tuner`, the master asks the search's
class which parents it may choose (:func:`candidate_parents`), and a
training rank imports :func:`leader_libraries` before the scored window.
Nothing else branches on a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Protocol

from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE

if TYPE_CHECKING:
    from aiperf_mpi.search.bayesian import Proposal, SearchConfig
    from aiperf_mpi.search.history import ModelRecord
    from aiperf_mpi.search.hpo import HParams


@dataclass(frozen=True)
class Registered:
    """One search or tuner: where its class is, and what its first use imports besides."""

    target: str
    """``"module:Class"``, imported on first use"""
    libraries: tuple[str, ...] = ()
    """the libraries its work imports where first used (not at its module's top: that would cost every rank's
    start-up); a training rank imports them before the scored window begins (:func:`leader_libraries`)"""


SEARCHES: Mapping[str, Registered] = MappingProxyType({
    # its Gaussian process (scipy.linalg, search/gp.py) and its distances (scipy.optimize, search/distance.py)
    "bayesian": Registered("aiperf_mpi.search.bayesian:BayesianSearch", ("scipy.linalg", "scipy.optimize")),
    "random": Registered("aiperf_mpi.search.bayesian:RandomSearch"),
})  # fmt: skip
"""architecture searches: the benchmark's (``bayesian``) first, then the baseline"""
TUNERS: Mapping[str, Registered] = MappingProxyType({
    "tpe": Registered("aiperf_mpi.search.hpo:TPETuner", ("optuna",)),
    "gp": Registered("aiperf_mpi.search.hpo:GPTuner", ("skopt",)),
    "random": Registered("aiperf_mpi.search.hpo:RandomTuner", ("optuna",)),
})  # fmt: skip
"""batch/kernel tuners: the benchmark's (``tpe``) first"""
PREDICTION_LIBRARIES = ("scipy.optimize",)
"""what the warm-up rounds' prediction imports (its curve fit, search/predict.py): every leader, whatever it runs"""


class Search(Protocol):
    """An architecture search: proposes a child of a model in the history it reads, learns through that history."""

    def ask(self, kernel: int = DEFAULT_KERNEL_SIZE) -> Proposal: ...

    def tell(self, record: ModelRecord) -> None: ...


class SearchClass(Protocol):
    """What the registry names for a search: built from (history, seed, config), and the parents it may pick."""

    parents_from_whole_view: ClassVar[bool]
    """whether any member of the search's view may become a parent (else only the best few)"""

    def __call__(self, history, seed: int, config: SearchConfig | None = None) -> Search: ...

    def candidate_parents(self, config: SearchConfig, best_ids: list[int], view_ids: list[int]) -> list[int]: ...


class Tuner(Protocol):
    """A batch/kernel tuner of one group: ``ask`` the next round's hyper-parameters, ``tell`` how they did."""

    def ask(self) -> HParams: ...

    def tell(self, params: HParams, accuracy: float | None) -> None: ...


def _entry(kind: str, registry: Mapping[str, Registered], name: str) -> Registered:
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r} (known: {', '.join(registry)})")
    return registry[name]


def _resolve(kind: str, registry: Mapping[str, Registered], name: str) -> type:
    module, _, attribute = _entry(kind, registry, name).target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def leader_libraries(search: str, tuner: str) -> tuple[str, ...]:
    """What a leader running ``search`` and ``tuner`` imports while it works, each once: the warm-up prediction's,
    the search's and the tuner's libraries (ValueError for a name not registered)."""
    return tuple(dict.fromkeys((*PREDICTION_LIBRARIES, *_entry("search", SEARCHES, search).libraries,
                                *_entry("tuner", TUNERS, tuner).libraries)))  # fmt: skip


def search_class(name: str) -> SearchClass:
    """The search registered as ``name`` (ValueError for a name not in :data:`SEARCHES`)."""
    return _resolve("search", SEARCHES, name)


def make_search(name: str, history, seed: int, config: SearchConfig | None = None) -> Search:
    """A new search ``name`` over ``history`` (a History or a leader's SearchView)."""
    return search_class(name)(history, seed, config)


def candidate_parents(name: str, config: SearchConfig, best_ids: list[int], view_ids: list[int]) -> list[int]:
    """The models search ``name`` may choose as the next parent: whose weights the run must keep."""
    return search_class(name).candidate_parents(config, best_ids, view_ids)


def make_tuner(name: str, batches: list[int], seed: int, default: HParams) -> Tuner:
    """A new tuner ``name`` over ``batches`` and the kernel sizes; ``default`` answers the warm-up rounds."""
    return _resolve("tuner", TUNERS, name)(batches, seed, default)
