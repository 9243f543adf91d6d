"""What several of verify's rules need of the run, kept once: the shared view the walk updates before any rule
sees an event (issue 44).

The run's model (:class:`aiperf_mpi.results.logmodel.RunModel`, ``run.model``) holds the segments, their
configuration, system, layout and peaks, and the open tasks as the scorer reads them; this view holds what the
model does not and more than one family reads, so that no family reaches into another's state:

- ``strategies``: how many tasks' first proposals name each search strategy (the ``record`` family's
  ``proposed twice`` is not counted again), which the ``score`` family's rule ``algorithms`` holds to the
  configured search;
- ``segment`` (:class:`SegmentView`), since the last ``run_start`` event: each layout group's ranks and each
  proposed task's batch size, as logged (a second ``layout`` in a segment replaces the groups it lists: the
  ``inventory`` row names the second one), which the ``data`` family holds an epoch's steps to.

The walk (:func:`analysis.verify.registry.walk`) calls :meth:`RunView.see` with each event that keeps to the
schema, after the model has read it and before the families are given it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel


@dataclass
class SegmentView:
    """What the rules share of the segment a ``run_start`` event opened, until the next one."""

    group_ranks: dict[int, int] = field(default_factory=dict)
    """each layout group's number of ranks: a group whose ``index`` is an integer and whose ``ranks`` is a list
    (a later layout's group replaces an earlier one's; one that is no such group changes nothing)"""
    task_batches: dict[object, object] = field(default_factory=dict)
    """each task proposed in the segment → its ``batch_size`` as logged (its hyper-parameters'; None: none)"""

    def layout(self, event: dict) -> None:
        for group in event["groups"]:
            index, ranks = group.get("index") if isinstance(group, Mapping) else None, None
            if isinstance(group, Mapping):
                ranks = group.get("ranks")
            if isinstance(index, int) and not isinstance(index, bool) and isinstance(ranks, list):
                self.group_ranks[index] = len(ranks)


@dataclass
class RunView:
    """The shared facts of one verification, as of the event being judged."""

    strategies: dict[str, int] = field(default_factory=dict)
    """search strategy → the tasks whose first proposal names it (``?``: a proposal that names none)"""
    seen_tasks: set[int] = field(default_factory=set)
    """every task proposed, or failed without a proposal (its search found no child): a second proposal of one
    is the record family's problem, never a second strategy"""
    segment: SegmentView | None = None
    """the segment the last ``run_start`` event opened (None before the first)"""

    def see(self, event: dict, model: RunModel) -> None:
        """Take ``event`` (one that keeps to the schema; ``model`` has read it) into the view."""
        name, task = event[runlog.EVENT], event.get("task")
        if name == runlog.RUN_START:
            self.segment = SegmentView()
        elif self.segment is not None and name == runlog.LAYOUT:
            self.segment.layout(event)
        elif self.segment is not None and name == runlog.MODEL_PROPOSED:
            self.segment.task_batches[task] = event["hparams"].get("batch_size")
        if not model.segment_records:  # before the model's first segment: the segments row names it, none counts
            return
        if name == runlog.MODEL_PROPOSED and task not in self.seen_tasks:
            self.seen_tasks.add(task)
            strategy = str((event.get("search") or {}).get("strategy", "?"))
            self.strategies[strategy] = self.strategies.get(strategy, 0) + 1
        elif name == runlog.MODEL_FAILED:
            self.seen_tasks.add(task)
