"""Bayesian search over architectures: GP + upper confidence bound + simulated annealing.

``ask()`` proposes (parent id, child graph, transfer plan); results reach the
search through the history it reads (``tell()`` appends to it): a complete
:class:`~aiperf_mpi.search.history.History` in tests, a leader's bounded
:class:`~aiperf_mpi.search.view.SearchView` in a run — the search reads only
``best``, ``recent``, the members of those, ``len`` and ``contains_graph``,
which both answer alike.  Cost per proposal is bounded independently of the
history's length:

* each model's signature and embedding are computed once, when it first
  enters the GP's working set, cached while it stays there and dropped when
  it leaves (a model never re-enters: see :mod:`aiperf_mpi.search.view`);
* the GP is fitted on a capped working set: the best models and the most
  recent ones (``working_set`` in all);
* the annealing walk evaluates a fixed number of candidates.

Embedding: the distances to a few *anchor* architectures, chosen by
farthest-point sampling in the working set and refreshed only when the
history doubles (8, 16, 32, … models), so the kernel is a true PSD kernel
derived from the architecture distance.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from typing import ClassVar

import networkx as nx
import numpy as np

from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE, from_json, to_json
from aiperf_mpi.graph.morph import MAX_CHAINED, Morphed, MorphError, compose, random_morph
from aiperf_mpi.search.distance import Signature, distances, signature
from aiperf_mpi.search.gp import FitStatus, GaussianProcess
from aiperf_mpi.search.history import History, ModelRecord, graph_hash
from aiperf_mpi.search.view import SearchView, ViewBounds

LOG = logging.getLogger("aiperf_mpi.search")


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search; the defaults are what the benchmark runs with."""

    anchors: int = 8
    working_set: int = 128
    parents: int = 4
    """annealing walks start from the best ``parents`` models"""
    candidates: int = 24
    """candidates evaluated per proposal (the annealing budget)"""
    max_morphs: int = MAX_CHAINED
    """morphisms chained into one proposal at most"""
    beta: float = 2.0
    """UCB exploration weight"""
    temperature: float = 1.0
    cooling: float = 0.85

    def view_bounds(self) -> ViewBounds:
        """The view that holds everything this search reads: its parents, its working set."""
        half = self.working_set // 2
        return ViewBounds(top=max(self.parents, half, 1), recent=half)


@dataclass(frozen=True)
class Proposal:
    """What ``ask()`` returns."""

    parent: int
    graph: nx.DiGraph
    plan: list[dict]
    description: str
    info: dict = field(default_factory=dict)
    steps: tuple[dict, ...] = ()
    """the morphisms from the parent's graph (:attr:`~aiperf_mpi.graph.morph.Morphed.steps`), logged for the
    verifier's rebuild"""


class _Cache:
    """Signatures and embeddings by model id, computed on first use."""

    def __init__(self) -> None:
        self.graphs: dict[int, nx.DiGraph] = {}
        self.signatures: dict[int, Signature] = {}
        self.embeddings: dict[int, np.ndarray] = {}


