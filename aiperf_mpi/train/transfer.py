"""Apply a morphism's transfer plan: the parent's trained weights → the child's.

The plan (from :mod:`aiperf_mpi.graph.morph`) is a list of steps naming
layers; here they are applied in order to a dictionary ``{layer: [arrays]}``
in Keras' weight layout — conv ``[kernel (k,k,cin,cout), bias?]``, dense
``[kernel (cin,cout), bias?]``, BN ``[γ, β, moving mean, moving variance]`` —
starting from the parent's weights.  Layers the child has and the result
lacks keep their fresh initialisation; a layer whose shape disagrees is an
error, never silently re-initialised.
"""

from __future__ import annotations

from collections.abc import Iterable

import keras
import numpy as np

Weights = dict[str, list[np.ndarray]]


class TransferError(ValueError):
    """A plan that does not fit the weights it is applied to."""


def model_weights(model: keras.Model) -> Weights:
    """``{layer name: [arrays]}`` of every layer that has weights."""
    return {layer.name: [np.array(w) for w in layer.get_weights()] for layer in model.layers if layer.weights}


def _counts(old: int, sources: list[int]) -> np.ndarray:
    counts = np.ones(old)
    for source in sources:
        counts[source] += 1
    return counts


def apply_plan(weights: Weights, plan: Iterable[dict]) -> Weights:
    """The weights after every step of ``plan`` (a new dict; ``weights`` is not changed)."""
    result = {name: [a.copy() for a in arrays] for name, arrays in weights.items()}
    for step in plan:
        try:
            _apply_step(result, step)
        except (IndexError, ValueError) as exc:
            if isinstance(exc, TransferError):
                raise
            raise TransferError(f"step {step['op']} on {step['layer']!r} does not fit the weights: {exc}") from None
    return result


