"""A checked bundle, loaded: its members' Keras models and the one ``predict`` every platform calls.

Every file's size and sha256 are checked (:func:`aiperf_mpi.serve.bundle.open_bundle`) before a model is
read.  ``predict`` takes uint8 pixels as stored, applies the manifest's preprocessing and combines the members
as the manifest says (mean of softmax probabilities, members summed in manifest order, so the same input gives
the same bits on a laptop and on any rank).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.bundle import check_input_shape, input_spec, open_bundle


def preprocess(images: np.ndarray, manifest: dict) -> np.ndarray:
    """uint8 pixels → the float32 the models take (``x / divide_by − subtract``), as the training pipeline does."""
    rule = input_spec(manifest)["preprocessing"]
    return images.astype(np.float32) / np.float32(rule["divide_by"]) - np.float32(rule["subtract"])


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class Servable:
    """The bundle at ``root``, checked and loaded (TensorFlow on the CPU unless ``gpu``)."""

    def __init__(self, root: Path | str, gpu: bool = False, manifest: dict | None = None) -> None:
        """``manifest``: the one rank 0 already checked (the other ranks of a serving run skip the hashing)."""
        self.root = Path(root)
        self.manifest = manifest if manifest is not None else open_bundle(self.root)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        if not gpu:
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:  # TensorFlow already initialised by the caller: use what it has
                pass
        import keras

        self.models = []
        for member in self.manifest["members"]:
            try:
                self.models.append(keras.models.load_model(self.root / member["keras"], compile=False))
            except (OSError, ValueError) as exc:
                raise ServeError(f"{self.root / member['keras']} does not load as a Keras model: {exc}") from None
        self.logits = [member["output_kind"] == "logits" for member in self.manifest["members"]]
        h, w, c = input_spec(self.manifest)["shape"][1:]
        signature = [tf.TensorSpec([None, h, w, c], tf.float32)]
        # one traced function per member for any batch size: every caller (a laptop, each rank, each scenario)
        # runs the same graph, and a query of one sample pays no eager dispatch per layer
        self.calls = [
            tf.function(lambda x, model=model: model(x, training=False), input_signature=signature)
            for model in self.models
        ]

    def check_shape(self, shape: tuple[int, ...], where: str) -> None:
        check_input_shape(self.manifest, shape, where)

    def member_predictions(self, images: np.ndarray, batch: int) -> list[np.ndarray]:
        """Each member's probabilities (N, classes), float32, of uint8 ``images`` (N, H, W, C), ``batch`` a call."""
        self.check_shape(images.shape, "the input")
        x = preprocess(images, self.manifest)
        found = []
        for model, call, logits in zip(self.models, self.calls, self.logits, strict=True):
            parts = [np.asarray(call(x[i : i + batch])) for i in range(0, len(x), batch)]
            out = np.concatenate(parts) if parts else np.zeros((0, *model.output_shape[1:]), np.float32)
            found.append((softmax(out) if logits else out).astype(np.float32))
        return found

    def predict(self, images: np.ndarray, batch: int) -> np.ndarray:
        """The servable's probabilities: the members' mean (summed in manifest order), float32."""
        return combine(self.member_predictions(images, batch))


def combine(members: list[np.ndarray]) -> np.ndarray:
    """The ensemble's probabilities: the members' sum in their order, divided by their number (float32)."""
    total = members[0].copy()
    for out in members[1:]:
        total += out
    return (total / np.float32(len(members))).astype(np.float32)
