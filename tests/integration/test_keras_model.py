"""Graph → Keras: every attribute honoured, and the op count checked by TensorFlow's profiler."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.model import GraphBuilder, infer_shapes, param_shapes, total_params, with_kernel_size
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from tests.support.random_graphs import random_graph

keras = pytest.importorskip("keras")
from aiperf_mpi.train.keras_model import build_keras_model  # noqa: E402
from tests.support.tf_profile import PROFILER_CONVENTIONS, expected_profiler_ops, profiler_float_ops  # noqa: E402

pytestmark = pytest.mark.tf


def conv_kernels(model) -> dict[str, tuple[int, ...]]:
    return {layer.name: tuple(layer.kernel.shape) for layer in model.layers if isinstance(layer, keras.layers.Conv2D)}


def test_resnet50_parameter_count_equals_keras() -> None:
    graph = resnet50(224, 3, 1000)
    model = build_keras_model(graph)
    assert model.count_params() == total_params(graph) == 25_610_152
    assert len(model.layers) == graph.number_of_nodes()


def test_tuned_kernel_size_is_the_kernel_that_is_built() -> None:
    graph = with_kernel_size(tiny_resnet(), 5)
    kernels = conv_kernels(build_keras_model(graph))
    for node, data in graph.nodes(data=True):
        if data["type"] == "conv":
            assert kernels[node][:2] == (data["kernel"], data["kernel"]), node
    assert kernels["b1_conv1"][:2] == (5, 5)
    assert kernels["stem_conv"][:2] == (3, 3)
    assert build_keras_model(graph).count_params() == total_params(graph)


@given(st.integers(min_value=0, max_value=10**9))
@settings(max_examples=25, deadline=None)
def test_shapes_and_attributes_agree_with_keras_layer_by_layer(seed: int) -> None:
    graph = random_graph(seed)
    shapes = infer_shapes(graph)
    model = build_keras_model(graph)
    for layer in model.layers:
        assert tuple(layer.output.shape[1:]) == shapes[layer.name], layer.name
    for name, kernel in conv_kernels(model).items():
        data = graph.nodes[name]
        assert kernel == (data["kernel"], data["kernel"], kernel[2], data["filters"])
        assert model.get_layer(name).strides == (data["stride"], data["stride"])
        assert model.get_layer(name).padding == data["padding"]
        assert model.get_layer(name).use_bias == data["bias"]
    assert model.count_params() == total_params(graph)
    # what a weights file of the graph holds, known without TensorFlow (verify's weights row): Keras' own arrays
    expected = {layer.name: [tuple(w.shape) for w in layer.weights] for layer in model.layers if layer.weights}
    assert param_shapes(graph) == expected


# --------------------------------------------------------------------------- against the profiler


def deepened() -> nx.DiGraph:
    """tiny_resnet with an extra conv-BN-ReLU block after the first residual block."""
    b = GraphBuilder(32, 32, 3, name="deepened")
    x = b.conv_bn_relu(b.input, 16, 3)
    y = b.bn(b.conv(b.conv_bn_relu(x, 16, 3), 16, 3))
    x = b.relu(b.add([x, y]))
    x = b.conv_bn_relu(x, 16, 3, tunable=True)  # the inserted block
    x = b.conv_bn_relu(x, 32, 3, stride=2)
    b.softmax(b.dense(b.gap(x), 10))
    return b.build()


def with_add_skip() -> nx.DiGraph:
    """A skip from the stem to the second block, through a 1×1 stride-2 conv."""
    b = GraphBuilder(32, 32, 3, name="add_skip")
    stem = b.conv_bn_relu(b.input, 16, 3)
    x = b.conv_bn_relu(stem, 32, 3, stride=2)
    y = b.bn(b.conv(x, 32, 3))
    skip = b.conv(stem, 32, 1, stride=2)
    x = b.relu(b.add([x, y, skip]))
    b.softmax(b.dense(b.gap(x), 10))
    return b.build()


def with_concat_skip() -> nx.DiGraph:
    """The stem concatenated to a later tensor, then pooled with both pool types."""
    b = GraphBuilder(32, 32, 3, name="concat_skip")
    stem = b.conv_bn_relu(b.input, 8, 3)
    x = b.conv_bn_relu(stem, 16, 3)
    x = b.concat([x, stem])
    x = b.maxpool(x, 3, 2, padding="same")
    x = b.avgpool(x, 2)
    x = b.dropout(b.conv_bn_relu(x, 16, 3), 0.25)
    b.softmax(b.dense(b.gap(x), 10))
    return b.build()


GRAPHS = {
    "resnet50-224": lambda: resnet50(224, 3, 1000),
    "tiny": tiny_resnet,
    "widened": lambda: tiny_resnet(width=24),
    "deepened": deepened,
    "add-skip": with_add_skip,
    "concat-skip": with_concat_skip,
}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_counter_agrees_with_tensorflow_profiler(name: str) -> None:
    graph = GRAPHS[name]()
    ops = count_ops(graph)
    shapes = infer_shapes(graph)
    profiled = profiler_float_ops(build_keras_model(graph))
    ours_total = tf_total = 0
    seen_types = set()
    for layer in ops.layers:
        tf_ops = sum(profiled.get(layer.name, {}).values())
        seen_types.add(layer.type)
        # conv, dense, gap, add, softmax: the same convention, so the same number;
        # bn, relu, maxpool: TensorFlow's convention (PROFILER_CONVENTIONS), exactly
        assert tf_ops == expected_profiler_ops(graph, layer, shapes), (layer.name, layer.type, profiled.get(layer.name))
        ours_total += layer.forward_eval
        tf_total += tf_ops
    assert seen_types <= set(PROFILER_CONVENTIONS) | {"conv", "dense"}
    ours_matrix = sum(layer.forward_eval for layer in ops.layers if layer.type in ("conv", "dense"))
    tf_matrix = sum(
        sum(profiled.get(layer.name, {}).values()) for layer in ops.layers if layer.type in ("conv", "dense")
    )
    assert ours_matrix == pytest.approx(tf_matrix, rel=1e-3)
    if name == "resnet50-224":
        assert ours_total == pytest.approx(tf_total, rel=0.01)
