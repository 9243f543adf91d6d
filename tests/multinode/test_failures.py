"""Failures as users meet them (issue 43, item 3): each row of tests/support/failure_matrix.py, as a test.

A row names a failure (``kill -9`` of a training rank, of a leader, of rank 0; SIGSTOP; a real node loss), the
phase it strikes in, the launcher (``srun --mpi=pmix``, the templates' default, or ``mpirun``), and what must
follow: who detects it (MPI through the launcher's report, the launcher ending the job, its TCP keepalive losing a
silent node's daemon, Slurm setting the node DOWN, a deadline) and within how many seconds, then either the
group lost and the run scoring in the same job, or the job ended with its log intact.  Every case then resumes
the run where it ended (``--resume``, a short rehearsal segment on node1; a job ended in start-up logged nothing,
so a new run starts in the same run directory instead) and the log, both segments, must pass
``analysis.verify`` with exactly one score.  No case launches again after a crash at start: such a crash fails it.

The Slurm cases submit ``jobscripts/scale-out.sbatch`` as a site would (2 nodes × 2 tasks, ``--group-size 2``:
rank 0 and group 0 on node1, group 1 — ranks 2 and 3, leader 2 — on node2) to the two-node Slurm of
tests/support/multihost_slurm.py with ``SlurmdTimeout`` shortened to
:data:`~tests.support.failure_matrix.SLURMD_TIMEOUT`; the multi-host cases run ``mpirun`` of
tests/support/multihost.py.  Most rows are rehearsals (no TensorFlow: they start in seconds on 2 shared
cores).  Each case prints one ``failure:`` line with what it measured (``-s`` shows it; docs/cluster.md,
"Failures, phase by phase", records them).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from aiperf_mpi.mpi.limits import open_files_needed, rank_need_mib, role_of
from aiperf_mpi.mpi.plan import plan_layout
from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH
from aiperf_mpi.results import runlog
from tests.support import slurm as slurm_support
from tests.support.failure_matrix import CASES, ONE_NODE, SCALE, SLURMD_TIMEOUT, Case
from tests.support.lost_groups import events_so_far, only_rates_of_freed_cores
from tests.support.mpirun import REPO_ROOT, mpi_vendor, run_command
from tests.support.multihost import VirtualCluster, start_cluster
from tests.support.multihost_slurm import HostsSlurm, NodeLimits, start_slurm, two_node_slurm
from tests.support.procs import terminate
from tests.support.slurm import STILL_RUNNING, job_pids

pytestmark = [pytest.mark.multinode, pytest.mark.mpi, pytest.mark.slow,
              pytest.mark.skipif(mpi_vendor() != "openmpi", reason="launchers, ULFM: Open MPI")]  # fmt: skip

JOBSCRIPTS = Path(__file__).resolve().parents[2] / "jobscripts"
TIME_LIMIT = 240
"""the run's clock: long enough that every detection bound of the matrix falls inside it"""
GRACE = 60
REHEARSAL = ["--rehearse", "--rehearse-rate", "2e10", "--seed-model", "tiny", "--group-size", "2",
             "--score-step", "10", "--progress-interval", "10"]  # fmt: skip
TRAINING = ["--seed-model", "tiny", "--group-size", "2", "--max-epochs", "2", "--score-step", "10",
            "--progress-interval", "10", "--monitor-interval", "5", "--peak-seconds", "1", "--no-xla"]  # fmt: skip
OUTER_TIMEOUT = TIME_LIMIT + GRACE + 300
RELAUNCH_TIME_LIMIT = {2: TIME_LIMIT, 64: 900}
"""the run's clock in the relaunch test by tasks per node: at 2 × 64 start-up took ≈ 5 min on these 2 cores and
both groups' first epochs came after 240 s of the run's clock, so the loss left the relaunch no clock ("no relaunch:
-79 s of the run's clock left", 2026-12-07)"""
"""the most one job may take, start to end, before the test ends it and fails"""
SCALE_REHEARSAL = ["--rehearse", "--rehearse-rate", "2e10", "--seed-model", "resnet50", "--group-size", "4",
                   "--score-step", "10", "--progress-interval", "10"]  # fmt: skip
"""the 2 × 64 rows' run (issue 50, item 5): the ResNet-50 seed as a rehearsal, groups of 4 (16 a node)"""


def arguments(case: Case) -> list[str]:
    """The benchmark's options for the case's run."""
    if not case.rehearse:
        return [*TRAINING, *case.options]
    return [*(REHEARSAL if case.per_node == 2 else SCALE_REHEARSAL), *case.options]


