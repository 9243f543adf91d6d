"""A lost group costs its group, not the run: the master's side, without MPI (issue 25).

The hang deadline is driven with a fake clock; the loss reported by the MPI
transport (ULFM) is the same ``GroupLost`` the MPI backend hands the master,
fed here directly; a whole in-process run with a group that hangs goes on to
its time limit, writes one score and passes verify.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.master import ALL_LOST
from aiperf_mpi.job.messages import EpochDone, EpochStarted, GroupLost, MonitorSample, Stop
from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH, finalize_returns
from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import score_run
from analysis import report, verify
from tests.support.fault_master import POLICY, epoch, lost_events, started_master
from tests.support.local_run import run_local
from tests.support.verify_runs import consistent_run, find, forge


def test_the_deadline_is_a_multiple_of_the_groups_own_longest_epoch() -> None:
    assert POLICY.silent_limit(None, None) is None  # nothing timed yet: no deadline
    assert POLICY.silent_limit(20.0, None) == 70.0
    assert POLICY.silent_limit(20.0, 45.0) == 3 * 45.0 + 10.0  # a new model's first-epoch cost counts too


def test_a_silent_group_is_lost_at_its_own_deadline_and_the_other_goes_on(tmp_path) -> None:
    """Group 0 trains 10 s epochs; group 1 falls silent after its first: lost at 3 × 10 + 10 s of silence."""
    now = [0.0]
    master, works = started_master(tmp_path, 2, now)
    now[0] = 10.0
    for group in (0, 1):
        master.handle(group, EpochDone(works[group].task_id, epoch(1, now[0] - 10.0, now[0])))
    for second in range(11, 51):  # group 0 speaks every 5 s; group 1 never again (its monitor does)
        now[0] = float(second)
        if second % 5 == 0:
            master.handle(0, EpochStarted(works[0].task_id, 2, now[0], 32))
        master.handle(1, MonitorSample(now[0], 1, "host1", 0, "cpu", []))
        assert master.tick() == []
        assert master.lost_groups == 0  # 40 s of silence at most: not past its deadline yet
    now[0] = 50.5
    master.tick()
    assert master.lost_groups == 0  # 40.5 s silent, the deadline is 40 s, but the walk runs once a second
    now[0] = 51.0
    master.tick()
    assert master.lost_groups == 1 and master.state[1].lost and master.newly_lost == [1]
    [lost] = lost_events(tmp_path)
    assert lost["group"] == 1 and lost["task"] == works[1].task_id and lost["host"] == "host1"
    assert lost["ranks"] == [] and "silent for 41.0 s" in lost["reason"] and lost["silent"] == 41.0
    assert works[1].task_id not in master.tasks and master.running == 1  # its task is not waited for
    assert master.handle(1, EpochDone(works[1].task_id, epoch(2, 10.0, 60.0))) == []  # woke up: ignored
    assert master.ignored == 1 and master.epochs_done == 2  # only the completed epochs count
    now[0] = 1000.0
    master.handle(0, EpochStarted(works[0].task_id, 3, now[0], 32))
    stops = master.tick()
    assert [(group, type(message)) for group, message in stops] == [(0, Stop)]  # nothing to the lost group
    master.log.close()


def test_a_group_without_a_timed_epoch_has_no_deadline(tmp_path) -> None:
    now = [0.0]
    master, _ = started_master(tmp_path, 1, now)
    now[0] = 900.0
    master.tick()
    assert master.lost_groups == 0
    master.log.close()


def test_without_a_policy_no_group_is_ever_lost_to_silence(tmp_path) -> None:
    """Fault tolerance off: as before, a silent group is waited for (until the grace period)."""
    now = [0.0]
    master, works = started_master(tmp_path, 1, now, hang=None)
    now[0] = 10.0
    master.handle(0, EpochDone(works[0].task_id, epoch(1, 0.0, 10.0)))
    now[0] = 900.0
    master.tick()
    assert master.lost_groups == 0 and master.running == 1
    master.log.close()


def test_a_failed_rank_reported_by_mpi_loses_its_group_and_when_all_are_lost_the_run_stops(tmp_path) -> None:
    now = [0.0]
    master, works = started_master(tmp_path, 2, now)
    assert master.handle(1, GroupLost([4], "rank 4 failed (MPI_ERR_PROC_FAILED)")) == []
    assert master.handle(1, GroupLost([3], "rank 3 failed")) == []  # the same group again: once
    [lost] = lost_events(tmp_path)
    assert lost["ranks"] == [4] and lost["task"] == works[1].task_id and "MPI_ERR_PROC_FAILED" in lost["reason"]
    assert "1 group(s) lost" in master.progress_line()
    master.handle(0, GroupLost([1, 2], "ranks 1, 2 failed"))
    assert master.tick() == [] and master.stopping == ALL_LOST and master.done
    master.log.close()


class HangingRunner:
    """Wraps a fake runner: from its second task on, the group's training never returns (until released)."""

    def __init__(self, runner, release: threading.Event) -> None:
        self.runner, self.release, self.tasks = runner, release, 0

    def run(self, task, on_epoch, should_stop, on_epoch_start=None):
        self.tasks += 1
        if self.tasks >= 2:
            self.release.wait()
        return self.runner.run(task, on_epoch, should_stop, on_epoch_start)

    def __getattr__(self, name):
        return getattr(self.runner, name)


