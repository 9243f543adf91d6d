"""A deadline at every phase under the templates' default launch, ``srun --mpi=pmix`` (issue 43, item 3).

The same cases as tests/mpi/test_deadlines.py (which runs them under ``mpirun`` on one host), here as a site runs
them: the scale-out template submitted to the one-node Slurm of tests/support/slurm.py with
``AIPERF_LAUNCHER=srun`` (Slurm's PMIx, no PRRTE, ``--kill-on-bad-exit=1``), fault tolerance off.  4 tasks, a
rehearsal (no TensorFlow): rank 0 the master, group 0 = ranks 1 and 2 (leader 1), group 1 = rank 3.  One rank is
stopped with SIGSTOP at a chosen phase — a hung rank, which Slurm's PMIx reports to nobody and srun does not see
(it has not exited) — and the case checks who detected it (the deadline line printed, or the log's
``group_lost`` and ``run_stop``), the seconds from the stop to the job's end against the bound, one score where
the run had started, a log that ``analysis.verify`` passes, and a ``--resume`` (mpirun) that scores once more.
The stopped rank must be gone with the job: slurmstepd kills the step's tasks (SIGKILL ends a stopped process).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aiperf_mpi.job.deadlines import DEFAULT_BOUNDS
from aiperf_mpi.results import runlog
from tests.support.deadline_runs import deadline_lines, resumed_once_more, verified
from tests.support.failure_matrix import CASES, HANG_MARGIN, ONE_NODE, Case
from tests.support.lost_groups import events_so_far
from tests.support.slurm import JOBSCRIPTS, STILL_RUNNING, JobEnd, SlurmCluster, assert_no_process_left, rank_pids

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.long, pytest.mark.mpi]
ARGS = ("--rehearse --rehearse-rate 1e10 --seed-model tiny --group-size 2 --score-step 5 --progress-interval 5 "
        "--monitor-interval 0")  # fmt: skip
WAIT = 180
"""seconds the test waits for the phase to strike in"""


def row_of(phase: str, fault_tolerance: bool = False) -> Case:
    """The matrix's srun row of this phase on one node (skipped where it is pending)."""
    [row] = [c for c in CASES if (c.failure, c.phase, c.launcher, c.fault_tolerance, c.fixture) ==
             ("sigstop-rank", phase, "srun", fault_tolerance, ONE_NODE)]  # fmt: skip
    if row.pending:
        pytest.skip(row.pending)
    return row


def bound_of(phase: str, fault_tolerance: bool = False) -> float:
    """The matrix's bound (seconds from the stop to the job's end) of this phase's srun row on one node."""
    return row_of(phase, fault_tolerance).bound_s


def stopped_in(slurm: SlurmCluster, tmp_path: Path, options: str, victim: int,
               ready: Callable[[Path], bool], fault_tolerance: bool = False) -> tuple[Path, JobEnd, float, float]:
    """Submit the run, SIGSTOP world rank ``victim`` once ``ready(run_dir)``, wait for the job's end.

    With ``fault_tolerance`` the site asks for it (``AIPERF_FAULT_TOLERANCE=1``) and keeps srun
    (``AIPERF_LAUNCHER=srun``): the template then runs fail-fast and says so in one line.

    The run directory, how the job ended, the stop's wall-clock time (the log's clock) and the seconds from the stop
    to the job's end."""
    run_dir = tmp_path / "run"
    job = slurm.submit(JOBSCRIPTS / "scale-out.sbatch", ["--nodes=1", "--ntasks-per-node=4", "--cpus-per-task=1",
                                                          "--time=15"],  # fmt: skip
                       env={"AIPERF_RUN_DIR": str(run_dir), "AIPERF_TIME_LIMIT": "60", "AIPERF_GRACE": "30",
                            "AIPERF_ARGS": f"{ARGS} {options}", "AIPERF_LAUNCHER": "srun",
                            "AIPERF_FAULT_TOLERANCE": "1" if fault_tolerance else "0"},
                       output=tmp_path / "job-%j.out")  # fmt: skip
    deadline = time.monotonic() + WAIT
    while True:
        assert slurm.job(job).get("JobState") in STILL_RUNNING, slurm.output(job)[-4000:]
        assert time.monotonic() < deadline, f"the phase never came in {WAIT} s\n{slurm.output(job)[-4000:]}"
        pids = rank_pids(slurm, job)
        if len(pids) == 4 and ready(run_dir):
            os.kill(pids[victim], signal.SIGSTOP)
            stopped_at, stopped_wall = time.monotonic(), time.time()
            break
        time.sleep(0.05)
    end = slurm.wait(job, timeout=600)
    took = time.monotonic() - stopped_at
    print(f"srun, one node: rank {victim} stopped; the job ended {took:.1f} s later, {end.state} {end.exit_code}")
    assert_no_process_left(slurm, job)  # the stopped rank too
    assert ("runs fail-fast" in end.output) == fault_tolerance, end.output[:2000]
    return run_dir, end, stopped_wall, took