def _apply_step(result: Weights, step: dict) -> None:
    """Apply one plan step to ``result`` in place."""
    op, layer = step["op"], step["layer"]
    if op == "identity_conv":
        k, c = step["kernel"], step["channels"]
        kernel = np.zeros((k, k, c, c), np.float32)
        kernel[k // 2, k // 2] = np.eye(c, dtype=np.float32)
        result[layer] = [kernel]
    elif op == "identity_bn":
        c = step["channels"]
        gamma = np.full(c, np.sqrt(1.0 + step["epsilon"]), np.float32)
        result[layer] = [gamma, np.zeros(c, np.float32), np.zeros(c, np.float32), np.ones(c, np.float32)]
    elif op == "zero_conv":
        result[layer] = [np.zeros((step["kernel"], step["kernel"], step["cin"], step["cout"]), np.float32)]
    elif op == "random_conv":
        k, cin, cout = step["kernel"], step["cin"], step["cout"]
        rng = np.random.default_rng(step["seed"])
        scale = np.sqrt(2.0 / (k * k * cin))  # He normal, as for a fresh conv before ReLU
        result[layer] = [rng.normal(0.0, scale, (k, k, cin, cout)).astype(np.float32)]
    elif op == "widen_out":
        arrays = _require(result, layer)
        sources = step["sources"]
        arrays[0] = np.concatenate([arrays[0], arrays[0][..., sources]], axis=-1)
        if len(arrays) > 1:
            arrays[1] = np.concatenate([arrays[1], arrays[1][sources]])
    elif op == "widen_bn":
        result[layer] = [np.concatenate([a, a[step["sources"]]]) for a in _require(result, layer)]
    elif op == "widen_in":
        arrays = _require(result, layer)
        kernel, sources = arrays[0], step["sources"]
        old = step["old"]
        if kernel.shape[-2] != old:
            raise TransferError(f"{layer}: expected {old} input channels, found {kernel.shape[-2]}")
        counts = _counts(old, sources).astype(kernel.dtype)
        shape = (1,) * (kernel.ndim - 2) + (old, 1)
        scaled = kernel / counts.reshape(shape)
        arrays[0] = np.concatenate([scaled, scaled[..., sources, :]], axis=-2)
    elif op == "extend_bn":
        gamma, beta, mean, var = _require(result, layer)
        n = step["count"]
        result[layer] = [
            np.concatenate([gamma, np.ones(n, gamma.dtype)]),
            np.concatenate([beta, np.zeros(n, beta.dtype)]),
            np.concatenate([mean, np.zeros(n, mean.dtype)]),
            np.concatenate([var, np.ones(n, var.dtype)]),
        ]
    elif op == "extend_in_zero":
        arrays = _require(result, layer)
        kernel = arrays[0]
        pad = [(0, 0)] * kernel.ndim
        pad[-2] = (0, step["count"])
        arrays[0] = np.pad(kernel, pad)
    else:
        raise TransferError(f"unknown transfer step {op!r}")


def _require(weights: Weights, layer: str) -> list[np.ndarray]:
    if layer not in weights:
        raise TransferError(f"the plan changes {layer!r}, which has no weights yet")
    return weights[layer]


def _fit_kernel(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A conv kernel moved to another (odd) kernel size, centred.

    Growing embeds the old kernel in zeros — with 'same' padding the layer
    computes exactly the same function; shrinking keeps the centre (an
    approximation: the tuner chose a smaller kernel).  Anything else is left
    as it is for the caller's shape check.
    """
    if array.ndim != 4 or len(shape) != 4 or array.shape[2:] != shape[2:] or array.shape == shape:
        return array
    old, new = array.shape[0], shape[0]
    if array.shape[0] != array.shape[1] or shape[0] != shape[1] or old % 2 == 0 or new % 2 == 0:
        return array
    if new > old:
        pad = (new - old) // 2
        return np.pad(array, [(pad, pad), (pad, pad), (0, 0), (0, 0)])
    cut = (old - new) // 2
    return np.ascontiguousarray(array[cut : cut + new, cut : cut + new])


NPZ_TIME = (1980, 1, 1, 0, 0, 0)
"""every member's time in an ``.npz`` of weights: the zip format's earliest, so that its bytes are its arrays'"""


def save_weights(path, weights: Weights) -> None:
    """Write ``{layer: [arrays]}`` to an ``.npz`` file (atomically), its bytes a function of the arrays alone.

    What ``numpy.savez`` writes (a stored zip of ``layer::index.npy`` members, read by ``numpy.load``) but
    for the members' times, fixed: the log records the file's sha256 (``model_done``'s ``weights_sha256``),
    and an export that writes a replaced best model's weights back from ``best/model.keras``
    (:func:`aiperf_mpi.export._restore_replaced_best`) must write the very bytes that sha256 was taken of.
    """
    import zipfile
    from pathlib import Path

    path = Path(path)
    tmp = path.with_name(path.name + ".partial.npz")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, arrays in weights.items():
            for index, array in enumerate(arrays):
                member = zipfile.ZipInfo(f"{name}::{index}.npy", date_time=NPZ_TIME)
                with archive.open(member, "w", force_zip64=True) as out:
                    np.lib.format.write_array(out, np.asanyarray(array), allow_pickle=False)
    tmp.replace(path)


def load_weights(path) -> Weights:
    """Read what :func:`save_weights` wrote."""
    weights: dict[str, list[tuple[int, np.ndarray]]] = {}
    with np.load(path) as data:
        for key in data.files:
            name, index = key.rsplit("::", 1)
            weights.setdefault(name, []).append((int(index), data[key]))
    return {name: [a for _, a in sorted(items, key=lambda item: item[0])] for name, items in weights.items()}


def read_weights(path) -> Weights:
    """A task's weights from either of its stored forms: an ``.npz`` (:func:`save_weights`) or a ``.keras`` model.

    The best model is stored once, as ``best/model.keras``, once the run's end has exported it
    (:mod:`aiperf_mpi.results.stored_weights` says which file holds a task's weights): the same layer names and
    arrays as its ``.npz``, in float32 as the trainer's variables are under every precision.  The model is
    loaded on the CPU and uncompiled: only its arrays are wanted, not an accelerator's memory nor an optimiser.
    """
    from pathlib import Path

    path = Path(path)
    if path.suffix != ".keras":
        return load_weights(path)
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return model_weights(keras.models.load_model(path, compile=False))


def transfer_weights(parent: keras.Model | Weights, child: keras.Model, plan: Iterable[dict]) -> list[str]:
    """Give ``child`` its parent's weights (a model or a weights dict) through ``plan``.

    Returns the layers left freshly initialised.
    """
    inherited = apply_plan(parent if isinstance(parent, dict) else model_weights(parent), plan)
    fresh = []
    for layer in child.layers:
        if not layer.weights:
            continue
        arrays = inherited.get(layer.name)
        if arrays is None:
            fresh.append(layer.name)
            continue
        expected = [tuple(w.shape) for w in layer.weights]
        arrays = [_fit_kernel(a, shape) for a, shape in zip(arrays, expected, strict=False)]
        got = [a.shape for a in arrays]
        if expected != got:
            raise TransferError(f"{layer.name}: the plan gives shapes {got}, the child layer has {expected}")
        layer.set_weights(arrays)
    return fresh
