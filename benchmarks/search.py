"""Proposal latency of the Bayesian search as the history grows (goal: flat, < 1 s at 10,000)."""

from __future__ import annotations

import random
import statistics
import time

import networkx as nx

from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.morph import random_morph
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from aiperf_mpi.search.bayesian import BayesianSearch
from aiperf_mpi.search.history import History, ModelRecord
from tests.support.synthetic_objective import synthetic_accuracy

SIZES = (10, 100, 1_000, 10_000)
POOL = 200
ASKS = 5


def pool_of(seed_graph: nx.DiGraph, size: int, rng: random.Random) -> list[tuple[str, float]]:
    """Distinct morphed architectures (random walks from the seed) with their synthetic accuracy."""
    pool = [(to_json(seed_graph), synthetic_accuracy(seed_graph))]
    current = seed_graph
    while len(pool) < size:
        current = seed_graph if rng.random() < 0.15 else current
        current = random_morph(current, rng).graph
        pool.append((to_json(current), synthetic_accuracy(current)))
    return pool


def history_of(pool: list[tuple[str, float]], size: int, rng: random.Random) -> History:
    history = History()
    for model_id in range(size):
        text, accuracy = pool[model_id % len(pool)]
        parent = None if model_id == 0 else rng.randrange(model_id)
        history.append(ModelRecord(model_id, parent, text, accuracy=accuracy + rng.gauss(0, 0.01)))
    return history


def measure(pool: list[tuple[str, float]], size: int) -> tuple[float, float, float]:
    """(cold first ask, median of the next asks, max of them) in seconds."""
    rng = random.Random(size)
    history = history_of(pool, size, rng)
    search = BayesianSearch(history, seed=size)
    start = time.perf_counter()
    proposal = search.ask()
    cold = time.perf_counter() - start
    times = []
    for _ in range(ASKS):
        search.tell(ModelRecord(history.next_id, proposal.parent, to_json(proposal.graph),
                                accuracy=synthetic_accuracy(proposal.graph)))  # fmt: skip
        start = time.perf_counter()
        proposal = search.ask()
        times.append(time.perf_counter() - start)
    return cold, statistics.median(times), max(times)


def run() -> str:
    rows = ["| seed model | history | first ask (cold caches) | ask, median | ask, max |", "|---|---|---|---|---|"]
    verdicts = []
    for name, seed_graph, sizes in (("tiny", tiny_resnet(), SIZES), ("resnet50 32²", resnet50(32, 3, 10), SIZES)):
        pool = pool_of(seed_graph, POOL, random.Random(0))
        for size in sizes:
            cold, median, worst = measure(pool, size)
            rows.append(f"| {name} | {size:,} | {cold * 1e3:.0f} ms | {median * 1e3:.0f} ms | {worst * 1e3:.0f} ms |")
            print(rows[-1], flush=True)
            if size == SIZES[-1]:
                verdicts.append(f"{name}: {median * 1e3:.0f} ms at {size:,} ({'meets' if median < 1 else 'MISSES'})")
    notes = [
        "",
        f"History of N models built from a pool of {POOL} distinct morphed architectures with a synthetic accuracy; "
        f"{ASKS} asks, each after a tell. Default SearchConfig (working set 128, 8 anchors, 24 candidates).",
        "",
        "Goal: flat in N, under 1 s at 10,000 on one core — " + "; ".join(verdicts) + ".",
    ]
    return "\n".join(rows + notes)
