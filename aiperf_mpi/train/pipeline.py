"""tf.data pipelines: a rank's shard of a split, shuffled with a recorded seed, batched, prefetched.

Every rank of a group runs the same number of steps per epoch — a Horovod
all-reduce per step needs every rank — so an epoch is
``(split size // group size) // batch`` steps on every rank, and the samples
counted as trained are exactly ``steps × batch × group size``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from aiperf_mpi.data.sources import DataError, DataSource, TFRecordSource

PREFETCH = 2
"""batches ready ahead of the step: enough to hide the input pipeline behind a step"""


def parallel_calls() -> int:
    """Decode/resize threads of one rank: the cores it may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _fixed(data: tf.data.Dataset) -> tf.data.Dataset:
    """Prefetched, with tf.data's autotuning off.

    With AUTOTUNE, every epoch's iterator owns an autotuning thread that its
    destructor waits for: on ResNet-50 here that wait took 14–24 s at the end
    of each epoch (seen with py-spy in ``RootDataset::Iterator::~Iterator``),
    a quarter of the run spent idle between epochs.  Fixed parallelism and a
    fixed prefetch depth cost nothing measurable (data wait stays well under
    1 % of an epoch).
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.prefetch(PREFETCH).with_options(options)


def normalise(images: tf.Tensor) -> tf.Tensor:
    """uint8 → float32 in [−1, 1]."""
    return tf.cast(images, tf.float32) / 127.5 - 1.0


@dataclass
class Shard:
    """One rank's view of a data set for one group size."""

    source: DataSource
    rank: int
    size: int

    def __post_init__(self) -> None:
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        if split not in self._arrays:
            self._arrays[split] = self.source.shard(split, self.rank, self.size)
        return self._arrays[split]

    def steps(self, batch: int) -> int:
        """Training steps per epoch, identical on every rank of the group."""
        return (self.source.sizes["train"] // self.size) // batch

    def train(self, batch: int, seed: int, epoch: int) -> tf.data.Dataset:
        """Exactly :meth:`steps` batches of ``batch``, shuffled by (seed, epoch, rank)."""
        steps = self.steps(batch)
        if steps < 1:
            raise DataError(
                f"{self.source.name}: {self.source.sizes['train']} training samples over {self.size} ranks "
                f"are fewer than one batch of {batch} per rank"
            )
        if isinstance(self.source, TFRecordSource):
            return imagenet_split(self.source, "train", self.rank, self.size, batch, seed + epoch).take(steps)
        images, labels = self._split("train")
        order = np.random.default_rng([seed, epoch, self.rank]).permutation(len(labels))[: steps * batch]
        data = tf.data.Dataset.from_tensor_slices((images[order], labels[order]))
        return _fixed(data.batch(batch, drop_remainder=True).map(_prepare, num_parallel_calls=parallel_calls()))

    def validation(self, batch: int) -> tf.data.Dataset:
        """This rank's whole validation shard (the last batch may be short)."""
        if isinstance(self.source, TFRecordSource):
            return imagenet_split(self.source, "validation", self.rank, self.size, batch, None)
        images, labels = self._split("validation")
        data = tf.data.Dataset.from_tensor_slices((images, labels))
        return _fixed(data.batch(batch).map(_prepare, num_parallel_calls=parallel_calls()))


def _prepare(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return normalise(images), tf.cast(labels, tf.int32)


# --------------------------------------------------------------------------- ImageNet TFRecords
# The shards were counted and their first records checked without TensorFlow
# (aiperf_mpi.data.sources.count_imagenet, on rank 0); here they are decoded.

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


LABEL_ERROR = (
    "imagenet: a record's image/class/label is outside 1..1000 (labels are 1-based as the standard "
    "converter writes them; a 0-based set must be written with label + 1); the label:"
)


def _decode(source: TFRecordSource):
    size = source.image_shape[:2]

    def decode(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        parsed = tf.io.parse_single_example(record, FEATURES)
        image = tf.io.decode_jpeg(parsed["image/encoded"], channels=3)
        image = tf.image.resize(image, size, antialias=True)
        label = tf.cast(parsed["image/class/label"], tf.int32) - source.label_offset  # 1..1000 → 0..999
        in_range = tf.logical_and(label >= 0, label < source.classes)  # else NaN on a GPU, not an error
        with tf.control_dependencies([tf.debugging.Assert(in_range, [LABEL_ERROR, label + source.label_offset])]):
            label = tf.identity(label)
        return tf.cast(tf.clip_by_value(image, 0.0, 255.0), tf.float32) / 127.5 - 1.0, label

    return decode


def imagenet_split(
    source: TFRecordSource, split: str, rank: int, size: int, batch: int, seed: int | None
) -> tf.data.Dataset:
    files = tf.data.Dataset.from_tensor_slices(list(source.split_files[split]))
    records = tf.data.TFRecordDataset(files, num_parallel_reads=parallel_calls()).shard(size, rank)
    if seed is not None:
        records = records.shuffle(10_000, seed=seed).repeat()
    data = records.map(_decode(source), num_parallel_calls=parallel_calls())
    return _fixed(data.batch(batch, drop_remainder=seed is not None))
