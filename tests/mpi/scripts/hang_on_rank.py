"""A job that hangs: every rank prints a line, then rank 1 never reaches the barrier."""

import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"rank {comm.Get_rank()} says hello before the hang", flush=True)
if comm.Get_rank() == 1:
    time.sleep(3600)
comm.Barrier()
