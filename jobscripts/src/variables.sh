#   AIPERF_VENV        a venv to activate (the one `make install` built); unset: python from PATH/modules
#   AIPERF_VENV_LOCAL  with AIPERF_VENV: a node-local directory (e.g. /tmp) to copy the venv to, once per
#                      node, and run from: at 4,096 ranks on a parallel file system (jobscripts/README.md)
#   AIPERF_RUN_DIR     where the run writes; must be on a file system every node sees (children load
#                      their parents' weights from it); default $SLURM_SUBMIT_DIR/runs/aiperf-$SLURM_JOB_ID
#   AIPERF_TIME_LIMIT  the benchmark's clock in seconds; default: the job's time left minus WARN and START
#   AIPERF_GRACE       seconds running epochs may finish after the time limit; default 120 (< WARN)
#   AIPERF_LAUNCHER    srun (default) or mpirun (the default with AIPERF_FAULT_TOLERANCE=1)
#   AIPERF_ARGS        more benchmark options (python -m aiperf_mpi --help)
#   AIPERF_FAULT_TOLERANCE  1: a dead or hung rank costs its group, not the run (Open MPI 5 with ULFM,
#                      launched by mpirun inside the allocation: a direct srun gives none; docs/cluster.md,
#                      "When a node fails"); default 0: one dead rank ends the job
#   AIPERF_RELAUNCHES  after a lost node, launch the run again with --resume on the nodes left, at most this
#                      many times (default 2; 0: never)
#   AIPERF_RELAUNCH_LEAST  the least allocation time left, in seconds, a relaunch is worth (default 600)
