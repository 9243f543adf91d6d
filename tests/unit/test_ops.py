"""The analytic operation counter, checked against hand-worked numbers."""

import pytest

from aiperf_mpi.graph.model import GraphBuilder, with_kernel_size
from aiperf_mpi.graph.ops import (
    ELEMENT_OPS,
    MOVING_AVERAGE_OPS,
    OPS_PER_MAC,
    SGD_MOMENTUM_OPS,
    count_ops,
    epoch_ops,
)
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet


def by_name(model):
    return {layer.name: layer for layer in model.layers}


def test_resnet50_forward_is_the_published_3_86_gmac() -> None:
    ops = count_ops(resnet50())
    assert ops.macs == pytest.approx(3.86e9, rel=0.02)
    conv_dense = sum(layer.forward_eval for layer in ops.layers if layer.type in ("conv", "dense"))
    assert conv_dense == pytest.approx(7.72e9, rel=0.02)
    assert ops.params == 25_610_152 and ops.trainable_params == 25_557_032


def test_hand_counted_conv_and_dense() -> None:
    b = GraphBuilder(8, 8, 3)
    c1 = b.conv(b.input, 4, 3, name="c1")  # 8×8×4, first layer, no bias
    c2 = b.conv(c1, 6, 3, stride=2, bias=True, name="c2")  # 4×4×6
    d = b.dense(b.gap(c2, name="g"), 5, name="d")
    graph = b.build()
    layers = by_name(count_ops(graph))
    c1_macs = 9 * 3 * 4 * 8 * 8
    assert layers["c1"].forward_eval == OPS_PER_MAC * c1_macs
    assert layers["c1"].backward == OPS_PER_MAC * c1_macs  # weight gradient only: no input gradient
    c2_macs = 9 * 4 * 6 * 4 * 4
    assert layers["c2"].forward_eval == OPS_PER_MAC * c2_macs + 4 * 4 * 6
    assert layers["c2"].backward == 2 * OPS_PER_MAC * c2_macs + 4 * 4 * 6
    assert layers[d].forward_eval == 2 * 6 * 5 + 5
    assert layers[d].backward == 2 * (2 * 6 * 5) + 5
    assert layers["g"].forward_eval == 4 * 4 * 6
    assert layers["c1"].update == SGD_MOMENTUM_OPS * 9 * 3 * 4


def test_first_layer_after_parameter_free_layers_has_no_input_gradient() -> None:
    b = GraphBuilder(8, 8, 3)
    x = b.maxpool(b.relu(b.input, name="r0"), 2, name="p0")
    b.dense(b.gap(b.conv(x, 4, 3, name="c")), 2)
    layers = by_name(count_ops(b.build()))
    macs = 9 * 3 * 4 * 4 * 4
    assert layers["c"].backward == OPS_PER_MAC * macs
    assert layers["r0"].backward == 0 and layers["p0"].backward == 0


def test_fan_out_sums_gradients() -> None:
    b = GraphBuilder(4, 4, 2)
    x = b.conv(b.input, 2, 1, name="c")
    y = b.relu(x, name="r")
    b.dense(b.gap(b.add([x, y], name="a")), 2)
    layers = by_name(count_ops(b.build()))
    elements = 4 * 4 * 2
    # c's output feeds r and a: one extra add per element on the way back
    assert layers["c"].backward == OPS_PER_MAC * (2 * 4 * 4 * 2) + elements
    assert layers["a"].forward_eval == elements and layers["a"].backward == 0


def test_element_table_drives_bn_and_pools() -> None:
    b = GraphBuilder(6, 6, 2)
    x = b.bn(b.conv(b.input, 2, 1), name="bn")
    x = b.maxpool(x, 3, 1, padding="same", name="mp")
    x = b.avgpool(x, 2, 2, name="ap")
    b.dense(b.gap(x), 2)
    layers = by_name(count_ops(b.build()))
    bn = ELEMENT_OPS["bn"]
    out = 6 * 6 * 2
    assert layers["bn"].forward_train == bn.forward_train * out
    assert layers["bn"].forward_eval == bn.forward_eval * out
    assert layers["bn"].backward == (bn.backward_params + bn.backward_input) * out
    assert layers["bn"].update == SGD_MOMENTUM_OPS * 4 + MOVING_AVERAGE_OPS * 4
    assert layers["mp"].forward_eval == out * (9 - 1)
    assert layers["ap"].forward_eval == 3 * 3 * 2 * 4


def test_backward_is_about_twice_forward_on_a_conv_dominated_graph() -> None:
    ops = count_ops(resnet50())
    assert 1.9 < ops.backward / ops.forward_eval < 2.05


def test_update_is_per_step_not_per_sample() -> None:
    ops = count_ops(tiny_resnet())
    small_batch = epoch_ops(ops, train_samples=1000, validation_samples=200, global_batch=10)
    large_batch = epoch_ops(ops, train_samples=1000, validation_samples=200, global_batch=100)
    assert small_batch.train == large_batch.train == 1000 * (ops.forward_train + ops.backward)
    assert small_batch.steps == 100 and large_batch.steps == 10
    assert small_batch.update == 10 * large_batch.update == 100 * ops.update
    assert small_batch.validation == 200 * ops.forward_eval
    assert epoch_ops(ops, 1001, 0, 100).steps == 11  # a partial batch is a step
    assert ops.train_step(32) == 32 * (ops.forward_train + ops.backward) + ops.update


def test_tuned_kernel_size_is_counted() -> None:
    base = count_ops(tiny_resnet())
    tuned = count_ops(with_kernel_size(tiny_resnet(), 5))
    base_layers, tuned_layers = by_name(base), by_name(tuned)
    assert tuned_layers["b1_conv1"].macs * 9 == base_layers["b1_conv1"].macs * 25
    assert tuned_layers["stem_conv"].macs == base_layers["stem_conv"].macs


def test_epoch_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        epoch_ops(count_ops(tiny_resnet()), 10, 10, 0)


def test_the_documented_table_equals_the_code() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "counting.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].startswith("`") and cells[0].strip("`") in ELEMENT_OPS:
            rows[cells[0].strip("`")] = [float(c) for c in cells[2:6]]
    assert set(rows) == set(ELEMENT_OPS)
    for kind, cost in ELEMENT_OPS.items():
        assert rows[kind] == [cost.forward_train, cost.forward_eval, cost.backward_input, cost.backward_params], kind
