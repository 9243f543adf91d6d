"""Rank 0's own stall blames no group, and its file work is bounded (issue 50), without MPI.

The master is driven by hand with a fake clock (tests/support/fault_master.py); the master loop's
``pace`` is called as the loop calls it at every pass.  The I/O thread's guard is a real watchdog's, its
action a test's.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from aiperf_mpi.job.batchio import GRAPHS_WRITE, IO_JOIN, WEIGHTS_REMOVAL, BatchIO, BatchWork
from aiperf_mpi.job.deadlines import Watchdog
from aiperf_mpi.job.master import IO_STALL_SECONDS, stall_line
from aiperf_mpi.job.messages import EpochDone, EpochStarted
from aiperf_mpi.mpi.plan import plan_layout, watcher_ranks
from tests.support.fault_master import epoch, lost_events, started_master


def test_a_stall_of_rank_0_moves_every_groups_deadline_and_is_counted_as_rank_0s(tmp_path) -> None:
    """Both groups train 10 s epochs (deadline 3 × 10 + 10 s); rank 0 stops for 100 s: on the wall clock both
    were silent past their deadline, on rank 0's own clock they were not, and neither is lost."""
    now = [0.0]
    master, works = started_master(tmp_path, 2, now)
    passes_until(master, now, 10.0)
    for group in (0, 1):
        master.handle(group, EpochDone(works[group].task_id, epoch(1, 0.0, 10.0)))
    now[0] = 110.0  # rank 0 was stopped for 100 s; its next pass finds the gap first
    assert master.pace() == 100.0 and master.paused == 100.0
    master.tick()
    assert master.lost_groups == 0 and lost_events(tmp_path) == []
    passes_until(master, now, 130.0)
    master.handle(0, EpochStarted(works[0].task_id, 2, now[0], 32))  # group 0 speaks; group 1 no longer
    master.tick()
    assert master.lost_groups == 0  # group 1: 30 s of its own silence, under 40
    for second in range(131, 152):
        now[0] = float(second)
        master.pace()
        master.handle(0, EpochStarted(works[0].task_id, 2, now[0], 32))
        master.tick()
    [lost] = lost_events(tmp_path)  # 41 s of rank 0's running time since group 1 spoke: past 40 s
    assert lost["group"] == 1 and lost["silent"] < 45, lost
    assert master.stall_summary() == {"count": 1, "seconds": 100.0, "longest": 100.0}
    assert "100.0 s" in stall_line(100.0) and "no group is blamed" in stall_line(100.0)
    master.log.close()


def passes_until(master, now: list[float], end: float) -> None:
    """The loop's passes, every 0.5 s, until ``end``: no stall among them."""
    while now[0] < end:
        now[0] = min(end, now[0] + 0.5)
        assert master.pace() == 0.0


def test_a_stall_inside_a_pass_is_judged_at_the_pass_not_blamed_on_the_groups(tmp_path) -> None:
    """Rank 0 stopped inside a pass (in a handler, a write), not in its poll: it woke up and judged the deadlines
    before the next pass counted the gap, and lost both groups (CI of ed2ddd5).  The hang check judges at the
    loop's last pass while a gap it has not counted is open; the next pass counts it; no group is lost."""
    now = [0.0]
    master, works = started_master(tmp_path, 2, now)
    passes_until(master, now, 10.0)
    for group in (0, 1):
        master.handle(group, EpochDone(works[group].task_id, epoch(1, 0.0, 10.0)))
    now[0] = 110.0  # stopped after the pass at 10 s, before its tick
    master.tick()
    assert master.lost_groups == 0 and lost_events(tmp_path) == []
    assert master.pace() == 100.0  # the next pass counts the gap as rank 0's
    master.tick()
    assert master.lost_groups == 0 and master.stall_summary()["count"] == 1
    master.log.close()


def test_without_pace_the_same_gap_loses_both_groups(tmp_path) -> None:
    """The control: the same 100 s, not counted as rank 0's (what the loop did before issue 50), loses both."""
    now = [0.0]
    master, works = started_master(tmp_path, 2, now)
    now[0] = 10.0
    for group in (0, 1):
        master.handle(group, EpochDone(works[group].task_id, epoch(1, 0.0, 10.0)))
    now[0] = 110.0
    master.tick()
    assert master.lost_groups == 2
    master.log.close()


