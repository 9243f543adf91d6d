"""Build the process layout from what MPI reports, and the group communicators.

The node of each rank comes from ``Split_type(COMM_TYPE_SHARED)``: the ranks
that can share memory are one node, whatever the host names say (containers
and some launchers report misleading names).  A node is identified by the
lowest world rank on it, so the plan needs no string comparison.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from mpi4py import MPI

from aiperf_mpi.errors import UsageError
from aiperf_mpi.mpi.plan import GroupPlan, LayoutError, LayoutPlan, plan_layout


@dataclass
class RankLayout:
    """What one rank knows after the layout is built.

    ``group_comm`` is the communicator Horovod is initialised on; it is
    ``MPI.COMM_NULL`` on the master.  ``node_comm`` groups every rank of the
    node, master included (used for node-local staging decisions).
    """

    plan: LayoutPlan
    rank: int
    group: GroupPlan | None
    group_comm: MPI.Comm
    node_comm: MPI.Comm

    @property
    def is_master(self) -> bool:
        return self.rank == self.plan.master_rank

    @property
    def is_relay(self) -> bool:
        return self.rank in self.plan.relay_ranks

    @property
    def is_leader(self) -> bool:
        return self.group is not None and self.group.leader == self.rank

    def free(self) -> None:
        """Release the sub-communicators (before ``MPI_Finalize``)."""
        for comm in (self.group_comm, self.node_comm):
            if comm != MPI.COMM_NULL:
                comm.Free()
        self.group_comm = self.node_comm = MPI.COMM_NULL


def build_layout(comm: MPI.Comm, group_size: int | None = None, relays: int = 0) -> RankLayout:
    """Collective over ``comm``: plan the layout and split the group communicators.

    Every rank gathers every rank's node id and host name (two small
    allgathers), runs the same pure planner, and so agrees on the plan without
    a broadcast from the master.  ``group_size`` must be the same on every
    rank, as must ``relays``; both are validated by the planner identically everywhere, so a bad
    value fails on every rank at once instead of hanging some of them.
    """
    rank = comm.Get_rank()
    node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    node_id = node_comm.allreduce(rank, op=MPI.MIN)
    nodes = comm.allgather(node_id)
    hosts = comm.allgather(socket.gethostname())

    try:
        plan = plan_layout(hosts, nodes, group_size, relays=relays)
    except LayoutError as exc:  # the same plan, so the same error, on every rank: one line from rank 0
        node_comm.Free()
        raise UsageError(str(exc)) from None
    group = plan.group_of(rank)
    color = MPI.UNDEFINED if group is None else group.index
    group_comm = comm.Split(color, key=rank)
    return RankLayout(plan=plan, rank=rank, group=group, group_comm=group_comm, node_comm=node_comm)