def test_a_run_with_a_hung_group_goes_on_to_its_time_limit_with_one_score(tmp_path, monkeypatch) -> None:
    """The benchmark's own session in this process: group 1 hangs in its second task; the run goes on."""
    release = threading.Event()
    from tests.support import fake_runner

    original = fake_runner.FakeRunner

    def hanging_in_group_1(group, **options):
        runner = original(group, **options)
        return HangingRunner(runner, release) if group == 1 else runner

    monkeypatch.setattr("tests.support.local_run.FakeRunner", hanging_in_group_1)
    # a margin of 2 s: at 0.5 s a loaded machine (the verify corpus recorded beside a TensorFlow run, 2 cores) held
    # the healthy group 0's thread past its 0.8 s deadline, and both groups were lost
    policy = HangPolicy(epochs=3.0, margin=2.0, check_interval=0.1)
    try:
        run = run_local(tmp_path, groups=2, time_limit=4.0, epoch_seconds=0.1, hang=policy)
    finally:
        release.set()
    assert run.outcome == "done" and run.master.stopping == "time limit"
    [lost] = lost_events(tmp_path)
    assert lost["group"] == 1 and "silent" in lost["reason"]
    events = runlog.read_events(tmp_path).events
    assert sum(e["event"] == runlog.SCORE for e in events) == 1
    assert find(events, runlog.RUN_STOP)["groups_lost"] == 1
    after = [e for e in events if e.get("group") == 1 and e[runlog.TIME] > lost[runlog.TIME]]
    assert after == []  # nothing of the lost group is logged after its loss
    assert score_run(tmp_path).active_time >= 4.0  # never shortened by the loss: lost capacity costs score
    markdown = report.write_report(tmp_path).read_text()
    assert "Group 1 on " in markdown and " was lost: silent for " in markdown  # the report shows the lost group
    # verify is not asked here: the fake runner's operation counts are not a graph's (see the next test)


