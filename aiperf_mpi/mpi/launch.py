"""Mis-launch detection: a job the launcher started as N tasks that MPI sees as N worlds of one.

The classic mistake at HPC centres is ``srun python …`` without the right
``--mpi`` plugin (or a ``python`` started straight from the batch script):
every task initialises MPI as a *singleton*, believes it is rank 0 of 1, and
the job silently measures N copies of nothing.  The launcher and the batch
system leave their task count in the environment; when it says more than one
task while the world has size 1, the launch is broken and the program
refuses it with one line that says how to launch correctly.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiperf_mpi.errors import UsageError

STEP_VARIABLES = (
    "SLURM_STEP_NUM_TASKS",  # srun: the tasks of this job step
    "OMPI_COMM_WORLD_SIZE",  # Open MPI's mpirun/prterun
    "PMI_SIZE",  # MPICH/Intel MPI Hydra, Slurm's pmi2
    "PMIX_SIZE",
    "MV2_COMM_WORLD_SIZE",  # MVAPICH
    "PALS_SIZE",  # HPE Cray PALS
    "JSM_NAMESPACE_SIZE",  # IBM jsrun
    "FLUX_JOB_SIZE",
)
"""variables a launcher sets in every task it starts, holding the number of tasks it started"""

JOB_VARIABLES = ("SLURM_NTASKS", "SLURM_NPROCS")
"""variables of the whole allocation: also seen by a process started without any launcher"""

HOW_TO_LAUNCH = (
    "launch with `srun --mpi=pmix` (Open MPI; `--mpi=pmi2` for MPICH) or `mpirun -n N` inside the allocation; "
    "see jobscripts/README.md"
)


def expected_tasks(environ: Mapping[str, str]) -> tuple[int, str] | None:
    """The task count the launcher or the batch system announced, and the variable that said it.

    A launcher's own variable wins over the allocation's: ``srun -n 1`` in a
    4-task job really starts one task.
    """
    for name in (*STEP_VARIABLES, *JOB_VARIABLES):
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value), name
    return None


def check_launch(world_size: int, environ: Mapping[str, str]) -> None:
    """Raise :class:`UsageError` when a multi-task launch came up as a world of one."""
    if world_size != 1:
        return
    expected = expected_tasks(environ)
    if expected is None or expected[0] <= 1:
        return
    count, variable = expected
    who = "the launcher started" if variable in STEP_VARIABLES else "the job has"
    raise UsageError(
        f"launched as a single MPI process but {who} {count} tasks ({variable}={count}): MPI was not "
        f"initialised by the launcher, so every task would run alone as rank 0 of 1; {HOW_TO_LAUNCH}"
    )
