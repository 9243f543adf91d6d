"""A deadline at every phase (issue 43), without MPI: the watchdog's thread, and the master's deadlines.

The watchdog runs its real thread against real waits (short bounds); its action is recorded instead of ending
the process (over MPI it is ``MPI_Abort``: tests/mpi/test_deadlines.py).  The master's first-model deadline, its
end of a run whose launch has no fault tolerance, and its verdict at the drain's end are driven with a fake clock.
"""

from __future__ import annotations

import threading
import time

import pytest

from aiperf_mpi.job.deadlines import (
    DEFAULT_BOUNDS,
    END_MARGIN,
    LOG_FSYNC,
    STARTUP,
    PhaseBounds,
    Watchdog,
    startup_bound_from_argv,
)
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.master import HANG_STOP
from aiperf_mpi.job.messages import EpochDone, EpochStarted
from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import stopped_by_signal
from tests.support.fault_master import epoch, lost_events, started_master


class Recorder:
    """The injected action: what ended the rank, and when."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []
        self.called = threading.Event()

    def __call__(self, status: int) -> None:
        self.calls.append((status, time.monotonic()))
        self.called.set()


def test_a_phase_past_its_bound_prints_one_line_and_runs_the_action_once(capsys) -> None:
    action = Recorder()
    watchdog = Watchdog(3, "node7", action, tick=0.05)
    began = time.monotonic()
    watchdog.enter(STARTUP, 0.3, "a rank hangs before the start line", 5)
    assert action.called.wait(5.0)
    waited = action.calls[0][1] - began
    assert 0.3 <= waited < 1.5, waited  # the bound, plus at most a tick (and this machine's load)
    time.sleep(0.3)
    assert [status for status, _ in action.calls] == [5]
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["aiperf_mpi: rank 3 on node7: start-up passed its deadline of 0 s: a rank hangs before the "
                     "start line"]  # fmt: skip
    assert watchdog.fired is not None and watchdog.fired.phase == STARTUP


def test_a_phase_left_in_time_and_a_renamed_one_keep_their_own_deadlines(capsys) -> None:
    action = Recorder()
    watchdog = Watchdog(0, "h", action, tick=0.05)
    watchdog.enter("the end", 0.4, "before the score", 5)
    time.sleep(0.1)
    watchdog.rename("the end", "the score is on disk")  # the same deadline, a new description
    assert watchdog.phase == "the end"
    assert action.called.wait(5.0)
    assert "the end passed its deadline of 0 s: the score is on disk" in capsys.readouterr().err
    calm = Recorder()
    watchdog = Watchdog(0, "h", calm, tick=0.05)
    watchdog.enter(STARTUP, 0.3, "-", 5)
    watchdog.leave()
    assert not calm.called.wait(0.8) and watchdog.phase == ""


def test_a_guarded_call_that_blocks_past_its_bound_ends_the_rank_from_the_watchdogs_thread(capsys) -> None:
    """A call that really blocks (a wait on an event nobody sets, as an fsync on a hung file system) in another
    thread: the watchdog's thread fires while it is still blocked; a call that ends in time fires nothing."""
    action = Recorder()
    watchdog = Watchdog(0, "h", action, tick=0.05)
    with watchdog.guard(LOG_FSYNC, 5.0, "-", 5):
        time.sleep(0.05)
    assert not action.called.wait(0.3)
    hung = threading.Event()

    def fsync_on_a_hung_file_system() -> None:
        with watchdog.guard(LOG_FSYNC, 0.3, "nothing after the last fsync'd event is claimed", 5):
            hung.wait(10.0)

    thread = threading.Thread(target=fsync_on_a_hung_file_system, daemon=True)
    thread.start()
    assert action.called.wait(5.0) and thread.is_alive()  # detected while the call still blocks
    hung.set()
    assert "the run log's fsync passed its deadline" in capsys.readouterr().err


def test_a_training_rank_waits_out_the_drain_and_rank_0s_end_before_its_own_end_fires() -> None:
    bounds = PhaseBounds(end=100.0)
    assert bounds.training_rank_end(grace=120.0) == 120.0 + 100.0 + END_MARGIN
    assert DEFAULT_BOUNDS.startup >= 30 * 32  # far past the 32 s a 128-rank start-up took (BENCHMARKS.md)


