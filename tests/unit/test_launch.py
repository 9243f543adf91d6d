"""Mis-launch detection: a multi-task launch that came up as worlds of one is refused."""

import pytest

from aiperf_mpi.errors import UsageError
from aiperf_mpi.mpi.launch import check_launch, expected_tasks


def test_srun_without_mpi_plugin_is_refused_with_how_to_launch() -> None:
    with pytest.raises(UsageError) as caught:
        check_launch(1, {"SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"})
    message = str(caught.value)
    assert message.startswith("launched as a single MPI process but the launcher started 4 tasks")
    assert "SLURM_STEP_NUM_TASKS=4" in message and "--mpi=pmix" in message


def test_python_started_from_the_batch_script_is_refused() -> None:
    with pytest.raises(UsageError, match=r"the job has 8 tasks \(SLURM_NTASKS=8\)"):
        check_launch(1, {"SLURM_NTASKS": "8"})


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PALS_SIZE"])
def test_other_launchers_count_too(variable: str) -> None:
    with pytest.raises(UsageError, match=variable):
        check_launch(1, {variable: "2"})


@pytest.mark.parametrize(
    ("world", "environ"),
    [
        (4, {"SLURM_STEP_NUM_TASKS": "4"}),  # a correct srun --mpi=pmix launch
        (2, {"SLURM_NTASKS": "4"}),  # mpirun -n 2 inside a 4-task allocation: not a singleton
        (1, {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"}),  # srun -n 1 really starts one task
        (1, {}),  # a plain `python -m aiperf_mpi --layout` on a laptop
        (1, {"SLURM_NTASKS": "garbage"}),
    ],
)
def test_correct_launches_pass(world: int, environ: dict) -> None:
    check_launch(world, environ)


def test_the_launchers_own_count_wins_over_the_allocation() -> None:
    assert expected_tasks({"SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "2"}) == (2, "SLURM_STEP_NUM_TASKS")
    assert expected_tasks({}) is None
