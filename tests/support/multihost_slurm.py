"""A real two-node Slurm on the test hosts of :mod:`tests.support.multihost`: one slurmd per host.

Debian's Slurm is built without ``--enable-multiple-slurmd``, but it does not
need it here: each host has its own host name, network stack and mount
namespace, so each runs an ordinary slurmd that registers as that host.
What a real cluster has per node, each host gets:

- its own munged (a single munged for both nodes refuses the second decode of
  a job's credential as a replay), its socket at the same path on every host
  — in the host's node-local tmpfs — which is what ``AuthInfo`` names;
- its own PMIx client directory (``mpi.conf``: ``PMIxCliTmpDirBase`` in the
  node-local tmpfs; in a shared ``/tmp`` the second node's step fails with
  "Cannot create directory /tmp/spmix_appdir_…: File exists").

slurmctld runs on node1, the client commands too (they reach the controller
at node1's address on the bridge); the configuration is the single-node one
of :mod:`tests.support.slurm` with those lines changed.  Every process carries
both fixtures' markers; stopping cancels the jobs, shuts Slurm down, and
stops the hosts, which sweeps whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import slurm
from tests.support.multihost import VirtualCluster, start_cluster
from tests.support.slurm import SlurmCluster

CPUS = 64
"""CPUs each node announces (2 cores here; ``config_overrides`` lets slurmd accept more): 64, so that the failure
table's rows at 2 × 64 tasks (issue 50) fit, one CPU a task"""

MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")
"""cgroup v1's memory controller, where this machine has it (v2's ``memory.max`` is the same idea)"""


@dataclass(frozen=True)
class NodeLimits:
    """What a node of the fixture gives a job, as a site's node does (issue 50: "give each container a memory.max
    and a hard file limit just above the need"): a memory cgroup around its slurmd, whose children (slurmstepd,
    the ranks) inherit it, so that the kernel's OOM killer holds the node's ranks to ``memory_mib`` together; and
    a hard ``RLIMIT_NOFILE`` of ``open_files`` on the slurmd, which its tasks inherit."""

    memory_mib: int | None = None
    open_files: int | None = None


