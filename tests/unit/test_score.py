"""The score function on hand-made logs with known answers."""

import json
import math

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import MAX_GRID_SAMPLES, compute_score, score_run


def start(t: float, dataset: str = "imagenet", precision: str = "fp16", **extra) -> dict:
    config = {"dataset": dataset, "precision": precision, "search": "bayesian", "hpo": "tpe", **extra}
    return {"event": runlog.RUN_START, "time": t, "config": config}


def epoch(end: float, ops: int, accuracy: float) -> dict:
    return {"event": runlog.EPOCH, "time": end, "end": end, "ops": ops, "val_accuracy": accuracy}


def stop(t: float, reason: str = "time limit") -> dict:
    return {"event": runlog.RUN_STOP, "time": t, "reason": reason}


def test_ops_on_the_grid_regulated_score_and_a_valid_run() -> None:
    events = [start(1000), epoch(1030, 600, 0.5), epoch(1070, 900, 0.75), epoch(1095, 300, 0.7), stop(1100)]
    score = compute_score(events, step=50)
    assert [s.active_time for s in score.grid] == [50, 100]
    assert score.grid[0].ops == 600 and score.grid[0].ops_per_second == 12.0
    assert score.score == 1800 / 100
    assert score.best_accuracy == 0.75
    assert score.regulated_score == pytest.approx(18.0 * -math.log(0.25))
    assert score.valid and all(rule["ok"] for rule in score.rules.values())


def test_each_validity_rule() -> None:
    events = [start(0, dataset="cifar10", precision="fp32", hpo="random"), epoch(10, 100, 0.6), stop(20)]
    score = compute_score(events, step=5)
    assert not score.valid
    assert not score.rules["dataset"]["ok"]
    assert not score.rules["error"]["ok"] and score.rules["error"]["value"] == pytest.approx(0.4)
    assert score.rules["precision"]["ok"]
    assert not score.rules["algorithms"]["ok"]
    assert score.grid[-1].active_time == 20 and len(score.grid) == 4


def test_resumed_run_counts_only_active_time() -> None:
    events = [
        start(0), epoch(50, 1000, 0.5), stop(100),
        start(1000), epoch(1040, 1000, 0.8), epoch(1070, 999, 0.9),  # killed: no run_stop, ends at its last event
    ]  # fmt: skip
    score = compute_score(events, step=60)
    assert score.segments == 2
    assert score.active_time == 100 + 70
    assert score.total_ops == 2999
    assert score.score == pytest.approx(2999 / 170)
    assert [round(s.active_time) for s in score.grid] == [60, 120, 170]
    assert score.grid[1].ops == 1000  # the second segment's first epoch ends at active time 100 + 40 = 140
    assert score.grid[2].ops == 2999
    assert score.best_accuracy == 0.9


def test_synthetic_data_has_no_regulated_score_and_only_completed_epochs_count() -> None:
    events = [start(0, dataset="synthetic"), epoch(5, 10, 0.1), stop(10)]
    score = compute_score(events, step=100)
    assert score.regulated_score is None and score.best_accuracy is None
    assert score.score == 1.0


