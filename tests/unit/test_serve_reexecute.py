"""The re-execution's pure parts (aiperf_mpi/serve/reexecute.py): a loaded model's configuration read back into
the ruler's graph, the draw, the reviewer's labels, the rates' claims.  The configurations are Keras 3's own
format (``model.get_config()``, as ``model.keras`` stores it), written out here so no TensorFlow is loaded; the
round trip through a real Keras model and the forgeries through the command line are tests/integration/
test_serve.py."""

from __future__ import annotations

import numpy as np
import pytest

from aiperf_mpi.graph.model import GraphBuilder
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.serve.reexecute import (
    Uncountable,
    accuracy_against,
    draw,
    graph_of_model,
    rate_claims,
)


def tensor(producer: str) -> dict:
    return {"class_name": "__keras_tensor__", "config": {"shape": [None], "dtype": "float32",
                                                         "keras_history": [producer, 0, 0]}}  # fmt: skip


def layer(class_name: str, name: str, inputs: list[str], **config: object) -> dict:
    args = [] if not inputs else [[tensor(p) for p in inputs]] if len(inputs) > 1 else [tensor(inputs[0])]
    return {"module": "keras.layers", "class_name": class_name, "config": {"name": name, **config}, "name": name,
            "inbound_nodes": [{"args": args, "kwargs": {}}] if inputs else []}  # fmt: skip


def small_model(**conv: object) -> dict:
    """input → conv → bn → relu → (add with the conv) → gap → dense → softmax, in Keras' configuration."""
    conv_config = {"filters": 8, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "use_bias": False,
                   "activation": "linear", "groups": 1, "dilation_rate": [1, 1], "data_format": "channels_last",
                   **conv}  # fmt: skip
    return {"name": "small", "layers": [
        layer("InputLayer", "input", [], batch_shape=[None, 16, 16, 3]),
        layer("Conv2D", "conv", ["input"], **conv_config),
        layer("BatchNormalization", "bn", ["conv"], axis=-1, epsilon=1e-5, momentum=0.9, center=True, scale=True),
        layer("ReLU", "relu", ["bn"], max_value=None, negative_slope=0.0, threshold=0.0),
        layer("Add", "add", ["relu", "conv"]),
        layer("GlobalAveragePooling2D", "gap", ["add"], keepdims=False, data_format="channels_last"),
        layer("Dense", "dense", ["gap"], units=10, use_bias=True, activation="linear"),
        layer("Softmax", "softmax", ["dense"], axis=-1),
    ]}  # fmt: skip


def test_a_models_configuration_reads_back_into_the_graph_the_ruler_counts() -> None:
    builder = GraphBuilder(16, 16, 3, name="small")
    conv = builder.conv("input", 8, 3, name="conv")
    relu = builder.relu(builder.bn(conv, name="bn"), name="relu")
    builder.softmax(builder.dense(builder.gap(builder.add([relu, conv], name="add"), name="gap"), 10, name="dense"),
                    name="softmax")  # fmt: skip
    expected = count_ops(builder.build())
    counted = count_ops(graph_of_model(small_model()))
    assert counted.forward_eval == expected.forward_eval and counted.params == expected.params
    wider = count_ops(graph_of_model(small_model(filters=16)))  # a model that is not the graph counts otherwise
    assert wider.forward_eval > counted.forward_eval


@pytest.mark.parametrize(("change", "said"), [
    ({"dilation_rate": [2, 2]}, "a dilated convolution"),
    ({"activation": "relu"}, "activation 'relu', which the graph cannot say"),
    ({"kernel_size": [3, 1]}, "is not one square size"),
    ({"groups": 2}, "groups 2"),
])  # fmt: skip
def test_a_convolution_beyond_what_the_graph_says_is_uncountable(change: dict, said: str) -> None:
    with pytest.raises(Uncountable, match=said.replace("(", r"\(").replace(")", r"\)")):
        graph_of_model(small_model(**change))


def test_a_layer_the_ruler_has_no_count_for_or_a_shared_one_is_uncountable() -> None:
    model = small_model()
    model["layers"].insert(4, layer("Lambda", "sneaky", ["relu"]))
    with pytest.raises(Uncountable, match="a Lambda, which the ruler has no count for"):
        graph_of_model(model)
    shared = small_model()
    shared["layers"][3]["inbound_nodes"] *= 2
    with pytest.raises(Uncountable, match="called 2 times"):
        graph_of_model(shared)
    with pytest.raises(Uncountable, match="no layers"):
        graph_of_model({"name": "empty", "layers": []})


