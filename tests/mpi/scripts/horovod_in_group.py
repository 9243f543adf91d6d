"""Horovod all-reduce inside the group communicator while rank 0 stays outside.

Checks, in one job: the layout's groups exclude the master; Horovod comes up
on the group communicator with the group's size; an all-reduce inside the
group gives the sum over the group's world ranks; afterwards a COMM_WORLD
collective that includes the master still works.  Rank 0 prints ``PASS`` or
raises (the abort guard then fails the job).
"""

import sys

from mpi4py import MPI

from aiperf_mpi.mpi.guard import run_guarded
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.mpi.layout import build_layout


def rank_main(comm: MPI.Comm, group_size: int | None) -> int:
    layout = build_layout(comm, group_size)
    report = None
    if not layout.is_master:
        import tensorflow as tf

        with horovod_on(layout.group_comm) as hvd:
            value = tf.constant([float(comm.Get_rank()), 1.0])
            summed = hvd.allreduce(value, op=hvd.Sum).numpy().tolist()
            report = {"rank": comm.Get_rank(), "hvd_rank": hvd.rank(), "hvd_size": hvd.size(), "sum": summed}
    # a world collective with the master, after Horovod shut down on the workers
    reports = comm.gather(report, root=0)
    total = comm.allreduce(comm.Get_rank(), op=MPI.SUM)
    if layout.is_master:
        assert total == sum(range(comm.Get_size())), total
        assert reports[0] is None
        for group in layout.plan.groups:
            expected = [float(sum(group.ranks)), float(len(group.ranks))]
            for position, rank in enumerate(group.ranks):
                got = reports[rank]
                assert got["hvd_size"] == len(group.ranks), (rank, got)
                assert got["hvd_rank"] == position, (rank, got)
                assert got["sum"] == expected, (rank, got, expected)
        print(f"PASS groups={[list(g.ranks) for g in layout.plan.groups]}", flush=True)
    layout.free()
    return 0


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else None
    comm = MPI.COMM_WORLD
    sys.exit(run_guarded(comm, lambda: rank_main(comm, size)))