def groups_by_node(events: list[dict]) -> tuple[int, list[int]]:
    """(node2's first group: the one every failure but rank 0's hits, node1's groups); (1, [0]) before the layout,
    the 2 × 2 job's."""
    layout = layout_of(events)
    if layout is None:
        return 1, [0]
    lost = next(g["index"] for g in layout["groups"] if g["host"] == "node2")
    return lost, [g["index"] for g in layout["groups"] if g["host"] == "node1"]


def node_limits(per_node: int) -> NodeLimits:
    """Each node's memory cgroup and hard open-file limit just above the need (issue 50: "give each container a
    memory.max and a hard file limit just above the need"): the need is what the start line states for the
    2 × ``per_node`` layout of the 2 × 64 rows (mpi/limits.py's table: the busiest node's ranks at their peak, and
    rank 0's open files), plus what Slurm's daemons and the page cache of the node's writes take."""
    hosts = ["node1"] * per_node + ["node2"] * per_node
    plan = plan_layout(hosts, [0] * per_node + [1] * per_node, 4 if per_node > 2 else 2)
    need = max(sum(rank_need_mib(role_of(plan, r), "resnet50", True, "digits") for r in range(len(hosts))
                   if plan.nodes[r] == node) for node in (0, 1))  # fmt: skip
    files = max(open_files_needed(plan) + 256, STEPD_FILES_PER_TASK * per_node + 256)
    return NodeLimits(memory_mib=int(need * 1.2) + NODE_DAEMONS_MIB, open_files=files)


NODE_DAEMONS_MIB = 1024
"""a node's memory beside its ranks: slurmd, slurmstepd, PMIx's shared memory and the page cache of its writes"""

STEPD_FILES_PER_TASK = 12
"""the hard open-file limit is the node's slurmd's, and its slurmstepd holds a step's files under it: the tasks'
pipes, PMIx's sockets, munge's (a limit at rank 0's need, ≈ 360 at 2 × 64, failed the step's launch: "Munge
encode failed: Failed to create socket: Too many open files", 2026-12-07).  A task's hard limit is slurmd's
(Slurm propagates the submitter's soft limit only), so the ranks get the larger of the two"""


@pytest.fixture(scope="module")
def slurm2() -> Iterator[HostsSlurm]:
    """The two-node Slurm, with a ``SlurmdTimeout`` short enough for a lost node to be declared within a test, and
    each node's limits just above what the 2 × 64 rows need (:func:`node_limits`)."""
    with two_node_slurm(slurmd_timeout=SLURMD_TIMEOUT, limits=node_limits(SCALE)) as cluster:
        yield cluster


# -- one job under test, whichever fixture runs it ---------------------------------------------------------------


@dataclass
class Job:
    """A benchmark job being run: how to tell whether it runs, find its ranks, and end it."""

    hosts: VirtualCluster
    run_dir: Path
    output: Path
    running: Callable[[], bool]
    ended: Callable[[], tuple[int, str]]
    """(exit status, Slurm's state or "exited") once it is over"""
    cancel: Callable[[], None]
    sweep: Callable[[], list[int]]
    """wait a little for the job's processes to end, kill the rest, return their PIDs (none: a clean end); never
    the Slurm daemons, which carry the hosts' marker too"""
    started: float = field(default_factory=time.time)
    stall: Path | None = None
    """the flag whose existence holds every fsync of node1's run directory (``fsync-stall-rank0``), or None"""
    per_node: int = 2
    peaks: dict[int, int] = field(default_factory=dict)
    """each rank's highest ``RssAnon`` seen (KiB), sampled every :data:`MEMORY_SAMPLE` s while the job runs"""
    _sampled: float = 0.0

    def rank_pids(self) -> dict[int, int]:
        return self.hosts.rank_pids()

    def sample_memory(self) -> None:
        """Each rank's anonymous memory now, kept where it is its highest so far (at most every few seconds: a
        look at 128 ranks' /proc takes a while on 2 shared cores)."""
        if time.monotonic() - self._sampled < MEMORY_SAMPLE:
            return
        self._sampled = time.monotonic()
        for rank, pid in self.rank_pids().items():
            anonymous = rss_anon_kib(pid)
            if anonymous is not None:
                self.peaks[rank] = max(self.peaks.get(rank, 0), anonymous)

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


MEMORY_SAMPLE = 2.0
"""seconds between two samples of the ranks' memory"""


