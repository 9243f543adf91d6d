"""tf.data building blocks of the data sources: fixed-parallelism prefetching, and ImageNet TFRecords decoded.

Here, in ``data/``, because the converter (``python -m aiperf_mpi.data``)
decodes ImageNet shards too: the training side (:mod:`aiperf_mpi.train.pipeline`)
imports these, never the other way round.  TensorFlow is imported by this
module alone in ``data/``; :mod:`aiperf_mpi.data.sources` stays TF-free.
"""

from __future__ import annotations

import os

import tensorflow as tf

from aiperf_mpi.data.sources import TFRecordSource

PREFETCH = 2
"""batches ready ahead of the step: enough to hide the input pipeline behind a step"""


def parallel_calls() -> int:
    """Decode/resize threads of one rank: the cores it may run on, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def prefetched(data: tf.data.Dataset) -> tf.data.Dataset:
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
    return prefetched(data.batch(batch, drop_remainder=seed is not None))
