"""Pure planning of the process layout: who is master, which ranks form groups.

The benchmark's shape (docs/design.md): world rank 0 is the master; every other
rank belongs to exactly one *group*; a group never spans two nodes (Horovod's
all-reduce inside a group then runs over shared memory / the node's fabric),
and a node's workers may be cut into groups of ``group_size`` ranks.  A group's
lowest world rank is its leader.

This module has no MPI import so that the planning rules are unit-tested
without ``mpirun``; :mod:`aiperf_mpi.mpi.layout` feeds it what MPI reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

MASTER_RANK = 0


class LayoutError(ValueError):
    """The requested layout cannot be built from the ranks the job has."""


@dataclass(frozen=True)
class GroupPlan:
    """One training group: ranks of one node that train one model together."""

    index: int
    node: int
    host: str
    ranks: tuple[int, ...]

    @property
    def leader(self) -> int:
        """The group's first rank: it talks to the master and runs the search."""
        return self.ranks[0]

    @property
    def horovod_size(self) -> int:
        """Horovod's ``hvd.size()`` inside this group."""
        return len(self.ranks)


@dataclass(frozen=True)
class LayoutPlan:
    """The whole job's layout, identical on every rank."""

    world_size: int
    master_rank: int
    hosts: tuple[str, ...]
    nodes: tuple[int, ...]
    group_size: int | None
    groups: tuple[GroupPlan, ...]
    relay_ranks: tuple[int, ...] = ()
    """the ranks on rank 0's node that take the leaders' messages for rank 0 (``--relays``; none: rank 0 does)"""

    def relay_of(self, group: int) -> int:
        """The rank ``group``'s leader sends its messages to: its relay (every ``len(relay_ranks)``-th group
        shares one), or the master when there are no relays."""
        if not self.relay_ranks:
            return self.master_rank
        return self.relay_ranks[group % len(self.relay_ranks)]

    def group_of(self, rank: int) -> GroupPlan | None:
        """The group ``rank`` belongs to, or ``None`` for the master."""
        for group in self.groups:
            if rank in group.ranks:
                return group
        return None

    @property
    def node_count(self) -> int:
        return len(set(self.nodes))

    def device_index(self, rank: int) -> int:
        """Which of its node's accelerators a worker rank uses: its place among the node's workers.

        The master and the relays train nothing and take no device, so on the master's node
        the workers still number their devices from 0.
        """
        if rank == self.master_rank:
            raise ValueError("the master uses no accelerator")
        if rank in self.relay_ranks:
            raise ValueError("a relay rank uses no accelerator")
        node = self.nodes[rank]
        workers = [r for r in range(self.world_size) if self.nodes[r] == node and r != self.master_rank
                   and r not in self.relay_ranks]  # fmt: skip
        return workers.index(rank)

    def monitors_node(self, rank: int) -> bool:
        """Whether ``rank`` runs its node's utilisation monitor: the leader of the node's first group."""
        node_groups = [g for g in self.groups if g.node == self.nodes[rank]]
        return bool(node_groups) and node_groups[0].leader == rank

    def to_dict(self) -> dict:
        """A JSON-ready form (for the run log and ``--layout --json``)."""
        data = asdict(self)
        for group, plan in zip(data["groups"], self.groups, strict=True):
            group["leader"] = plan.leader
            group["horovod_size"] = plan.horovod_size
        data["node_count"] = self.node_count
        return data

    def describe(self) -> str:
        """Human-readable layout, as printed by ``--layout``."""
        lines = [
            f"world size:   {self.world_size} ranks on {self.node_count} node(s)",
            f"master:       rank {self.master_rank} on {self.hosts[self.master_rank]}",
            f"group size:   {self.group_size if self.group_size else 'whole node'}",
            f"groups:       {len(self.groups)}",
        ]
        if self.relay_ranks:
            share = ("taking the messages of every group's leader" if len(self.relay_ranks) == 1
                     else f"each taking the messages of every {_ordinal(len(self.relay_ranks))} group's leader")
            lines.insert(2, f"relays:       rank(s) {_ranges(self.relay_ranks)} on {self.hosts[self.master_rank]}, "
                            f"{share} for the master")  # fmt: skip
        for group in self.groups:
            lines.append(
                f"  group {group.index:>4}: host {group.host}, node {group.node}, "
                f"leader {group.leader}, horovod size {group.horovod_size}, "
                f"ranks {_ranges(group.ranks)}"
            )
        if not self.groups:
            lines.append("  (none: a benchmark run needs at least 2 ranks — the master and one worker)")
        return "\n".join(lines)


