"""Several hosts on one machine, for MPI jobs that really span nodes: Linux namespaces and Open MPI's launch agent.

A host here is a set of Linux namespaces held open by one small process
(``sleep infinity``, like a container's pause process):

- its own **network** namespace: a loopback and an ``eth0`` (a veth pair)
  plugged into a bridge that lives in one more namespace, the cluster's
  switch, so the hosts talk TCP over ``10.77.0.0/24`` and the machine's own
  network stack is never touched;
- its own **UTS** namespace: its own host name (``node1``, ``node2``, …);
- its own **mount** namespace (a private copy of the machine's): a tmpfs of
  its own on ``/dev/shm`` and on ``<scratch>/local`` — node-local storage, the
  same path on every host but a different file system on each — and an
  ``/etc/hosts`` that names every host.  Every other path is the machine's
  file system, shared by all hosts as a cluster's shared file system is
  (``/tmp`` included: that is where tests keep their run directories).

The processes are not in a PID namespace of their own, so the test process
sees (and can signal) every process of every host.

MPI is launched as on a cluster: ``mpirun --host node1:2,node2:2`` runs *on*
the first host (entered with ``nsenter``), and Open MPI starts one daemon
(``prted``) on every other host through its ssh launcher with
``--prtemca plm_ssh_agent <scratch>/launch-agent``.  The agent stands in for
ssh and does what ssh would: ``agent HOST COMMAND…`` runs ``/bin/sh -c
"COMMAND…"`` in HOST's namespaces, from the home directory, with the bare
environment of a login (HOME, PATH, USER, LOGNAME) — so a job sees only what
``mpirun -x`` forwards, as it would across real nodes.  The daemon then
connects back to mpirun over the bridge (its URI names ``10.77.0.1``), the
ranks' traffic between hosts goes through Open MPI's TCP transport, and
``COMM_TYPE_SHARED`` splits by host (Open MPI's notion of a node is the
daemon's host).  No sshd runs and no keys are made: the agent gives the same
separation of daemons, host names and network stacks with fewer moving parts.

Stopping follows :mod:`tests.support.procs`: every process of the cluster
carries ``AIPERF_MULTIHOST_SCRATCH=<scratch>`` in its environment (the
holders from us, the daemons from the agent, the ranks from their daemon or
from mpirun), processes are stopped by PID, and a watchdog sweeps them if the
test process dies.  Nothing is mounted in the machine's own mount namespace
and no namespace is pinned by a file, so when the last process of a host ends
its namespaces, its interfaces and its tmpfs mounts go with it: the sweep
leaves nothing behind but the scratch directory, which it removes.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import procs
from tests.support.mpirun import REPO_ROOT, MpiResult, MpiTimeout, mpi_env, mpi_vendor, mpirun_path, run_command

MARKER = "AIPERF_MULTIHOST_SCRATCH"
"""environment variable that every process of one test cluster carries (its scratch directory)"""

PACKAGES = ("iproute2", "util-linux", "mount")
"""``ip``; ``unshare`` and ``nsenter``; ``mount`` — usually all there, installed when not"""

SUBNET = "10.77.0"
"""the hosts' /24: it exists only inside the cluster's own network namespaces"""

SLOTS = 2
"""ranks per host unless a test says otherwise"""

FORWARDED = ("PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL", "AIPERF_MPI_DEBUG")
"""what ``mpirun -x`` passes to the ranks on the other hosts (those set here), as a user's job script would"""

_HINT = "leave out the multi-node tests (they run only with -m multinode)"

SWITCH_SCRIPT = """\
set -e
ip link set lo up
ip link add br0 type bridge
ip link set br0 up
echo ready
exec sleep infinity </dev/null >/dev/null 2>&1
"""

HOST_SCRIPT = """\
set -e
hostname "$1"
ip link set lo up
mount -t tmpfs -o size=1g,mode=1777 "node-local-$1" "$2"
mount -t tmpfs -o mode=1777 "shm-$1" /dev/shm
mount --bind "$3" /etc/hosts
echo ready
exec sleep infinity </dev/null >/dev/null 2>&1
"""

