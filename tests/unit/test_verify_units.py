"""verify's rules as functions of finished units (issue 51): what a unit carries is what held when its events came.

A task's unit is judged when the task ends, long after its first epoch; anything the stream hands it by reference
would be read as the log left it, not as it stood.  These hold the cases a differential fuzz of the old event walk
against the units found (13,135 mutants of the verify corpus, three causes, each fixed here): an epoch recounted
against a layout logged after it, a log with no ``run_start`` refused after its ``score.json`` was opened, and a
forged parent graph whose rebuild no JSON can hold ending the walk.
"""

from __future__ import annotations

import math
import os

import pytest

from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.results import runlog
from analysis import checks, verify
from analysis.verify.lineage import _compare
from tests.support.verify_runs import find, rewrite_log


def _row(run_dir, name: str) -> checks.Check:
    return next(check for check in verify.verify_dir(run_dir).checks if check.name == name)


def test_an_epoch_logged_before_its_segment_s_layout_is_recounted_as_of_it(run) -> None:
    """The layout moved after task 0's first epoch: that epoch's global batch was unknown when it came (the old
    walk's line), however the layout reads once the task has ended."""

    def layout_after_the_first_epoch(events: list[dict]) -> list[dict]:
        layout = find(events, runlog.LAYOUT)
        events.remove(layout)
        events.insert(events.index(find(events, runlog.EPOCH, task=0, epoch=1)) + 1, layout)
        return events

    rewrite_log(run, layout_after_the_first_epoch)
    row = _row(run, "ops recount")
    assert row.summary.startswith("3 of 4 epochs recounted exactly"), row.summary
    assert row.problems == ["task 0 epoch 1: the global batch is unknown (batch_size 32, group 0: its segment has no "
                            "layout)"]  # fmt: skip


def test_a_second_layout_does_not_reach_back_to_an_epoch_before_it(run) -> None:
    """A second layout that doubles every group's ranks after task 0's first epoch: the epochs after it are recounted
    with the doubled batch (and differ), the one before it with the first layout's (and matches)."""

    def doubled_after_the_first_epoch(events: list[dict]) -> list[dict]:
        layout = find(events, runlog.LAYOUT)
        doubled = {**layout, "groups": [{**group, "horovod_size": 2 * group["horovod_size"]}
                                        for group in layout["groups"]]}  # fmt: skip
        events.insert(events.index(find(events, runlog.EPOCH, task=0, epoch=1)) + 1, doubled)
        return events

    rewrite_log(run, doubled_after_the_first_epoch)
    row = _row(run, "ops recount")
    assert row.summary.startswith("1 of 4 epochs recounted exactly"), row.summary
    assert not any(line.startswith("task 0 epoch 1:") for line in row.problems), row.problems


def test_a_log_with_no_run_start_is_refused_before_its_score_file_is_opened(run) -> None:
    """No run_start: not an event log, whatever its score.json is (a FIFO is bad input only once it would be
    read)."""
    rewrite_log(run, lambda events: [e for e in events if e[runlog.EVENT] != runlog.RUN_START])
    (run / "score.json").unlink()
    os.mkfifo(run / "score.json")
    with pytest.raises(checks.BadInput, match="no run_start: not an aiperf_mpi event log"):
        verify.verify_dir(run)


def test_a_rebuild_no_json_can_hold_is_a_lineage_problem_not_the_end_of_the_walk() -> None:
    """A forged parent graph with an epsilon of 1e405 (inf once parsed) makes a child whose rebuild cannot be
    written: the lineage row names it, and the walk goes on (before, the error ended the log's reading)."""
    graph = tiny_resnet()
    node = next(name for name, data in graph.nodes(data=True) if "epsilon" in data)
    graph.nodes[node]["epsilon"] = math.inf
    found = _compare(None, "{}", graph, "model_proposed of task 2: its graph is not its parent's")
    assert not found.rebuilt and "the rebuild cannot be written as a graph file" in found.problem, found
