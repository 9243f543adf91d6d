"""The failure matrix's rows (tests/support/failure_matrix.py) as data: each names one case, and the single-node
tests that take one row by its words find exactly one (a 2 × 64 row of the same failure once made one such
match two, and the fresh-clone CI failed at collection)."""

from __future__ import annotations

from tests.support.failure_matrix import CASES, ONE_NODE, SCALE


def test_every_row_has_its_own_id() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_the_rows_the_single_node_slurm_tests_take_are_one_each() -> None:
    kill = [c for c in CASES if (c.failure, c.phase, c.launcher, c.fault_tolerance, c.per_node, c.rehearse) ==
            ("kill-9-rank", "mid-run", "srun", False, 2, True)]  # fmt: skip
    assert len(kill) == 1
    for phase in ("start-up", "first-model", "mid-run", "end"):
        rows = [c for c in CASES if (c.failure, c.phase, c.launcher, c.fault_tolerance, c.fixture) ==
                ("sigstop-rank", phase, "srun", False, ONE_NODE)]  # fmt: skip
        assert len(rows) == 1, phase


def test_the_rows_at_2_x_64_are_rehearsals_on_the_two_node_slurm() -> None:
    scale = [c for c in CASES if c.per_node == SCALE]
    assert len(scale) >= 5 and all(c.rehearse and c.fixture == "slurm" for c in scale)
