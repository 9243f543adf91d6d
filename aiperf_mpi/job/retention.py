"""Which trained weights can still be inherited; the others are removed from the run directory.

A child loads its parent's weights (91 MB for ResNet-50 at 32²), and the
search picks parents only among a few models (:func:`~aiperf_mpi.search.registry.candidate_parents`),
so keeping every model's weights would grow the run directory with the
number of models for files nobody reads again.  A weights file is kept while
its model is

* a candidate parent now (the view's best, for the Bayesian search);
* a candidate parent some group was given with its last Work (its leader
  may still choose it: the reference lasts until the group's next Work or
  Stop);
* the parent of a task in flight (from the master's Accepted until the
  task's Result or failure: the leader loads it at the start of training);
* the best model so far by observed validation accuracy.

Everything else is removed, once: a model that stopped being a candidate
never becomes one again (the view's membership is monotone), so removal
cannot take a file a later task will want.  Each check is O(1) per model
touched; nothing here walks the history or the groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class Retention:
    """Reference counts of the models whose weights may still be read."""

    def __init__(self, keep_all: bool = False) -> None:
        self.keep_all = keep_all
        self.files: dict[int, str] = {}
        """model id → its weights file (relative to the run directory), for files not yet removed"""
        self._group_refs: dict[int, tuple[int, ...]] = {}
        self._refs: Counter[int] = Counter()
        self._candidates: frozenset[int] = frozenset()
        self._task_parent: dict[int, int] = {}
        self._in_flight: Counter[int] = Counter()
        self._best: int | None = None
        self._doubtful: set[int] = set()
        """models that lost a protection since the last sweep"""

    def kept(self, model_id: int) -> bool:
        """Whether ``model_id``'s weights are protected now."""
        return (self.keep_all or model_id in self._candidates or self._refs[model_id] > 0
                or self._in_flight[model_id] > 0 or model_id == self._best)  # fmt: skip

    def added(self, model_id: int, weights: str) -> None:
        """A model's weights file exists (a Result, or a record read back on ``--resume``)."""
        if weights:
            self.files[model_id] = weights
            self._doubtful.add(model_id)

    def candidates(self, ids: Iterable[int], best: int | None) -> None:
        """The search's candidate parents now, and the best model by observed accuracy."""
        ids = frozenset(ids)
        if ids != self._candidates:
            self._doubtful |= self._candidates - ids
            self._candidates = ids
        if best != self._best:
            if self._best is not None:
                self._doubtful.add(self._best)
            self._best = best

    def refer(self, group: int, ids: Iterable[int]) -> None:
        """``group`` was sent a Work whose candidate parents are ``ids`` (its previous ones are released)."""
        ids = tuple(ids)
        if self._group_refs.get(group) == ids:
            return
        self.release(group)
        self._group_refs[group] = ids
        self._refs.update(ids)

    def release(self, group: int) -> None:
        """``group`` will choose no more parents from its last Work (it got a new one, or Stop)."""
        for model_id in self._group_refs.pop(group, ()):
            self._refs[model_id] -= 1
            if self._refs[model_id] <= 0:
                del self._refs[model_id]
                self._doubtful.add(model_id)

    def task_started(self, task: int, parent: int | None) -> None:
        """The master accepted ``task``'s proposal: its leader is about to load ``parent``'s weights."""
        if parent is not None:
            self._task_parent[task] = parent
            self._in_flight[parent] += 1

    def task_ended(self, task: int) -> None:
        parent = self._task_parent.pop(task, None)
        if parent is not None:
            self._in_flight[parent] -= 1
            if self._in_flight[parent] <= 0:
                del self._in_flight[parent]
                self._doubtful.add(parent)

    def sweep(self) -> list[tuple[int, str]]:
        """The (model, file) pairs that can go now; they are forgotten here (the caller removes them)."""
        if self.keep_all:
            self._doubtful.clear()
            return []
        gone = []
        for model_id in sorted(self._doubtful):
            if model_id in self.files and not self.kept(model_id):
                gone.append((model_id, self.files.pop(model_id)))
        self._doubtful.clear()
        return gone