def test_a_group_silent_in_its_first_model_is_lost_at_the_first_model_deadline(tmp_path) -> None:
    now = [0.0]
    master, works = started_master(tmp_path, 2, now, hang=HangPolicy(first_model=100.0, check_interval=1.0))
    for second in range(1, 101):
        now[0] = float(second)
        master.handle(0, EpochStarted(works[0].task_id, 1, now[0], 32))  # group 0 speaks; group 1 never
        master.tick()
    assert master.lost_groups == 0
    now[0] = 101.5
    master.tick()
    [lost] = lost_events(tmp_path)
    assert lost["group"] == 1 and "in its first model" in lost["reason"] and "--first-model-deadline" in lost["reason"]
    assert master.stopping == ""  # fault tolerance on: the run goes on
    master.log.close()


def test_a_group_never_ready_after_the_start_line_is_lost_at_the_first_model_deadline(tmp_path) -> None:
    from aiperf_mpi.config import RunConfig
    from aiperf_mpi.job.master import Master
    from aiperf_mpi.job.messages import Ready
    from aiperf_mpi.search.bayesian import SearchConfig
    from aiperf_mpi.search.view import MasterHistory

    now = [0.0]
    master = Master(RunConfig(time_limit=1000, seed_model="tiny", run_dir=str(tmp_path)), runlog.EventLog(tmp_path),
                    MasterHistory(SearchConfig().view_bounds()), 2, tmp_path, clock=lambda: now[0],
                    hang=HangPolicy(first_model=50.0))  # fmt: skip
    [(_, work)] = master.handle(0, Ready(0, 2, "host0"))
    now[0] = 50.0
    master.tick()
    assert master.lost_groups == 0
    master.handle(0, EpochStarted(work.task_id, 1, now[0], 32))  # group 0 speaks; group 1 never did
    now[0] = 51.5
    master.tick()
    [lost] = lost_events(tmp_path)
    assert lost["group"] == 1 and lost["task"] is None and "first model" in lost["reason"]
    now[0] = 103.0  # group 0 spoke at 50 s but never proposed its model: lost in its search, at 50 s + 50 s
    master.tick()
    lost = lost_events(tmp_path)[1]
    # its task was handed out but never proposed: the log never saw it, and group_lost names none (verify holds a
    # lost group's task to its proposals; seen in tests/mpi/test_deadlines.py)
    assert lost["group"] == 0 and lost["task"] is None and work.task_id is not None
    master.log.close()


def test_with_fault_tolerance_off_a_missed_deadline_ends_the_run_with_its_reason(tmp_path) -> None:
    now = [0.0]
    master, works = started_master(tmp_path, 2, now, hang=HangPolicy(epochs=3.0, margin=10.0, tolerant=False))
    now[0] = 10.0
    for group in (0, 1):
        master.handle(group, EpochDone(works[group].task_id, epoch(1, 0.0, 10.0)))
    now[0] = 51.0  # group 1 silent 41 s, past its 3 × 10 + 10 s
    master.handle(0, EpochStarted(works[0].task_id, 2, now[0], 32))
    stops = master.tick()
    assert master.lost_groups == 1 and master.stopping == HANG_STOP
    assert [group for group, _ in stops] == [0]  # the live group is stopped; the hung one gets nothing
    assert stopped_by_signal(HANG_STOP)  # on the score's axis as it ran: --resume goes on from there
    master.log.close()


@pytest.mark.parametrize(("spoke_in_drain", "lost"), [(False, True), (True, False)])
def test_when_the_drain_ends_a_group_silent_through_it_is_lost_and_a_speaking_one_discarded(
        tmp_path, spoke_in_drain: bool, lost: bool) -> None:  # fmt: skip
    """The multi-node SIGSTOP case with the default --grace: the stopped rank's deadline (3 × 40 s + 60 s) falls
    after the drain's end; its group is lost there, not merely discarded, while a slow group that spoke is not."""
    now = [0.0]
    master, works = started_master(tmp_path, 1, now, hang=HangPolicy(epochs=3.0, margin=60.0))
    now[0] = 40.0
    master.handle(0, EpochDone(works[0].task_id, epoch(1, 0.0, 40.0)))
    now[0] = 60.0  # the stop begins (a signal; the time limit alike)
    master.tick("signal SIGUSR1")
    if spoke_in_drain:
        now[0] = 150.0
        master.handle(0, EpochStarted(works[0].task_id, 2, now[0], 32))
    now[0] = 60.0 + 100.0  # the drain's end: silent 120 s, under its deadline of 180 s
    master.tick()
    assert master.lose_silent_at_drain_end() == int(lost)
    events = lost_events(tmp_path)
    assert bool(events) == lost and (not lost or "when the drain ended" in events[0]["reason"])
    assert master.running == (0 if lost else 1)
    master.log.close()
    assert runlog.HANG_REASON == HANG_STOP


