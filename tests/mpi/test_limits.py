"""Rank 0's open files over TCP: 32 group leaders launched under ``prlimit`` (aiperf_mpi/mpi/limits.py).

Each rank starts under ``prlimit --nofile=SOFT:HARD`` (inside ``mpirun``, so that the launcher keeps its own
limit), over Open MPI's TCP transport (``pml ob1``, ``btl tcp,self``: what fault tolerance uses), 33 ranks in
groups of 1 on this machine, a short rehearsal (no TensorFlow).  Rank 0 holds ≈ 53 open files by the end (35
sockets); with a soft limit of 40 the run before this change hung ("accept failed: Too many open files" from
rank 0's TCP transport, thousands of times) until the test's timeout.  Now every rank raises its soft limit to
the hard limit at start, and rank 0 says in one line when the hard limit cannot cover what it needs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.support.mpirun import mpirun_command, start_in_background

pytestmark = pytest.mark.long

RANKS = 33
TIMEOUT = 420.0
WARNING = "aiperf_mpi: warning: rank 0 may open"
STARTED = "start-up on the slowest rank"
"""rank 0's line once every rank is past the start line (and so past its raise)"""


def launch(tmp_path: Path, soft: int, hard: int, extra: list[str] | None = None):
    run_dir = tmp_path / "run"
    argv = ["prlimit", f"--nofile={soft}:{hard}", sys.executable, "-m", "aiperf_mpi", "--rehearse",
            "--rehearse-rate", "2e10", "--group-size", "1", "--dataset", "synthetic", "--seed-model", "tiny",
            "--time-limit", "10", "--score-step", "5", "--monitor-interval", "0", "--no-report",
            "--run-dir", str(run_dir), *(extra or [])]  # fmt: skip
    command = mpirun_command(RANKS, argv)
    command[1:1] = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    return run_dir, start_in_background(command, tmp_path / "output.txt")


def ranks_open_file_limits(run_dir: Path) -> list[tuple[int, int]]:
    """(soft, hard) RLIMIT_NOFILE of every rank of the run still alive (found by its run directory)."""
    limits = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if cmdline[0] != sys.executable.encode() or str(run_dir).encode() not in cmdline:  # a rank, not mpirun
                continue
            line = next(x for x in (proc / "limits").read_text().splitlines() if x.startswith("Max open files"))
        except (OSError, StopIteration):
            continue
        soft, hard = line.split()[3:5]
        limits.append((int(soft), int(hard)))
    return limits


def test_every_rank_raises_its_soft_limit_and_the_run_ends_where_it_hung_before(tmp_path) -> None:
    run_dir, job = launch(tmp_path, 40, 4096)
    deadline = time.monotonic() + TIMEOUT
    limits: list[tuple[int, int]] = []
    try:
        while time.monotonic() < deadline and job.process.poll() is None and STARTED not in job.output():
            time.sleep(0.5)
        limits = ranks_open_file_limits(run_dir)  # every rank has passed its check by the start-up line
    finally:
        output = job.finish(max(1.0, deadline - time.monotonic()), "the run hung: rank 0 out of open files?")
    assert job.process.returncode == 0, output[-4000:]
    assert len(limits) == RANKS and set(limits) == {(4096, 4096)}, limits
    assert WARNING not in output and "Too many open files" not in output
    assert (run_dir / "score.json").exists()


def test_rank_0_refuses_in_one_line_when_the_hard_limit_cannot_cover_its_sockets(tmp_path) -> None:
    """Issue 50: the check only warned, and past the limit the job hung until its first-model deadline.  Rank 0
    needs 32 leaders + ⌈log₂ 33⌉ + 64 ≈ 102 by the rule: under a hard limit of 80 it refuses before anything
    starts, one line, every rank out with status 2, nothing measured."""
    run_dir, job = launch(tmp_path, 40, 80)
    output = job.finish(TIMEOUT, "the refused run hung")
    assert job.process.returncode == 2, output[-4000:]
    errors = [line for line in output.splitlines() if "aiperf_mpi: error:" in line]
    assert len(errors) == 1 and errors[0].startswith("[1,0]"), errors
    assert "rank 0 may open" in errors[0] and "limit is 80 (hard 80)" in errors[0] and "--ignore-limits" in errors[0]
    assert "Traceback" not in output and not (run_dir / "events.jsonl").exists()


def test_ignore_limits_starts_the_job_with_the_line_as_a_warning(tmp_path) -> None:
    # 53 open files in fact: the run still ends, as it did when the check only warned
    run_dir, job = launch(tmp_path, 40, 80, ["--ignore-limits"])
    output = job.finish(TIMEOUT, "the run hung")
    assert job.process.returncode == 0, output[-4000:]
    warnings = [line for line in output.splitlines() if WARNING in line]
    assert len(warnings) == 1 and warnings[0].startswith("[1,0]"), warnings
    assert "32 group leaders" in warnings[0] and "limit is 80 (hard 80)" in warnings[0]
    assert "--ignore-limits: starting anyway" in warnings[0]
    assert (run_dir / "score.json").exists()