def rss_anon_kib(pid: int) -> int | None:
    """A process's ``RssAnon`` in KiB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def memory_against_the_start_line(job: Job, events: list[dict]) -> str:
    """Each role's highest peak ``RssAnon`` (MiB) against the start line's figure for it: one line for the table,
    and an assertion that no rank held more than its role's figure (the figure is the rank's peak, with about 10 %
    above the measurement: mpi/limits.py)."""
    stated = re.search(r"a rank's peak MiB by role ([^(]+) \(", job.text())
    layout = layout_of(events)
    if not stated or layout is None or not job.peaks:
        return "memory: not measured (no start line, layout or sample)"
    figures = {role: float(mib) for role, mib in (item.split() for item in stated.group(1).split(", "))}
    leaders = {g["leader"] for g in layout["groups"]}
    relays = set(layout.get("relay_ranks", []))

    def role(rank: int) -> str:
        return "master" if rank == layout["master_rank"] else "relay" if rank in relays else \
            "leader" if rank in leaders else "other"  # fmt: skip

    highest: dict[str, float] = {}
    for rank, kib in job.peaks.items():
        highest[role(rank)] = max(highest.get(role(rank), 0.0), kib / 1024)
    over = {r: round(k / 1024) for r, k in job.peaks.items() if k / 1024 > figures.get(role(r), float("inf"))}
    line = "memory: " + ", ".join(f"{name} peak {mib:.0f} MiB (start line {figures.get(name, 0):.0f})"
                                  for name, mib in sorted(highest.items()))  # fmt: skip
    line += f" over {len(job.peaks)} ranks"
    assert not over, f"ranks above the start line's figure for their role: {over}; {line}"
    return line


def own(request: pytest.FixtureRequest, cluster: VirtualCluster | HostsSlurm):
    """A cluster of the test's own, stopped at its end: a lost node does not come back for the next test."""
    request.addfinalizer(cluster.stop)
    return cluster