AGENT_SCRIPT = """\
#!/bin/sh
# Open MPI's launch agent (plm_ssh_agent) for the test cluster in {scratch}.
# Called as ssh is: `launch-agent HOST COMMAND...`; runs COMMAND with /bin/sh on HOST, that is inside
# HOST's network, UTS and mount namespaces, from the home directory, with the bare environment an ssh
# login gives (plus the cluster's marker, so that the fixture can find and stop what it starts).
host="$1"; shift
case "$host" in
{cases}
  *) echo "launch-agent: no host '$host' in this test cluster" >&2; exit 255 ;;
esac
# The agent stays on the calling host while the command runs, as an ssh client does, and passes on the
# signals the launcher sends it.  When the host was lost (tests.support.multihost, lose_node: its network
# down, everything on it killed) an ssh client would learn nothing until TCP gave up (hours: ssh sets no
# keepalive of its own): so does the agent, which then waits for ever instead of exiting.
exec 3<&0
/usr/bin/env -i HOME="{home}" PATH=/usr/local/bin:/usr/bin:/bin USER="{user}" LOGNAME="{user}" \\
  {marker}="{scratch}" nsenter -t "$pid" --net --uts --mount --wd="{home}" -- /bin/sh -c "$*" <&3 3<&- &
child=$!
trap 'kill -TERM $child 2>/dev/null' TERM INT HUP
status=0
while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
[ -e "{scratch}/lost-$host" ] && exec sleep infinity
exit "$status"
"""


class MultihostUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no Debian packages, not Open MPI)."""


@dataclass(frozen=True)
class Host:
    """One host of the cluster: its name, its address on the bridge, the process that holds its namespaces."""

    name: str
    address: str
    pid: int

    def namespace(self, kind: str) -> int:
        """The inode of the host's ``net``, ``uts`` or ``mnt`` namespace (what ``/proc/PID/ns/KIND`` names)."""
        return os.stat(f"/proc/{self.pid}/ns/{kind}").st_ino


@dataclass(frozen=True)
class NodeLoss:
    """What :meth:`VirtualCluster.lose_node` did: the host, when its link went down, what it killed there."""

    host: str
    time: float
    """``time.time()`` when the link went down (the run log's clock)"""
    killed: dict[str, list[int]]
    """command name → PIDs killed on the host (``prted``, ``slurmd``, ``slurmstepd``, ``python``, …)"""


@dataclass
class MultihostResult(MpiResult):
    """An MPI job's result, plus the processes of the job still alive after mpirun returned (killed by then)."""

    leftovers: list[int] = field(default_factory=list)


def namespace_of(pid: int, kind: str) -> int | None:
    """The inode of ``pid``'s namespace of ``kind`` (None when the process is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def live_namespaces(inodes: set[int], kinds: Sequence[str] = ("net", "uts", "mnt")) -> set[int]:
    """Which of ``inodes`` some process on the machine is still in (a namespace with no process is gone)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            for kind in kinds:
                inode = namespace_of(int(entry.name), kind)
                if inode in inodes:
                    found.add(inode)
    return found