def plan_layout(
    hosts: Sequence[str],
    nodes: Sequence[int],
    group_size: int | None = None,
    master_rank: int = MASTER_RANK,
    relays: int = 0,
) -> LayoutPlan:
    """Plan the groups from each rank's host name and node id.

    ``nodes[r]`` identifies the shared-memory node of world rank ``r`` (as
    ``MPI_Comm_split_type(COMM_TYPE_SHARED)`` found it); ``hosts[r]`` is only
    for display.  Workers of one node are taken in rank order and cut into
    consecutive groups of ``group_size`` (the last one of a node may be
    smaller); ``None`` puts all of a node's workers in one group.  ``relays``:
    the first that many ranks of the master's node after the master are
    relay ranks (:mod:`aiperf_mpi.mpi.relay`), in no group: the master's node
    is already the run's one node that cannot be lost, so they add no fault domain.
    """
    if len(hosts) != len(nodes):
        raise LayoutError(f"{len(hosts)} host names for {len(nodes)} ranks")
    world_size = len(nodes)
    if world_size < 1:
        raise LayoutError("an empty world")
    if not 0 <= master_rank < world_size:
        raise LayoutError(f"master rank {master_rank} outside a world of {world_size}")
    if group_size is not None and group_size < 1:
        raise LayoutError(f"--group-size must be at least 1, got {group_size}")

    if relays < 0:
        raise LayoutError(f"--relays must be 0 or more, got {relays}")
    workers_by_node: dict[int, list[int]] = {}
    for rank, node in enumerate(nodes):
        if rank != master_rank:
            workers_by_node.setdefault(node, []).append(rank)
    beside = workers_by_node.get(nodes[master_rank], [])
    if relays > len(beside):
        raise LayoutError(f"--relays {relays}: the relays run on rank 0's node ({hosts[master_rank]}), which has "
                          f"{len(beside)} other rank(s); start more ranks there, or ask for fewer relays (a resumed "
                          "run keeps its logged --relays)")  # fmt: skip
    relay_ranks = tuple(beside[:relays])
    if relay_ranks:
        workers_by_node[nodes[master_rank]] = beside[relays:]
        if not workers_by_node[nodes[master_rank]]:  # rank 0's node holds only the master and its relays
            del workers_by_node[nodes[master_rank]]

    groups: list[GroupPlan] = []
    for node in sorted(workers_by_node):
        ranks = workers_by_node[node]
        size = group_size or len(ranks)
        for start in range(0, len(ranks), size):
            chunk = tuple(ranks[start : start + size])
            groups.append(GroupPlan(len(groups), node, hosts[chunk[0]], chunk))

    if relay_ranks and not groups:
        raise LayoutError(f"--relays {relays} leaves no rank to train: every rank but the master is a relay")
    return LayoutPlan(
        world_size=world_size,
        master_rank=master_rank,
        hosts=tuple(hosts),
        nodes=tuple(nodes),
        group_size=group_size,
        groups=tuple(groups),
        relay_ranks=relay_ranks,
    )


GROUPS_PER_RELAY = 16_384
"""groups one relay serves with room at one model per group per minute (BENCHMARKS.md: a relay is ≈ 40 % of a
core for 65,536 groups; rank 0 alone is 75–90 % busy at 65,536 groups, ≈ 40 % at 16,384)"""


WATCHERS = 2
"""leaders that watch rank 0 (mpi/heartbeat.py): one is enough to end the job, a second covers the loss of the
first's node"""


def watcher_ranks(plan: LayoutPlan) -> list[int]:
    """The world ranks of the leaders that watch rank 0: the first group's, then the first group's on another
    node (the second group's where every group shares a node), at most :data:`WATCHERS`."""
    leaders = [(plan.nodes[group.leader], group.leader) for group in plan.groups]
    chosen: list[tuple[int, int]] = []
    for node, leader in leaders:
        if len(chosen) < WATCHERS and all(node != taken for taken, _ in chosen):
            chosen.append((node, leader))
    for pair in leaders:
        if len(chosen) < WATCHERS and pair not in chosen:
            chosen.append(pair)
    return [leader for _, leader in chosen]


def relay_hint(groups: int, relays: int) -> str | None:
    """What rank 0 says when a run of ``groups`` groups has no relays and would want them (``--relays``)."""
    if relays or groups < GROUPS_PER_RELAY:
        return None
    wanted = -(-groups // GROUPS_PER_RELAY)
    return (f"aiperf_mpi: note: {groups:,} groups and no relay ranks: rank 0 receives every leader's messages "
            f"itself; --relays {wanted} (one per {GROUPS_PER_RELAY:,} groups) keeps it well ahead "
            "(docs/cluster.md)")


def _ordinal(count: int) -> str:
    """'2nd', '3rd', '4th', '11th', '21st', …: "every 2nd group"."""
    suffix = "th" if 10 <= count % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(count % 10, "th")
    return f"{count}{suffix}"


def _ranges(ranks: Sequence[int]) -> str:
    """Compress ``1,2,3,5`` to ``1-3,5`` so a 4,096-rank layout stays readable."""
    parts: list[str] = []
    start = prev = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return ",".join(parts)
