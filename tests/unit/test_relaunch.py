"""The templates' relaunch after a lost node (issue 50): when to launch again, and with which options."""

from __future__ import annotations

import pytest

from aiperf_mpi.cli import resume_arguments
from aiperf_mpi.errors import EXIT_ENDED_EARLY, EXIT_NOT_SCORED
from aiperf_mpi.job.relaunch import decide, main


def test_a_run_that_stopped_early_on_fewer_nodes_is_launched_again() -> None:
    relaunch = decide(EXIT_ENDED_EARLY, nodes_at_start=2, nodes_now=1, relaunches=0, most=2, seconds_left=900)
    assert relaunch.relaunch and "1 node(s) lost, 1 left" in relaunch.why and "relaunch 1 of at most 2" in relaunch.why


@pytest.mark.parametrize(
    ("status", "start", "now", "done", "left", "why"),
    [
        (0, 2, 1, 0, 900, "did not stop early"),  # the run scored at its time limit
        (EXIT_NOT_SCORED, 2, 1, 0, 900, "nothing to resume"),
        (EXIT_ENDED_EARLY, 2, 2, 0, 900, "no node was lost"),  # a signal, a hang: not a node's loss
        (EXIT_ENDED_EARLY, 2, 0, 0, 900, "no node is left"),
        (EXIT_ENDED_EARLY, 3, 2, 2, 900, "the most this job makes"),
        (EXIT_ENDED_EARLY, 2, 1, 0, 300, "under the 600 s a relaunch needs"),
    ],
)
def test_no_relaunch_says_why(status: int, start: int, now: int, done: int, left: float, why: str, capsys) -> None:
    decision = decide(status, start, now, done, 2, left)
    assert not decision.relaunch and why in decision.why, decision
    argv = ["--status", str(status), "--nodes-at-start", str(start), "--nodes-now", str(now), "--relaunches",
            str(done), "--most", "2", "--seconds-left", str(left)]  # fmt: skip
    assert main(argv) == 1 and capsys.readouterr().out.startswith("no relaunch: ")


def test_the_relaunch_takes_the_first_launchs_deadlines_and_nothing_a_resume_refuses() -> None:
    first = ["--time-limit", "3600", "--rehearse", "--group-size", "2", "--startup-deadline", "40",
             "--master-deadline", "20.5", "--ignore-limits", "--seed-model", "tiny"]  # fmt: skip
    assert resume_arguments("/runs/r", 1200, first) == [
        "--resume", "/runs/r", "--time-limit", "1200", "--startup-deadline", "40", "--master-deadline", "20.5",
        "--ignore-limits",
    ]  # fmt: skip
    assert resume_arguments("/runs/r", 60, []) == ["--resume", "/runs/r", "--time-limit", "60"]