@dataclass
class VirtualCluster:
    """One running cluster of hosts; :func:`start_cluster` makes it, :meth:`stop` ends it."""

    scratch: Path
    hosts: list[Host]
    switch: int
    """the process that holds the switch's network namespace (the bridge)"""
    agent: Path
    node_local: Path
    """the same path on every host, a tmpfs of its own on each (empty outside the hosts)"""
    holders: list[subprocess.Popen] = field(default_factory=list)
    watchdog: subprocess.Popen | None = None
    timings: dict[str, float] = field(default_factory=dict)

    # -- what there is ----------------------------------------------------------------------------

    @property
    def head(self) -> Host:
        """The first host: mpirun runs there, as on the first node of an allocation."""
        return self.hosts[0]

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def namespaces(self) -> set[int]:
        """Every namespace of the cluster (hosts' net, UTS and mount; the switch's net)."""
        inodes = {h.namespace(kind) for h in self.hosts for kind in ("net", "uts", "mnt")}
        return inodes | {os.stat(f"/proc/{self.switch}/ns/net").st_ino}

    def host_of(self, pid: int) -> str | None:
        """The host a process runs on, by its UTS namespace (None: the machine itself, or gone)."""
        uts = namespace_of(pid, "uts")
        return next((h.name for h in self.hosts if h.namespace("uts") == uts), None)

    def marked(self) -> list[int]:
        """Every process of the cluster: holders, daemons, ranks, launchers."""
        return procs.marked_pids(MARKER, self.scratch)

    def job_pids(self) -> list[int]:
        """The cluster's processes but the namespace holders: what MPI jobs and commands on the hosts left."""
        holders = {self.switch, *(h.pid for h in self.hosts)}
        return [pid for pid in self.marked() if pid not in holders and not procs.gone(pid)]

    def rank_pids(self) -> dict[int, int]:
        """``{world rank: PID}`` of the MPI processes running now.

        The rank is ``OMPI_COMM_WORLD_RANK`` (mpirun's daemons set it), else ``PMIX_RANK`` (what Slurm's PMIx
        plugin gives a task of ``srun --mpi=pmix``): either is in the process's environment from its start.
        """
        found: dict[int, list[int]] = {}
        for pid in self.job_pids():
            try:
                environ = dict(e.split(b"=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                               if b"=" in e)  # fmt: skip
            except OSError:
                continue
            rank = environ.get(b"OMPI_COMM_WORLD_RANK", environ.get(b"PMIX_RANK"))
            if rank is not None and rank.isdigit():
                found.setdefault(int(rank), []).append(pid)
        # a rank's own children inherit its variables: the rank is the one whose parent is not of its rank
        return {rank: next(p for p in pids if procs.parent_pid(p) not in pids) for rank, pids in found.items()}

    def node_local_disk(self, name: str) -> Path:
        """``<node_local>/<name>``: node-local storage on the machine's disk, the same path on every host.

        Each host's tmpfs holds 1 GiB, in memory; what a test puts on node-local storage beyond that (a venv of
        ≈ 2 GB copied to every node) goes here, on disk.  On each host the path is a bind mount of that host's
        own ``<scratch>/<name>-<host>``: every host sees only its own files there, as on a node's local disk,
        and the test reads them from outside.  The mounts end with the hosts' namespaces, the files with the
        scratch directory (minutes for two copies of a 1.9 GB venv: this disk discards every freed block at once).
        """
        for host in self.hosts:
            own = self.scratch / f"{name}-{host.name}"
            own.mkdir(exist_ok=True)
            self.on_host(host.name, ["mkdir", "-p", str(self.node_local / name)])
            self.on_host(host.name, ["mount", "--bind", str(own), str(self.node_local / name)])
        return self.node_local / name

    # -- running things on the hosts --------------------------------------------------------------

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """What mpirun and commands on the hosts get: the MPI test environment plus the cluster's marker."""
        return {**mpi_env(extra), MARKER: str(self.scratch)}

    def on_host(self, name: str, argv: Sequence[str], timeout: float = 30, check: bool = True,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:  # fmt: skip
        """Run a command on one host (in its namespaces, with this process's environment)."""
        command = ["nsenter", "-t", str(self.host(name).pid), "--net", "--uts", "--mount", f"--wd={REPO_ROOT}",
                   "--", *argv]  # fmt: skip
        done = subprocess.run(command, env=self.env(env), capture_output=True, text=True, timeout=timeout,
                              check=False)  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"on {name}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    def host_list(self, slots: int | Mapping[str, int] = SLOTS) -> str:
        """``node1:2,node2:2`` — every host with ``slots`` ranks, or the hosts and counts of a mapping."""
        chosen = slots if isinstance(slots, Mapping) else {h.name: slots for h in self.hosts}
        return ",".join(f"{name}:{count}" for name, count in chosen.items())

    def mpirun_command(self, argv: Sequence[str], slots: int | Mapping[str, int] = SLOTS,
                       env: Mapping[str, str] | None = None, options: Sequence[str] = ()) -> list[str]:  # fmt: skip
        """``mpirun --host …`` on the head host, launching the other hosts' daemons through the agent.

        ``argv`` starting with ``-m``, ``-c`` or a ``.py`` path runs with this
        interpreter.  ``--bind-to none``: every host shares the machine's
        cores, so binding each host's ranks to "its" cores would pile them up.
        ``options`` go to mpirun itself (the fault-tolerance settings, say).
        """
        argv = list(argv)
        if argv and (argv[0] in ("-m", "-c") or argv[0].endswith(".py")):
            argv = [sys.executable, *argv]
        spec = self.host_list(slots)
        ranks = sum(int(part.rsplit(":", 1)[1]) for part in spec.split(","))
        environment = self.env(env)
        forward = [arg for name in FORWARDED if name in environment for arg in ("-x", name)]
        return ["nsenter", "-t", str(self.head.pid), "--net", "--uts", "--mount", f"--wd={REPO_ROOT}", "--",
                mpirun_path(), *options, "-n", str(ranks), "--host", spec, "--bind-to", "none", "--tag-output",
                "--prtemca", "plm_ssh_agent", str(self.agent), *forward, *argv]  # fmt: skip

    def mpirun(self, argv: Sequence[str], timeout: float, slots: int | Mapping[str, int] = SLOTS,
               env: Mapping[str, str] | None = None) -> MultihostResult:  # fmt: skip
        """Run an MPI job across the hosts; raise :class:`MpiTimeout` past ``timeout`` s (job swept first).

        Once mpirun has returned, every process of the job on every host is
        given 10 s to end; those that did not are killed and listed in
        ``leftovers`` (a clean job leaves none).
        """
        try:
            result = run_command(self.mpirun_command(argv, slots, env), timeout, env=self.env(env), cwd=REPO_ROOT)
        except MpiTimeout:
            self.settle(grace=2)
            raise
        return MultihostResult(result.returncode, result.output, result.elapsed, self.settle())

    def launch(self, argv: Sequence[str], output: str | os.PathLike, slots: int | Mapping[str, int] = SLOTS,
               env: Mapping[str, str] | None = None, options: Sequence[str] = ()) -> subprocess.Popen:  # fmt: skip
        """Start an MPI job in the background (its own session), its output to ``output``."""
        with open(output, "wb") as sink:
            return subprocess.Popen(self.mpirun_command(argv, slots, env, options), env=self.env(env), cwd=REPO_ROOT,
                                    stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip

    def settle(self, grace: float = 10.0) -> list[int]:
        """Wait up to ``grace`` s for the jobs' processes to end; kill the rest; return who had to be killed."""
        deadline = time.monotonic() + grace
        while self.job_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.job_pids()
        procs.terminate(left)
        return left

    # -- failures ---------------------------------------------------------------------------------

    def processes_on(self, name: str) -> list[int]:
        """Every live process on host ``name`` (by its UTS namespace) but the one that holds its namespaces."""
        host = self.host(name)
        uts = host.namespace("uts")
        return sorted(int(entry.name) for entry in Path("/proc").iterdir()
                      if entry.name.isdigit() and int(entry.name) != host.pid
                      and namespace_of(int(entry.name), "uts") == uts and not procs.gone(int(entry.name)))  # fmt: skip

    def lose_node(self, name: str) -> NodeLoss:
        """Take host ``name`` off the cluster as a node that loses power or its network does: silently.

        First its link goes down, on both ends of its veth pair (``eth0``
        inside the host, its port on the switch), so nothing it does from then
        on reaches anyone: no FIN, no RST, no "connection refused" — the peers'
        packets vanish, as towards a dead node.  Then every process on it is
        killed with SIGKILL: the launcher's daemon (``prted`` under mpirun,
        ``slurmstepd`` under srun), ``slurmd``, ``munged`` and the ranks.
        The host's namespaces stay (their holder lives), so the fixture's stop
        still finds and ends everything; the host is not brought back.

        Returns when it happened (``time.time()``, the log's clock) and what
        was killed, by command name.
        """
        host = self.host(name)
        (self.scratch / f"lost-{name}").touch()  # the launch agent's "ssh" to it now hangs, as ssh would
        when = time.time()
        _ip(host.pid, "link", "set", "eth0", "down")
        _ip(self.switch, "link", "set", f"v-{name}"[:15], "down")
        killed: dict[str, list[int]] = {}
        for _ in range(5):  # a daemon may fork while the first round is killed
            for pid in self.processes_on(name):
                command = procs.command_name(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                if pid not in killed.get(command or "?", []):
                    killed.setdefault(command or "?", []).append(pid)
            time.sleep(0.2)
            if not self.processes_on(name):
                break
        return NodeLoss(name, when, killed)

    def reachable(self, source: str, target: str, port: int, timeout: float = 2.0) -> bool:
        """Whether a TCP connection from host ``source`` to ``target``:``port`` is answered within ``timeout`` s
        (accepted or refused: either way the target's network stack is there)."""
        probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1],int(sys.argv[2])),"
                 "timeout=float(sys.argv[3]))\nexcept ConnectionRefusedError: pass\n"
                 "except OSError: sys.exit(1)\n")  # fmt: skip
        done = self.on_host(source, [sys.executable, "-c", probe, self.host(target).address, str(port), str(timeout)],
                            timeout=timeout + 30, check=False)  # fmt: skip
        return done.returncode == 0

    # -- life cycle -------------------------------------------------------------------------------

    def stop(self, keep: bool = False) -> list[int]:
        """Kill what jobs left, then the holders (the namespaces go with them); remove the scratch directory.

        Returns the PIDs of job processes that were still alive.  ``keep``
        leaves the scratch directory (agent, hosts file) for debugging.
        """
        start = time.monotonic()
        left = self.job_pids()
        procs.terminate(left)
        holders = self.marked()
        procs.terminate(holders, grace=5)
        for holder in self.holders:  # reap our own children
            try:
                holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                holder.kill()
        procs.terminate(self.marked(), grace=1)  # forked while the first rounds ran
        if self.watchdog is not None:
            self.watchdog.stdin.close()  # EOF: the watchdog finds nothing left and exits
            self.watchdog.wait(timeout=10)
        if not keep:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.timings["stop"] = time.monotonic() - start
        return left


def _await_ready(proc: subprocess.Popen, what: str, timeout: float = 20) -> None:
    """Wait for a holder's ``ready`` line; fail with what it printed if it exits or stalls instead."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    if line.strip() == b"ready":
        proc.stdout.close()
        return
    if proc.poll() is None:
        proc.kill()
    rest = proc.stdout.read()
    proc.wait()
    raise MultihostUnavailable(f"{what} could not be set up (exit {proc.returncode}): "
                               f"{(line + rest).decode(errors='replace').strip()}")  # fmt: skip


def _hold(argv: Sequence[str], env: Mapping[str, str], what: str) -> subprocess.Popen:
    proc = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd="/")  # fmt: skip
    _await_ready(proc, what)
    return proc


def _ip(pid: int, *args: str) -> None:
    """``ip ARGS`` in the network namespace of ``pid``."""
    done = subprocess.run(["nsenter", "-t", str(pid), "--net", "--", "ip", *args], capture_output=True, text=True,
                          check=False, timeout=20)  # fmt: skip
    if done.returncode != 0:
        raise MultihostUnavailable(f"ip {' '.join(args)}: {done.stderr.strip()}")


def start_cluster(count: int = 2) -> VirtualCluster:
    """Install what is missing, then make ``count`` hosts (``node1`` …) on a bridge, under a fresh scratch dir."""
    if not 1 <= count <= 200:
        raise ValueError(f"between 1 and 200 hosts, not {count}")
    if os.geteuid() != 0:
        raise MultihostUnavailable("making network, UTS and mount namespaces needs root; " + _HINT)
    if mpi_vendor() != "openmpi":
        raise MultihostUnavailable("the multi-host fixture drives Open MPI's ssh launcher (plm_ssh_agent); "
                                   "this venv has another MPI")  # fmt: skip
    started = time.monotonic()
    timings = {"apt_install": procs.ensure_debian_packages(PACKAGES, MultihostUnavailable, _HINT)}
    scratch = Path(tempfile.mkdtemp(prefix="aiperf-multihost-"))
    scratch.chmod(0o755)
    node_local = scratch / "local"
    node_local.mkdir()
    names = [f"node{i}" for i in range(1, count + 1)]
    addresses = {name: f"{SUBNET}.{i}" for i, name in enumerate(names, start=1)}
    hosts_file = scratch / "hosts"
    hosts_file.write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                          + "".join(f"{addresses[n]}\t{n}\n" for n in names))  # fmt: skip
    env = {**os.environ, MARKER: str(scratch)}
    watchdog = procs.start_watchdog("tests.support.multihost", MARKER, scratch)
    holders: list[subprocess.Popen] = []
    cluster = None
    try:
        switch = _hold(["unshare", "--net", "--", "/bin/sh", "-c", SWITCH_SCRIPT], env, "the switch")
        holders.append(switch)
        hosts = []
        for name in names:
            holder = _hold(["unshare", "--net", "--uts", "--mount", "--propagation", "private", "--",
                            "/bin/sh", "-c", HOST_SCRIPT, "sh", name, str(node_local), str(hosts_file)],
                           env, f"host {name}")  # fmt: skip
            holders.append(holder)
            port = f"v-{name}"[:15]
            _ip(switch.pid, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid))
            _ip(switch.pid, "link", "set", port, "master", "br0", "up")
            _ip(holder.pid, "addr", "add", f"{addresses[name]}/24", "dev", "eth0")
            _ip(holder.pid, "link", "set", "eth0", "up")
            hosts.append(Host(name, addresses[name], holder.pid))
        agent = scratch / "launch-agent"
        home = os.environ.get("HOME") or "/"
        user = os.environ.get("USER") or "root"
        cases = "\n".join(f"  {h.name}) pid={h.pid} ;;" for h in hosts)
        agent.write_text(AGENT_SCRIPT.format(scratch=scratch, cases=cases, home=home, user=user, marker=MARKER))
        agent.chmod(0o755)
        cluster = VirtualCluster(scratch, hosts, switch.pid, agent, node_local, holders, watchdog, timings)
    finally:
        if cluster is None:  # a failed start: sweep what was made, as a clean stop would
            procs.terminate(procs.marked_pids(MARKER, scratch))
            for holder in holders:
                holder.wait(timeout=10)
            watchdog.stdin.close()
            watchdog.wait(timeout=10)
            shutil.rmtree(scratch, ignore_errors=True)
    cluster.timings["start"] = time.monotonic() - started - timings["apt_install"]
    return cluster


if __name__ == "__main__" and sys.argv[1:2] == ["--watchdog"]:
    procs.watch(MARKER, sys.argv[2])