def of(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in events_so_far(run_dir) if e[runlog.EVENT] == kind]


def ended_by_the_hang_deadline(run_dir: Path, end: JobEnd, stopped_wall: float, reason: str) -> float:
    """Group 0 lost by the master's deadline (``reason`` in its ``group_lost``), the run stopped for it with its
    one score, the job ended by rank 0's MPI_Abort: the seconds from the stop to the loss."""
    [lost] = of(run_dir, runlog.GROUP_LOST)
    assert lost["group"] == 0 and reason in lost["reason"], lost
    [stop] = of(run_dir, runlog.RUN_STOP)
    assert stop["reason"] == runlog.HANG_REASON, stop
    assert len(of(run_dir, runlog.SCORE)) == 1 and "the score above is final" in end.output, end.output[-4000:]
    assert end.state == "FAILED" and end.exit_code != 0, (end.state, end.exit_code, end.output[-4000:])
    detected = lost[runlog.TIME] - stopped_wall
    print(f"group 0 lost {detected:.1f} s after the stop: {lost['reason']}")
    assert "group 0 lost" in verified(run_dir, {1})
    return detected


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault_tolerance", [False, True], ids=["srun", "srun-ft-asked"])
def test_a_training_rank_stopped_mid_run_under_srun_ends_the_run_by_the_masters_deadline_with_its_score(
    slurm: SlurmCluster, tmp_path: Path, fault_tolerance: bool
) -> None:
    """Rank 2 stopped once both groups logged an epoch: its leader waits for it in the group's all-reduce, the group
    goes silent, and the master's hang deadline (3 × the group's longest epoch + ``--hang-margin``, 15 s here:
    the matrix's row) loses it; fault tolerance off, the run then ends at once with its score (the hung rank
    cannot be left behind) and rank 0's MPI_Abort ends the step.  The same when the site asks for fault tolerance
    and keeps srun: the template runs fail-fast.  With the default margin of 60 s each case waited 45 s more (the
    job's end 77 s after the stop, 109 and 108 s a case; at 15 s: 35–37 s, 80 and 70 s; 2026-12-08, Intel Xeon)."""
    row = row_of("mid-run", fault_tolerance)
    both = lambda run_dir: {e["group"] for e in of(run_dir, runlog.EPOCH)} == {0, 1}  # noqa: E731
    run_dir, end, stopped_wall, took = stopped_in(slurm, tmp_path, " ".join(("--time-limit 240", *row.options)), 2,
                                                  both, fault_tolerance)  # fmt: skip
    assert f"longest epoch + {HANG_MARGIN} s (--hang-margin)" in end.output, end.output[-4000:]  # rank 0's policy
    detected = ended_by_the_hang_deadline(run_dir, end, stopped_wall, "past its deadline")
    [lost] = of(run_dir, runlog.GROUP_LOST)
    limit = float(re.search(r"past its deadline of ([0-9.]+) s", lost["reason"]).group(1))
    longest = max(e["end"] - e["start"] for e in of(run_dir, runlog.EPOCH) if e["group"] == 0)
    # the master's limit is 3 × the longest of the group's epochs and its first-epoch cost (not logged) + the margin
    # given: at least 3 × its longest logged epoch + 15 s, and below the default margin alone (≈ 27 s measured)
    assert 3 * longest + HANG_MARGIN - 0.1 <= limit < DEFAULT_BOUNDS.hang_margin, (limit, longest, lost)
    assert detected < limit + 10, (detected, lost)  # silent since before the stop; the once-a-second walk, the load
    assert took < row.bound_s, end.output[-4000:]
    resumed_once_more(run_dir, False)


