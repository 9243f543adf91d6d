"""tf.data pipelines: a rank's shard of a split, shuffled with a recorded seed, batched, prefetched.

Every rank of a group runs the same number of steps per epoch — a Horovod
all-reduce per step needs every rank — so an epoch is
``(split size // group size) // batch`` steps on every rank, and the samples
counted as trained are exactly ``steps × batch × group size``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from aiperf_mpi.data.sources import DataError, DataSource, TFRecordSource
from aiperf_mpi.data.tfdata import imagenet_split, normalise, parallel_calls, prefetched
from aiperf_mpi.results.epochs import rank_batches

DEVICE_BATCHES = 2
"""training batches held on the device ahead of the step (with ``Shard.device``)"""


@dataclass
class Shard:
    """One rank's view of a data set for one group size."""

    source: DataSource
    rank: int
    size: int
    device: str | None = None
    """prefetch training batches onto this device (``/GPU:0``), so the copy overlaps the running step"""

    def __post_init__(self) -> None:
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        if split not in self._arrays:
            self._arrays[split] = self.source.shard(split, self.rank, self.size)
        return self._arrays[split]

    def steps(self, batch: int) -> int:
        """Training steps per epoch, identical on every rank of the group."""
        return rank_batches(self.source.sizes["train"], self.size, batch)

    def validation_batches(self, batch: int) -> int:
        """This rank's validation batches (about: the split's ranks may differ by a sample)."""
        return math.ceil(self.source.sizes.get("validation", 0) / self.size / batch)

    def train(self, batch: int, seed: int, epoch: int) -> tf.data.Dataset:
        """Exactly :meth:`steps` batches of ``batch``, shuffled by (seed, epoch, rank)."""
        steps = self.steps(batch)
        if steps < 1:
            raise DataError(
                f"{self.source.name}: {self.source.sizes['train']} training samples over {self.size} ranks "
                f"are fewer than one batch of {batch} per rank"
            )
        if isinstance(self.source, TFRecordSource):
            data = imagenet_split(self.source, "train", self.rank, self.size, batch, seed + epoch).take(steps)
        else:
            images, labels = self._split("train")
            order = np.random.default_rng([seed, epoch, self.rank]).permutation(len(labels))[: steps * batch]
            data = tf.data.Dataset.from_tensor_slices((images[order], labels[order]))
            data = prefetched(data.batch(batch, drop_remainder=True).map(_prepare, num_parallel_calls=parallel_calls()))
        if self.device is not None:  # must be the last transformation of the pipeline
            data = data.apply(tf.data.experimental.prefetch_to_device(self.device, buffer_size=DEVICE_BATCHES))
        return data

    def validation(self, batch: int) -> tf.data.Dataset:
        """This rank's whole validation shard (the last batch may be short)."""
        if isinstance(self.source, TFRecordSource):
            return imagenet_split(self.source, "validation", self.rank, self.size, batch, None)
        images, labels = self._split("validation")
        data = tf.data.Dataset.from_tensor_slices((images, labels))
        return prefetched(data.batch(batch).map(_prepare, num_parallel_calls=parallel_calls()))


def _prepare(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return normalise(images), tf.cast(labels, tf.int32)
