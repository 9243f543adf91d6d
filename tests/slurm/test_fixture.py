"""The Slurm fixture leaves nothing behind: not after a failing test, not after a killed test session.
Nor does it use what others leave: a PMIx step's directory is in the cluster's own scratch directory, not /tmp.

Each test runs a session of its own in a child process — one where a test
fails while a job is running, one that is SIGKILLed while a job is running
— then looks, with ``ps`` and through ``/proc``, for any process of that
session's cluster (they all carry its scratch directory in their environment).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.slurm import MARKER, SlurmCluster, marked_pids

# The session's cluster is not used here, but its fixture installs the packages (and times the install)
# before the child sessions below need them.
pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm")]

REPO_ROOT = Path(__file__).resolve().parents[2]

START_A_SLEEPING_JOB = """
    script = Path(tmp) / "sleep.sh"
    script.write_text("#!/bin/bash\\nsleep 300\\n")
    job = cluster.submit(script, ["--ntasks=1", "--time=5"])
    deadline = time.monotonic() + 30
    while not job_pids(cluster.scratch, job) or cluster.job(job).get("JobState") != "RUNNING":
        assert time.monotonic() < deadline, cluster.output(job)
        time.sleep(0.1)
"""


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != MARKER and not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def ps_lines_naming(scratch: str) -> list[str]:
    """What ``ps`` shows of the cluster: every daemon has the scratch directory on its command line."""
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listing.splitlines() if scratch in line and "ps -eo" not in line]


def assert_gone(scratch: str, within: float) -> None:
    deadline = time.monotonic() + within
    while (marked_pids(scratch) or ps_lines_naming(scratch)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_pids(scratch), f"processes of the cluster left: {marked_pids(scratch)}"
    assert not ps_lines_naming(scratch), ps_lines_naming(scratch)


def test_a_failing_test_leaves_no_daemon_and_no_job(tmp_path: Path) -> None:
    probe = tmp_path / "scratch.txt"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import time
        from pathlib import Path

        from tests.support.slurm import job_pids


        def test_fails_while_a_job_runs(slurm, tmp_path):
            cluster, tmp = slurm, tmp_path
            Path(__import__("os").environ["SCRATCH_PROBE"]).write_text(str(cluster.scratch))
    """) + textwrap.indent(textwrap.dedent(START_A_SLEEPING_JOB), "    ") + """
    assert False, "deliberate failure while a job runs"
""")  # fmt: skip
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "-p", "tests.slurm.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
        cwd=REPO_ROOT, env={**child_env(), "SCRATCH_PROBE": str(probe)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert inner.returncode == 1 and "deliberate failure while a job runs" in inner.stdout, inner.stdout + inner.stderr
    scratch = probe.read_text()
    assert_gone(scratch, within=0)  # the fixture's teardown already stopped everything, nothing to wait for
    assert not Path(scratch).exists()


def test_a_killed_session_leaves_no_daemon_and_no_job(tmp_path: Path) -> None:
    """SIGKILL runs no teardown and no atexit: the watchdog, seeing its pipe closed, sweeps the cluster."""
    program = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from tests.support.slurm import job_pids, start_cluster

        cluster = start_cluster()
        tmp = sys.argv[1]
    """) + textwrap.dedent(START_A_SLEEPING_JOB) + textwrap.dedent("""
        print(cluster.scratch, flush=True)
        time.sleep(600)
    """)  # fmt: skip
    session = subprocess.Popen([sys.executable, "-c", program, str(tmp_path)], cwd=REPO_ROOT, env=child_env(),
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        scratch = session.stdout.readline().strip()
        assert scratch and marked_pids(scratch), "the cluster and its job are running"
    finally:
        session.send_signal(signal.SIGKILL)
        session.wait(timeout=10)
    assert_gone(scratch, within=15)
    assert not Path(scratch).exists()


def test_a_pmix_steps_directory_is_in_the_clusters_own_tmp(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Slurm's PMIx plugin makes ``spmix_appdir_<uid>_<job>.<step>`` per step and fails the step's launch when it
    exists; every test cluster numbers its jobs from 1, so in /tmp one left by an earlier session (or made by
    another session's cluster) broke ``srun --mpi=pmix``.  The step finds its directory under the scratch."""
    script = tmp_path / "pmix_dir.sh"
    script.write_text("#!/bin/bash\n"
                      "srun --mpi=pmix -n 1 sh -c 'ls -d \"$AIPERF_SLURM_SCRATCH/tmp/spmix_appdir_$(id -u)_"
                      "$SLURM_JOB_ID.$SLURM_STEP_ID\"'\n")  # fmt: skip
    job = slurm.submit(script, ["--ntasks=1", "--time=2"])
    end = slurm.wait(job, timeout=120)
    expected = f"{slurm.scratch}/tmp/spmix_appdir_{os.getuid()}_{job}.0"
    assert end.state == "COMPLETED" and expected in end.output.splitlines(), end.output