def test_verify_accepts_a_lost_groups_open_task_and_refuses_work_logged_after_the_loss(tmp_path, capsys) -> None:
    run = consistent_run(tmp_path / "run")

    def lose_group_1(events: list[dict]) -> list[dict]:
        kept = [e for e in events  # group 1's second epoch and its model_done never came
                if not (e.get("group") == 1 and (e["event"] == runlog.MODEL_DONE or e.get("epoch") == 2))]
        stop = kept.index(find(kept, runlog.RUN_STOP))
        kept.insert(stop, {"event": runlog.GROUP_LOST, "time": 1095.0, "group": 1, "ranks": [4], "host": "h0",
                           "task": 1, "reason": "rank 4 failed (MPI_ERR_PROC_FAILED)"})  # fmt: skip
        kept[stop + 1]["groups_lost"] = 1
        return kept

    forge(run, lose_group_1)
    assert verify.main([str(run)]) == 0, capsys.readouterr().out
    assert "group 1 lost" in capsys.readouterr().out

    def late_epoch(events: list[dict]) -> list[dict]:
        lost = find(events, runlog.GROUP_LOST)
        lost["time"] = 1040.0  # before group 1's first epoch is logged
        return sorted(events, key=lambda e: e["time"])

    forge(run, late_epoch)
    assert verify.main([str(run)]) == 1
    assert "after it was lost" in capsys.readouterr().out


def test_a_tolerant_rank_leaves_through_mpi_finalize_unless_the_detector_thread_runs() -> None:
    """Under the detector thread Open MPI 5.0.11's MPI_Finalize never returns; without it, it is the clean end."""
    words = OPEN_MPI_LAUNCH.split()  # --mca NAME VALUE reaches every rank as OMPI_MCA_NAME=VALUE
    launched = {f"OMPI_MCA_{words[at + 1]}": words[at + 2] for at, word in enumerate(words) if word == "--mca"}
    assert launched["OMPI_MCA_mpi_ft_detector"] == "false" and finalize_returns(launched)
    older = {**launched, "OMPI_MCA_mpi_ft_detector": "true", "OMPI_MCA_mpi_ft_detector_thread": "true"}
    assert not finalize_returns(older)
    assert finalize_returns({**older, "OMPI_MCA_mpi_ft_detector_thread": "false"})


def test_one_function_decides_whether_fault_tolerance_is_on() -> None:
    """The start line, the transport, the relays and the abort guard ask job_fault_tolerance: no module but
    tolerance.py applies the rule itself or reads its settings, so no two ranks or roles can decide otherwise."""
    package = Path(__file__).resolve().parents[2] / "aiperf_mpi"
    deciding = set()
    for path in package.rglob("*.py"):
        if path.name in ("tolerance.py", "launch_settings.py"):  # the rule, and the settings' one home (no rule)
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            called = node.func if isinstance(node, ast.Call) else None
            name = getattr(called, "id", getattr(called, "attr", None))
            if name == "fault_tolerance" or (isinstance(node, ast.Constant) and "mpi_ft_" in str(node.value)):
                deciding.add(path.relative_to(package).as_posix())
    assert not deciding, f"fault tolerance decided outside mpi/tolerance.py: {sorted(deciding)}"


def test_the_hang_check_walks_the_groups_a_slice_a_pass(tmp_path) -> None:
    """A round over the groups goes ``HANG_CHECK_SLICE`` groups per tick (a walk over 65,536 at once was a
    ≈ 35 ms pause once a second); a silent group past the first slice is lost on the pass that reaches it."""
    from aiperf_mpi.job.master import HANG_CHECK_SLICE

    groups = 2 * HANG_CHECK_SLICE + 10
    now = [0.0]
    master, _ = started_master(tmp_path, groups, now)
    for group in range(groups):
        master.state[group].longest_epoch = 10.0  # every group timed 10 s epochs: deadline 40 s
    silent = groups - 1  # in the last slice
    now[0] = 30.0
    for group in range(groups - 1):
        master.handle(group, EpochStarted(master.state[group].task, 2, now[0], 32))
    now[0] = 41.0  # group `silent` has been silent 41 s; the others 11 s
    master.tick()
    assert master.checking_hangs and master.lost_groups == 0  # the first slice: not there yet
    master.tick()
    assert master.checking_hangs and master.lost_groups == 0
    master.tick()
    assert not master.checking_hangs and master.lost_groups == 1 and master.state[silent].lost
    master.tick()  # the round is over; the next begins a check interval after the last began
    assert not master.checking_hangs
    master.log.close()
