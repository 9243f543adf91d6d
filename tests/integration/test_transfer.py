"""Function preservation: a morphed child with transferred weights computes its parent's function."""

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.morph import MORPH_KINDS, apply_morph, candidates, compose, random_morph
from aiperf_mpi.graph.seeds import tiny_resnet

keras = pytest.importorskip("keras")
from aiperf_mpi.train.keras_model import build_keras_model  # noqa: E402
from aiperf_mpi.train.transfer import TransferError, transfer_weights  # noqa: E402

pytestmark = pytest.mark.tf
TOLERANCE = 1e-4


def randomised(model, seed: int):
    """Non-trivial weights and BN statistics, so that preservation is not an accident of zeros and ones."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, c), rng.normal(0, 0.2, c), rng.normal(0, 0.2, c),
                               rng.uniform(0.5, 2.0, c)])  # fmt: skip
        elif layer.weights:
            layer.set_weights([rng.normal(0, 0.3, w.shape) for w in layer.weights])
    return model


def logits(model, x):
    """The pre-softmax output in inference mode (softmax would hide differences)."""
    return keras.Model(model.inputs, model.get_layer("fc").output)([x], training=False).numpy()


def check_preserved(parent_graph, morphed, seed: int = 0) -> None:
    parent = randomised(build_keras_model(parent_graph), seed)
    child = build_keras_model(morphed.graph)
    transfer_weights(parent, child, morphed.plan)
    x = np.random.default_rng(seed + 1).normal(size=(4, 32, 32, 3)).astype(np.float32)
    np.testing.assert_allclose(logits(child, x), logits(parent, x), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("kind", MORPH_KINDS)
def test_each_morphism_preserves_the_function(kind: str) -> None:
    graph = tiny_resnet()
    rng = random.Random(3)
    places = candidates(graph, kind)
    assert places, kind
    for place in rng.sample(places, min(3, len(places))):
        check_preserved(graph, apply_morph(graph, kind, place, rng, kernel=rng.choice([1, 3, 5])))


@given(st.integers(0, 10**6), st.integers(1, 5))
@settings(max_examples=12, deadline=None)
def test_random_sequences_of_morphisms_preserve_the_function(seed: int, length: int) -> None:
    rng = random.Random(seed)
    graph = tiny_resnet()
    morphed = random_morph(graph, rng)
    for _ in range(length - 1):
        morphed = compose(morphed, random_morph(morphed.graph, rng))
    check_preserved(graph, morphed, seed)


def test_a_plan_that_does_not_fit_is_an_error() -> None:
    graph = tiny_resnet()
    morphed = apply_morph(graph, "wider", ("b1_conv1",), random.Random(0))
    parent = build_keras_model(tiny_resnet(width=8))
    with pytest.raises(TransferError):
        transfer_weights(parent, build_keras_model(morphed.graph), morphed.plan)


def test_a_parent_weights_file_that_cannot_be_read_costs_the_child_its_inheritance_not_the_run(tmp_path) -> None:
    """Read on the group's first rank alone: an error there would strand the others in the trainer's collective."""
    from aiperf_mpi.train.runner import read_parent_weights
    from aiperf_mpi.train.transfer import model_weights, save_weights

    weights = model_weights(build_keras_model(tiny_resnet(8, 3, 4)))
    (tmp_path / "weights").mkdir()
    save_weights(tmp_path / "weights/task-1.npz", weights)
    read, note = read_parent_weights(tmp_path, "weights/task-1.npz")
    assert note == "" and read.keys() == weights.keys()
    assert all(np.array_equal(a, b) for name in weights for a, b in zip(read[name], weights[name], strict=True))

    whole = (tmp_path / "weights/task-1.npz").read_bytes()
    for damage in (whole[: len(whole) // 2], b"not a zip file", b""):  # a full disk, another file, nothing
        (tmp_path / "weights/task-2.npz").write_bytes(damage)
        read, note = read_parent_weights(tmp_path, "weights/task-2.npz")
        assert read is None and note.startswith("parent weights weights/task-2.npz could not be read (")
        assert note.endswith("): trained from scratch") and "\n" not in note
    read, note = read_parent_weights(tmp_path, "weights/task-3.npz")
    assert read is None and note == "parent weights weights/task-3.npz not readable here: trained from scratch"


def test_a_weights_file_is_its_arrays_bytes_read_back_from_best_and_its_shapes_read_without_tensorflow(
        tmp_path) -> None:  # fmt: skip
    """The same arrays give the same bytes (the sha256 the log records survives a restore from best/model.keras),
    ``numpy.load`` reads them, and the verifier's header reader sees exactly the graph's shapes."""
    import time

    from aiperf_mpi.graph.model import param_shapes
    from aiperf_mpi.results.stored_weights import file_sha256, npz_shapes
    from aiperf_mpi.train.transfer import load_weights, model_weights, read_weights, save_weights

    graph = tiny_resnet(8, 3, 4)
    model = build_keras_model(graph)
    weights = model_weights(model)
    save_weights(tmp_path / "a.npz", weights)
    time.sleep(2.1)  # a zip member's time has a resolution of two seconds: cross at least one
    model.save(tmp_path / "model.keras")
    save_weights(tmp_path / "b.npz", read_weights(tmp_path / "model.keras"))  # as an export restores a best model
    assert file_sha256(tmp_path / "a.npz") == file_sha256(tmp_path / "b.npz")
    assert npz_shapes(tmp_path / "a.npz") == param_shapes(graph)
    read = load_weights(tmp_path / "b.npz")
    assert all(np.array_equal(a, b) for name in weights for a, b in zip(read[name], weights[name], strict=True))