def stalling_run_dir(request: pytest.FixtureRequest, hosts: VirtualCluster, tmp_path: Path,
                     only: str = "") -> tuple[Path, Path]:  # fmt: skip
    """A run directory whose fsyncs on node1 (rank 0's) block while a flag exists (``only``: those of paths that
    contain it, the graphs file's say); its path, and the flag.

    tests/support/stall_fs.py (a FUSE pass-through, as tests/mpi/test_deadlines.py uses it) mounted inside node1's
    mount namespace; node2 and this test see the same files through a bind mount of its root (each host's mounts
    are its own: ``--propagation private``).  Skipped where nothing can be mounted."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("fuse") is None:
        pytest.skip("fusepy is not installed (the test extra: pip install -e '.[test]')")
    root, mount, flag = tmp_path / "fs-root", tmp_path / "mnt", tmp_path / "stall"
    root.mkdir()
    mount.mkdir()
    enter = lambda host: ["nsenter", "-t", str(hosts.host(host).pid), "--mount", "--"]  # noqa: E731
    server = subprocess.Popen([*enter("node1"), sys.executable, "-m", "tests.support.stall_fs", str(root), str(mount),
                               str(flag), only], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    # PYTHONPATH: inside node1's mount namespace python -m does not find this checkout by its working directory
    binds = [[*enter("node2"), "mount", "--bind", str(root), str(mount)], ["mount", "--bind", str(root), str(mount)]]
    for command in binds:
        subprocess.run(command, check=True, capture_output=True, timeout=30)

    def unmount() -> None:
        flag.unlink(missing_ok=True)  # release any held fsync first
        for command in ([*enter("node1"), "umount", "-l", str(mount)], [*enter("node2"), "umount", "-l", str(mount)],
                        ["umount", "-l", str(mount)]):  # fmt: skip
            subprocess.run(command, check=False, capture_output=True, timeout=30)
        terminate([server.pid])
        server.wait(10)

    request.addfinalizer(unmount)
    mounted = lambda: b"fuse" in subprocess.run([*enter("node1"), "findmnt", "-n", "-o", "FSTYPE", str(mount)],  # noqa: E731
                                               capture_output=True, timeout=30).stdout  # fmt: skip
    deadline = time.monotonic() + 30
    while not mounted() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not mounted():
        pytest.skip(f"no FUSE mount on node1 (libfuse 2, /dev/fuse, the right to mount): "
                    f"{server.communicate(timeout=10)[0][-500:] if server.poll() is not None else 'no mount in 30 s'}")
    return mount / "run", flag


def start_job(case: Case, request: pytest.FixtureRequest, tmp_path: Path) -> Job:
    """Launch the case's job; a node-loss case on a cluster of its own (the session's keeps both nodes)."""
    run_dir, output = tmp_path / "run", tmp_path / "job.out"
    lost = case.failure == "node-loss"
    args = arguments(case)
    if case.fixture == "multihost":
        cluster: VirtualCluster = own(request, start_cluster(2)) if lost else request.getfixturevalue("multihost")
        options = OPEN_MPI_LAUNCH.split() if case.fault_tolerance else []
        argv = ["-m", "aiperf_mpi", *args, "--time-limit", str(TIME_LIMIT), "--grace", str(GRACE),
                "--run-dir", str(run_dir)]  # fmt: skip
        process = cluster.launch(argv, output, options=options)

        def cancel() -> None:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

        return Job(cluster, run_dir, output, lambda: process.poll() is None,
                   lambda: (process.wait(), "exited"), cancel, lambda: cluster.settle(grace=15))  # fmt: skip
    slurm: HostsSlurm = own(request, start_slurm(2, SLURMD_TIMEOUT, node_limits(SCALE))) if lost else \
        request.getfixturevalue("slurm2")  # fmt: skip
    stall = None
    if case.failure in ("fsync-stall-rank0", "graphs-stall-rank0"):
        only = "graphs/" if case.failure == "graphs-stall-rank0" else ""
        run_dir, stall = stalling_run_dir(request, slurm.hosts, tmp_path, only)
    env = {"AIPERF_RUN_DIR": str(run_dir), "AIPERF_TIME_LIMIT": str(TIME_LIMIT), "AIPERF_GRACE": str(GRACE),
           "AIPERF_ARGS": " ".join(args), "AIPERF_LAUNCHER": case.launcher,
           "AIPERF_FAULT_TOLERANCE": "1" if case.fault_tolerance else "0",
           "AIPERF_RELAUNCHES": "0"}  # the matrix's rows end with the job; the relaunch is its own test  # fmt: skip
    job_id = slurm.submit(JOBSCRIPTS / "scale-out.sbatch",
                          ["--nodes=2", f"--ntasks-per-node={case.per_node}", "--cpus-per-task=1", "--time=20"],
                          env=env, output=output)  # fmt: skip

    def running() -> bool:
        """Still on, and not requeued: Slurm requeues a batch job whose node failed (``JobRequeue=1``, the
        default), which ends this run's job as surely as a cancel (the requeued job waits for nodes)."""
        info = slurm.job(job_id)
        return info.get("JobState", "UNKNOWN") in STILL_RUNNING and info.get("Restarts", "0") == "0"

    def ended() -> tuple[int, str]:
        info = slurm.job(job_id)
        requeued = " (requeued)" if info.get("Restarts", "0") != "0" else ""
        return int(info.get("ExitCode", "0:0").split(":")[0]), info.get("JobState", "UNKNOWN") + requeued

    def sweep() -> list[int]:
        deadline = time.monotonic() + slurm_support.KILL_WAIT + 10  # SIGTERM, then SIGKILL at KillWait
        while job_pids(slurm.scratch, job_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = job_pids(slurm.scratch, job_id)
        terminate(left)
        return left

    return Job(slurm.hosts, run_dir, output, running, ended, lambda: slurm.command(["scancel", job_id], check=False),
               sweep, stall=stall, per_node=case.per_node)  # fmt: skip


# -- the phases: when the failure strikes ------------------------------------------------------------------------


def layout_of(events: list[dict]) -> dict | None:
    return next((e for e in events if e[runlog.EVENT] == runlog.LAYOUT), None)


def reached(phase: str, job: Job, events: list[dict]) -> bool:
    """Whether the run is in ``phase`` now (see tests/support/failure_matrix.py)."""
    kinds = {(e[runlog.EVENT], e.get("group")) for e in events}
    if phase == "start-up":
        return not events and len(job.rank_pids()) == 2 * job.per_node
    lost, survivors = groups_by_node(events)
    if phase == "first-model":
        return (runlog.MODEL_PROPOSED, lost) in kinds and (runlog.EPOCH, lost) not in kinds
    if phase == "mid-run":
        return {(runlog.EPOCH, survivors[0]), (runlog.EPOCH, lost)} <= kinds
    if phase == "end":
        return any(kind == runlog.RUN_STOP for kind, _ in kinds)
    raise ValueError(phase)


def victims(case: Case, layout: dict | None) -> list[int]:
    """World ranks the failure hits: node2's group (ranks 2 and 3, leader 2) unless it is rank 0's."""
    if case.failure.endswith("rank0"):
        return [0]
    lost = groups_by_node([layout] if layout else [])[0]
    group = next((g for g in layout["groups"] if g["index"] == lost), None) if layout else None
    ranks, leader = (group["ranks"], group["leader"]) if group else ([2, 3], 2)
    if case.failure == "kill-9-leader":
        return [leader]
    return [next(r for r in ranks if r != leader)]


@dataclass
class Struck:
    """The failure, done: when (the log's clock), to whom, and what the node loss killed."""

    time: float
    victims: list[int]
    killed: dict[str, list[int]] = field(default_factory=dict)


def strike(case: Case, job: Job) -> Struck:
    """Wait for the case's phase, then cause its failure."""
    deadline = time.monotonic() + OUTER_TIMEOUT
    while True:
        assert job.running(), f"the job ended before {case.phase}:\n{job.text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {case.phase} within {OUTER_TIMEOUT} s\n{job.text()[-4000:]}"
        events = events_so_far(job.run_dir)
        if reached(case.phase, job, events):
            break
        if case.phase != "start-up":
            job.sample_memory()
        time.sleep(0.1 if case.phase == "start-up" else 0.25)
    if case.failure == "none":  # the healthy row: nothing struck
        return Struck(time.time(), [])
    if case.failure == "node-loss":
        loss = job.hosts.lose_node("node2")
        return Struck(loss.time, [r for r, p in job.rank_pids().items() if r >= job.per_node] or [2, 3], loss.killed)
    if case.failure in ("fsync-stall-rank0", "graphs-stall-rank0"):  # rank 0's next fsync (there) blocks, in the kernel
        when = time.time()
        job.stall.touch()
        return Struck(when, [0])
    chosen = victims(case, layout_of(events))
    pids = job.rank_pids()
    signum = signal.SIGSTOP if case.failure.startswith("sigstop") else signal.SIGKILL
    when = time.time()
    for rank in chosen:
        os.kill(pids[rank], signum)
    return Struck(when, chosen)


# -- what followed ------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    returncode: int
    state: str
    ended_after: float
    """seconds from the failure to the job's end"""
    text: str
    events: list[dict]
    said_after: float | None = None
    """seconds from the failure to a rank's deadline line (a stalled file system's case), None otherwise"""

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e[runlog.EVENT] == kind]


