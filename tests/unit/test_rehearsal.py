"""The rehearsal's stand-in arithmetic (job/rehearsal.py): what it logs is what a real epoch would count."""

from __future__ import annotations

import pytest

from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from aiperf_mpi.job.rehearsal import (
    ALL_REDUCE_CHUNK,
    all_reduce_chunks,
    all_reduce_floats,
    stand_in_accuracy,
    stand_in_epoch,
)
from aiperf_mpi.results import runlog
from aiperf_mpi.results.schema import REQUIRED

DIGITS = {"train": 1437, "validation": 360}


def test_the_curve_rises_saturates_and_grows_with_the_model() -> None:
    small, large = 50_000, 25_600_000
    curve = [stand_in_accuracy(large, epoch) for epoch in range(1, 30)]
    assert curve == sorted(curve) and 0 < curve[0] < curve[-1] < 0.95
    assert stand_in_accuracy(small, 10) < stand_in_accuracy(large, 10)
    assert stand_in_accuracy(10**12, 10**6) <= 0.95


@pytest.mark.parametrize(("ranks", "batch"), [(1, 32), (2, 64), (3, 16)])
def test_an_epoch_counts_what_the_trainer_would_and_lasts_its_operations_at_the_rate(ranks: int, batch: int) -> None:
    counts = count_ops(tiny_resnet(32, 3, 10))
    planned = stand_in_epoch(counts, DIGITS, batch, ranks, epoch=2, rate=1e9)
    fields = planned.fields
    steps = (DIGITS["train"] // ranks) // batch
    assert fields["steps"] == steps and fields["train_samples"] == steps * batch * ranks  # the trainer's shards
    expected = epoch_ops(counts, steps * batch * ranks, DIGITS["validation"], batch * ranks)
    assert (fields["ops_train"], fields["ops_update"], fields["ops_validation"]) == \
        (expected.train, expected.update, expected.validation)  # fmt: skip
    assert fields["ops"] == expected.total
    assert fields["val_accuracy"] == fields["correct"] / DIGITS["validation"]  # a count over a whole pass
    assert planned.train_seconds == pytest.approx((expected.train + expected.update) / (1e9 * ranks))
    assert planned.validation_seconds == pytest.approx(expected.validation / (1e9 * ranks))
    clock = {"start", "end", "compute", "evaluation"}  # the runner's
    missing = set(REQUIRED[runlog.EPOCH]) - set(fields) - clock - {"task", "group"}
    assert not missing, missing  # every other field a real epoch logs


def test_resnet50_on_imagenet_at_the_default_rate_is_minutes_an_epoch_on_8_ranks() -> None:
    """The default rate (config.rehearse_rate) keeps a full-size rehearsal in minutes, as its help says."""
    from aiperf_mpi.config import RunConfig

    counts = count_ops(resnet50(224, 3, 1000))
    planned = stand_in_epoch(counts, {"train": 1_281_167, "validation": 50_000}, 64, 8, 1, RunConfig().rehearse_rate)
    assert 60 < planned.train_seconds + planned.validation_seconds < 900


def test_the_all_reduce_is_the_parameters_share_and_never_empty() -> None:
    assert all_reduce_floats(1000, 1.0) == 1000 and all_reduce_floats(1000, 0.25) == 250
    assert all_reduce_floats(1000, 0.0) == 1


def test_the_all_reduce_moves_the_models_bytes_in_pieces_a_rank_can_hold() -> None:
    """ResNet-50's 25.6 M parameters go in 4 MiB pieces: the same bytes on the wire, a buffer of one piece."""
    floats = all_reduce_floats(count_ops(resnet50(224, 3, 1000)).params, 1.0)
    chunks = all_reduce_chunks(floats)
    assert sum(chunks) == floats and max(chunks) == ALL_REDUCE_CHUNK == 1 << 20
    assert len(chunks) == -(-floats // ALL_REDUCE_CHUNK) >= 24
    assert all_reduce_chunks(1) == [1] and all_reduce_chunks(5, 2) == [2, 2, 1]


def test_a_rehearsal_option_without_rehearse_is_refused_in_one_line() -> None:
    from aiperf_mpi.config import load_config
    from aiperf_mpi.errors import UsageError

    with pytest.raises(UsageError, match=r"rehearse_rate applies only to a rehearsal \(--rehearse\)"):
        load_config(None, {"rehearse_rate": 1e9})
    assert load_config(None, {"rehearse": True, "rehearse_rate": 1e9}).rehearse_rate == 1e9
