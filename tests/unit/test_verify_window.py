"""The verifier enforces the scored window: a run that ends itself is scored over its whole time limit.

Each forgery rewrites the log and then, as a careful forger would, the score
event and ``score.json`` with the package's own score code, so only the
window rule is left to catch it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import compute_score
from analysis import checks, verify
from analysis.verify import score as verify_score
from tests.support.event_logs import write_log
from tests.support.verify_runs import consistent_run, find, read_log, write_mllog

EARLY_STOP = 1095.0
"""the consistent run (100 s limit from 1000 s) ends itself 5 s early: every group stopped, no model fitting"""


def rescore(run: Path, events: list[dict], forged: dict | None = None) -> None:
    """Write the log with its score event and score.json recomputed by the score code (then ``forged`` over them)."""
    events = [e for e in events if e["event"] != runlog.SCORE]
    score = compute_score(events, step=50.0).to_dict()
    score.update(forged or {})
    events.append({"event": runlog.SCORE, "time": EARLY_STOP + 0.1, **{k: v for k, v in score.items() if k != "grid"}})
    write_log(run, events)
    write_mllog(run, events)  # the side file agrees: only the window is under test
    (run / verify_score.SCORE_FILE).write_text(json.dumps(score, indent=2))


def early_run(tmp_path: Path, reason: str = "time limit", **stop_fields: object) -> tuple[Path, list[dict]]:
    run = consistent_run(tmp_path / "run")
    events = read_log(run)
    stop = find(events, runlog.RUN_STOP)
    stop.update({"time": EARLY_STOP, "reason": reason, "groups_stopped_early": 2, **stop_fields})
    return run, events


def window_problems(result: checks.Verification) -> list[str]:
    return next(c for c in result.checks if c.name == "scored window").problems


def test_a_run_that_ended_itself_early_verifies_over_its_time_limit(tmp_path, capsys) -> None:
    run, events = early_run(tmp_path)
    rescore(run, events)
    assert json.loads((run / verify_score.SCORE_FILE).read_text())["active_time"] == 100.0
    assert verify.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "scored window" in out and "segment 1 100.0 s (ran 95.0 s of its 100 s limit, ended itself" in out


def test_a_score_over_the_shorter_window_fails_naming_the_rule(tmp_path) -> None:
    run, events = early_run(tmp_path)
    ops = sum(e["ops"] for e in events if e["event"] == runlog.EPOCH)
    rescore(run, events, {"active_time": 95.0, "score": ops / 95.0})  # divided by the time it ran, as before
    result = verify.verify(run)
    assert not result.ok
    assert window_problems(result) == [f"score.json is scored over 95 s, the run's window is 100 s "
                                       f"({verify_score.WINDOW_RULE})"]  # fmt: skip


@pytest.mark.parametrize(("reason", "fields", "line"), [
    ("signal SIGUSR1", {}, "segment 1: run_stop says 'signal SIGUSR1', but all 2 group(s) had stopped because no new "
                           "model fit before the time limit: the run ended itself"),
    ("finished early", {}, 'segment 1: run_stop reason "finished early" is none the run writes'),
    ("max models", {}, "segment 1: run_stop says 'max models', but the configuration sets no max_models"),
], ids=["signal", "unknown", "max-models"])  # fmt: skip
def test_a_forged_run_stop_reason_fails_naming_the_rule(tmp_path, reason, fields, line) -> None:
    run, events = early_run(tmp_path, reason, **fields)
    rescore(run, events)  # score and score.json agree with the forged reason: only the window rule is left
    result = verify.verify(run)
    found = window_problems(result)
    assert not result.ok and len(found) == 1 and found[0].startswith(line) and verify_score.WINDOW_RULE in found[0]


def test_a_signal_stop_is_scored_over_the_declared_time_limit_and_verifies(tmp_path, capsys) -> None:
    run, events = early_run(tmp_path, "signal SIGTERM", groups_stopped_early=0)
    rescore(run, events)
    assert json.loads((run / verify_score.SCORE_FILE).read_text())["active_time"] == 100.0
    assert verify.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "the run 100.0 s, what its segments declared (they ran 95.0 s" in out, out


def test_a_signal_stop_scored_as_it_ran_fails_naming_the_rule(tmp_path) -> None:
    """The old reading of a signal (the window as it ran) is now a shortened window."""
    run, events = early_run(tmp_path, "signal SIGUSR1", groups_stopped_early=0)
    ops = sum(e["ops"] for e in events if e["event"] == runlog.EPOCH)
    rescore(run, events, {"active_time": 95.0, "score": ops / 95.0})
    assert window_problems(verify.verify(run)) == [f"score.json is scored over 95 s, the run's window is 100 s "
                                                   f"({verify_score.WINDOW_RULE})"]  # fmt: skip


def test_a_run_start_without_a_time_limit_fails(tmp_path) -> None:
    run, events = early_run(tmp_path)
    del events[0]["config"]["time_limit"]
    rescore(run, events)
    assert any("no positive time_limit" in line for line in window_problems(verify.verify(run)))