def test_the_draw_is_distinct_rows_in_order_and_all_of_a_small_input() -> None:
    rows = draw(1000, 64, seed=7)
    assert len(set(rows.tolist())) == 64 and list(rows) == sorted(rows) and rows.max() < 1000
    assert list(draw(10, 64, seed=7)) == list(range(10))
    assert list(draw(1000, 64, seed=7)) == list(rows) and list(draw(1000, 64, seed=8)) != list(rows)


def test_the_accuracy_counts_only_against_the_reviewers_labels() -> None:
    labels = np.array([0, 1, 2, 3])
    found = {"classes": np.array([0, 1, 2, 0]), "labels": np.array([0, 1, 2, 0])}  # the file's labels: its classes
    problems = accuracy_against(labels, found, None, {"correct": 4, "samples": 4})
    assert len(problems) == 2 and "labels differ from the reviewer's data in 1 of 4" in problems[0]
    assert "3 of 4 correct; the log says 4 of 4" in problems[1]
    honest = {"classes": np.array([0, 1, 2, 0]), "labels": labels}
    members = np.array([[0, 1, 2, 0], [0, 1, 2, 3]])
    assert accuracy_against(labels, honest, members, {"correct": 3, "samples": 4, "member_correct": [3, 4]}) == []
    assert "members' accuracy" in accuracy_against(labels, honest, members, {"correct": 3, "samples": 4,
                                                                              "member_correct": [4, 4]})[0]  # fmt: skip


def test_a_rate_is_a_claim_with_its_factor_and_no_number_a_failure() -> None:
    events = {"offline": [{"ops_per_second": 4e10}], "peak": [{"ops_per_second": 8e10}], "server": [{}]}
    claims, problems = rate_claims(events)
    assert problems == [] and "×0.5 the ranks' own measured peak" in claims[0] and "server latencies" in claims[-1]
    assert "names no host description" in claims[1]  # a log from before the hosts were logged: said
    events["offline"][0]["ops_per_second"] = 8e10 * 67 * 0.5  # the never-served run: printed as what it is
    claims, problems = rate_claims(events)
    assert problems == [] and "×33.5 the ranks' own measured peak" in claims[0]
    claims, problems = rate_claims({"offline": [{"ops_per_second": 4e10}]})
    assert problems == [] and "no peak was measured" in claims[0]
    for absurd in (float("inf"), float("nan"), -1.0, 0, "fast", True):
        assert rate_claims({"offline": [{"ops_per_second": absurd}]})[1], absurd
        assert rate_claims({"offline": [{"ops_per_second": 1e9}], "peak": [{"ops_per_second": absurd}]})[1], absurd


XEON = {"host": "a", "cpu": "Intel(R) Xeon(R) Processor", "cpu_vendor": "GenuineIntel", "cores": 2,
        "cpu_flags": ["avx2", "fma", "avx512f"], "accelerators": []}  # fmt: skip
"""a host as results.machine.local_description() gives it (this machine's kind)"""


def test_the_peak_and_the_rate_are_held_to_the_hardware_table_for_the_hosts_logged() -> None:
    from aiperf_mpi.results.hardware import host_bound

    bound = host_bound(XEON, 2, "fp32").ops_per_second
    assert bound is not None and bound > 0
    peak = {"ops_per_second": 0.4 * bound, "per_rank": [0.2 * bound, 0.2 * bound], "hosts": [XEON],
            "rank_hosts": ["a", "a"]}  # fmt: skip
    events = {"offline": [{"ops_per_second": 0.1 * bound}], "peak": [peak]}
    claims, problems = rate_claims(events, {**XEON, "host": "here"})
    assert problems == [] and any("the hardware named: Intel(R) Xeon(R) Processor (2 logical processors) on host "
                                  "'a': ×1 this machine's bound" in claim for claim in claims), claims  # fmt: skip
    faster = {**peak, "per_rank": [0.6 * bound, 0.6 * bound], "ops_per_second": 1.2 * bound}  # a probe forged up
    assert "above the hardware table's bound" in rate_claims({**events, "peak": [faster]})[1][0]
    never = {"offline": [{"ops_per_second": 1.5 * bound}], "peak": [faster]}  # and the rate with it: past both
    assert any("offline rate" in p and "every host together" in p for p in rate_claims(never)[1])
    unknown = {**peak, "hosts": [{**XEON, "cpu_vendor": "Made-up", "cpu": "Quantum 9000"}]}
    claims, problems = rate_claims({**events, "peak": [unknown]})
    assert problems == [] and any("the hardware table bounds no such host" in claim for claim in claims)
