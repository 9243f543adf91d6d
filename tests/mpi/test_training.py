"""The Horovod trainer on real groups: identical weights, learning, inheritance, failed trials."""

import json

import numpy as np
import pytest

from tests.support.data_files import small_h5
from tests.support.mpirun import SCRIPTS, run_mpi

pytestmark = [pytest.mark.horovod, pytest.mark.tf, pytest.mark.slow]
SCRIPT = str(SCRIPTS / "train_group.py")


def results(output: str) -> list[dict]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


@pytest.mark.parametrize("path", ["tf.function", "xla"])
def test_two_ranks_keep_identical_weights_and_the_loss_falls(tmp_path, path: str) -> None:
    run = run_mpi(2, [SCRIPT, "identical", small_h5(tmp_path / "small.h5"), path], timeout=240)
    assert run.returncode == 0, run.output
    by_rank = {r["rank"]: r for r in results(run.output)}
    assert set(by_rank) == {0, 1}, run.output
    assert by_rank[0]["sums"] == by_rank[1]["sums"], "weights differ between ranks after an epoch"
    assert len(set(by_rank[0]["sums"])) == 3, "the weights must change every epoch"
    losses = by_rank[0]["losses"]
    assert losses == by_rank[1]["losses"]
    assert losses[-1] < losses[0]
    # 256 samples over 2 ranks at batch 16: 8 steps × 16 × 2 = 256 trained samples per epoch
    assert by_rank[0]["samples"] == [256, 256, 256]
    assert by_rank[0]["ops"][0] > 0
    # tracing (and XLA's compilation) is the first epoch's, apart from compute; later epochs reuse it
    compile_seconds, compute = by_rank[0]["compile"], by_rank[0]["compute"]
    assert compile_seconds[0] > 0.5 and compile_seconds[1:] == [0.0, 0.0], compile_seconds
    assert compute[0] < 2 * max(compute[1:]) + 0.5, (compute, compile_seconds)  # the trace is not in compute


def test_digits_reaches_90_percent_and_a_child_inherits_its_parents_accuracy() -> None:
    run = run_mpi(1, [SCRIPT, "digits", "6"], timeout=420)
    assert run.returncode == 0, run.output
    (result,) = results(run.output)
    assert max(result["parent"]) >= 0.90, result["parent"]
    final = result["parent"][-1]
    assert abs(result["child"] - final) <= 0.01, result  # deeper + wider child, weights transferred
    assert abs(result["kernel5"] - final) <= 0.01, result  # 3×3 kernels grown to 5×5, centred
    assert result["fresh"] == []


def test_a_nan_trial_fails_on_every_rank_and_the_group_trains_the_next_model(tmp_path) -> None:
    """Then a child whose parent's weights fit no layer: the first rank alone finds out (the others wait in the
    weights' broadcast), so it trains the child from scratch rather than fail it out of that collective."""
    run = run_mpi(2, [SCRIPT, "nan", small_h5(tmp_path / "small.h5")], timeout=240)
    assert run.returncode == 0, run.output
    by_rank = {r["rank"]: r for r in results(run.output)}
    assert set(by_rank) == {0, 1}, run.output
    for result in by_rank.values():
        assert "non-finite training loss" in result["failed"]
        assert np.isfinite(result["after"])
    epochs, fresh, layers = by_rank[0]["misfit"]
    assert epochs == 1 and fresh == layers > 0, run.output
    assert by_rank[1]["misfit"][0] == 1 and "the parent's weights do not fit this child" in run.output


def test_fp16_and_bf16_train(tmp_path) -> None:
    run = run_mpi(1, [SCRIPT, "precision", small_h5(tmp_path / "small.h5")], timeout=240)
    assert run.returncode == 0, run.output
    (result,) = results(run.output)
    for precision, losses in result["losses"].items():
        assert all(np.isfinite(losses)), (precision, losses)
        assert losses[-1] < losses[0], (precision, losses)


def test_a_first_epoch_that_would_end_after_the_deadline_is_given_up_by_the_whole_group(tmp_path) -> None:
    """Two ranks, the deadline known to the first only: both stop at the same step and the group trains on."""
    run = run_mpi(2, [SCRIPT, "deadline", small_h5(tmp_path / "small.h5")], timeout=240)
    assert run.returncode == 0, run.output
    by_rank = {r["rank"]: r for r in results(run.output)}
    assert set(by_rank) == {0, 1}, run.output
    for result in by_rank.values():
        assert result["late"] == [0, "time limit"] and result["timely"] == [2, "epoch limit"], result