def test_passes_of_the_loop_are_not_stalls_and_a_held_io_batch_is(tmp_path) -> None:
    now = [0.0]
    master, _ = started_master(tmp_path, 1, now)
    for step in range(1, 50):
        now[0] = step * 0.2  # a pass every 0.2 s, the poll's longest wait
        assert master.pace() == 0.0
    assert master.paused == 0.0
    base = now[0]

    def passes(until: float, waited_at: float) -> None:
        """The loop's passes every 0.5 s (it polls every millisecond while a batch is held) until ``until``, the
        oldest batch submitted at ``waited_at``."""
        while now[0] < base + until:
            now[0] = min(base + until, now[0] + 0.5)
            assert master.pace(io_wait=now[0] - (base + waited_at)) == 0.0

    passes(9.0, 0.0)  # a slow fsync: seconds, not a stall (IO_STALL_SECONDS)
    assert master.paused == 0.0
    passes(18.0, 0.0)  # past it: the whole wait when first seen, then each pass's gap
    assert master.paused == pytest.approx(18.0) and IO_STALL_SECONDS < 18.0
    # the thread took every queued batch at once when the held one was done: the oldest now is one submitted
    # during the stall (its wait 15 s at 20 s, younger than what was counted); the episode goes on by the gap
    passes(20.0, 5.0)
    assert master.paused == pytest.approx(20.0)
    now[0] = base + 20.1
    assert master.pace(io_wait=0.0) == pytest.approx(20.0)  # the batches are done: one stall, all of it
    assert master.stall_summary()["count"] == 1 and master.stall_summary()["seconds"] == pytest.approx(20.0)
    master.log.close()


def test_the_io_threads_file_work_and_its_end_run_under_the_guard(tmp_path) -> None:
    """Every blocking call of the I/O thread (the graphs file's write and sync, a weights file's removal) and the
    wait for it at the end run under the guard it is given: a stall there ends the job, as the log's fsync does."""
    phases: list[str] = []
    fired = threading.Event()
    watchdog = Watchdog(0, "host", lambda status: fired.set(), tick=0.05)

    def guard(phase: str):
        phases.append(phase)
        return watchdog.guard(phase, 30.0, "a test", 9)

    weights = tmp_path / "w.weights.h5"
    weights.write_bytes(b"x")
    io = BatchIO(lambda: None, guard)
    io.submit(BatchWork([b"{}\n"], True, [weights], graph_path=str(tmp_path / "graphs.jsonl")), ["reply"])
    deadline = time.monotonic() + 10
    while io.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert io.completed() == ["reply"] and io.waiting() == 0.0
    io.close()
    assert phases == [GRAPHS_WRITE, WEIGHTS_REMOVAL, IO_JOIN] and not weights.exists() and not fired.is_set()
    assert Path(tmp_path / "graphs.jsonl").read_bytes() == b"{}\n"


def test_a_stalled_graphs_write_fires_the_guard_from_the_watchdogs_thread(tmp_path, capsys) -> None:
    """The graphs file's write blocks (a stand-in for a hung file system: the guard's own block, held by the
    test): the watchdog's thread fires within the bound while the I/O thread is still blocked."""
    hung, fired = threading.Event(), threading.Event()
    watchdog = Watchdog(0, "host", lambda status: fired.set(), tick=0.05)

    class Blocking:
        def __init__(self, phase: str) -> None:
            self.phase, self.inner = phase, watchdog.guard(phase, 0.3, "a hung file system", 9)

        def __enter__(self):
            self.inner.__enter__()
            if self.phase == GRAPHS_WRITE:
                hung.wait(10)

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    io = BatchIO(lambda: None, Blocking)
    io.submit(BatchWork([b"{}\n"], False, graph_path=str(tmp_path / "graphs.jsonl")), [])
    assert fired.wait(5.0)
    assert "the graphs file's write and sync passed its deadline" in capsys.readouterr().err
    assert io.waiting() > 0.2  # its batch still waits: rank 0's loop counts that as its own stall
    hung.set()
    io.close()


def test_the_watchers_are_two_leaders_on_distinct_nodes_where_there_are_two() -> None:
    hosts = ["a"] * 4 + ["b"] * 4
    plan = plan_layout(hosts, [0] * 4 + [1] * 4, group_size=2)
    assert watcher_ranks(plan) == [1, 4]  # group 0's leader on node 0, the first leader on node 1
    one_node = plan_layout(["a"] * 6, [0] * 6, group_size=1)
    assert watcher_ranks(one_node) == [1, 2]
    assert watcher_ranks(plan_layout(["a"] * 3, [0] * 3)) == [1]  # one group: one watcher