def await_end(job: Job, struck: Struck) -> Outcome:
    """Wait for the job's end.  A stalled file system comes back 5 s after a rank said its deadline passed: rank
    0, in the kernel's fsync, dies of the kill only once the file system answers (tests/mpi/test_deadlines.py)."""
    deadline = time.monotonic() + OUTER_TIMEOUT
    said: float | None = None
    while job.running():
        if time.monotonic() > deadline:
            text = job.text()
            job.cancel()
            pytest.fail(f"the job outlived {OUTER_TIMEOUT} s after the failure: nobody detected it\n{text[-4000:]}")
        if job.stall is not None and said is None and "passed its deadline" in job.text():
            said = time.time() - struck.time
        if said is not None and time.time() - struck.time > said + 5:
            job.stall.unlink(missing_ok=True)
        job.sample_memory()
        time.sleep(0.5)
    ended_after = time.time() - struck.time
    returncode, state = job.ended()
    left = job.sweep()  # what the job's ranks still do on their way out (a score on SIGTERM) ends first
    assert not left, f"processes of the job outlived it: {left}\n{job.text()[-4000:]}"
    return Outcome(returncode, state, ended_after, job.text(), events_so_far(job.run_dir), said)


def resume(case: Case, job: Job, fresh: bool = False) -> None:
    """``--resume`` where the run ended: a 20 s rehearsal segment with 3 ranks on node1 (node2 may be gone).

    ``fresh``: a job ended in start-up logged nothing, so a new run starts in the same run directory instead."""
    again = [*REHEARSAL, "--run-dir"] if fresh else ["--resume"]
    command = job.hosts.mpirun_command(["-m", "aiperf_mpi", *again, str(job.run_dir), "--time-limit", "20"],
                                       slots={"node1": 3})  # fmt: skip
    # run_command, not VirtualCluster.mpirun: its sweep of the hosts' processes would take Slurm's daemons too
    result = run_command(command, 300, env=job.hosts.env(), cwd=REPO_ROOT)
    assert result.returncode == 0, result.output[-4000:]


