"""TensorFlow's thread pools on a CPU node that several training ranks share.

Left alone, TensorFlow gives every process an intra-op pool (the threads one
kernel — a convolution, a matmul — is split over) and an inter-op pool (kernels
run side by side) of one thread per core the process may run on.  Two training
ranks on one node then run twice as many threads as there are cores, beside
Horovod's background thread, and one rank's kernels wait for threads the
other rank holds.

The rule, on CPU nodes: each training rank sizes both pools to its share of
the cores it may run on (``os.sched_getaffinity``) — each of its cores counts
``1 / (training ranks of the node allowed on it)``, so unbound ranks share the
node's cores evenly (cores ÷ training ranks) and a rank that the launcher
bound to cores of its own (``mpirun --map-by slot:PE=n``,
``srun --cpu-bind=cores``) keeps them all — rounded down, at least one.  The
master (world rank 0) trains nothing and is not counted.  One rank alone on
a node gets TensorFlow's own default.  Measured (BENCHMARKS.md, "TensorFlow's
threads, ranks, batch and precision on CPU"; ResNet-50 32², 2 cores): a
group of 2 ranks trained 1.14× faster with 1 + 1 threads each than with
TensorFlow's default (1.15× per CPU-second; 1.03× in a second, shorter run);
one rank alone lost 11 % with its inter-op pool cut to 1, so the inter-op
pool follows the share too.

A user's explicit setting wins: ``TF_NUM_INTRAOP_THREADS`` /
``TF_NUM_INTEROP_THREADS`` (TensorFlow reads them itself; the rule then leaves
that pool alone) and ``OMP_NUM_THREADS`` (taken as the intra-op count when
``TF_NUM_INTRAOP_THREADS`` is not set).  GPU ranks keep TensorFlow's defaults:
only CPUs were measured.

:func:`choose_threads` is the pure rule; :func:`use_cpu_share` applies it in a
training rank before TensorFlow runs anything.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadChoice:
    """The pool sizes one training rank uses; ``None`` leaves that pool to TensorFlow (and its variables)."""

    intra: int | None
    inter: int | None
    cores: int
    """cores the rank may run on"""
    share: float
    """its share of them (cores ÷ training ranks allowed on each)"""
    source: str
    """where ``intra`` comes from: ``"share"``, or the environment variable that set it"""

    def describe(self) -> str:
        intra = self.intra if self.intra is not None else "$TF_NUM_INTRAOP_THREADS"
        inter = self.inter if self.inter is not None else "$TF_NUM_INTEROP_THREADS"
        origin = "its share of the cores" if self.source == "share" else f"${self.source}"
        return (f"TensorFlow threads per training rank: intra-op {intra} ({origin}: {self.share:g} of "
                f"{self.cores} cores), inter-op {inter}")  # fmt: skip

    def to_dict(self) -> dict:
        return {"intra": self.intra, "inter": self.inter, "cores": self.cores, "share": self.share,
                "source": self.source}  # fmt: skip


def _positive(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else 0
    except ValueError:
        return None
    return value if value > 0 else None


def cpu_share(mine: Iterable[int], others: Sequence[Iterable[int]]) -> float:
    """This rank's share of its cores: each counts 1 / (ranks allowed on it, this one included)."""
    sets = [set(o) for o in others]
    return sum(1.0 / (1 + sum(core in o for o in sets)) for core in set(mine))


def choose_threads(mine: Iterable[int], others: Sequence[Iterable[int]], env: Mapping[str, str]) -> ThreadChoice:
    """The thread pools of a CPU training rank allowed on cores ``mine``, beside ranks allowed on ``others``.

    ``others`` are the affinity sets of the node's other training ranks;
    ``env`` the environment (``TF_NUM_INTRAOP_THREADS``,
    ``TF_NUM_INTEROP_THREADS``, ``OMP_NUM_THREADS``).
    """
    cores = set(mine)
    share = cpu_share(cores, others)
    threads = max(1, int(share + 1e-9))
    intra: int | None = threads
    source = "share"
    if _positive(env.get("TF_NUM_INTRAOP_THREADS")) is not None:
        intra, source = None, "TF_NUM_INTRAOP_THREADS"
    elif (omp := _positive(env.get("OMP_NUM_THREADS"))) is not None:
        intra, source = omp, "OMP_NUM_THREADS"
    inter = None if _positive(env.get("TF_NUM_INTEROP_THREADS")) is not None else threads
    return ThreadChoice(intra, inter, len(cores), round(share, 3), source)


def node_peers(plan, rank: int, node_pids: Sequence[int]) -> list[int]:
    """Process ids of the other training ranks on ``rank``'s node (the master and the relays train nothing).

    ``node_pids`` are the pids of the node's ranks in world-rank order (an
    all-gather on the node communicator, which is split with ``key=rank``);
    ``plan`` is the :class:`~aiperf_mpi.mpi.plan.LayoutPlan`.
    """
    local = [r for r in range(plan.world_size) if plan.nodes[r] == plan.nodes[rank]]
    if len(local) != len(node_pids):
        raise ValueError(f"{len(node_pids)} pids for the {len(local)} ranks of node {plan.nodes[rank]}")
    return [pid for r, pid in zip(local, node_pids, strict=True)
            if r not in (rank, plan.master_rank) and r not in plan.relay_ranks]  # fmt: skip


def _affinity(pid: int, fallback: set[int]) -> set[int]:
    try:
        return set(os.sched_getaffinity(pid))
    except (AttributeError, OSError):  # not Linux, gone, or hidden: assume it shares this rank's cores
        return fallback


def use_cpu_share(device: str, plan, rank: int, node_pids: Sequence[int]) -> ThreadChoice | None:
    """On a CPU rank, set TensorFlow's pools by :func:`choose_threads`; the choice (None on a GPU rank).

    Must run before TensorFlow runs anything (after :func:`~aiperf_mpi.train.devices.pin_device`,
    which only lists devices).  The node's first group leader prints the choice, one line per node.
    """
    if device != "CPU":
        return None
    import tensorflow as tf

    mine = _affinity(0, set(range(os.cpu_count() or 1)))
    others = [_affinity(pid, mine) for pid in node_peers(plan, rank, node_pids)]
    choice = choose_threads(mine, others, os.environ)
    try:
        if choice.intra is not None:
            tf.config.threading.set_intra_op_parallelism_threads(choice.intra)
        if choice.inter is not None:
            tf.config.threading.set_inter_op_parallelism_threads(choice.inter)
    except RuntimeError as exc:  # TensorFlow already ran something: its pools are fixed
        print(f"aiperf_mpi: warning: rank {rank} keeps TensorFlow's threads: {exc}", file=sys.stderr, flush=True)
        return None
    if plan.monitors_node(rank):
        print(f"aiperf_mpi: {plan.hosts[rank]}: {len(others) + 1} training rank(s); {choice.describe()}", flush=True)
    return choice


def current_threads() -> dict:
    """The pool sizes TensorFlow runs with: as set, else its variable, else its default (one per core)."""
    import tensorflow as tf

    cores = len(_affinity(0, set(range(os.cpu_count() or 1))))
    set_intra = tf.config.threading.get_intra_op_parallelism_threads()
    set_inter = tf.config.threading.get_inter_op_parallelism_threads()
    return {"intra": set_intra or _positive(os.environ.get("TF_NUM_INTRAOP_THREADS")) or cores,
            "inter": set_inter or _positive(os.environ.get("TF_NUM_INTEROP_THREADS")) or cores}  # fmt: skip
