"""Morphisms on graphs: valid children, more work, clear refusals (no TensorFlow)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.model import GraphBuilder, infer_shapes, total_params
from aiperf_mpi.graph.morph import (
    MORPH_KINDS,
    MorphError,
    add_skip,
    apply_morph,
    candidates,
    channel_path,
    compose,
    concat_skip,
    deeper,
    random_morph,
    wider,
)
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet


def kinds_count(graph, kind: str) -> int:
    return sum(1 for _, t in graph.nodes(data="type") if t == kind)


def test_deeper_inserts_a_whole_block_after_the_relu() -> None:
    graph = tiny_resnet()
    child = deeper(graph, "b1_out", kernel=5)
    new = [n for n in child.graph if n not in graph]
    assert sorted(child.graph.nodes[n]["type"] for n in new) == ["bn", "conv", "relu"]
    conv = next(n for n in new if child.graph.nodes[n]["type"] == "conv")
    assert child.graph.nodes[conv]["kernel"] == 5 and child.graph.nodes[conv]["tunable"]
    assert set(child.graph.successors("b1_out")) == {conv}  # every old consumer moved behind the block
    assert [s["op"] for s in child.plan] == ["identity_conv", "identity_bn"]


def test_wider_widens_the_conv_and_plans_for_its_consumers() -> None:
    graph = tiny_resnet()
    child = wider(graph, "b1_conv1", 8, random.Random(0))
    assert child.graph.nodes["b1_conv1"]["filters"] == 24
    assert infer_shapes(child.graph)["b1_relu1"] == (32, 32, 24)
    ops = {(s["op"], s["layer"]) for s in child.plan}
    assert ops == {("widen_out", "b1_conv1"), ("widen_bn", "b1_bn1"), ("widen_in", "b1_conv2")}
    assert all(0 <= source < 16 for source in child.plan[0]["sources"])


def test_wider_refuses_a_conv_feeding_an_add() -> None:
    with pytest.raises(MorphError, match="reach add"):
        wider(tiny_resnet(), "b1_conv2", 4, random.Random(0))
    with pytest.raises(MorphError, match="not one"):
        wider(tiny_resnet(), "b1_bn1", 4, random.Random(0))


def test_skips_project_with_the_right_stride() -> None:
    graph = tiny_resnet()
    child = add_skip(graph, "stem_relu", "b2_relu1")
    proj = next(n for n in child.graph if n.startswith("skip_conv"))
    assert child.graph.nodes[proj]["stride"] == 2 and child.graph.nodes[proj]["kernel"] == 1
    assert child.plan == [{"op": "zero_conv", "layer": proj, "kernel": 1, "cin": 16, "cout": 32}]

    child = concat_skip(graph, "stem_relu", "b1_relu1", random.Random(0))
    assert infer_shapes(child.graph)[next(n for n in child.graph if n.startswith("skip_concat"))][2] == 16 + 8
    assert {s["op"] for s in child.plan} == {"random_conv", "extend_in_zero"}


def test_skips_refuse_backwards_and_impossible_strides() -> None:
    graph = tiny_resnet()
    with pytest.raises(MorphError, match="goes forward"):
        add_skip(graph, "b2_relu1", "stem_relu")
    b = GraphBuilder(9, 9, 3)
    x = b.relu(b.conv(b.input, 4, 3), name="a")
    y = b.relu(b.conv(x, 4, 3, stride=2, padding="valid"), name="b")  # 4×4: no stride maps 9→4
    b.dense(b.gap(b.relu(b.conv(y, 4, 1))), 2)
    with pytest.raises(MorphError, match="no stride"):
        add_skip(b.build(), "a", "b")
    with pytest.raises(MorphError, match="reach add"):
        concat_skip(graph, "input", "stem_relu", random.Random(0))  # stem_relu feeds b1_add


def test_the_output_cannot_be_widened_or_deepened() -> None:
    b = GraphBuilder(8, 8, 3)
    b.relu(b.conv(b.input, 4, 3), name="last")
    graph = b.graph
    with pytest.raises(MorphError):
        channel_path(graph, "last")


@pytest.mark.parametrize("kind", MORPH_KINDS)
def test_every_place_gives_a_valid_child_with_more_work(kind: str) -> None:
    graph = tiny_resnet()
    base = count_ops(graph)
    rng = random.Random(1)
    places = candidates(graph, kind)
    assert places
    for place in places:
        child = apply_morph(graph, kind, place, rng)
        ops = count_ops(child.graph)  # validates too
        assert ops.forward_eval > base.forward_eval, (kind, place)
        assert total_params(child.graph) > total_params(graph)


def test_deeper_and_wider_add_more_than_a_skip() -> None:
    graph = tiny_resnet()
    base = count_ops(graph).forward_eval
    deep = count_ops(deeper(graph, "b1_relu1").graph).forward_eval - base
    wide = count_ops(wider(graph, "b1_conv1", 8, random.Random(0)).graph).forward_eval - base
    skip = count_ops(add_skip(graph, "stem_relu", "b1_relu1").graph).forward_eval - base
    assert deep > skip and wide > skip


@given(st.integers(0, 10**6), st.integers(1, 8))
@settings(max_examples=40, deadline=None)
def test_random_morph_sequences_stay_valid_and_grow(seed: int, length: int) -> None:
    rng = random.Random(seed)
    graph = tiny_resnet()
    morphed = random_morph(graph, rng)
    previous = count_ops(graph).forward_eval
    for _ in range(length):
        current = count_ops(morphed.graph).forward_eval
        assert current > previous
        previous = current
        morphed = compose(morphed, random_morph(morphed.graph, rng))
    assert morphed.morphs == length + 1


def test_random_morph_uses_every_kind() -> None:
    rng = random.Random(0)
    seen = {random_morph(tiny_resnet(), rng).description.split(":")[0] for _ in range(40)}
    assert seen == {"deeper", "wider", "add-skip", "concat-skip"}


def test_resnet50_offers_every_kind() -> None:
    graph = resnet50(32, 3, 10)
    for kind in ("deeper", "wider"):
        assert candidates(graph, kind)
    rng = random.Random(2)
    kinds = {random_morph(graph, rng).description.split(":")[0] for _ in range(24)}
    assert {"add-skip", "concat-skip"} <= kinds
