"""A repeat run gets a new seed unless the user fixes it; the drawn seed is the configuration's, so it is logged."""

from aiperf_mpi.cli import build_parser, run_overrides
from aiperf_mpi.config import DRAWN_SEED_LIMIT, load_config
from aiperf_mpi.job.leader import group_seed


def test_a_run_without_a_seed_draws_a_fresh_one() -> None:
    seeds = {load_config(None, {}).seed for _ in range(8)}
    assert all(isinstance(seed, int) and 0 <= seed < DRAWN_SEED_LIMIT for seed in seeds)
    assert len(seeds) > 1  # 8 draws from 2**31 values: all equal only if nothing is drawn


def test_a_given_seed_is_kept(tmp_path) -> None:
    assert load_config(None, run_overrides(build_parser().parse_args(["--seed", "7"]))).seed == 7
    assert load_config(None, run_overrides(build_parser().parse_args(["--seed", "0"]))).seed == 0
    toml = tmp_path / "run.toml"
    toml.write_text("seed = 11\n")
    assert load_config(str(toml), run_overrides(build_parser().parse_args([]))).seed == 11
    assert load_config(str(toml), {"seed": 12}).seed == 12  # the command line over the file


def test_every_group_seed_is_one_numpy_takes() -> None:
    # a drawn seed times 100,003 passed 2**32 and Optuna's sampler refused it ("Seed must be between 0 and 2**32 - 1")
    for run_seed in (0, 7, DRAWN_SEED_LIMIT - 1, 2**32 - 1):
        seeds = [group_seed(run_seed, group) for group in range(4)]
        assert all(0 <= seed < 2**32 for seed in seeds) and len(set(seeds)) == 4
    assert group_seed(7, 2) == 7 * 100_003 + 2  # small seeds keep the seeds they always had
