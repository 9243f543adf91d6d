"""A real single-node Slurm for tests: munge, slurmctld and slurmd on localhost, stopped by PID.

The sbatch templates are only worth something if a real Slurm accepted and ran
them, so the tests start one (Slurm 22.05 from Debian, configured as measured
in shared/SLURM.md) under a scratch directory, and stop it again.

Leaks are the danger of a fixture that starts daemons, so every process of
the cluster carries one marker in its environment, ``AIPERF_SLURM_SCRATCH=<the
scratch directory>``: the daemons get it from us, slurmstepd from slurmd, and
the jobs from sbatch (which exports the submitter's environment).  Stopping
is by PID — the daemons' own, then every process with that marker — never by
name, so nothing of anyone else's Slurm or jobs on the machine is touched.  A
watchdog process holds the read end of a pipe whose write end only the
test process holds; when the test process dies in any way (even SIGKILL) the
pipe reaches EOF and the watchdog sweeps the marked processes.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import procs
from tests.support.procs import ensure_debian_packages, gone, missing_debian_packages, parent_pid, terminate

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "AIPERF_SLURM_SCRATCH"
"""environment variable that every process of one test cluster carries (its scratch directory)"""

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix-dev")
"""libpmix-dev, not just libpmix2: Slurm's pmix plugin dlopens the library by the path only -dev provides"""

KILL_WAIT = 30
"""Slurm's default KillWait: the SIGTERM-to-SIGKILL window a real centre gives a job"""

GPUS = 4
"""generic GPUs the test node announces, so GPU templates can be checked by ``sbatch --test-only``"""


STILL_RUNNING = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "UNKNOWN")
"""job states that are not an end (SIGNALING: the --signal warning is being delivered, the run is still on)"""
CONTROLLER_PATIENCE = 60
"""seconds a test asks a busy controller again before it takes no answer for a job gone (its own timeout is
slurmctld's MessageTimeout, 10 s by default)"""


class SlurmUnavailable(RuntimeError):
    """The packages are missing and cannot be installed here (not root, not Debian)."""


_HINT = "run pytest -m 'not slurm'"


def missing_packages() -> list[str]:
    """The Debian packages of :data:`PACKAGES` that are not installed."""
    return missing_debian_packages(PACKAGES, SlurmUnavailable, _HINT)


def ensure_packages() -> float:
    """Install the missing packages with apt-get; return the seconds it took (0 when none were missing)."""
    return ensure_debian_packages(PACKAGES, SlurmUnavailable, _HINT)


def free_port() -> int:
    """A TCP port free right now on this machine (two test sessions at once must not share 16817)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def marked_pids(scratch: str | os.PathLike) -> list[int]:
    """Every process (but this one) whose environment carries this cluster's marker."""
    return procs.marked_pids(MARKER, scratch)


def job_pids(scratch: str | os.PathLike, job_id: str) -> list[int]:
    """The processes of one job of the cluster: its tasks, launchers and shells, and its slurmstepd."""
    found = []
    for pid in marked_pids(scratch):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in environ or cmdline.startswith(f"slurmstepd: [{job_id}.".encode()):
            if not gone(pid):
                found.append(pid)
    return found


