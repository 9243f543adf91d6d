"""The end-of-run rule, and the master and the leader applying it (the trainer's use is in tests/mpi)."""

from __future__ import annotations

import ast
from pathlib import Path

from aiperf_mpi.job.leader import epoch_would_overrun
from aiperf_mpi.results.timelimit import ends_after_limit

PACKAGE = Path(__file__).resolve().parents[2] / "aiperf_mpi"


def test_work_that_ends_after_the_limit_is_not_begun() -> None:
    assert ends_after_limit(10.0, 10.5)
    assert ends_after_limit(-1.0, 0.0)  # the limit has passed
    assert not ends_after_limit(10.0, 10.0)  # ending exactly at the limit fits
    assert not ends_after_limit(10.0, 3.0)


def test_nothing_to_judge_lets_the_work_go_ahead() -> None:
    assert not ends_after_limit(None, 1e9)  # no time limit
    assert not ends_after_limit(0.0, None)  # nothing measured yet


def test_the_leader_judges_an_epoch_as_long_as_the_last() -> None:
    assert epoch_would_overrun(110.0, [10.5], 100.0) == ends_after_limit(10.0, 10.5) is True
    assert epoch_would_overrun(110.0, [10.0], 100.0) == ends_after_limit(10.0, 10.0) is False


def test_the_three_users_call_the_one_rule() -> None:
    """The master, the leader and the trainer each call :func:`ends_after_limit` (no copy of the comparison)."""
    for module in ("job/master.py", "job/leader.py", "train/trainer.py"):
        tree = ast.parse((PACKAGE / module).read_text())
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", None) == "ends_after_limit"]  # fmt: skip
        assert calls, f"{module} does not apply the end-of-run rule"
