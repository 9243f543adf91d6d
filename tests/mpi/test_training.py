"""The Horovod trainer on real groups: identical weights, learning, inheritance, failed trials.

The scenarios run in two launches of ``train_group.py`` (one of two ranks, one of one rank), each shared by
the tests of its module-scoped fixture: TensorFlow and Horovod start once per launch, which on CI's 2 cores
is ≈ 15 s a launch.  Each test reads its own scenario's RESULT lines.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.data_files import small_h5
from tests.support.mpirun import SCRIPTS, MpiResult, run_mpi

pytestmark = [pytest.mark.horovod, pytest.mark.tf, pytest.mark.slow, pytest.mark.long,
              pytest.mark.xdist_group("training")]  # make test-long; one worker builds its module's launches
SCRIPT = str(SCRIPTS / "train_group.py")
TWO_RANKS = ("identical", "identical-xla", "nan", "deadline")
ONE_RANK = ("digits", "precision")


def results(output: str, mode: str) -> list[dict]:
    """The RESULT lines ``mode`` printed."""
    found = [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]
    return [r for r in found if r.pop("mode") == mode]


def launch(ranks: int, modes: tuple[str, ...], directory: Path) -> MpiResult:
    run = run_mpi(ranks, [SCRIPT, "+".join(modes), small_h5(directory / "small.h5")], timeout=540)
    assert run.returncode == 0, run.output[-6000:]
    return run


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> MpiResult:
    return launch(2, TWO_RANKS, tmp_path_factory.mktemp("two"))


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> MpiResult:
    return launch(1, ONE_RANK, tmp_path_factory.mktemp("one"))


def by_rank(run: MpiResult, mode: str) -> dict[int, dict]:
    ranks = {r["rank"]: r for r in results(run.output, mode)}
    assert set(ranks) == {0, 1}, run.output[-6000:]
    return ranks


@pytest.mark.parametrize("mode", ["identical", "identical-xla"], ids=["tf.function", "xla"])
def test_two_ranks_keep_identical_weights_and_the_loss_falls(two_ranks, mode: str) -> None:
    ranks = by_rank(two_ranks, mode)
    assert ranks[0]["sums"] == ranks[1]["sums"], "weights differ between ranks after an epoch"
    assert len(set(ranks[0]["sums"])) == 3, "the weights must change every epoch"
    losses = ranks[0]["losses"]
    assert losses == ranks[1]["losses"]
    assert losses[-1] < losses[0]
    # 256 samples over 2 ranks at batch 16: 8 steps × 16 × 2 = 256 trained samples per epoch
    assert ranks[0]["samples"] == [256, 256, 256]
    assert ranks[0]["ops"][0] > 0
    # tracing (and XLA's compilation) is the first epoch's, apart from compute; later epochs reuse it
    compile_seconds, compute = ranks[0]["compile"], ranks[0]["compute"]
    assert compile_seconds[0] > 0.5 and compile_seconds[1:] == [0.0, 0.0], compile_seconds
    assert compute[0] < 2 * max(compute[1:]) + 0.5, (compute, compile_seconds)  # the trace is not in compute


def test_digits_reaches_90_percent_and_a_child_inherits_its_parents_accuracy(one_rank) -> None:
    (result,) = results(one_rank.output, "digits")
    assert max(result["parent"]) >= 0.90, result["parent"]
    final = result["parent"][-1]
    assert abs(result["child"] - final) <= 0.01, result  # deeper + wider child, weights transferred
    assert abs(result["kernel5"] - final) <= 0.01, result  # 3×3 kernels grown to 5×5, centred
    assert result["fresh"] == []


def test_a_nan_trial_fails_on_every_rank_and_the_group_trains_the_next_model(two_ranks) -> None:
    """Then a child whose parent's weights fit no layer: the first rank alone finds out (the others wait in the
    weights' broadcast), so it trains the child from scratch rather than fail it out of that collective."""
    ranks = by_rank(two_ranks, "nan")
    for result in ranks.values():
        assert "non-finite training loss" in result["failed"]
        assert np.isfinite(result["after"])
    epochs, fresh, layers = ranks[0]["misfit"]
    assert epochs == 1 and fresh == layers > 0, two_ranks.output[-6000:]
    assert ranks[1]["misfit"][0] == 1 and "the parent's weights do not fit this child" in two_ranks.output


def test_fp16_and_bf16_train(one_rank) -> None:
    (result,) = results(one_rank.output, "precision")
    for precision, losses in result["losses"].items():
        assert all(np.isfinite(losses)), (precision, losses)
        assert losses[-1] < losses[0], (precision, losses)


def test_a_first_epoch_that_would_end_after_the_deadline_is_given_up_by_the_whole_group(two_ranks) -> None:
    """Two ranks, the deadline known to the first only: both stop at the same step and the group trains on."""
    for result in by_rank(two_ranks, "deadline").values():
        assert result["late"] == [0, "time limit"] and result["timely"] == [2, "epoch limit"], result