@pytest.mark.parametrize(("argv", "bound"), [
    (["--startup-deadline", "40"], 40.0),
    (["--rehearse", "--startup-deadline=12.5", "--time-limit", "60"], 12.5),
    (["--startup-deadline", "40", "--startup-deadline", "90"], 90.0),  # the last one, as argparse takes it
    (["--time-limit", "60"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline"], DEFAULT_BOUNDS.startup),  # no value: the parser says so later
    (["--startup-deadline", "soon"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline=0"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline", "-5"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline", "nan"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline", "inf"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline", "1e12"], DEFAULT_BOUNDS.startup),
    (["--", "--startup-deadline", "40"], DEFAULT_BOUNDS.startup),
    (["--startup-deadline-x", "40"], DEFAULT_BOUNDS.startup),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)  # fmt: skip
def test_the_start_up_bound_is_read_from_the_command_line_before_mpi_exists(argv: list[str], bound: float) -> None:
    """main's SIGALRM inside MPI_Init takes it: a bad value falls back to the default, reported later by the parser."""
    assert startup_bound_from_argv(argv) == bound


def test_the_templates_read_the_start_up_and_end_bounds_from_the_benchmarks_options() -> None:
    """``python -m aiperf_mpi.job.deadlines OPTIONS``: the start-up watcher's bound and srun's ``--wait`` (the end)."""
    import subprocess
    import sys

    from aiperf_mpi.job.deadlines import launch_bounds

    rest = "60 120"  # the watcher's margin and the close's bound: the batch shell restates none of them
    assert launch_bounds(["--time-limit", "60"]) == f"{DEFAULT_BOUNDS.startup:.0f} {DEFAULT_BOUNDS.end:.0f} {rest}"
    assert launch_bounds(["--startup-deadline=12.5", "--end-deadline", "30"]) == f"13 30 {rest}"
    assert launch_bounds(["--end-deadline", "never"]) == f"{DEFAULT_BOUNDS.startup:.0f} {DEFAULT_BOUNDS.end:.0f} {rest}"
    shown = subprocess.run([sys.executable, "-m", "aiperf_mpi.job.deadlines", "--end-deadline", "45"],
                           capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert shown.stdout == f"{DEFAULT_BOUNDS.startup:.0f} 45 {rest}\n" and not shown.stderr


def test_once_the_ranks_met_mpi_finalize_gets_what_is_left_of_the_phase_at_most_the_ends_bound() -> None:
    """A training rank's end bound (grace + end + 120 s) no longer applies once every rank met: rank 0's end is
    done, and a node-mate of a rank stopped after its part of the meeting must not wait 210 s in MPI_Finalize."""
    now = [100.0]
    watchdog = Watchdog(2, "node2", Recorder(), clock=lambda: now[0], tick=0.05)
    assert watchdog.finalize_bound(120.0) == 120.0  # no phase, no configuration: the default
    watchdog.enter("the end", DEFAULT_BOUNDS.training_rank_end(60.0), "a training rank's end", 5)
    now[0] += 10.0
    assert watchdog.finalize_bound(120.0) == 60.0 + 900.0 + END_MARGIN - 10.0
    watchdog.after_meeting = 30.0
    assert watchdog.finalize_bound(120.0) == 30.0
    now[0] += DEFAULT_BOUNDS.training_rank_end(60.0) - 15.0  # 5 s left of the phase: less than the end's bound
    assert watchdog.finalize_bound(120.0) == 5.0
    watchdog.leave()
    assert watchdog.finalize_bound(120.0) == 30.0


def test_a_phase_past_its_bound_ends_the_rank_while_a_c_call_holds_the_interpreter_lock() -> None:
    """Issue 50: the watchdog is a Python thread, which cannot run while the main thread is inside a C call that
    holds the interpreter lock (mpi4py's MPI_Init and MPI_Finalize, a library's teardown).  Here the main thread
    calls libc's sleep(60) through ctypes.PyDLL, which keeps the lock: the watchdog's own line never comes, and
    faulthandler's C thread ends the process with status 1 at the bound plus the backstop, its stack on stderr."""
    import subprocess
    import sys

    program = (
        "import ctypes, time\n"
        "from aiperf_mpi.job.deadlines import Watchdog\n"
        "watchdog = Watchdog(0, 'host', lambda status: print('ACTION', flush=True), backstop=1.0)\n"
        "watchdog.enter('a test phase', 1.0, 'a C call holds the lock', 9)\n"
        "ctypes.PyDLL(None).sleep(60)\n"  # PyDLL: the interpreter lock is held through the call
        "print('NOT REACHED', flush=True)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=50)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stderr and "sleep" not in done.stdout and "NOT REACHED" not in done.stdout
    assert "ACTION" not in done.stdout and "passed its deadline" not in done.stderr  # the Python thread never ran
    assert took < 20, took  # 2 s after the phase began, a start-up of the interpreter besides


def test_a_phase_left_in_time_cancels_its_backstop() -> None:
    import subprocess
    import sys

    program = (
        "import time\n"
        "from aiperf_mpi.job.deadlines import Watchdog\n"
        "watchdog = Watchdog(0, 'host', lambda status: None, backstop=0.5)\n"
        "watchdog.enter('a test phase', 0.5, 'nothing', 9)\n"
        "watchdog.leave()\n"
        "time.sleep(3)\n"
        "print('ALIVE', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0 and "ALIVE" in done.stdout, done.stderr


def test_the_default_start_up_bound_scales_with_the_job_and_says_where_it_came_from(monkeypatch) -> None:
    """Issue 50: a 3-rank make run started with 'start-up 1800 s'; the bound is now 300 s + 0.3 s a rank, read
    from the launcher's variables before MPI_Init and from the world after it, and an explicit option wins."""
    from aiperf_mpi.config import RunConfig
    from aiperf_mpi.job.deadlines import STARTUP_UNKNOWN, bounds_of, startup_for, world_size_from

    assert startup_for(3) == pytest.approx(300.9) and startup_for(4096) == pytest.approx(1528.8)
    assert startup_for(None) == STARTUP_UNKNOWN
    assert world_size_from({"OMPI_COMM_WORLD_SIZE": "128", "SLURM_NTASKS": "4"}) == 128  # the launcher's own first
    assert world_size_from({"SLURM_NTASKS": "4"}) == 4 and world_size_from({"PMI_SIZE": "x"}) is None
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "1000")
    assert startup_bound_from_argv([]) == pytest.approx(600.0)
    assert startup_bound_from_argv(["--startup-deadline", "0"]) == pytest.approx(600.0)  # 0: derived
    assert startup_bound_from_argv(["--startup-deadline", "40"]) == 40.0
    derived = bounds_of(RunConfig(), 3)
    assert derived.startup == pytest.approx(300.9) and "0.3 s × 3 ranks" in derived.startup_from
    assert derived.first_model_derived
    given = bounds_of(RunConfig(startup_deadline=50.0, first_model_deadline=70.0), 3)
    assert (given.startup, given.startup_from, given.first_model, given.first_model_derived) == \
        (50.0, "--startup-deadline", 70.0, False)  # fmt: skip


def test_the_hang_margin_goes_from_the_command_line_to_the_masters_policy(tmp_path) -> None:
    """``--hang-margin`` (issue 51): the mid-run bound's margin has one default (RunConfig's), and the command line's
    value is the configuration's, its bounds' and the policy's the master builds (:meth:`HangPolicy.of`, as
    MasterRole does): a group whose longest epoch took 4 s is lost after 27 s of silence at 15 s instead of 72 s;
    a bad value is refused in rank 0's one line (the launch: tests/mpi/test_bad_input.py)."""
    from aiperf_mpi.cli import build_parser, check_mode, run_overrides
    from aiperf_mpi.config import RunConfig, load_config
    from aiperf_mpi.errors import UsageError
    from aiperf_mpi.job.deadlines import NOT_READY, bounds_of

    def policy(argv: list[str], epoch_ops: float | None = None) -> HangPolicy:
        options = build_parser().parse_args(argv)
        check_mode(options)
        return HangPolicy.of(bounds_of(load_config(options.config, run_overrides(options)), 4), epoch_ops, False)

    assert policy([]).margin == RunConfig.hang_margin == DEFAULT_BOUNDS.hang_margin == HangPolicy().margin == 60.0
    assert policy([]).silent_limit(4.0, 3.0) == 72.0
    small = policy(["--hang-margin", "15", "--first-model-deadline", "40"])
    assert (small.silent_limit(4.0, 3.0), small.silent_limit(None, None), small.tolerant) == (27.0, 40.0, False)
    derived = policy(["--hang-margin=7.5"], epoch_ops=1e12)
    assert (derived.margin, derived.first_model, derived.first_model_epoch_ops) == (7.5, NOT_READY, 1e12)
    assert policy(["--resume", str(tmp_path), "--hang-margin", "15"]).margin == 15.0  # a resume may change it
    toml = tmp_path / "run.toml"
    toml.write_text("hang_margin = 20\n")
    assert policy(["--config", str(toml)]).margin == 20.0  # a TOML key like every option
    assert policy(["--config", str(toml), "--hang-margin", "9"]).margin == 9.0  # the command line's last
    for bad, why in (("0", "hang_margin must be > 0, got 0"), ("-5", "hang_margin must be > 0, got -5"),
                     ("nan", "hang_margin must be a finite number"), ("1e12", "hang_margin must be ≤ 2678400")):
        with pytest.raises(UsageError, match=why):
            policy([f"--hang-margin={bad}"])
    with pytest.raises(UsageError, match="argument --hang-margin: invalid float value: 'soon'"):
        policy(["--hang-margin", "soon"])


def test_a_groups_first_model_bound_is_derived_from_its_probed_peak(tmp_path) -> None:
    """Issue 50: the first model's bound was 3600 s for every job.  Derived, each group's is 300 s + 3 × the seed's
    first epoch at 3 % of the peak its Ready reports: a slow group gets longer than a fast one, a group with no
    probe 3600 s, and a group never Ready the policy's own bound (600 s in a run: NOT_READY; 300 s here)."""
    from aiperf_mpi.config import RunConfig
    from aiperf_mpi.job.deadlines import FIRST_MODEL_UNMEASURED, first_model_for
    from aiperf_mpi.job.master import Master
    from aiperf_mpi.job.messages import Ready
    from aiperf_mpi.search.bayesian import SearchConfig
    from aiperf_mpi.search.view import MasterHistory

    ops = 7.39e11  # the ResNet-50 seed's first epoch of the embedded digits (make run)
    assert first_model_for(ops, 5e10) == pytest.approx(300 + 3 * ops / (5e10 * 0.03))
    assert first_model_for(ops, None) == FIRST_MODEL_UNMEASURED == first_model_for(ops, float("nan"))
    now = [0.0]
    master = Master(RunConfig(time_limit=10_000, seed_model="tiny", run_dir=str(tmp_path)),
                    runlog.EventLog(tmp_path), MasterHistory(SearchConfig().view_bounds()), 3, tmp_path,
                    clock=lambda: now[0], hang=HangPolicy(first_model=300.0, first_model_epoch_ops=ops))  # fmt: skip
    peak = {"precision": "fp32", "ranks": 2, "ops_per_second": 5e10}
    master.handle(0, Ready(0, 2, "fast", {**peak, "ops_per_second": 1e12}))
    master.handle(1, Ready(1, 2, "slow", peak))
    fast, slow = master.state[0].first_model, master.state[1].first_model
    assert fast == pytest.approx(300 + 3 * ops / (1e12 * 0.03)) and slow == pytest.approx(first_model_for(ops, 5e10))
    now[0] = 301.5
    master.tick()
    lost = {e["group"]: e["reason"] for e in lost_events(tmp_path)}
    assert set(lost) == {2} and "in its first model" in lost[2]  # never Ready: the floor
    now[0] = fast + 2.0
    master.tick()
    assert {e["group"] for e in lost_events(tmp_path)} == {0, 2}  # the fast group, past its 374 s
    now[0] = slow - 2.0
    master.tick()
    assert {e["group"] for e in lost_events(tmp_path)} == {0, 2}  # the slow one still within its 1,778 s
    now[0] = slow + 2.0
    master.tick()
    assert {e["group"] for e in lost_events(tmp_path)} == {0, 1, 2}
    master.log.close()


def test_the_bounds_table_of_docs_cluster_md_is_generated_from_their_one_home() -> None:
    """Issue 51: the defaults lived in five places; docs/cluster.md's table is deadlines.py's own rendering."""
    from pathlib import Path

    from aiperf_mpi.job.deadlines import bounds_markdown

    text = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text()
    marker = "<!-- generated from aiperf_mpi/job/deadlines.py (bounds_markdown): "
    begin, end = marker + "begin -->\n", marker + "end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, "docs/cluster.md has lost the bounds table's markers"
    assert text[text.index(begin) + len(begin):text.index(end)] == bounds_markdown(), "regenerate the table"
