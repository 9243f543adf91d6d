"""The arithmetic of serving, after MLPerf Inference: shards, percentiles, Poisson arrivals, the server queue,
the bounded rate search and the batch sweep.  Pure (no TensorFlow, no MPI): the runner gives it a real clock and
a real model, the unit tests a clock they advance themselves, and the reviewer's check recomputes from the log.

* **Offline**: every sample at once; the figure is samples per second (the input split among ranks by
  :func:`shards`).
* **Single-stream**: one query of one sample at a time, the next sent when the last returned; the figure is the
  90th-percentile latency.
* **Server**: queries of one sample arrive at a Poisson rate (:func:`poisson_arrivals`); the server takes what
  has arrived, up to a batch, whenever it is free (:func:`serve_queue`); a query's latency is from its arrival to
  the end of its batch.  The figure is the highest rate whose 99th-percentile latency stays within a stated bound,
  found by :func:`search_rate` in a bounded number of trials.
* **Batch sweep**: offline samples per second at batch sizes 1, 2, 4, … (:func:`batch_candidates`), the best
  batch being the fastest (:func:`best_batch`).

Percentiles are nearest-rank: the ⌈q·n⌉-th smallest of n values, so a p99 is a latency some query really had
(what MLPerf's LoadGen reports), and the check recomputes them exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def shards(count: int, ranks: int, batch: int) -> list[tuple[int, int]]:
    """Each rank's contiguous slice ``[start, end)`` of ``count`` samples, cut at multiples of ``batch``.

    Whole batches are spread as evenly as they go (rank r starts at batch ⌊r·batches/ranks⌋), so every batch a rank
    runs holds the same samples as the one-process run's batch at that place: the same inputs to the same
    kernels, hence the same output bits however many ranks serve.
    """
    if count < 0 or ranks < 1 or batch < 1:
        raise ValueError(f"shards({count}, {ranks}, {batch})")
    batches = math.ceil(count / batch)
    bounds = [min(count, (rank * batches // ranks) * batch) for rank in range(ranks + 1)]
    return [(bounds[rank], bounds[rank + 1]) for rank in range(ranks)]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 < q ≤ 100) of ``values``: the ⌈q·n/100⌉-th smallest."""
    if not len(values):
        raise ValueError("no values")
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def latency_summary(latencies: Sequence[float]) -> dict:
    """p50, p90, p99, the mean and the largest of ``latencies`` (seconds)."""
    return {
        "queries": len(latencies),
        "p50": percentile(latencies, 50),
        "p90": percentile(latencies, 90),
        "p99": percentile(latencies, 99),
        "mean": float(np.mean(latencies)),
        "max": float(max(latencies)),
    }


def poisson_arrivals(rate: float, count: int, seed: int) -> np.ndarray:
    """``count`` arrival times (seconds from 0) of a Poisson process of ``rate`` queries per second."""
    if rate <= 0:
        raise ValueError(f"rate {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    return np.cumsum(gaps)


def serve_queue(
    arrivals: Sequence[float],
    max_batch: int,
    run_batch: Callable[[int, int], None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> list[float]:
    """Serve queries arriving at ``arrivals`` (seconds after the call): returns each query's latency.

    Whenever the server is free it takes every query that has arrived, up to ``max_batch``, and runs them
    (``run_batch(first, end)``); with none waiting it sleeps until the next arrives.  A latency runs from the
    query's arrival to the end of its batch: the time it waited in the queue counts, as a user sees it.
    """
    start = clock()
    done: list[float] = [0.0] * len(arrivals)
    following = 0
    while following < len(arrivals):
        now = clock() - start
        if arrivals[following] > now:
            sleep(arrivals[following] - now)
            continue
        end = following
        while end < len(arrivals) and end - following < max_batch and arrivals[end] <= now:
            end += 1
        run_batch(following, end)
        finished = clock() - start
        for query in range(following, end):
            done[query] = finished - arrivals[query]
        following = end
    return done


@dataclass
class Trial:
    """One server trial: its rate, its latencies' summary, and whether its p99 met the bound."""

    rate: float
    summary: dict
    met: bool


def search_rate(
    p99_at: Callable[[float], dict], bound: float, start: float, trials: int
) -> tuple[float | None, list[Trial]]:
    """The highest rate (queries/s) whose p99 latency is within ``bound`` seconds, in at most ``trials`` trials.

    ``p99_at(rate)`` serves a trial and returns its :func:`latency_summary`.  The rate doubles from ``start``
    until a trial misses the bound (or halves while the start itself misses), then the interval between the
    best rate met and the lowest missed is halved until the trials are spent.  Returns the best rate met
    (None: even the lowest rate tried missed) and every trial in the order run.
    """
    done: list[Trial] = []

    def run(rate: float) -> bool:
        summary = p99_at(rate)
        done.append(Trial(rate, summary, summary["p99"] <= bound))
        return done[-1].met

    met, missed, rate = None, None, start
    while len(done) < trials and missed is None:  # grow while it holds
        if run(rate):
            met, rate = rate, rate * 2
        else:
            missed = rate
    while len(done) < trials and met is None:  # the start missed: shrink until one holds
        rate = missed / 2
        if run(rate):
            met = rate
        else:
            missed = rate
    while len(done) < trials and met is not None and missed is not None:  # bisect
        middle = (met + missed) / 2
        if run(middle):
            met = middle
        else:
            missed = middle
    return met, done


def best_rate(trials: Sequence[Trial]) -> float | None:
    """The highest rate among the trials that met the bound (what :func:`search_rate` returns, recomputed)."""
    rates = [trial.rate for trial in trials if trial.met]
    return max(rates) if rates else None


def trial_queries(rate: float, queries: int, seconds: float, least: int = 20) -> int:
    """Queries of one server trial: ``queries``, but no more than ``seconds`` of arrivals at ``rate`` (at least
    ``least``, so a p99 still rests on some queries): a slow rate must not stretch the search for minutes."""
    return max(min(least, queries), min(queries, math.ceil(rate * seconds)))


def batch_candidates(largest: int) -> list[int]:
    """1, 2, 4, … up to ``largest`` (and ``largest`` itself): the bounded sweep's batch sizes."""
    sizes, size = [], 1
    while size < largest:
        sizes.append(size)
        size *= 2
    return [*sizes, largest]


def best_batch(sweep: Sequence[dict]) -> int:
    """The batch of the highest samples per second (the smaller batch among equals)."""
    return max(sweep, key=lambda row: (row["samples_per_second"], -row["batch"]))["batch"]


def offline_figures(samples: int, seconds: float, forward_ops: int, peak_ops_per_second: float | None) -> dict:
    """Offline figures: samples/s, inference operations (analytic forward count × samples) per second, and
    their ratio to the measured peak (None without a peak)."""
    ops = samples * forward_ops
    rate = ops / seconds if seconds > 0 else 0.0
    return {
        "samples": samples,
        "seconds": seconds,
        "samples_per_second": samples / seconds if seconds > 0 else 0.0,
        "ops": ops,
        "ops_per_second": rate,
        "peak_ratio": rate / peak_ops_per_second if peak_ops_per_second else None,
    }