class BayesianSearch:
    """GP-guided network-morphism search over a :class:`History`."""

    parents_from_whole_view: ClassVar[bool] = False

    @staticmethod
    def candidate_parents(config: SearchConfig, best_ids: list[int], view_ids: list[int]) -> list[int]:
        """The models it may choose as the next parent (whose weights must be kept): the walks start from the
        ``config.parents`` best of ``best_ids`` (the view's best, at least that many)."""
        return list(best_ids[: config.parents])

    def __init__(self, history: History | SearchView, seed: int, config: SearchConfig | None = None) -> None:
        self.history = history
        self.config = config or SearchConfig()
        self.rng = random.Random(seed)
        self.gp = GaussianProcess()
        self._cache = _Cache()
        self._anchors: list[Signature] = []
        self._anchor_epoch = 0  # history size class the anchors were chosen at
        self.last_fit: FitStatus | None = None
        self.gp_failures = 0

    # ------------------------------------------------------------------ API

    def tell(self, record: ModelRecord) -> None:
        """Record a finished model (appends to the history)."""
        self.history.append(record)

    def ask(self, kernel: int = DEFAULT_KERNEL_SIZE) -> Proposal:
        """Propose the next child: its parent, graph and weight-transfer plan."""
        trained = self.history.best(self.config.parents)
        if not trained:
            raise RuntimeError("the search needs at least one trained model in the history")
        self._forget_departed()
        if len(self.history.best(2)) < 2:
            return self._explore(trained, kernel, "warm start: fewer than two trained models")
        status = self._fit()
        if not status.ok:
            return self._explore(trained, kernel, f"GP failed ({status.message})")
        return self._anneal(trained, kernel, status)

    # ------------------------------------------------------------------ internals

    def _graph(self, model_id: int) -> nx.DiGraph:
        """A history model's graph, parsed once (callers must not modify it)."""
        if model_id not in self._cache.graphs:
            self._cache.graphs[model_id] = from_json(self.history[model_id].graph)
        return self._cache.graphs[model_id]

    def _signature(self, model_id: int) -> Signature:
        if model_id not in self._cache.signatures:
            self._cache.signatures[model_id] = signature(self._graph(model_id))
        return self._cache.signatures[model_id]

    def _embed(self, sig: Signature) -> np.ndarray:
        return distances(sig, self._anchors)

    def _embedding(self, model_id: int) -> np.ndarray:
        if model_id not in self._cache.embeddings:
            self._cache.embeddings[model_id] = self._embed(self._signature(model_id))
        return self._cache.embeddings[model_id]

    def _working_set(self) -> list[int]:
        half = self.config.working_set // 2
        chosen = [r.id for r in self.history.best(half)]
        taken = set(chosen)
        for record in reversed(self.history.recent(half)):
            if record.id not in taken:
                chosen.append(record.id)
                taken.add(record.id)
        return chosen

    def _forget_departed(self) -> None:
        """Drop cached graphs, signatures and embeddings of models no longer in the working set.

        Without this the caches would hold every model the leader ever saw:
        O(N) parsed graphs over a long run.  A model that left the working
        set never returns to it (records only push it further out), so
        nothing dropped here is needed again.
        """
        keep = set(self._working_set()) | {r.id for r in self.history.best(self.config.parents)}
        for cache in (self._cache.graphs, self._cache.signatures, self._cache.embeddings):
            for model_id in [m for m in cache if m not in keep]:
                del cache[model_id]

    def _refresh_anchors(self, members: list[int]) -> None:
        """Farthest-point anchors from the working set, re-chosen only when the history doubles."""
        epoch = max(1, len(self.history)).bit_length()
        wanted = min(self.config.anchors, len(members))
        if self._anchors and epoch == self._anchor_epoch and len(self._anchors) >= wanted:
            return
        signatures = [self._signature(m) for m in members]
        chosen = [0]
        nearest = distances(signatures[0], signatures)
        while len(chosen) < wanted:
            far = int(np.argmax(nearest))
            if nearest[far] <= 0.0:
                break  # every member is identical to an anchor already
            chosen.append(far)
            nearest = np.minimum(nearest, distances(signatures[far], signatures))
        self._anchors = [signatures[i] for i in chosen]
        self._anchor_epoch = epoch
        self._cache.embeddings.clear()

    def _fit(self) -> FitStatus:
        members = self._working_set()
        self._refresh_anchors(members)
        x = np.stack([self._embedding(m) for m in members])
        y = np.array([self.history[m].search_accuracy for m in members], dtype=float)
        status = self.gp.fit(x, y)
        self.last_fit = status
        if not status.ok:
            self.gp_failures += 1
            LOG.error(
                "search: the Gaussian process could not be fitted on %d models (%s); this proposal falls back to "
                "exploration (failure %d)", len(members), status.message, self.gp_failures,
            )  # fmt: skip
        elif status.jitter:
            LOG.warning("search: GP fitted only with jitter %g on %d models", status.jitter, len(members))
        return status

    def _explore(self, trained: list[ModelRecord], kernel: int, reason: str) -> Proposal:
        """A random morph of a random top model: used before the GP can be fitted, or when it fails."""
        for _ in range(20):
            parent = self.rng.choice(trained)
            try:
                morphed = random_morph(self._graph(parent.id), self.rng, kernel)
            except MorphError:
                continue
            if not self.history.contains_graph(to_json(morphed.graph)):
                return Proposal(parent.id, morphed.graph, morphed.plan, morphed.description,
                                {"strategy": "explore", "reason": reason}, morphed.steps)  # fmt: skip
        raise RuntimeError("no new architecture found by morphing the best models")

    def _anneal(self, trained: list[ModelRecord], kernel: int, status: FitStatus) -> Proposal:
        """Simulated annealing from each top model; the best UCB candidate seen wins.

        A walk chains morphisms (at most ``max_morphs``) while the annealing
        rule accepts; the temperature is in units of the GP's target spread.
        """
        config = self.config
        best: tuple[float, int, Morphed, float, float] | None = None
        seen: set[str] = set()
        per_walk = max(1, config.candidates // len(trained))
        for parent in trained:
            parent_graph = self._graph(parent.id)
            current: Morphed | None = None
            current_value = -math.inf
            temperature = config.temperature * self.gp.target_scale
            for _ in range(per_walk):
                try:
                    if current is not None and current.morphs < config.max_morphs:
                        step = random_morph(current.graph, self.rng, kernel, analysis=current.analysis)
                        candidate = compose(current, step)
                    else:
                        candidate = random_morph(parent_graph, self.rng, kernel)
                except MorphError:
                    break
                text = to_json(candidate.graph)
                key = graph_hash(text)
                if key in seen or self.history.contains_graph(text):
                    continue
                seen.add(key)
                mean, std = self.gp.predict(self._embed(signature(candidate.graph, candidate.analysis))[None, :])
                value = float(mean[0] + config.beta * std[0])
                if best is None or value > best[0]:
                    best = (value, parent.id, candidate, float(mean[0]), float(std[0]))
                accept = value >= current_value or self.rng.random() < math.exp(
                    (value - current_value) / max(temperature, 1e-12)
                )
                if accept:
                    current, current_value = candidate, value
                temperature *= config.cooling
        if best is None:
            return self._explore(trained, kernel, "annealing found no new candidate")
        value, parent_id, morphed, mean, std = best
        info = {"strategy": "gp-ucb", "ucb": value, "mean": mean, "std": std, "gp": status.message}
        return Proposal(parent_id, morphed.graph, morphed.plan, morphed.description, info, morphed.steps)


class RandomSearch:
    """The baseline: a random morph of a random model of the view (the best and the most recent trained).

    The view rather than every trained model, so that a leader needs no
    replica of the history and the master knows which weights a parent may
    come from (:func:`candidate_parents`).  Up to ``working_set / 2``
    models the two are the same.
    """

    parents_from_whole_view: ClassVar[bool] = True

    @staticmethod
    def candidate_parents(config: SearchConfig, best_ids: list[int], view_ids: list[int]) -> list[int]:
        """The models it may choose as the next parent: any member of the view (``view_ids``)."""
        return list(view_ids)

    def __init__(self, history: History | SearchView, seed: int, config: SearchConfig | None = None) -> None:
        self.history = history
        self.rng = random.Random(seed)
        self.bounds = (config or SearchConfig()).view_bounds()

    def tell(self, record: ModelRecord) -> None:
        self.history.append(record)

    def ask(self, kernel: int = DEFAULT_KERNEL_SIZE) -> Proposal:
        pool = {r.id: r for r in [*self.history.best(self.bounds.top), *self.history.recent(self.bounds.recent)]}
        trained = [pool[i] for i in sorted(pool)]
        if not trained:
            raise RuntimeError("the search needs at least one trained model in the history")
        for _ in range(20):
            parent = self.rng.choice(trained)
            morphed = random_morph(from_json(parent.graph), self.rng, kernel)
            if not self.history.contains_graph(to_json(morphed.graph)):
                return Proposal(parent.id, morphed.graph, morphed.plan, morphed.description, {"strategy": "random"},
                                morphed.steps)  # fmt: skip
        raise RuntimeError("no new architecture found by random morphing")
