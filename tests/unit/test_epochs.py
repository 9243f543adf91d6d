"""The shared facts of one epoch (results/epochs.py): its steps and the stop policy the trainer and the rehearsal
both run."""

from __future__ import annotations

import math

import pytest

from aiperf_mpi.results.epochs import EARLY_STOP, EPOCH_LIMIT, TIME_LIMIT, EpochStop, rank_batches, stop_asked


def test_an_epoch_is_whole_batches_of_each_ranks_share() -> None:
    assert rank_batches(1_437, 2, 32) == 22  # 718 a rank: 22 batches of 32, 14 samples dropped
    assert rank_batches(1_437, 1, 32) == 44
    assert rank_batches(360.0, 4, 32) == 2 and isinstance(rank_batches(360.0, 4, 32), int)
    assert rank_batches(31, 1, 32) == 0


def walk(policy: EpochStop, accuracies: list[float]) -> int:
    """The epochs the policy lets a model train, given each epoch's accuracy."""
    for epoch, accuracy in enumerate(accuracies, start=1):
        if policy.after_epoch(accuracy):
            return epoch
    return len(accuracies)


def test_a_model_stops_after_patience_epochs_without_a_gain_above_min_delta() -> None:
    policy = EpochStop(patience=2, min_delta=0.01)
    assert walk(policy, [0.5, 0.505, 0.509, 0.9]) == 3 and policy.reason == EARLY_STOP
    policy = EpochStop(patience=2, min_delta=0.01)
    assert walk(policy, [0.5, 0.505, 0.52, 0.521, 0.6]) == 5 and policy.reason == EPOCH_LIMIT
    policy = EpochStop(patience=1, min_delta=1.0)  # the first epoch always counts as a gain
    assert walk(policy, [0.0, 0.0]) == 2 and policy.reason == EARLY_STOP
    policy = EpochStop(patience=2, min_delta=0.0)  # a NaN accuracy is no gain
    assert walk(policy, [0.3, math.nan, math.nan]) == 3 and policy.reason == EARLY_STOP


@pytest.mark.parametrize(("answer", "reason"), [(None, ""), (False, ""), ("", ""), (True, TIME_LIMIT),
                                                 ("max models", "max models")])  # fmt: skip
def test_a_stop_asked_for_is_its_reason(answer: object, reason: str) -> None:
    policy = EpochStop(patience=5, min_delta=0.0)
    assert stop_asked(answer) == reason
    assert policy.stopped(stop_asked(answer)) is bool(reason)
    assert policy.reason == (reason or EPOCH_LIMIT)