@pytest.mark.timeout(600)
def test_a_leader_stopped_in_its_first_model_under_srun_ends_the_run_by_the_first_model_deadline(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Group 0's leader stopped once the run started, before group 0 logged an epoch: the master's first-model
    deadline (40 s here) loses the group and, fault tolerance off, ends the run with its score."""
    bound = 40
    started = lambda run_dir: bool(of(run_dir, runlog.RUN_START))  # noqa: E731
    run_dir, end, stopped_wall, took = stopped_in(
        slurm, tmp_path, f"--first-model-deadline {bound} --end-deadline 30", 1, started)
    assert not any(e["group"] == 0 and e[runlog.TIME] < stopped_wall for e in of(run_dir, runlog.EPOCH))
    detected = ended_by_the_hang_deadline(run_dir, end, stopped_wall, "in its first model")
    assert detected < bound + 10  # its Work went out before the stop: the bound, and the once-a-second walk
    assert took < bound_of("first-model"), end.output[-4000:]
    resumed_once_more(run_dir, False)


@pytest.mark.timeout(600)
def test_a_rank_stopped_in_start_up_under_srun_ends_the_job_within_the_start_up_bound(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Rank 3 stopped once rank 0 made the run directory: the others wait in a start-up collective until their own
    start-up deadline (40 s here, from each rank's start) ends the job with MPI_Abort; nothing was measured."""
    bound = 40
    run_dir, end, _, took = stopped_in(slurm, tmp_path, f"--startup-deadline {bound}", 3, Path.is_dir)
    lines = deadline_lines(end.output)
    print(f"deadline lines (rank, phase, bound): {lines}")
    assert lines and {phase for _, phase, _ in lines} == {"start-up"} and lines[0][0] != 3, end.output[-4000:]
    assert all(b == bound for _, _, b in lines), lines
    assert end.state == "FAILED" and end.exit_code != 0, (end.state, end.exit_code, end.output[-4000:])
    assert took < bound_of("start-up"), end.output[-4000:]
    assert not of(run_dir, runlog.RUN_START)  # nothing was measured: no score, nothing to resume


@pytest.mark.timeout(600)
def test_a_rank_stopped_in_the_end_under_srun_ends_the_job_within_the_end_bound_with_one_score(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Rank 2 stopped once the run's stop is logged: rank 0 waits for it in the job's end until its end deadline
    (30 s here) ends the job, its score already on disk."""
    bound = 30
    stopping = lambda run_dir: bool(of(run_dir, runlog.RUN_STOP))  # noqa: E731
    run_dir, end, _, took = stopped_in(slurm, tmp_path, f"--end-deadline {bound} --time-limit 15", 2, stopping)
    alarm = 128 + signal.SIGALRM  # inside MPI_Finalize no line can be printed (tests/mpi/test_deadlines.py)
    print(f"deadline lines (rank, phase, bound): {deadline_lines(end.output)}")
    assert (0, "the end", bound) in deadline_lines(end.output) or end.exit_code == alarm, end.output[-4000:]
    # the job's status is the close's (issue 50): the run scored at its time limit before the stop, so 0, its line
    # naming the launcher's non-zero status (the end's deadline, or the alarm)
    assert end.state == "COMPLETED" and end.exit_code == 0, (end.state, end.exit_code, end.output[-4000:])
    assert "job status 0: the run scored" in end.output and "the launcher's status was" in end.output
    assert took < bound_of("end"), end.output[-4000:]
    assert len(of(run_dir, runlog.SCORE)) == 1 and (run_dir / "score.json").exists()
    verified(run_dir, {0, 1})
    resumed_once_more(run_dir, False)


@pytest.mark.timeout(600)
def test_rank_0_stopped_mid_run_under_srun_ends_the_job_at_its_watchers_deadline_with_one_score(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Issue 50 under the templates' default launch: rank 0 stopped once both groups logged an epoch; its
    heartbeat stops, a watching leader (rank 1 or 3) ends the job with MPI_Abort at --master-deadline, the step's
    kill takes the stopped rank 0, and the template's close scores the run from its log (or rank 0 did, on the
    step's SIGTERM): one score, the job's status 7 (scored, stopped early), a log that verifies, a resume."""
    bound = 20
    both = lambda run_dir: {e["group"] for e in of(run_dir, runlog.EPOCH)} == {0, 1}  # noqa: E731
    run_dir, end, _, took = stopped_in(slurm, tmp_path, f"--time-limit 240 --master-deadline {bound}", 0, both)
    lines = deadline_lines(end.output)
    assert lines and {(phase, b) for _, phase, b in lines} == {("rank 0's heartbeat", bound)}, end.output[-4000:]
    assert took < bound + 30, end.output[-4000:]  # the bound, the abort, the step's end and the close
    assert len(of(run_dir, runlog.SCORE)) == 1, end.output[-4000:]
    [stop] = of(run_dir, runlog.RUN_STOP)
    assert stop["reason"] in (runlog.CLOSED_REASON, "signal SIGTERM"), stop
    assert end.state == "FAILED" and end.exit_code == 7 and "job status 7" in end.output, (end.state, end.exit_code)
    verified(run_dir, {0, 1})
    resumed_once_more(run_dir, False)
