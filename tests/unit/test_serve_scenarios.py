"""The arithmetic of serving (pure): shards, percentiles, Poisson arrivals, the server queue on a clock the test
advances itself, the bounded rate search, the batch sweep's choice and the offline figures."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aiperf_mpi.serve import scenarios
from aiperf_mpi.serve.world import OneProcess, under_launcher


@pytest.mark.parametrize("count, ranks, batch", [(360, 4, 32), (360, 1, 32), (10, 4, 32), (0, 3, 8), (1000, 7, 1),
                                                 (257, 2, 256), (4096, 128, 64)])  # fmt: skip
def test_shards_cover_the_input_once_in_order_at_whole_batches(count, ranks, batch) -> None:
    spans = scenarios.shards(count, ranks, batch)
    assert len(spans) == ranks and spans[0][0] == 0 and spans[-1][1] == count
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous, in order
    assert all(start % batch == 0 for start, _ in spans)  # every rank's batches are the one-process run's
    sizes = [math.ceil((end - start) / batch) for start, end in spans]
    assert max(sizes) - min(sizes) <= 1  # whole batches spread evenly


def test_shards_of_360_digits_on_4_ranks() -> None:
    assert scenarios.shards(360, 4, 32) == [(0, 96), (96, 192), (192, 288), (288, 360)]


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert [scenarios.percentile(values, q) for q in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert scenarios.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert scenarios.percentile([5.0], 99) == 5.0
    summary = scenarios.latency_summary([0.1] * 98 + [1.0, 2.0])
    assert (summary["p50"], summary["p90"], summary["p99"], summary["max"]) == (0.1, 0.1, 1.0, 2.0)
    with pytest.raises(ValueError):
        scenarios.percentile([], 50)


def test_poisson_arrivals_have_the_rate_asked_for() -> None:
    arrivals = scenarios.poisson_arrivals(200.0, 20000, seed=1)
    assert np.all(np.diff(arrivals) > 0)
    assert arrivals[-1] / len(arrivals) == pytest.approx(1 / 200, rel=0.03)
    assert np.array_equal(arrivals, scenarios.poisson_arrivals(200.0, 20000, seed=1))


class Clock:
    """Time the test advances: sleeping and each batch's service move it, nothing else."""

    def __init__(self, per_batch: float) -> None:
        self.now, self.per_batch, self.batches = 0.0, per_batch, []

    def run_batch(self, first: int, end: int) -> None:
        self.batches.append((first, end))
        self.now += self.per_batch

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_server_takes_what_has_arrived_up_to_a_batch_and_counts_the_wait() -> None:
    clock = Clock(per_batch=1.0)
    latencies = scenarios.serve_queue([0.0, 0.5, 0.6, 0.7, 5.0], 2, clock.run_batch, lambda: clock.now, clock.sleep)
    # t=0: query 0 alone, done at 1; then 1 and 2 (arrived, batch of 2) done at 2; then 3 done at 3; 4 at 6
    assert clock.batches == [(0, 1), (1, 3), (3, 4), (4, 5)]
    assert latencies == pytest.approx([1.0, 1.5, 1.4, 2.3, 1.0])


def test_the_rate_search_finds_the_highest_rate_within_the_bound_in_its_trials() -> None:
    capacity = 100.0  # an M/M/1-like p99 that grows without bound as the rate nears the capacity

    def p99_at(rate: float) -> dict:
        p99 = math.inf if rate >= capacity else 0.01 * capacity / (capacity - rate)
        return {"p99": p99}

    best, trials = scenarios.search_rate(p99_at, bound=0.05, start=10.0, trials=12)
    assert len(trials) == 12  # bounded
    exact = capacity * (1 - 0.01 / 0.05)  # p99 = bound at 80/s
    assert best <= exact and best == pytest.approx(exact, rel=0.02)
    assert best == scenarios.best_rate(trials)
    assert all(t.met == (t.summary["p99"] <= 0.05) for t in trials)


def test_the_rate_search_shrinks_when_the_first_rate_misses_and_says_none_when_nothing_holds() -> None:
    best, trials = scenarios.search_rate(lambda rate: {"p99": rate / 1000}, bound=0.01, start=160.0, trials=8)
    assert best == 10.0 and [t.rate for t in trials] == [160.0, 80.0, 40.0, 20.0, 10.0, 15.0, 12.5, 11.25]
    assert len({t.rate for t in trials}) == len(trials)  # no rate tried twice
    best, trials = scenarios.search_rate(lambda rate: {"p99": 1.0}, bound=0.01, start=8.0, trials=3)
    assert best is None and len(trials) == 3


def test_the_batch_sweep_is_bounded_and_chooses_the_fastest() -> None:
    assert scenarios.batch_candidates(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert scenarios.batch_candidates(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert scenarios.batch_candidates(1) == [1]
    rows = [{"batch": 8, "samples_per_second": 90.0}, {"batch": 16, "samples_per_second": 120.0},
            {"batch": 32, "samples_per_second": 120.0}]  # fmt: skip
    assert scenarios.best_batch(rows) == 16  # the smaller among equals


def test_offline_figures_use_the_analytic_forward_count() -> None:
    figures = scenarios.offline_figures(360, 2.0, 1_000_000, peak_ops_per_second=1e9)
    assert figures == {"samples": 360, "seconds": 2.0, "samples_per_second": 180.0, "ops": 360_000_000,
                       "ops_per_second": 180_000_000.0, "peak_ratio": 0.18}  # fmt: skip
    assert scenarios.offline_figures(1, 1.0, 5, None)["peak_ratio"] is None


def test_one_process_needs_no_mpi() -> None:
    world = OneProcess()
    assert (world.Get_rank(), world.Get_size(), world.bcast(3), world.gather(4)) == (0, 1, 3, [4])
    assert not under_launcher({"SLURM_NTASKS": "8"})  # an allocation's variable: a laptop-style start inside it
    assert under_launcher({"OMPI_COMM_WORLD_SIZE": "4"}) and under_launcher({"SLURM_STEP_NUM_TASKS": "2"})


def test_a_server_trial_is_bounded_in_time() -> None:
    assert scenarios.trial_queries(1000.0, 200, 10.0) == 200
    assert scenarios.trial_queries(3.0, 200, 10.0) == 30  # 10 s of arrivals at 3/s
    assert scenarios.trial_queries(0.5, 200, 10.0) == 20  # never fewer than 20 queries
    assert scenarios.trial_queries(0.5, 8, 10.0) == 8
