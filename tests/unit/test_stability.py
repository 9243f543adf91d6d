"""How settled a score is: the two stability figures on hand-computed grids, in score.json and in the report."""

import json
import math

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import read_model as load_run
from aiperf_mpi.results.score import compute_score, score_run
from aiperf_mpi.results.stability import (
    CHANGE_LIMIT,
    CV_LIMIT,
    Stability,
    change_last_quarter,
    cv_last_half,
    sample_cv,
    stability,
)
from analysis.metrics import run_score
from analysis.report import settledness
from tests.support.event_logs import known_run


def test_a_rising_grid() -> None:
    # T = 4: the last half is t ≥ 2 → 20, 30, 40: mean 30, sample variance (100 + 0 + 100) / 2 = 100, sd 10
    times, ops = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]
    assert cv_last_half(times, ops) == pytest.approx(10 / 30)
    # 3T/4 = 3: t₀ = 3, OPS 30 → (40 − 30) / 40
    assert change_last_quarter(times, ops) == pytest.approx(0.25)
    assert stability(times, ops).settled is False


def test_a_flat_grid_is_settled() -> None:
    times, ops = [float(t) for t in range(1, 9)], [5.0] * 8
    figures = stability(times, ops)
    assert figures == Stability(0.0, 0.0) and figures.settled is True


def test_a_coarse_grid_with_a_short_last_step() -> None:
    # grid 360, 600 (the default step, a 10-minute run): both in the last half (t ≥ 300): mean 105, sd √50
    times, ops = [360.0, 600.0], [100.0, 110.0]
    assert cv_last_half(times, ops) == pytest.approx(math.sqrt(50) / 105)
    # 3T/4 = 450: t₀ = 360 (the span is longer than a quarter on this grid) → 10 / 110
    assert change_last_quarter(times, ops) == pytest.approx(10 / 110)
    # a falling score: the change is negative, and its size is what the limit judges
    falling = stability(times, [110.0, 100.0])
    assert falling.change_last_quarter == pytest.approx(-0.1) and falling.settled is False


def test_only_the_last_half_counts() -> None:
    # T = 10: t ≥ 5 → 99, 100, 101 (the early 1 and 50 are left out); sample sd 1, mean 100
    times, ops = [2.0, 4.0, 5.0, 8.0, 10.0], [1.0, 50.0, 99.0, 100.0, 101.0]
    assert cv_last_half(times, ops) == pytest.approx(0.01)
    # 3T/4 = 7.5: t₀ = 5 (OPS 99) → 2 / 101
    assert change_last_quarter(times, ops) == pytest.approx(2 / 101)
    assert stability(times, ops).settled is True


def test_too_few_samples_or_no_operations_cannot_tell() -> None:
    assert stability([100.0], [5.0]) == Stability(None, None) and stability([100.0], [5.0]).settled is None
    assert stability([], []) == Stability(None, None)
    assert stability([1.0, 2.0], [0.0, 0.0]) == Stability(None, None)
    assert sample_cv([3.0]) is None and sample_cv([2.0, 4.0]) == pytest.approx(math.sqrt(2) / 3)
    # one figure beyond its limit is enough to say "not settled", even with the other unknown
    assert Stability(CV_LIMIT * 2, None).settled is False and Stability(CV_LIMIT / 2, None).settled is None
    assert Stability(0.0, -CHANGE_LIMIT * 1.01).settled is False


def test_the_score_carries_the_figures_of_its_grid() -> None:
    config = {"dataset": "imagenet", "precision": "fp16", "search": "bayesian", "hpo": "tpe"}
    events = [{"event": runlog.RUN_START, "time": 0, "config": config}]
    events += [{"event": runlog.EPOCH, "time": t, "end": t, "ops": 100, "val_accuracy": 0.5} for t in (10, 20, 30, 40)]
    events += [{"event": runlog.RUN_STOP, "time": 40}]
    score = compute_score(events, step=10)
    # OPS(t) = 100 k / (10 k) = 10 at every grid point: settled, CV 0, change 0
    assert [s.ops_per_second for s in score.grid] == [10.0] * 4
    assert score.ops_cv_last_half == 0.0 and score.ops_change_last_quarter == 0.0
    assert score.to_dict()["ops_cv_last_half"] == 0.0


def test_score_json_and_the_report_of_a_known_run(tmp_path) -> None:
    run_dir = known_run(tmp_path / "run")
    score = score_run(run_dir)
    # grid 50, 100 with OPS 12, 18: mean 15, sample sd √18 → CV √18 / 15; t₀ = 50 → (18 − 12) / 18
    assert score.ops_cv_last_half == pytest.approx(math.sqrt(18) / 15)
    assert score.ops_change_last_quarter == pytest.approx(1 / 3)
    written = json.loads(json.dumps(score.to_dict()))
    assert written["ops_change_last_quarter"] == pytest.approx(1 / 3)
    text = settledness(run_score(load_run(run_dir)))
    assert text.startswith("**not settled**") and "28.3 %" in text and "+33.3 %" in text
