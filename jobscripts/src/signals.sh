# The warning: WARN (below) seconds before the time limit Slurm sends SIGUSR1 to the batch shell, which
# passes it on to the launcher (its trap, below); srun and mpirun forward it to every rank, and the run
# stops as at its time limit and writes its score.  Slurm checks every 30 s and sends the warning up to
# 30 s early.
#SBATCH --signal=B:USR1@300
#SBATCH --output=aiperf-%j.out
# --no-kill: when a node fails, Slurm keeps the allocation (its default ends the whole job at once) and takes
# the node out of it.  The launch still ends, on every launcher (srun's step loses a task; PRRTE cannot keep a
# job whose daemon is lost); the close below scores the segment and the run is launched again with --resume
# on the nodes left (AIPERF_RELAUNCHES).  Measured in the two-node Slurm fixture, a node's network and its
# slurmd taken down (docs/cluster.md, the failure table's "real node loss" rows).
#SBATCH --no-kill