def assert_no_process_left(cluster: SlurmCluster, job_id: str) -> None:
    """No rank, launcher or step daemon of the job outlives it (an orphaned rank would hold a node)."""
    deadline = time.monotonic() + 10
    while job_pids(cluster.scratch, job_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not job_pids(cluster.scratch, job_id), f"processes of job {job_id} outlived it"


@dataclass(frozen=True)
class BatchScript:
    """A batch script's ``#SBATCH`` options, read as sbatch reads them, and the lines it would ignore."""

    options: dict[str, str]
    ignored: list[str]
    """``#SBATCH`` lines after the first command: sbatch silently skips them"""


def read_batch_script(path: str | os.PathLike) -> BatchScript:
    """Parse ``#SBATCH --name=value`` / ``--name value`` / ``--flag`` lines up to the first command line."""
    options: dict[str, str] = {}
    ignored: list[str] = []
    in_header = True
    for line in Path(path).read_text().splitlines()[1:]:  # the first line is the shebang
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            in_header = False
        if not stripped.startswith("#SBATCH"):
            continue
        if not in_header:
            ignored.append(stripped)
            continue
        text = stripped.removeprefix("#SBATCH").strip()
        name, _, value = text.partition("=") if "=" in text.split()[0] else text.partition(" ")
        options[name.strip()] = value.strip()
    return BatchScript(options, ignored)


def slurm_minutes(value: str) -> float:
    """A Slurm time (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in minutes."""
    days = 0
    if "-" in value:
        head, value = value.split("-", 1)
        days = int(head)
        fields = [int(f) for f in value.split(":")]
        hours, minutes, seconds = [*fields, 0, 0][:3]
    else:
        fields = [int(f) for f in value.split(":")]
        if len(fields) == 1:
            hours, minutes, seconds = 0, fields[0], 0
        elif len(fields) == 2:
            hours, minutes, seconds = 0, fields[0], fields[1]
        else:
            hours, minutes, seconds = fields
    return days * 1440 + hours * 60 + minutes + seconds / 60


@dataclass
class JobEnd:
    """How a batch job ended, from ``scontrol show job``."""

    job_id: str
    state: str
    exit_code: int
    signal: int
    elapsed: float
    output: str


@dataclass
class SlurmCluster:
    """One running test cluster; :func:`start_cluster` makes it, :meth:`stop` ends it."""

    scratch: Path
    conf: Path
    node: str
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    watchdog: subprocess.Popen | None = None
    output_files: dict[str, Path] = field(default_factory=dict)

    # -- commands ---------------------------------------------------------------------------------

    def command(self, argv: Sequence[str], timeout: float = 30, check: bool = True,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """Run a Slurm client command against this cluster."""
        done = subprocess.run(list(argv), env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=self.scratch)  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def submit(self, script: str | os.PathLike, options: Sequence[str] = (), env: Mapping[str, str] | None = None,
               output: str | os.PathLike | None = None) -> str:  # fmt: skip
        """``sbatch`` a script with extra options; return the job id.  Output goes to ``output``."""
        out = Path(output) if output else self.scratch / "jobs" / f"{Path(script).stem}-%j.out"
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = ["sbatch", "--parsable", f"--output={out}", *options, str(script)]
        job_id = self.command(argv, env=env).stdout.strip().split(";")[0]
        self.output_files[job_id] = Path(str(out).replace("%j", job_id))
        return job_id

    def test_only(self, script: str | os.PathLike, options: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """``sbatch --test-only``: would this job be accepted and when would it start?"""
        return self.command(["sbatch", "--test-only", *options, str(script)], check=False, env=env)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (empty when the controller forgot the job).

        A controller too busy to answer is asked again for up to :data:`CONTROLLER_PATIENCE` seconds: at 2 × 64
        ranks on 2 cores (load 40) one ``scontrol`` timed out while the job ran, and an empty answer read as a job
        gone failed a healthy row."""
        deadline = time.monotonic() + CONTROLLER_PATIENCE
        while True:
            try:
                done = self.command(["scontrol", "show", "job", "-o", job_id], check=False)
            except subprocess.TimeoutExpired:
                done = None
            if done is not None and (done.returncode == 0 or "Invalid job id" in done.stderr):
                return dict(re.findall(r"(\w+)=(\S*)", done.stdout)) if done.returncode == 0 else {}
            if time.monotonic() > deadline:
                return {}
            time.sleep(1)

    def wait(self, job_id: str, timeout: float) -> JobEnd:
        """Wait for a job to end; past ``timeout`` it is cancelled and the test fails with its output."""
        start = time.monotonic()
        while True:
            info = self.job(job_id)
            state = info.get("JobState", "UNKNOWN")
            if state not in STILL_RUNNING:
                code, _, sig = info.get("ExitCode", "0:0").partition(":")
                return JobEnd(job_id, state, int(code), int(sig or 0), time.monotonic() - start, self.output(job_id))
            if time.monotonic() - start > timeout:
                self.command(["scancel", job_id], check=False)
                raise AssertionError(f"job {job_id} still {state} after {timeout:.0f} s; cancelled. Output:\n"
                                     f"{self.output(job_id)}")  # fmt: skip
            time.sleep(0.25)

    def output(self, job_id: str) -> str:
        """What the job wrote to its output file so far."""
        path = self.output_files.get(job_id)
        return path.read_text(errors="replace") if path and path.exists() else ""

    # -- life cycle -------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen:
        log = open(self.scratch / "log" / f"{name}.stdout", "wb")  # the daemon writes to it; our copy closes below
        try:
            proc = subprocess.Popen(list(argv), env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=self.scratch)  # fmt: skip
        finally:
            log.close()
        self.processes[name] = proc
        return proc

    def _wait_for(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}:\n"
                                       f"{self.logs()}")  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not within {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.05)

    def logs(self) -> str:
        """The daemons' log files, for a failure message."""
        parts = []
        for path in sorted((self.scratch / "log").glob("*")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.name} ---\n{text[-3000:]}")
        return "\n".join(parts)

    def start(self) -> None:
        """munged, then slurmctld (until ``scontrol ping`` says UP), then slurmd (until the node is idle)."""
        start = time.monotonic()
        munge = self.scratch / "munge"
        self._spawn("munged", [
            "munged", "-F", "--force", f"--key-file={munge / 'munge.key'}", f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={self.scratch / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ])  # fmt: skip
        self._wait_for("munged's socket", (munge / "munge.socket").exists, 10)
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)])

        def controller_up() -> bool:
            return " is UP" in self.command(["scontrol", "ping"], check=False, timeout=10).stdout

        self._wait_for("slurmctld", controller_up, 20)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])

        def node_idle() -> bool:
            return self.command(["sinfo", "-h", "-o", "%T"], check=False, timeout=10).stdout.strip() == "idle"

        self._wait_for("the node to be idle", node_idle, 20)
        self.timings["start"] = time.monotonic() - start

    def stop(self) -> list[int]:
        """Cancel every job, shut the daemons down, then kill whatever still carries the marker.

        Jobs get ``scancel`` and 5 s; whatever of them is left then (ranks
        that trap SIGTERM wait for KillWait, 30 s) is killed by PID, so a
        failed test's teardown stays short.  Returns the PIDs that had to be
        killed that way; nothing of the cluster is left when it returns.
        """
        start = time.monotonic()
        daemons = {proc.pid for proc in self.processes.values()}
        try:
            if self.processes.get("slurmctld") and self.processes["slurmctld"].poll() is None:
                queued = self.command(["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.split()
                if queued:
                    self.command(["scancel", *queued], check=False, timeout=10)
                    deadline = time.monotonic() + 5
                    while self._job_processes(daemons) and time.monotonic() < deadline:
                        time.sleep(0.1)
        except (subprocess.SubprocessError, OSError):
            pass  # the kills below do not need the controller
        swept = self._job_processes(daemons)
        terminate(swept)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.command(["scontrol", "shutdown"], check=False, timeout=10)
        for name in ("slurmctld", "slurmd", "munged"):  # munged last: the others talk to it while they stop
            proc = self.processes.get(name)
            if proc is None:
                continue
            if name == "munged" and proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        left = marked_pids(self.scratch)
        terminate(left)
        if self.watchdog is not None:
            self.watchdog.stdin.close()  # EOF: the watchdog finds nothing left and exits
            self.watchdog.wait(timeout=10)
        self.timings["stop"] = time.monotonic() - start
        return swept + left

    def _job_processes(self, daemons: set[int]) -> list[int]:
        """Marked processes that are neither a daemon nor a daemon's helper (slurmctld's slurmscriptd)."""
        return [pid for pid in marked_pids(self.scratch) if pid not in daemons and parent_pid(pid) not in daemons]


SLURM_CONF = """\
ClusterName=aiperftest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={s}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={s}/state
SlurmdSpoolDir={s}/spool/slurmd
SlurmctldPidFile={s}/run/slurmctld.pid
SlurmdPidFile={s}/run/slurmd.pid
SlurmctldLogFile={s}/log/slurmctld.log
SlurmdLogFile={s}/log/slurmd.log
TmpFS={s}/tmp
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait={kill_wait}
MinJobAge=300
FirstJobId={first_job}
InactiveLimit=0
MailProg=/bin/true
SlurmctldDebug={ctld_debug}
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

GRES_CONF = "NodeName={node} Name=gpu File={s}/dev/gpu[0-{last}]\n"


def first_job_id() -> int:
    """A cluster's first job id, drawn: each test session's cluster starts afresh, and Open MPI names a step's
    shared-memory segments after its Slurm job and step (``/dev/shm/sm_segment.HOST.UID.JOBHASH.RANK``).  Job 1 of
    every session had the same names, and a segment left behind by an earlier session's killed job (the tests
    kill ranks) made the next session's job 1 crash in its first broadcast (seen: signal 11 in
    ``mca_btl_sm_poll_handle_frag``, two srun rows after a rerun).  Below Slurm's ``MaxJobId`` (67,043,328)."""
    return random.SystemRandom().randrange(1_000, 60_000_000)


