"""Failure injection for the abort guard: rank R raises while the others wait.

Usage: raise_on_rank.py R — every other rank blocks in a barrier that rank R
never reaches; only the guard's MPI_Abort can end the job.
"""

import sys

from mpi4py import MPI

from aiperf_mpi.mpi.guard import run_guarded


def rank_main(comm: MPI.Comm, bad_rank: int) -> int:
    print(f"rank {comm.Get_rank()} started", flush=True)
    if comm.Get_rank() == bad_rank:
        raise RuntimeError(f"injected failure\non rank {bad_rank}")
    comm.Barrier()
    return 0


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    sys.exit(run_guarded(comm, lambda: rank_main(comm, int(sys.argv[1]))))