@pytest.mark.timeout(2 * OUTER_TIMEOUT + 400)
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.pending)] if c.pending else
                  [pytest.mark.xfail(strict=True, reason=c.xfail_today)] if c.xfail_today else [])
     for c in CASES if c.fixture != ONE_NODE],
)  # fmt: skip
def test_a_failure_is_detected_in_bounded_time_and_the_run_scores_once(case: Case, request, tmp_path) -> None:
    job = start_job(case, request, tmp_path)
    try:
        struck = strike(case, job)
        end = await_end(job, struck)
    finally:
        job.cancel()  # a requeued Slurm job too
        job.sweep()
    text = end.text
    assert "Segmentation fault" not in text, f"a crash at start: no case launches again\n{text[-4000:]}"
    if case.phase != "start-up":  # the start line says whether fault tolerance is on, and under srun it never is
        on = case.fault_tolerance and case.launcher == "mpirun"
        assert f"aiperf_mpi: fault tolerance {'on' if on else 'off'} (" in text, text[-4000:]
        if case.launcher == "srun" and case.fault_tolerance:  # the template refuses it, in one line
            assert "AIPERF_LAUNCHER=srun: a direct srun reports no failure to the ranks" in text, text[-4000:]
    lost = end.of(runlog.GROUP_LOST)
    lost_group, survivors = groups_by_node(end.events)
    detected = lost[0][runlog.TIME] - struck.time if lost else end.said_after or end.ended_after
    summary = (f"failure: {case.id}: victims {struck.victims}, detected by {case.detector} after {detected:.1f} s "
               f"(group_lost: {[(g['group'], g['ranks'], g['reason'][:50]) for g in lost]}), job ended "
               f"{end.ended_after:.1f} s after the failure, {end.state} {end.returncode}, "
               f"scores {len(end.of(runlog.SCORE))}{', killed ' + str(sorted(struck.killed)) if struck.killed else ''}")
    print(summary)
    print(f"failure: {case.id}: {memory_against_the_start_line(job, end.events)}")

    if case.failure == "none":  # the healthy run outlives its start-up bound and the template's watcher of it, and
        # ends at its time limit with its score and the job's status 0
        stops = end.of(runlog.RUN_STOP)
        assert stops and stops[-1][runlog.TIME] - job.started > case.bound_s, summary  # from the submission
        assert not lost and [e["reason"] for e in end.of(runlog.RUN_STOP)] == ["time limit"], summary
        assert len(end.of(runlog.SCORE)) == 1 and end.returncode == 0 and end.state == "COMPLETED", summary
        assert "job status 0: the run scored" in text, summary
    elif case.detector == "watchers":  # rank 0 stopped: its heartbeat stops, a watching leader ends the job at
        # --master-deadline; the stopped rank 0 writes nothing, the template's close scores the run from its log;
        # the job's status says it scored but stopped early (7).  Under fault tolerance PRRTE continues the
        # stopped rank 0 to kill it, and rank 0 may log the watcher's own exit as its group's loss (2 × 64,
        # 2026-12-07: "rank(s) 64 failed (MPI_ERR_PROC_FAILED"): a loss the launcher reported, never a deadline's
        assert "rank 0's heartbeat passed its deadline" in text, summary
        assert all("past its deadline" not in g["reason"] for g in lost), summary
        assert not lost or case.fault_tolerance, summary
        assert end.ended_after < case.bound_s, summary
        assert len(end.of(runlog.SCORE)) == 1 and end.returncode == 7 and "job status 7" in text, summary
    elif case.outcome == "group-lost":
        [group] = lost
        assert group["group"] == lost_group and group["host"] == "node2", (group, summary)
        if case.detector == "mpi":
            assert group["ranks"] and set(group["ranks"]) <= set(struck.victims), (group, summary)
            assert "past its deadline" not in group["reason"], summary
        else:
            assert case.detector == "deadline" and "past its deadline" in group["reason"], summary
        assert detected < case.bound_s, summary
        assert [e["reason"] for e in end.of(runlog.RUN_STOP)] == ["time limit"], summary
        assert len(end.of(runlog.SCORE)) == 1 and "the score above is final" in text, summary
        after = [e for e in end.of(runlog.EPOCH) if e["group"] in survivors and e["start"] > struck.time]
        assert after, f"node1's group did not train on\n{summary}"
    elif case.failure in ("fsync-stall-rank0", "graphs-stall-rank0"):  # rank 0's I/O watchdog: its line,
        # MPI_Abort; rank 0 writes no score (the score lives on the stalled file system), the log whole to its last
        # fsync; once the file system is back (here 5 s after the line) the template's close may score the run
        # from the log, and nothing else does.  Aimed at the graphs file, the I/O thread's guard says so
        what = "the run log's fsync" if case.failure == "fsync-stall-rank0" else "the graphs file's write and sync"
        assert end.said_after is not None and end.said_after < case.bound_s, summary
        assert f"rank 0 on node1: {what} passed its deadline" in text, summary
        assert not lost and len(end.of(runlog.SCORE)) <= 1 and end.returncode != 0, summary
        assert all(e["reason"] == runlog.CLOSED_REASON for e in end.of(runlog.RUN_STOP)), summary
    elif case.detector == "deadline" and case.phase in ("start-up", "end"):  # a rank's own watchdog ends the job:
        # no group is lost; at the start nothing was measured, at the end the score was on disk before the stop
        assert not lost and end.ended_after < case.bound_s, summary
        # the job's status is the close's (issue 50): nothing measured at the start (non-zero); at the end the run
        # had scored at its time limit before the stop (0, the line naming the launcher's status)
        assert (end.returncode != 0) == (case.phase == "start-up") or case.fixture == "multihost", summary
        if case.phase == "start-up":  # stopped after MPI_Init: the waiting ranks' watchdog says so in its line;
            # inside it (this fixture's stop comes as soon as 4 ranks exist) no Python runs, and SIGALRM's default
            # action ends each waiting rank at the same bound (__main__.main): srun says "Alarm clock" for them;
            # under fault tolerance mpirun keeps that job, and the template's watcher ends the launcher
            said = "start-up passed its deadline" in text or "Alarm clock" in text \
                or "the launch outlived the run's start-up deadline" in text  # fmt: skip
            assert said and not end.of(runlog.RUN_START), summary
        else:
            assert len(end.of(runlog.SCORE)) == 1, summary
    elif case.detector == "deadline":  # fault tolerance off: the master's deadline loses the hung group, and the
        # run then ends at once with its score (a hung rank cannot be left behind), rank 0's MPI_Abort ends the job
        assert [g["group"] for g in lost] == [lost_group] and "past its deadline" in lost[0]["reason"], summary
        assert [e["reason"] for e in end.of(runlog.RUN_STOP)] == [runlog.HANG_REASON], summary
        assert len(end.of(runlog.SCORE)) == 1 and "the score above is final" in text, summary
        assert end.ended_after < case.bound_s, summary
    else:  # a score may be written on the way out (srun's SIGTERM to every rank: the master scores at once), else
        # the template's close writes it from the log after the launcher returned; where the row knows which
        # (Case.closed_after: under srun across nodes Open MPI aborts rank 0 first), exactly
        assert not lost and len(end.of(runlog.SCORE)) <= 1, summary
        assert case.scores is None or len(end.of(runlog.SCORE)) == case.scores, summary
        closed = [e["reason"] == runlog.CLOSED_REASON for e in end.of(runlog.RUN_STOP)]
        assert case.closed_after is None or closed == [case.closed_after], summary
        if any(closed):
            assert "before rank 0 wrote the score; segment 1 closed from its log" in text, summary
        assert end.ended_after < case.bound_s, summary
        if case.detector == "slurm":  # slurmctld declared the node DOWN, and the job ended: without --no-kill
            # requeued (Slurm's default) or NODE_FAIL; with the templates' --no-kill the step on the lost node
            # ends, and with it srun's step (FAILED) or mpirun, which SIGTERMs its ranks (COMPLETED: rank 0 scored)
            assert "Nodes node2 not responding, setting DOWN" in (job.hosts.scratch / "log" / "slurmctld.log"
                                                                   ).read_text(), summary  # fmt: skip
        elif case.detector == "launcher":
            assert end.state in ("FAILED", "exited") and end.returncode != 0, summary
        elif case.detector == "keepalive":  # mpirun lost the silent node's daemon and ended the whole job; PRRTE
            # 3.0.14 then exits 0 (its exit status is not set on a lost daemon: docs/cluster.md), so it is not held
            assert "PRTE has lost communication with a remote daemon" in text, summary
            if not end.of(runlog.RUN_STOP):  # rank 0 wrote no score: the close a user runs after an mpirun by hand
                closing = run_command([sys.executable, "-m", "aiperf_mpi.job.close", str(job.run_dir)], timeout=120)
                assert closing.returncode == 0 and "closed from its log" in closing.output, closing.output
                end = replace(end, events=events_so_far(job.run_dir))
                assert [e["reason"] for e in end.of(runlog.RUN_STOP)] == [runlog.CLOSED_REASON], summary
            assert len(end.of(runlog.SCORE)) == 1, summary
    fresh = case.phase == "start-up"  # nothing was logged: launch again, into the same run directory
    before = runlog.LogContents([], False, 0) if fresh else runlog.read_events(job.run_dir)
    assert not before.truncated_tail, summary

    resume(case, job, fresh)
    from analysis.verify import verify

    events = runlog.read_events(job.run_dir).events
    assert events[: len(before.events)] == before.events, "the resume rewrote the first segment"
    scores = [e for e in events if e[runlog.EVENT] == runlog.SCORE]
    assert len(scores) == len(end.of(runlog.SCORE)) + 1 and scores[-1]["segments"] == (1 if fresh else 2), summary
    result = verify(job.run_dir)
    assert result.ok or only_rates_of_freed_cores(result, survivors), result.text()
    score = json.loads((job.run_dir / "score.json").read_text())["score"]
    print(f"failure: {case.id}: {'started again' if fresh else 'resumed'}; verify "
          f"{'ok' if result.ok else 'ok but for the freed cores'}; score {score:.4g}")


