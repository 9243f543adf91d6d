"""Warm-up prediction and the batch/kernel tuners, without TensorFlow."""

import numpy as np
import pytest

from aiperf_mpi.graph.model import batch_choices
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from aiperf_mpi.search.hpo import KERNEL_SIZES, WARMUP_ROUNDS, HParams
from aiperf_mpi.search.predict import predict_final_accuracy
from aiperf_mpi.search.registry import TUNERS, make_tuner


def test_prediction_extrapolates_a_saturating_curve() -> None:
    epochs = np.arange(1, 7)
    curve = 0.9 - 0.6 * np.exp(-0.4 * epochs)
    predicted = predict_final_accuracy(curve, 30)
    assert predicted == pytest.approx(0.9 - 0.6 * np.exp(-0.4 * 30), abs=0.01)
    assert predicted > curve.max()


def test_prediction_is_never_below_the_observed_best_and_needs_three_points() -> None:
    assert predict_final_accuracy([0.8, 0.5, 0.4, 0.3], 20) >= 0.8
    assert predict_final_accuracy([0.2, 0.4], 20) == 0.4
    assert predict_final_accuracy([0.2, 0.4, 0.5], 3) == 0.5
    assert predict_final_accuracy([0.5, 0.5, 0.5, 0.5], 20) <= 1.0
    with pytest.raises(ValueError):
        predict_final_accuracy([], 10)


def test_batch_choices_scale_with_memory_and_model() -> None:
    small = batch_choices(tiny_resnet(), 16 * 2**30)
    assert small[0] == 16 and small[-1] == 512
    big = batch_choices(resnet50(224, 3, 1000), 16 * 2**30)
    assert big[-1] < small[-1]
    assert batch_choices(resnet50(224, 3, 1000), 2**20) == [16]


@pytest.mark.parametrize("kind", list(TUNERS))
def test_tuners_use_defaults_for_the_warmup_then_explore(kind: str) -> None:
    default = HParams(32, 3)
    tuner = make_tuner(kind, [16, 32, 64], seed=0, default=default)
    seen = []
    for _ in range(12):
        params = tuner.ask()
        seen.append(params)
        tuner.tell(params, 0.5 + 0.05 * params.kernel_size - 0.001 * params.batch_size)
    assert seen[:WARMUP_ROUNDS] == [default] * WARMUP_ROUNDS
    later = seen[WARMUP_ROUNDS:]
    assert all(p.batch_size in (16, 32, 64) and p.kernel_size in KERNEL_SIZES for p in later)
    assert len(set(later)) > 1


def test_tpe_learns_from_failures_and_refuses_unknown_kinds() -> None:
    tuner = make_tuner("tpe", [16, 32], seed=1, default=HParams(16, 3))
    for _ in range(6):
        params = tuner.ask()
        tuner.tell(params, None)
    with pytest.raises(ValueError, match="unknown tuner"):
        make_tuner("bohb", [16], 0, HParams(16, 3))
