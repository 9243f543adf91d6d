"""The per-phase deadline tests' shared launch and checks (issue 43): a 4-rank rehearsal under mpirun, a rank
stopped at a phase, the job's end, its deadline lines, verify and a resume.  Used by tests/mpi/test_deadlines.py and
tests/slurm/test_deadlines.py (a test module may import no other test module)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH
from aiperf_mpi.results import runlog
from tests.support.lost_groups import events_so_far, job_rank_pids, only_rates_of_freed_cores
from tests.support.mpirun import BackgroundJob, mpirun_command, start_in_background

OUTER_TIMEOUT = 300
MARKER = "AIPERF_DEADLINE_TEST"
KILLED_RANK_GRACE = 10.0  # seconds a killed rank may take to be gone after its launcher ended (see _gone_within)


def this_session() -> str:
    """The marker's value of this session's jobs (another session's ranks are not this one's to signal)."""
    return str(os.getpid())


def launch(run_dir: Path, options: list[str], tolerant: bool, resume: bool = False,
           report: bool = False) -> BackgroundJob:  # fmt: skip
    """A 4-rank rehearsal, groups [1, 2] and [3], output to a file beside ``run_dir``."""
    argv = [sys.executable, "-m", "aiperf_mpi", *([] if report else ["--no-report"]), *options]
    argv += ["--resume", str(run_dir)] if resume else [
        "--rehearse", "--rehearse-rate", "1e10", "--seed-model", "tiny", "--group-size", "2", "--score-step", "5",
        "--progress-interval", "5", "--monitor-interval", "0", "--run-dir", str(run_dir)]  # fmt: skip
    command = mpirun_command(4, argv)
    if tolerant:
        command[1:1] = OPEN_MPI_LAUNCH.split()
    out = run_dir.with_name(f"{run_dir.name}-{'resume' if resume else 'run'}.out")
    return start_in_background(command, out, {MARKER: this_session()})


def stop_when(job: BackgroundJob, rank: int, ready: Callable[[], bool]) -> tuple[int, float]:
    """SIGSTOP world rank ``rank`` of this session's job as soon as ``ready()``; its pid and the time."""
    deadline = time.monotonic() + OUTER_TIMEOUT
    while time.monotonic() < deadline and job.process.poll() is None:
        pid = job_rank_pids(MARKER, this_session()).get(rank)
        if pid is not None and ready():
            os.kill(pid, signal.SIGSTOP)
            return pid, time.monotonic()
        time.sleep(0.05)
    pytest.fail(f"rank {rank} was never stopped\n{job.kill()[-4000:]}")


def ended(job: BackgroundJob, pid: int, stopped_at: float) -> tuple[str, float]:
    """Wait for the job's end; its output and the seconds from the stop to the end.  The stopped rank must be gone
    within KILLED_RANK_GRACE of the end."""
    try:
        output = job.finish(OUTER_TIMEOUT, f"the job outlived {OUTER_TIMEOUT} s after its rank was stopped")
    finally:
        took = time.monotonic() - stopped_at
        alive = _gone_within(pid, KILLED_RANK_GRACE)
        if alive:  # the test's own process, left behind: end it before failing
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not alive, f"the stopped rank (pid {pid}) outlived its job by {KILLED_RANK_GRACE} s\n{output[-4000:]}"
    print(f"the job ended {took:.1f} s after the SIGSTOP (status {job.process.returncode})")
    return output, took


def _gone_within(pid: int, grace: float) -> bool:
    """Whether ``pid`` is still alive ``grace`` seconds after the launcher's end.  PRRTE sends its SIGKILL and exits
    without waiting for the rank (odls_base_default_fns.c, v3.0.14), and a loaded kernel tears a TensorFlow-sized
    process down in its own time: seen in CI, the stopped rank was still there the instant prterun had gone."""
    deadline = time.monotonic() + grace
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def deadline_lines(output: str) -> list[tuple[int, str, int]]:
    """(rank, phase, bound) of every deadline line the job printed."""
    return [(int(m[1]), m[2], int(m[3])) for m in
            re.finditer(r"aiperf_mpi: rank (\d+) on \S+: (.+?) passed its deadline of (\d+) s", output)]  # fmt: skip


def verified(run_dir: Path, survivors: set[int]) -> str:
    from analysis.verify import verify

    result = verify(run_dir)
    assert result.ok or only_rates_of_freed_cores(result, survivors), result.text()
    return result.text()


def resumed_once_more(run_dir: Path, tolerant: bool, scores: int = 2) -> None:
    """``--resume`` of the run where it ended: a second segment, its score (``scores`` in all), a log that
    verifies."""
    job = launch(run_dir, ["--time-limit", "10"], tolerant, resume=True)
    output = job.finish(OUTER_TIMEOUT, "the resume did not end")
    assert job.process.returncode == 0, output[-4000:]
    events = events_so_far(run_dir)
    assert [e["segment"] for e in events if e["event"] == runlog.RUN_START] == [1, 2], output[-4000:]
    assert sum(e["event"] == runlog.SCORE for e in events) == scores
    verified(run_dir, {0, 1})