def write_mpi_conf(slurm_conf: Path, tmp: str | os.PathLike) -> None:
    """``mpi.conf`` beside ``slurm_conf`` (Slurm reads it from there): the PMIx plugin's client directory in ``tmp``.

    Under ``srun --mpi=pmix`` slurmstepd creates ``spmix_appdir_<uid>_<job>.<step>`` in ``PMIxCliTmpDirBase``
    (else in ``TmpFS``, else in /tmp) and refuses the step when it exists ("Cannot create directory
    /tmp/spmix_appdir_0_1.0: File exists", the tasks' launch fails).  Every test cluster numbers its jobs from 1,
    so in a shared /tmp one left by a killed step of an earlier session, or made by another session's cluster at
    the same time, breaks a step; in the cluster's own directory (``TmpFS`` names it too) nothing outlives it.
    """
    (slurm_conf.parent / "mpi.conf").write_text(f"PMIxCliTmpDirBase={tmp}\n")


def start_cluster(extra_env: Mapping[str, str] | None = None) -> SlurmCluster:
    """Install what is missing, write the configuration under a fresh scratch directory, start the daemons.

    ``extra_env`` is added to the environment of the daemons and of every
    client command (and so of every job, which inherits the submitter's).
    """
    timings = {"apt_install": ensure_packages()}
    scratch = Path(tempfile.mkdtemp(prefix="aiperf-slurm-"))
    for sub in ("munge", "state", "spool/slurmd", "run", "log", "jobs", "tmp"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    (scratch / "munge").chmod(0o700)
    key = scratch / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    conf = scratch / "slurm.conf"
    conf.write_text(SLURM_CONF.format(s=scratch, node=node, ctld_port=free_port(), slurmd_port=free_port(),
                                      kill_wait=KILL_WAIT, gpus=GPUS, first_job=first_job_id(),
                                      ctld_debug=os.environ.get("AIPERF_SLURMCTLD_DEBUG", "info")))  # fmt: skip
    (scratch / "dev").mkdir()
    for index in range(GPUS):  # stand-ins for /dev/nvidiaN: slurmd counts them and hands out their indices
        device = scratch / "dev" / f"gpu{index}"
        try:  # a character device like /dev/null, as slurmd expects; a plain file works, with an error logged
            os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except OSError:
            device.touch()
    (scratch / "gres.conf").write_text(GRES_CONF.format(node=node, s=scratch, last=GPUS - 1))
    write_mpi_conf(conf, scratch / "tmp")
    env = {**os.environ, **(extra_env or {}), "SLURM_CONF": str(conf), MARKER: str(scratch)}
    for name in list(env):  # a test session inside a Slurm job must not talk to that job's Slurm
        if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and name != "SLURM_CONF":
            del env[name]
    cluster = SlurmCluster(scratch=scratch, conf=conf, node=node, env=env, timings=timings)
    cluster.watchdog = procs.start_watchdog("tests.support.slurm", MARKER, scratch)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return cluster


if __name__ == "__main__" and sys.argv[1:2] == ["--watchdog"]:
    procs.watch(MARKER, sys.argv[2])


JOBSCRIPTS = Path(__file__).resolve().parents[2] / "jobscripts"
"""the sbatch templates"""


def rank_pids(slurm: SlurmCluster, job: str) -> dict[int, int]:
    """``{rank: PID}`` of the job's benchmark processes, by ``PMIX_RANK`` (Slurm's PMIx sets it in each task)."""
    found = {}
    for pid in job_pids(slurm.scratch, job):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            environ = dict(e.split(b"=", 1) for e in entries if b"=" in e)
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"aiperf_mpi"] and environ.get(b"PMIX_RANK", b"").isdigit():
            found[int(environ[b"PMIX_RANK"])] = pid
    return found
