"""The model graph: validation with named nodes, shapes, JSON, parameters."""

import json
import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.model import (
    GraphBuilder,
    GraphError,
    from_json,
    graphs_equal,
    infer_shapes,
    param_counts,
    param_shapes,
    to_json,
    total_params,
    with_kernel_size,
)
from aiperf_mpi.graph.seeds import resnet50, seed_model, tiny_resnet
from tests.support.random_graphs import random_graph


def small() -> GraphBuilder:
    b = GraphBuilder(8, 8, 3, name="small")
    return b


# --------------------------------------------------------------------------- validation


def test_unknown_layer_type_is_named() -> None:
    b = small()
    x = b.layer("gelu", [b.input], name="weird")
    b.softmax(b.dense(b.gap(x), 2))
    with pytest.raises(GraphError, match="unknown layer type 'gelu'") as caught:
        b.build()
    assert caught.value.node == "weird"


def test_add_of_mismatched_shapes_is_named() -> None:
    b = small()
    a = b.conv(b.input, 4, 3)
    c = b.conv(b.input, 8, 3)
    b.dense(b.gap(b.add([a, c], name="bad_add")), 2)
    with pytest.raises(GraphError, match="add needs inputs of one shape") as caught:
        b.build()
    assert caught.value.node == "bad_add"


def test_concat_needs_same_spatial_size() -> None:
    b = small()
    a = b.conv(b.input, 4, 3)
    c = b.conv(b.input, 4, 3, stride=2)
    b.dense(b.gap(b.concat([a, c], name="cat")), 2)
    with pytest.raises(GraphError) as caught:
        b.build()
    assert caught.value.node == "cat"


def test_cycle_is_reported() -> None:
    b = small()
    a = b.conv(b.input, 3, 3, name="a")
    c = b.relu(a, name="c")
    b.dense(b.gap(c), 2)
    b.graph.remove_edge("input", "a")
    b.graph.add_edge("c", "a", slot=0)
    with pytest.raises(GraphError, match="cycle") as caught:
        infer_shapes(b.graph)
    assert caught.value.node in {"a", "c"}


def test_dangling_output_is_named() -> None:
    b = small()
    x = b.conv(b.input, 4, 3)
    b.relu(x, name="unused")
    b.dense(b.gap(x), 2, name="out")
    with pytest.raises(GraphError, match="exactly one output"):
        b.build()


def test_node_not_reachable_from_input_is_named() -> None:
    b = small()
    x = b.conv(b.input, 4, 3)
    b.graph.add_node("orphan", type="relu")
    b.graph.add_node("orphan_src", type="bn")
    b.graph.add_edge("orphan_src", "orphan", slot=0)
    b.graph.add_edge("orphan", "join", slot=1)
    b.graph.add_node("join", type="add")
    b.graph.add_edge(x, "join", slot=0)
    b.dense(b.gap("join"), 2)
    with pytest.raises(GraphError) as caught:
        b.build()
    assert caught.value.node == "orphan_src"


@pytest.mark.parametrize(
    ("mutate", "node", "message"),
    [
        (lambda g: g.nodes["c1"].pop("filters"), "c1", "missing attribute"),
        (lambda g: g.nodes["c1"].update(kernel=0), "c1", "kernel must be a positive integer"),
        (lambda g: g.nodes["c1"].update(padding="full"), "c1", "padding"),
        (lambda g: g.nodes["c1"].update(kernel=9, padding="valid"), "c1", "does not fit"),
        (lambda g: g.nodes["d"].update(rate=1.5), "d", "rate"),
    ],
)
def test_bad_attributes_are_named(mutate, node: str, message: str) -> None:
    b = small()
    x = b.dropout(b.conv(b.input, 4, 3, name="c1"), 0.1, name="d")
    b.dense(b.gap(x), 2)
    mutate(b.graph)
    with pytest.raises(GraphError, match=message) as caught:
        infer_shapes(b.graph)
    assert caught.value.node == node


def test_dense_on_an_image_and_softmax_in_the_middle_are_refused() -> None:
    b = small()
    b.dense(b.conv(b.input, 4, 3), 2, name="flat")
    with pytest.raises(GraphError, match="flat input") as caught:
        b.build()
    assert caught.value.node == "flat"

    b = small()
    s = b.softmax(b.gap(b.conv(b.input, 4, 3)), name="early")
    b.dense(s, 2)
    with pytest.raises(GraphError, match="only allowed as the output") as caught:
        b.build()
    assert caught.value.node == "early"


def test_wrong_number_of_inputs_is_named() -> None:
    b = small()
    x = b.conv(b.input, 4, 3)
    b.dense(b.gap(b.add([x], name="lonely")), 2)
    with pytest.raises(GraphError, match="at least 2") as caught:
        b.build()
    assert caught.value.node == "lonely"


# --------------------------------------------------------------------------- shapes and params


def test_resnet50_shapes_follow_the_paper() -> None:
    shapes = infer_shapes(resnet50())
    assert shapes["stem_conv"] == (112, 112, 64)
    assert shapes["stem_pool"] == (56, 56, 64)
    assert shapes["s2b3_out"] == (56, 56, 256)
    assert shapes["s3b4_out"] == (28, 28, 512)
    assert shapes["s4b6_out"] == (14, 14, 1024)
    assert shapes["s5b3_out"] == (7, 7, 2048)
    assert shapes["softmax"] == (1000,)


