"""The rule for TensorFlow's thread pools of a CPU training rank, without TensorFlow."""

import subprocess
import sys

import pytest

from aiperf_mpi.mpi.plan import plan_layout
from aiperf_mpi.train.threads import choose_threads, cpu_share, node_peers


def test_two_unbound_ranks_on_two_cores_take_one_core_each() -> None:
    choice = choose_threads({0, 1}, [{0, 1}], {})
    assert (choice.intra, choice.inter, choice.cores, choice.share, choice.source) == (1, 1, 2, 1.0, "share")


def test_one_rank_alone_takes_every_core() -> None:
    assert choose_threads(range(16), [], {}).intra == 16


@pytest.mark.parametrize(
    ("cores", "ranks", "intra"),
    [(64, 8, 8), (64, 3, 21), (3, 2, 1), (2, 3, 1), (2, 8, 1), (1, 1, 1)],
)
def test_unbound_ranks_share_the_cores_evenly_rounded_down_at_least_one(cores: int, ranks: int, intra: int) -> None:
    mine = set(range(cores))
    assert choose_threads(mine, [mine] * (ranks - 1), {}).intra == intra


def test_a_rank_bound_to_cores_of_its_own_keeps_them() -> None:
    assert choose_threads({0, 1, 2, 3}, [{4, 5, 6, 7}, {8, 9, 10, 11}], {}).intra == 4


def test_partly_shared_cores_count_by_how_many_ranks_may_run_there() -> None:
    assert cpu_share({0, 1, 2, 3}, [{2, 3}, {3}]) == pytest.approx(1 + 1 + 0.5 + 1 / 3)
    assert choose_threads({0, 1, 2, 3}, [{2, 3}, {3}], {}).intra == 2


def test_explicit_tensorflow_variables_leave_their_pool_to_tensorflow() -> None:
    choice = choose_threads({0, 1}, [{0, 1}], {"TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "3"})
    assert (choice.intra, choice.inter, choice.source) == (None, None, "TF_NUM_INTRAOP_THREADS")
    assert "$TF_NUM_INTRAOP_THREADS" in choice.describe() and "$TF_NUM_INTEROP_THREADS" in choice.describe()


def test_omp_num_threads_sets_intra_op_unless_tensorflow_s_own_variable_does() -> None:
    assert choose_threads({0, 1}, [{0, 1}], {"OMP_NUM_THREADS": "2"}).intra == 2
    assert choose_threads({0, 1}, [{0, 1}], {"OMP_NUM_THREADS": "2"}).source == "OMP_NUM_THREADS"
    assert choose_threads({0, 1}, [], {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "2"}).intra is None


@pytest.mark.parametrize("value", ["", "0", "-1", "two", "2.5"])
def test_unusable_values_are_ignored(value: str) -> None:
    env = {"OMP_NUM_THREADS": value, "TF_NUM_INTRAOP_THREADS": value, "TF_NUM_INTEROP_THREADS": value}
    choice = choose_threads({0, 1}, [{0, 1}], env)
    assert (choice.intra, choice.inter, choice.source) == (1, 1, "share")


def test_node_peers_are_the_other_training_ranks_of_the_node_without_the_master() -> None:
    plan = plan_layout(["a", "a", "a", "b", "b"], [0, 0, 0, 3, 3])
    assert node_peers(plan, 1, [100, 101, 102]) == [102]
    assert node_peers(plan, 4, [103, 104]) == [103]
    with pytest.raises(ValueError, match="2 pids for the 3 ranks"):
        node_peers(plan, 2, [100, 101])


def test_the_rule_imports_no_tensorflow() -> None:
    code = "import sys, aiperf_mpi.train.threads; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