def own_memory_cgroup() -> Path | None:
    """This process's memory cgroup directory (v1), where a node's cgroup is made as a child (None: none here)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            place = MEMORY_CGROUPS / parts[2].lstrip("/")
            return place if place.is_dir() else None
    return None


def node_cgroup(scratch: Path, host: str, memory_mib: int) -> Path:
    """A memory cgroup of ``memory_mib`` for ``host`` (a child of this process's: limits nest); its directory."""
    parent = own_memory_cgroup()
    if parent is None:
        raise RuntimeError(f"no cgroup v1 memory controller under {MEMORY_CGROUPS}: a node cannot be given a limit")
    place = parent / f"aiperf-{scratch.name}-{host}"
    place.mkdir(exist_ok=True)
    (place / "memory.limit_in_bytes").write_text(str(memory_mib * 1024 * 1024))
    return place


def remove_cgroup(place: Path) -> list[int]:
    """Kill what is left in a node's cgroup, then remove it (a cgroup with tasks cannot be removed: tried for 10 s).

    Returns the PIDs it killed.  A ``slurmstepd`` carries no marker the hosts' sweep finds: after a 2 × 64 row
    whose job the controller had not yet ended, three step daemons outlived the fixture in the node cgroups; every
    process slurmd started is in its node's cgroup, so the cgroup is the sweep that cannot miss one."""
    killed: list[int] = []
    deadline = time.monotonic() + 10
    while place.exists():
        try:
            pids = [int(pid) for pid in (place / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        try:
            place.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                return killed
            time.sleep(0.2)
    return killed


def two_node_conf(cluster: VirtualCluster, ctld_port: int = 6817, slurmd_port: int = 6818,
                  slurmd_timeout: int | None = None, memory_mib: int | None = None) -> str:  # fmt: skip
    """The single-node configuration with the controller on node1, one NodeName per host, node-local paths.

    ``slurmd_timeout``: Slurm's ``SlurmdTimeout`` (default 300 s), how long slurmctld waits for a silent slurmd
    before it sets the node DOWN and ends the jobs on it; a test of a lost node shortens it.
    """
    scratch, head = cluster.scratch, cluster.head
    text = slurm.SLURM_CONF.format(s=scratch, node=head.name, ctld_port=ctld_port, slurmd_port=slurmd_port,
                                   kill_wait=slurm.KILL_WAIT, gpus=0, ctld_debug="info",
                                   first_job=slurm.first_job_id())  # fmt: skip
    changes = {
        "SlurmctldHost": f"{head.name}({head.address})",
        "AuthInfo": f"socket={cluster.node_local}/munge/munge.socket",
        "SlurmdSpoolDir": f"{cluster.node_local}/slurmd",
        "SlurmdPidFile": f"{scratch}/run/slurmd-%n.pid",
        "SlurmdLogFile": f"{scratch}/log/slurmd-%n.log",
        "TmpFS": cluster.node_local,
        "GresTypes": None,
        "NodeName": None,
    }
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0]
        if key not in changes:
            lines.append(line)
        elif changes[key] is not None:
            lines.append(f"{key}={changes[key]}")
    nodes = [f"NodeName={h.name} NodeAddr={h.address} CPUs={CPUS} RealMemory={memory_mib or 1000} State=UNKNOWN"
             for h in cluster.hosts]  # fmt: skip
    partition = next(i for i, line in enumerate(lines) if line.startswith("PartitionName="))
    timeout = [f"SlurmdTimeout={slurmd_timeout}"] if slurmd_timeout is not None else []
    return "\n".join([*lines[:partition], *timeout, *nodes, *lines[partition:]]) + "\n"


@dataclass
class HostsSlurm(SlurmCluster):
    """The Slurm of :class:`tests.support.slurm.SlurmCluster`, its daemons and commands on the test hosts."""

    hosts: VirtualCluster | None = None
    limits: NodeLimits = field(default_factory=NodeLimits)
    cgroups: dict[str, Path] = field(default_factory=dict)
    """each host's memory cgroup (:class:`NodeLimits`), made at start, removed at stop"""

    def command(self, argv: Sequence[str], timeout: float = 30, check: bool = True,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """A client command, run on the head host (where the controller's address is reachable)."""
        done = self.hosts.on_host(self.hosts.head.name, argv, timeout=timeout, check=False,
                                  env={**self.env, **(env or {})})  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def _spawn_on(self, name: str, host: str, argv: Sequence[str]) -> subprocess.Popen:
        prefix = ["nsenter", "-t", str(self.hosts.host(host).pid), "--net", "--uts", "--mount", f"--wd={self.scratch}",
                  "--"]  # fmt: skip
        return self._spawn(name, [*prefix, *argv])

    def start(self) -> None:
        """A munged on every host, slurmctld on the head host, then a slurmd on every host (until all are idle)."""
        start = time.monotonic()
        names = [h.name for h in self.hosts.hosts]
        for host in names:
            self.hosts.on_host(host, ["mkdir", "-p", "-m", "700", f"{self.hosts.node_local}/munge"])
            self.hosts.on_host(host, ["mkdir", "-p", f"{self.hosts.node_local}/slurmd"])
            munge = f"{self.hosts.node_local}/munge"
            self._spawn_on(f"munged-{host}", host, [
                "munged", "-F", "--force", f"--key-file={self.scratch / 'munge' / 'munge.key'}",
                f"--socket={munge}/munge.socket", f"--pid-file={munge}/munged.pid",
                f"--log-file={self.scratch / 'log' / f'munged-{host}.log'}", f"--seed-file={munge}/munged.seed",
            ])  # fmt: skip

        def sockets() -> bool:
            return all(self.hosts.on_host(h, ["test", "-S", f"{self.hosts.node_local}/munge/munge.socket"],
                                          check=False).returncode == 0 for h in names)  # fmt: skip

        self._wait_for("every host's munged", sockets, 10)
        self._spawn_on("slurmctld", self.hosts.head.name, ["slurmctld", "-D", "-c", "-f", str(self.conf)])
        self._wait_for("slurmctld", lambda: " is UP" in self.command(["scontrol", "ping"], check=False).stdout, 20)
        for host in names:
            files = self.limits.open_files
            prefix = ["prlimit", f"--nofile={files}:{files}", "--"] if files else []
            slurmd = self._spawn_on(f"slurmd-{host}", host, [*prefix, "slurmd", "-D", "-N", host, "-f", str(self.conf)])
            if self.limits.memory_mib:  # before it starts a step: its children are born in the cgroup
                self.cgroups[host] = node_cgroup(self.scratch, host, self.limits.memory_mib)
                (self.cgroups[host] / "cgroup.procs").write_text(str(slurmd.pid))

        def all_idle() -> bool:
            states = self.command(["sinfo", "-h", "-N", "-o", "%N %T"], check=False).stdout.split("\n")
            return sorted(line.strip() for line in states if line.strip()) == [f"{h} idle" for h in names]

        self._wait_for("every node to be idle", all_idle, 30)
        self.timings["start"] = time.monotonic() - start

    def stop(self) -> list[int]:
        """Cancel the jobs, shut Slurm down (10 s), then stop the hosts, which kills whatever is left."""
        start = time.monotonic()
        try:
            queued = self.command(["squeue", "-h", "-o", "%i"], check=False, timeout=10).stdout.split()
            if queued:
                self.command(["scancel", *queued], check=False, timeout=10)
            self.command(["scontrol", "shutdown"], check=False, timeout=10)
        except (subprocess.SubprocessError, OSError):
            pass  # stopping the hosts below does not need the controller
        deadline = time.monotonic() + 10
        while any(p.poll() is None for n, p in self.processes.items() if not n.startswith("munged")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        left = self.hosts.stop()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        for place in self.cgroups.values():
            remove_cgroup(place)
        self.timings["stop"] = time.monotonic() - start
        return left


def job_environment() -> dict[str, str]:
    """What every job sees besides the submitter's environment: this venv, root MPI, quiet TensorFlow."""
    return {
        "PATH": os.pathsep.join([str(os.path.dirname(sys.executable)), os.environ.get("PATH", "")]),
        "AIPERF_VENV": sys.prefix,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
    }


def start_slurm(count: int = 2, slurmd_timeout: int | None = None, limits: NodeLimits | None = None) -> HostsSlurm:
    """``count`` test hosts, and a Slurm with one slurmd on each; :meth:`HostsSlurm.stop` ends both.

    ``slurmd_timeout``: see :func:`two_node_conf`; ``limits``: :class:`NodeLimits` (none by default)."""
    limits = limits or NodeLimits()
    timings = {"apt_install": slurm.ensure_packages()}
    hosts = start_cluster(count)
    try:
        scratch = hosts.scratch
        for sub in ("munge", "state", "run", "log", "jobs"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        (scratch / "munge").chmod(0o700)
        key = scratch / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        conf = scratch / "slurm.conf"
        # Slurm's own ports: each host's network stack is the cluster's own
        conf.write_text(two_node_conf(hosts, slurmd_timeout=slurmd_timeout, memory_mib=limits.memory_mib))
        slurm.write_mpi_conf(conf, hosts.node_local)
        env = {**hosts.env(job_environment()), "SLURM_CONF": str(conf), slurm.MARKER: str(scratch)}
        for name in list(env):  # a test session inside a Slurm job must not talk to that job's Slurm
            if re.match(r"(SLURM|SBATCH|SRUN|SALLOC)_", name) and name != "SLURM_CONF":
                del env[name]
        cluster = HostsSlurm(scratch=scratch, conf=conf, node=hosts.head.name, env=env, timings=timings, hosts=hosts,
                             limits=limits)  # fmt: skip
        cluster.start()
    except BaseException:
        hosts.stop()
        raise
    return cluster


@contextlib.contextmanager
def two_node_slurm(**options: object) -> Iterator[HostsSlurm]:
    """:func:`start_slurm` with two hosts, for a module's fixture: stopped at the end, and then nothing of it may
    be left, neither a marked process nor a namespace of its hosts."""
    from tests.support.multihost import MARKER, live_namespaces
    from tests.support.procs import marked_pids

    cluster = start_slurm(2, **options)
    namespaces = cluster.hosts.namespaces()
    try:
        yield cluster
    finally:
        cluster.stop()
        assert not marked_pids(MARKER, cluster.scratch), "processes of the two-node Slurm outlived it"
        assert not live_namespaces(namespaces)
