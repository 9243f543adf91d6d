"""The operating system's limits a large job hits at start: open files on rank 0.

**Open files.**  Under Open MPI's ``pml ob1`` with the TCP transport (``btl tcp``, what fault tolerance
uses: ULFM has no UCX code), a rank holds one socket for every peer it has exchanged a message with, opened
on the first message and kept to the end.  Rank 0 talks to every group's leader (each ``Work`` and ``Stop``
goes to the leader itself, relays or not; without relays every leader's messages come to it too), to each
relay, and to the few partners of the collectives' trees: at 4,096 ranks in groups of 1 that is ≈ 4,100
sockets, against a soft limit of 1,024 on many systems.  A socket past the limit is not an error the job
survives: measured here (33 ranks over TCP, each launched under ``prlimit --nofile=40:4096``), rank 0's TCP
transport fails to accept the leaders' connections ("accept failed: Too many open files", thousands of
times) and the job hangs until its launcher's time limit.  So every rank raises its soft limit to its hard
limit (which an unprivileged process may do) before its first collective, and rank 0 says in one line
when even the hard limit is below what it needs.

Each rank calls :func:`raise_open_files` first thing (``aiperf_mpi/__main__.py``: before the first collective, since
the start's broadcasts and gathers already connected rank 0 to enough ranks to fail under a soft limit of 40
at 33 ranks), and :func:`say_limits` once the layout is known.  The rules are pure and unit-tested
(tests/unit/test_limits.py); the launch under ``prlimit`` is tests/mpi/test_limits.py.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping

from aiperf_mpi.mpi.plan import LayoutPlan

FILES_BESIDE_PEERS = 64
"""rank 0's open files that are not a socket to a peer: stdin/out/err, the event log, MLLOG, the graphs file and
the run's lock, the launcher's PMIx connection, the TCP transport's listening sockets, Open MPI's eventfds,
pipes and shared-memory files, Python's own.  Measured: 18 of them on rank 0 of a 33-rank rehearsal over TCP
(53 open files, 35 sockets: 32 leaders, the PMIx server, two listening); the rest is headroom for the
monitor, the report's fonts and libraries opened later"""


def collective_partners(world_size: int) -> int:
    """The peers a rank meets in the world's collectives (binomial and recursive-doubling trees): ⌈log₂ P⌉."""
    return max(1, math.ceil(math.log2(max(world_size, 2))))


def rank0_peers(plan: LayoutPlan) -> int:
    """The ranks rank 0 holds a connection to by the end of the run: every leader, every relay, the collectives'.

    A group's other ranks talk only to their group and the world's collective trees; a relay to its own
    leaders and rank 0: each fewer than rank 0, so rank 0's need is the job's largest.
    """
    leaders = {group.leader for group in plan.groups}
    return len(leaders | set(plan.relay_ranks)) + collective_partners(plan.world_size)


def open_files_needed(plan: LayoutPlan) -> int:
    """Rank 0's open files at the end of a run over TCP: a socket per peer (:func:`rank0_peers`) and the rest."""
    return rank0_peers(plan) + FILES_BESIDE_PEERS


def talks_tcp(environ: Mapping[str, str]) -> bool:
    """Whether this job's ranks may reach each other by TCP sockets (Open MPI's ``--mca`` settings, as each rank
    reads them from its environment): not when the point-to-point layer is UCX (sockets only to connect) or the
    transports named exclude ``tcp``.  Unset (Open MPI's choice at run time): TCP where nothing faster exists."""
    pml = environ.get("OMPI_MCA_pml", "").strip().lower()
    if pml and not pml.startswith("^") and "ob1" not in pml.split(","):
        return False  # ucx, cm: no TCP transport of their own per peer
    btl = environ.get("OMPI_MCA_btl", "").strip().lower()
    if not btl:
        return True
    if btl.startswith("^"):
        return "tcp" not in btl[1:].split(",")
    return "tcp" in btl.split(",")


def raised_soft_limit(soft: int, hard: int, nr_open: int | None) -> int:
    """The soft limit to ask for: the hard limit; when that is unlimited, the kernel's ceiling (``fs.nr_open``:
    Linux refuses an unlimited ``RLIMIT_NOFILE``), or the soft limit as it is when that cannot be read."""
    if hard == resource.RLIM_INFINITY:
        return soft if nr_open is None or (soft != resource.RLIM_INFINITY and soft >= nr_open) else nr_open
    return hard


def _nr_open() -> int | None:
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def raise_open_files() -> tuple[int, int]:
    """This process's ``RLIMIT_NOFILE`` soft limit raised to its hard limit; (soft, hard) as they are after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = raised_soft_limit(soft, hard, _nr_open())
    if wanted != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass  # left as it was; rank 0's line says so when it matters
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_files_line(plan: LayoutPlan, soft: int, hard: int, tcp: bool) -> str | None:
    """Rank 0's one line when its limit cannot cover its sockets over TCP (None when it can, or off TCP)."""
    needed = open_files_needed(plan)
    if not tcp or soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    shown = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard:,}"
    return (f"aiperf_mpi: warning: rank 0 may open ≈ {needed:,} files over TCP (a socket to each of "
            f"{len(plan.groups):,} group leaders and {len(plan.relay_ranks)} relay(s), ⌈log₂ "
            f"{plan.world_size:,}⌉ collective partners, {FILES_BESIDE_PEERS} other files) but its open-file limit "
            f"is {soft:,} (hard {shown}): past it the job hangs; raise the hard limit (`ulimit -Hn`, limits.conf, "
            "Slurm's PropagateResourceLimits) or use fewer groups (docs/cluster.md, \"Open files and memory\")")


def say_limits(comm, plan: LayoutPlan) -> None:
    """Rank 0, once the layout is known (``mpi/run.py``): one line for each limit that cannot hold the job.

    ``comm`` is the world communicator (any object with mpi4py's ``Get_rank``).  The open-file limits are
    read as :func:`raise_open_files` left them.
    """
    if comm.Get_rank() != plan.master_rank:
        return
    line = open_files_line(plan, *resource.getrlimit(resource.RLIMIT_NOFILE), talks_tcp(os.environ))
    if line:
        print(line, flush=True)
