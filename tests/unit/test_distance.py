"""The architecture distance: zero on equal graphs, symmetric, grows with morphs."""

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.morph import deeper, random_morph
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from aiperf_mpi.search.distance import distance, distances, main_chain, signature


def test_zero_on_identical_graphs_even_when_built_twice() -> None:
    assert distance(signature(resnet50()), signature(resnet50())) == 0.0
    assert distance(signature(tiny_resnet()), signature(tiny_resnet())) == 0.0


def test_main_chain_of_resnet_runs_through_the_convolution_branch() -> None:
    chain = main_chain(tiny_resnet())
    assert chain[0] == "input" and chain[-1] == "softmax"
    assert "b1_conv1" in chain and "b2_proj" not in chain


@given(st.integers(0, 10**6))
@settings(max_examples=30, deadline=None)
def test_symmetric_and_consistent_with_the_batched_form(seed: int) -> None:
    rng = random.Random(seed)
    a = random_morph(tiny_resnet(), rng).graph
    b = random_morph(random_morph(tiny_resnet(), rng).graph, rng).graph
    sa, sb = signature(a), signature(b)
    assert distance(sa, sb) == distance(sb, sa)
    assert distance(sa, sb) >= 0
    assert np.allclose(distances(sa, [sb, sa]), [distance(sa, sb), 0.0])


def test_grows_with_the_number_of_morphs() -> None:
    graph = tiny_resnet()
    base = signature(graph)
    last = 0.0
    for _ in range(5):
        relu = sorted(n for n, t in graph.nodes(data="type") if t == "relu")[0]
        graph = deeper(graph, relu).graph
        current = distance(base, signature(graph))
        assert current > last
        last = current


def test_random_morph_chains_drift_away_on_average() -> None:
    rng = random.Random(7)
    totals = np.zeros(4)
    for _ in range(10):
        graph = tiny_resnet()
        base = signature(graph)
        for steps in range(4):
            graph = random_morph(graph, rng).graph
            totals[steps] += distance(base, signature(graph))
    assert np.all(np.diff(totals) > 0), totals


def test_skips_count() -> None:
    from aiperf_mpi.graph.morph import add_skip, concat_skip

    graph = tiny_resnet()
    added = add_skip(graph, "stem_relu", "b1_relu1").graph
    concat = concat_skip(graph, "stem_relu", "b1_relu1", random.Random(0)).graph
    base = signature(graph)
    assert distance(base, signature(added)) > 0
    assert distance(signature(added), signature(concat)) > 0
