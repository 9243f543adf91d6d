"""What several of verify's rules need of the run, kept once: the shared view the walk updates before any rule
sees an event (issue 44).

The run's model (:class:`aiperf_mpi.results.logmodel.RunModel`, ``run.model``) holds the segments, their
configuration, system, layout and peaks, and the open tasks as the scorer reads them; this view holds what the
model does not and more than one family reads, so that no family reaches into another's state:

- ``strategies``: how many tasks' first proposals name each search strategy (the ``record`` family's
  ``proposed twice`` is not counted again), which the ``score`` family's rule ``algorithms`` holds to the
  configured search.

The walk (:func:`analysis.verify.registry.walk`) calls :meth:`RunView.see` with each event that keeps to the
schema, after the model has read it and before the families are given it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel


@dataclass
class RunView:
    """The shared facts of one verification, as of the event being judged."""

    strategies: dict[str, int] = field(default_factory=dict)
    """search strategy → the tasks whose first proposal names it (``?``: a proposal that names none)"""
    seen_tasks: set[int] = field(default_factory=set)
    """every task proposed, or failed without a proposal (its search found no child): a second proposal of one
    is the record family's problem, never a second strategy"""

    def see(self, event: dict, model: RunModel) -> None:
        """Take ``event`` (one that keeps to the schema; ``model`` has read it) into the view."""
        if not model.segment_records:  # before the first run_start: the segments row names it, nothing counts
            return
        name, task = event[runlog.EVENT], event.get("task")
        if name == runlog.MODEL_PROPOSED and task not in self.seen_tasks:
            self.seen_tasks.add(task)
            strategy = str((event.get("search") or {}).get("strategy", "?"))
            self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
        elif name == runlog.MODEL_FAILED:
            self.seen_tasks.add(task)