def test_truncated_last_line_is_tolerated_and_reported(tmp_path) -> None:
    lines = [json.dumps(e) for e in (start(0), epoch(10, 100, 0.5), stop(20))]
    (tmp_path / runlog.EVENTS_FILE).write_text("\n".join(lines) + '\n{"event": "epoch", "ti')
    score = score_run(tmp_path, step=10)
    assert score.truncated_log and score.total_ops == 100
    (tmp_path / runlog.EVENTS_FILE).write_text(lines[0] + "\n{broken\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match="not a JSON line"):
        score_run(tmp_path)


def test_event_log_writer_round_trips(tmp_path) -> None:
    log = runlog.EventLog(tmp_path)
    log.write(runlog.RUN_START, sync=True, segment=1, resumed=False, config={"dataset": "digits"})
    from tests.support.event_logs import epoch as full_epoch

    fields = {k: v for k, v in full_epoch(0, 0, 1, 0.5, 1.0, 5, 0.5).items() if k != "event"}
    log.write(runlog.EPOCH, sync=True, **fields)
    with pytest.raises(ValueError, match="epoch: missing steps"):  # the writer keeps to the schema
        log.write(runlog.EPOCH, end=1.0, ops=5, val_accuracy=0.5)
    with pytest.raises(ValueError, match="'epoch_started' is not in the schema"):  # and writes only its events
        log.write("epoch_started", task=1)
    log.close()
    events = runlog.read_events(tmp_path).events
    assert [e["event"] for e in events] == ["run_start", "epoch"]
    with pytest.raises(ValueError, match="no run_start"):
        compute_score(events[1:])


def test_a_model_stopped_before_its_first_epoch_is_not_counted_as_trained() -> None:
    done = {"event": runlog.MODEL_DONE, "time": 50, "model": {"id": 0, "status": "trained"}}
    empty = {"event": runlog.MODEL_DONE, "time": 90, "model": {"id": 1, "status": "failed", "epochs": []}}
    failed = {"event": runlog.MODEL_FAILED, "time": 95, "model": 2}
    score = compute_score([start(0), epoch(40, 100, 0.5), done, empty, failed, stop(100)], step=50)
    assert score.models_trained == 1 and score.models_failed == 1


def test_a_best_accuracy_of_zero_gives_a_regulated_score_of_plus_zero() -> None:
    import math

    from aiperf_mpi.results.score import compute_score
    from tests.support.event_logs import epoch, start

    events = [start(0.0, score_step=10), epoch(0, 0, 1, 1.0, 5.0, 1000, 0.0), {"event": "run_stop", "time": 20.0}]
    score = compute_score(events, step=10)
    assert score.regulated_score == 0.0 and math.copysign(1.0, score.regulated_score) == 1.0


# --------------------------------------------------------------------------- the scored window is the time limit


def test_a_run_that_ends_itself_early_is_scored_over_its_whole_time_limit() -> None:
    """make run stopped at 199 s of 240 s (no group's next model fitting) and divided by 199: now by 240."""
    early = [start(0, time_limit=240), epoch(100, 2400, 0.5), epoch(190, 2400, 0.6), stop(199)]
    score = compute_score(early, step=60)
    assert score.active_time == 240
    assert score.score == 4800 / 240
    assert [s.active_time for s in score.grid] == [60, 120, 180, 240]
    full = compute_score([*early[:-1], stop(240)], step=60)  # the same work, ended at the limit
    assert score.score == full.score and score.regulated_score == full.regulated_score
    budget = compute_score([*early[:-1], stop(199, "max models")], step=60)  # the model budget: the run's plan too
    assert budget.active_time == 240


def test_ending_early_never_raises_the_score() -> None:
    epochs = [epoch(50, 1000, 0.5), epoch(120, 1000, 0.6)]
    scores = [compute_score([start(0, time_limit=200), *epochs, stop(t)], step=10).score for t in (121, 150, 200)]
    assert scores == [2000 / 200] * 3
    over = compute_score([start(0, time_limit=200), *epochs, stop(230)], step=10)  # past the limit (grace): as ran
    assert over.active_time == 230


def test_a_signal_or_a_kill_never_scores_a_run_over_less_than_its_time_limit() -> None:
    """DESIGN §9: the scored window is the declared time limit; a signal sent at a chosen moment cannot shorten it."""
    epochs = [epoch(50, 1000, 0.5), epoch(120, 1000, 0.6)]
    for reason in ("signal SIGTERM", "signal SIGUSR1"):
        score = compute_score([start(0, time_limit=240), *epochs, stop(150, reason)], step=10)
        assert score.active_time == 240 and score.score == 2000 / 240
        assert score.grid[-1].active_time == 240 and [s.ops for s in score.grid][11:] == [2000] * 13
    killed = compute_score([start(0, time_limit=240), *epochs], step=10)  # no run_stop: the same
    assert killed.active_time == 240
    old = compute_score([start(0), *epochs, stop(150)], step=10)  # a log without time_limit: as it ran
    assert old.active_time == 150


def test_a_cut_run_resumed_with_the_time_it_had_left_loses_nothing_and_a_resume_cannot_shorten_either() -> None:
    first = [start(0, time_limit=240), epoch(50, 1000, 0.5), stop(150, "signal SIGTERM")]  # cut at 150 of 240
    resumed = compute_score([*first, start(1000, time_limit=90), epoch(1080, 1000, 0.6), stop(1090)], step=10)
    assert resumed.active_time == 240 and resumed.score == 2000 / 240  # 150 + 90: what it declared, no more
    short = compute_score([*first, start(1000, time_limit=30), epoch(1020, 1000, 0.6), stop(1030)], step=10)
    assert short.active_time == 240  # resumed for 30 s of the 90 left: still scored over 240
    # the second segment declares 150 + 300 = 450 on the active axis; a signal at its 50th second cannot cut that
    cut_again = compute_score([*first, start(1000, time_limit=300), epoch(1040, 1000, 0.6),
                               stop(1050, "signal SIGUSR1")], step=10)  # fmt: skip
    assert cut_again.active_time == 450 and cut_again.score == 2000 / 450


def test_each_resumed_segment_is_scored_over_its_own_time_limit() -> None:
    events = [
        start(0, time_limit=100), epoch(40, 1000, 0.5), stop(60, "signal SIGTERM"),  # killed at 60: 60 on the axis
        start(1000, time_limit=300), epoch(1100, 1000, 0.6), stop(1150),  # --resume --time-limit 300, ended itself
        start(2000, time_limit=50), epoch(2010, 1000, 0.7), stop(2020),  # resumed again, ended itself at 20 of 50
    ]  # fmt: skip
    score = compute_score(events, step=10)
    assert score.active_time == 60 + 300 + 50
    assert score.score == 3000 / 410
    ends = [s.active_time for s in score.grid if s.ops == 2000][:1]
    assert ends == [160]  # the second segment's epoch at 60 + 100 s; the third's at 60 + 300 + 10


def test_a_segment_resumed_before_its_predecessors_limit_would_have_passed_counts_each_window_once() -> None:
    events = [start(0, time_limit=100), epoch(30, 1000, 0.5), stop(50),
              start(60, time_limit=100), epoch(70, 1000, 0.6), stop(80)]  # fmt: skip
    score = compute_score(events, step=10)
    assert score.active_time == 200
    assert next(s.active_time for s in score.grid if s.ops == 2000) == 110  # 100 for segment 1, then 10


def test_a_tiny_step_or_a_clock_jump_of_years_caps_the_grid_and_says_so() -> None:
    events = [start(0, time_limit=240), epoch(100, 2400, 0.5), stop(240)]
    fine = compute_score(events, step=1e-9)
    assert fine.grid_capped and len(fine.grid) <= MAX_GRID_SAMPLES
    assert fine.score == 10.0 and fine.grid[-1].active_time == 240
    assert fine.grid_step == pytest.approx(240 / MAX_GRID_SAMPLES)  # a whole multiple of the asked step
    jump = compute_score([start(0), epoch(100, 2400, 0.5), epoch(1e9, 100, 0.6), stop(2e9)], step=360)
    assert jump.grid_capped and len(jump.grid) <= MAX_GRID_SAMPLES and jump.score == 2500 / 2e9
    plain = compute_score(events, step=60)
    assert not plain.grid_capped and plain.grid_step == 60
    with pytest.raises(ValueError, match="finite"):
        compute_score([start(-1.5e308), stop(1.5e308)], step=1)  # 3e308 s: beyond a float


def test_the_rules_are_one_versioned_table_that_the_score_reads() -> None:
    """score.json's rules are the table's, in its order, each {ok, value, need}, named with their version."""
    from aiperf_mpi.results.rules import RULE_NAMES, RULES_VERSION, evaluate_rules

    score = compute_score([start(0), epoch(10, 100, 0.8), stop(20)], step=5)
    assert list(score.rules) == list(RULE_NAMES) == ["dataset", "error", "precision", "algorithms", "training"]
    assert all(set(rule) == {"ok", "value", "need"} for rule in score.rules.values())
    assert score.rules_version == RULES_VERSION and score.to_dict()["rules_version"] == RULES_VERSION
    assert score.rules == evaluate_rules(score_config(), 1.0 - 0.8)
    assert evaluate_rules({}, None) == {  # an old log without the fields: the defaults, no accuracy
        "dataset": {"ok": False, "value": None, "need": "imagenet, the ILSVRC-2012 split"},
        "error": {"ok": False, "value": None, "need": "≤ 0.3"},
        "precision": {"ok": True, "value": "fp32", "need": "fp16 or wider"},
        "algorithms": {"ok": True, "value": "bayesian+tpe", "need": "bayesian+tpe"},
        "training": {"ok": True, "value": "trained", "need": "trained (not a rehearsal)"},
    }
    rehearsal = evaluate_rules({"dataset": "imagenet", "rehearse": True}, 0.1)["training"]
    assert not rehearsal["ok"] and "rehearsal" in rehearsal["value"]  # a rehearsal is never valid
    assert not evaluate_rules({"dataset": "imagenet", "precision": "fp8"}, 0.1)["precision"]["ok"]
    assert evaluate_rules({"dataset": "imagenet"}, 0.30)["error"]["ok"]  # 30 % itself is valid
    assert not evaluate_rules({"search": "random", "hpo": "tpe"}, 0.1)["algorithms"]["ok"]
    assert not evaluate_rules({"search": "bayesian", "hpo": "gp"}, 0.1)["algorithms"]["ok"]
    standard = {"dataset": "imagenet", "train": 1_281_167, "validation": 50_000, "classes": 1000,
                "image_shape": [224, 224, 3]}  # fmt: skip
    assert evaluate_rules({"dataset": "imagenet"}, 0.1, standard)["dataset"]["ok"]
    assert evaluate_rules({"dataset": "imagenet"}, 0.1)["dataset"]["ok"]  # a log older than the data check: its name
    small = evaluate_rules({"dataset": "imagenet"}, 0.1, dict(standard, train=48, validation=16))["dataset"]
    assert small == {"ok": False, "value": "imagenet, an undocumented split (48 train, 16 validation, 1000 classes)",
                     "need": "imagenet, the ILSVRC-2012 split"}  # fmt: skip


def score_config() -> dict:
    return start(0)["config"]


def test_the_valid_algorithms_and_precisions_are_ones_a_run_can_choose() -> None:
    from aiperf_mpi.config import CHOICES, RunConfig
    from aiperf_mpi.results.rules import VALID_PRECISIONS, VALID_SEARCH, VALID_TUNER

    assert VALID_SEARCH in CHOICES["search"] and VALID_TUNER in CHOICES["hpo"]
    assert (RunConfig().search, RunConfig().hpo) == (VALID_SEARCH, VALID_TUNER)  # the default run is a valid one
    assert set(VALID_PRECISIONS) == set(CHOICES["precision"]) - {"auto"}


def test_the_schema_is_the_only_list_of_event_names() -> None:
    """runlog's event names are the schema's own objects, and every ``runlog.NAME`` used anywhere exists."""
    import ast
    from pathlib import Path

    from aiperf_mpi.results import schema

    event_like = {name: value for name, value in vars(runlog).items()
                  if name.isupper() and isinstance(value, str) and value.isidentifier() and value.islower()}
    assert set(event_like.values()) == {*schema.EVENT_NAMES, schema.EVENT, schema.TIME, schema.SEGMENT}
    assert all(value is getattr(schema, name) for name, value in event_like.items())
    assert schema.EVENT_NAMES == tuple(schema.REQUIRED) and set(schema.OPTIONAL) <= set(schema.EVENT_NAMES)
    root = Path(__file__).resolve().parents[2]
    used = set()
    for folder in ("aiperf_mpi", "analysis", "tests", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "runlog":
                    used.add(node.attr)
    missing = sorted(name for name in used if name.isupper() and not hasattr(runlog, name))
    assert not missing, f"runlog has no {missing}"
    assert {name for name in used if name in event_like} >= {"RUN_START", "EPOCH", "RUN_STOP", "SCORE"}
