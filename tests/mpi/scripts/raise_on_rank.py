"""Failure injection for the abort guard: rank R raises while the others wait.

Usage: raise_on_rank.py R [SECONDS] — every other rank blocks in a barrier that rank R
never reaches; only the guard's MPI_Abort can end the job.  With SECONDS, rank 0
enters its barrier that much later: rank 0 is the master in a run, which learns of a
loss on its own loop, not first of all; without the wait, under fault tolerance, rank
0's barrier could fail first and its Abort end ranks 1 and 3 before they said what
they saw (CI of bb3ef44: rank 0's barrier failed with MPI_ERR_OTHER, no survivor line).
"""

import sys
import time

from mpi4py import MPI

from aiperf_mpi.mpi.guard import run_guarded


def rank_main(comm: MPI.Comm, bad_rank: int, rank_0_later: float) -> int:
    print(f"rank {comm.Get_rank()} started", flush=True)
    if comm.Get_rank() == bad_rank:
        raise RuntimeError(f"injected failure\non rank {bad_rank}")
    if comm.Get_rank() == 0:
        time.sleep(rank_0_later)
    comm.Barrier()
    return 0


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    later = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    sys.exit(run_guarded(comm, lambda: rank_main(comm, int(sys.argv[1]), later)))