# -- a lost node relaunches the run inside the allocation (issue 50) ------------------------------------------------


@pytest.mark.timeout(2 * (OUTER_TIMEOUT + RELAUNCH_TIME_LIMIT[SCALE]) + 400)
@pytest.mark.parametrize("per_node", [2, SCALE], ids=["2x2", f"2x{SCALE}"])
@pytest.mark.parametrize("launcher", ["srun", "mpirun"], ids=["srun", "mpirun-ft"])
def test_a_lost_node_relaunches_the_run_on_the_node_left_and_one_score_spans_both(
        launcher: str, per_node: int, request, tmp_path) -> None:  # fmt: skip
    """The scale-out template as a site submits it, a relaunch allowed (``AIPERF_RELAUNCHES=1``): node2 is lost
    once both groups have logged an epoch; Slurm takes it out of the --no-kill allocation, the launch ends, the
    close scores segment 1, and the batch shell launches again with --resume on node1 (2 tasks: rank 0 and one
    training rank), which trains, ends at the run's time limit and scores both segments; the job's status is 0
    (its run scored at its time limit) and verify passes (a resumed segment with fewer ranks).  At 2 × 64 (issue
    50, item 5) the relaunch has node1's 64 tasks: the ResNet-50 seed as a rehearsal, groups of 4."""
    run_dir, output = tmp_path / "run", tmp_path / "job.out"
    slurm: HostsSlurm = own(request, start_slurm(2, SLURMD_TIMEOUT, node_limits(SCALE)))
    fault_tolerant = launcher == "mpirun"
    limit = RELAUNCH_TIME_LIMIT[per_node]
    env = {"AIPERF_RUN_DIR": str(run_dir), "AIPERF_TIME_LIMIT": str(limit), "AIPERF_GRACE": str(GRACE),
           "AIPERF_ARGS": " ".join(REHEARSAL if per_node == 2 else SCALE_REHEARSAL), "AIPERF_LAUNCHER": launcher,
           "AIPERF_FAULT_TOLERANCE": "1" if fault_tolerant else "0", "AIPERF_RELAUNCHES": "1",
           "AIPERF_RELAUNCH_LEAST": "60"}  # fmt: skip
    job_id = slurm.submit(JOBSCRIPTS / "scale-out.sbatch",
                          ["--nodes=2", f"--ntasks-per-node={per_node}", "--cpus-per-task=1",
                           f"--time={20 if per_node == 2 else 45}"], env=env, output=output)  # fmt: skip
    text = lambda: output.read_text(errors="replace") if output.exists() else ""  # noqa: E731
    try:
        deadline = time.monotonic() + OUTER_TIMEOUT + limit
        while not reached("mid-run", None, events_so_far(run_dir)):  # type: ignore[arg-type]  # no start-up phase
            assert time.monotonic() < deadline, f"no epoch of both groups\n{text()[-4000:]}"
            assert slurm.job(job_id).get("JobState") in STILL_RUNNING, text()[-4000:]
            time.sleep(0.25)
        loss = slurm.hosts.lose_node("node2")
        deadline = time.monotonic() + 2 * (OUTER_TIMEOUT + limit)
        first_epoch_after = None
        while slurm.job(job_id).get("JobState", "UNKNOWN") in STILL_RUNNING:
            assert time.monotonic() < deadline, f"the job outlived {2 * OUTER_TIMEOUT} s\n{text()[-4000:]}"
            events = events_so_far(run_dir)
            relaunched = [e[runlog.TIME] for e in events if e[runlog.EVENT] == runlog.RUN_START][1:]
            if first_epoch_after is None and relaunched:  # the relaunch's first epoch, from the loss
                later = [e for e in events if e[runlog.EVENT] == runlog.EPOCH and e["start"] > relaunched[0]]
                first_epoch_after = later[0]["end"] - loss.time if later else None
            time.sleep(0.5)
        info = slurm.job(job_id)
    finally:
        slurm.command(["scancel", job_id], check=False)
    out = text()
    events = events_so_far(run_dir)
    starts = [e for e in events if e[runlog.EVENT] == runlog.RUN_START]
    layouts = [e for e in events if e[runlog.EVENT] == runlog.LAYOUT]
    stops = [e["reason"] for e in events if e[runlog.EVENT] == runlog.RUN_STOP]
    scores = [e for e in events if e[runlog.EVENT] == runlog.SCORE]
    exit_code = int(info.get("ExitCode", "0:0").split(":")[0])
    worlds = [x["world_size"] for x in layouts]
    summary = (f"relaunch: {launcher}: node2 lost; segments {len(starts)}, worlds {worlds}, stops {stops}, "
               f"scores {len(scores)}, the relaunch's first epoch "
               f"{first_epoch_after if first_epoch_after is None else round(first_epoch_after, 1)} s after the "
               f"loss, job {info.get('JobState')} {exit_code}")  # fmt: skip
    print(summary)
    assert "relaunch 1 on 1 node(s)" in out and "relaunch: 1 node(s) lost, 1 left" in out, out[-4000:]
    assert [x["world_size"] for x in layouts] == [2 * per_node, per_node], summary
    assert stops[-1] == "time limit" and len(scores) == len(stops) == 2, summary
    assert scores[-1]["segments"] == 2 and first_epoch_after is not None, summary
    assert any(e[runlog.EVENT] == runlog.EPOCH and e["start"] > starts[1][runlog.TIME] for e in events), summary
    assert exit_code == 0 and "job status 0: the run scored" in out, summary
    from analysis.verify import verify

    result = verify(run_dir)
    assert result.ok or only_rates_of_freed_cores(result, groups_by_node(events)[1]), result.text()