def test_resnet50_parameters() -> None:
    graph = resnet50()
    counts = param_counts(graph)
    # the published 25,557,032 counts trainable parameters; BN's moving statistics add 2 per channel
    assert sum(t for t, _ in counts.values()) == 25_557_032
    assert total_params(graph) == 25_610_152
    assert sum(1 for _, d in graph.nodes(data=True) if d["type"] == "conv") == 53


def test_kernel_size_changes_the_graph_and_everything_derived() -> None:
    base = tiny_resnet()
    tuned = with_kernel_size(base, 5)
    kernels = {n: d["kernel"] for n, d in tuned.nodes(data=True) if d["type"] == "conv"}
    assert kernels["b1_conv1"] == 5 and kernels["b2_conv2"] == 5
    assert kernels["stem_conv"] == 3 and kernels["b2_proj"] == 1  # not tunable
    assert total_params(tuned) > total_params(base)
    assert infer_shapes(tuned) == infer_shapes(base)
    with pytest.raises(GraphError, match="odd"):
        with_kernel_size(base, 4)


def test_seed_lookup() -> None:
    assert seed_model("tiny", 16, 1, 4).graph["name"] == "tiny_resnet"
    with pytest.raises(GraphError, match="unknown seed model"):
        seed_model("vgg", 32, 3, 10)
    with pytest.raises(GraphError, match="image size"):
        resnet50(image_size=8)


# --------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("graph", [resnet50(), tiny_resnet(), resnet50(32, 3, 10)], ids=["r50", "tiny", "r50-32"])
def test_json_round_trip_of_seeds(graph: nx.DiGraph) -> None:
    text = to_json(graph)
    back = from_json(text)
    assert graphs_equal(graph, back)
    assert to_json(back) == text


def test_resnet50_json_is_small_enough_for_a_message() -> None:
    assert len(to_json(resnet50())) < 32 * 1024


@given(st.integers(min_value=0, max_value=10**9))
@settings(max_examples=200, deadline=None)
def test_json_round_trip_is_identity_on_random_graphs(seed: int) -> None:
    graph = random_graph(seed)
    text = to_json(graph)
    back = from_json(text)
    assert graphs_equal(graph, back)
    assert to_json(back) == text
    assert infer_shapes(back) == infer_shapes(graph)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a graph JSON"),
        ('{"format": "other"}', "not a aiperf_mpi.graph/1"),
        (
            '{"format": "aiperf_mpi.graph/1", "nodes": [{"id": "a", "type": "input"}], "edges": [["a", "b", 0]]}',
            "unknown node",
        ),
    ],
)
def test_bad_json_is_a_graph_error(text: str, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        from_json(text)


def test_json_is_canonical_regardless_of_insertion_order() -> None:
    graph = tiny_resnet()
    shuffled = nx.DiGraph(**graph.graph)
    for node in reversed(list(graph.nodes)):
        shuffled.add_node(node, **graph.nodes[node])
    for u, v, d in reversed(list(graph.edges(data=True))):
        shuffled.add_edge(u, v, **d)
    assert to_json(shuffled) == to_json(graph)
    assert json.loads(to_json(graph))["nodes"][0]["id"] == "input"


def test_parameter_shapes_are_the_keras_layout_of_each_layer() -> None:
    """What a weights file of the graph must hold, known without TensorFlow (the verifier's weights row)."""
    graph = with_kernel_size(tiny_resnet(), 5)
    shapes = param_shapes(graph)
    assert shapes["stem_conv"] == [(3, 3, 3, 16)]  # no bias: conv's default
    assert shapes["b1_conv1"][0][:2] == (5, 5)  # the tuned kernel
    assert shapes["stem_bn"] == [(16,)] * 4  # γ, β, moving mean and variance
    dense = next(n for n, d in graph.nodes(data=True) if d["type"] == "dense")
    [source] = graph.predecessors(dense)
    assert shapes[dense] == [(infer_shapes(graph)[source][-1], 10), (10,)]  # kernel (in, units) and bias
    assert set(shapes) == {n for n, d in graph.nodes(data=True) if d["type"] in ("conv", "dense", "bn")}
    assert sum(math.prod(s) for layer in shapes.values() for s in layer) == total_params(graph)


def test_a_child_deeper_than_the_seed_trains_at_a_batch_within_the_seeds_activations() -> None:
    """Issue 50: a training rank's memory follows its batch's activations, and a child deeper than the seed holds
    more a sample; the leader halves the tuner's batch until the child's activations fit the seed's at the
    tuner's largest (what the start line counts), never below the smallest."""
    import random

    from aiperf_mpi.graph.model import SMALLEST_BATCH, activation_bytes_per_sample, batch_within
    from aiperf_mpi.graph.morph import apply_morph, candidates
    from aiperf_mpi.graph.seeds import seed_model

    seed = seed_model("tiny", 32, 3, 10)
    budget = activation_bytes_per_sample(seed) * 512
    assert batch_within(seed, 512, budget) == 512 and batch_within(seed, 64, budget) == 64  # the seed: as asked
    child, rng = seed, random.Random(0)
    for _ in range(12):  # deeper at its first ReLU (full resolution), a step at a time
        child = apply_morph(child, "deeper", candidates(child, "deeper")[0], rng).graph
    per_sample = activation_bytes_per_sample(child)
    assert per_sample > activation_bytes_per_sample(seed)
    fitted = batch_within(child, 512, budget)
    assert fitted < 512 and per_sample * fitted <= budget and per_sample * fitted * 2 > budget
    assert batch_within(child, 16, budget) == 16 and batch_within(child, 512, 0) == SMALLEST_BATCH
