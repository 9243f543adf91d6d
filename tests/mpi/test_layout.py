"""`mpirun -n 4 python -m aiperf_mpi --layout`: real layout code under real MPI."""

import json

import pytest

from tests.support.mpirun import run_mpi

TIMEOUT = 60


def layout_json(*extra: str) -> dict:
    result = run_mpi(4, ["-m", "aiperf_mpi", "--layout", "--json", *extra], timeout=TIMEOUT)
    assert result.returncode == 0, result.output
    printed = [line for rank in range(4) for line in result.lines_of_rank(rank) if line.startswith("{")]
    assert len(printed) == 1, f"only rank 0 prints the layout:\n{result.output}"
    assert result.lines_of_rank(0) == printed
    return json.loads(printed[0])


@pytest.mark.parametrize(
    ("extra", "groups"),
    [
        ((), [[1, 2, 3]]),
        (("--group-size", "1"), [[1], [2], [3]]),
        (("--group-size", "2"), [[1, 2], [3]]),
        (("--group-size", "8"), [[1, 2, 3]]),
    ],
)
def test_groups_exclude_master_and_follow_group_size(extra: tuple[str, ...], groups: list[list[int]]) -> None:
    layout = layout_json(*extra)
    assert layout["world_size"] == 4
    assert layout["master_rank"] == 0
    assert [g["ranks"] for g in layout["groups"]] == groups
    assert [g["leader"] for g in layout["groups"]] == [g[0] for g in groups]
    assert [g["horovod_size"] for g in layout["groups"]] == [len(g) for g in groups]
    assert layout["node_count"] == 1
    assert len(layout["hosts"]) == 4


def test_text_layout_is_printed_once() -> None:
    result = run_mpi(4, ["-m", "aiperf_mpi", "--layout", "--group-size", "2"], timeout=TIMEOUT)
    assert result.returncode == 0, result.output
    assert result.output.count("world size:") == 1, result.output
    assert "horovod size 2" in result.output and "horovod size 1" in result.output


def test_bad_option_one_line_from_rank_zero_and_exit_on_every_rank() -> None:
    result = run_mpi(4, ["-m", "aiperf_mpi", "--layout", "--group-size", "0"], timeout=30)
    assert result.returncode != 0
    assert result.elapsed < 30
    errors = [line for line in result.output.splitlines() if "aiperf_mpi: error:" in line]
    assert len(errors) == 1, result.output
    assert "--group-size" in errors[0] and "at least 1" in errors[0]
    assert "Traceback" not in result.output
    assert result.lines_of_rank(0), "the error comes from rank 0"
