"""A small ImageNet-style TFRecord set, written the way the standard converter writes it.

``build_imagenet_data.py`` (tensorflow/models, inception/data) writes one
``tf.train.Example`` per image into shards named ``train-00000-of-01024`` …
``validation-00127-of-00128``, with the JPEG bytes in ``image/encoded``, the
label 1..1000 in ``image/class/label`` (0 was the background class) and
these features beside them: ``image/height``, ``image/width``,
``image/colorspace``, ``image/channels``, ``image/class/synset``,
``image/class/text``, ``image/object/bbox/{xmin,ymin,xmax,ymax,label}``,
``image/format``, ``image/filename``.  The records here are written by
TensorFlow itself (``tf.io.TFRecordWriter``, ``tf.train.Example``), not by
the benchmark's reader, so the reader is checked against the real format.

The functions that damage a set (``cut_mid_record``, ``flip_byte`` …) work
on the bytes of one shard.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def example(
    image: np.ndarray, label: int, index: int, encoded: bytes | None = None, drop: tuple[str, ...] = ()
) -> bytes:
    """One serialised ``tf.train.Example`` as the standard converter writes it (less the features in ``drop``)."""
    import tensorflow as tf

    if encoded is None:
        encoded = tf.io.encode_jpeg(tf.constant(image), format="rgb", quality=90).numpy()
    synset = f"n{1440764 + label:08d}".encode()

    def ints(*values: int) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def strings(*values: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))

    def floats(*values: float) -> tf.train.Feature:
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    feature = {
        "image/height": ints(image.shape[0]),
        "image/width": ints(image.shape[1]),
        "image/colorspace": strings(b"RGB"),
        "image/channels": ints(3),
        "image/class/label": ints(label),
        "image/class/synset": strings(synset),
        "image/class/text": strings(f"class {label}".encode()),
        "image/object/bbox/xmin": floats(0.1),
        "image/object/bbox/ymin": floats(0.2),
        "image/object/bbox/xmax": floats(0.8),
        "image/object/bbox/ymax": floats(0.9),
        "image/object/bbox/label": ints(label),
        "image/format": strings(b"JPEG"),
        "image/filename": strings(f"{synset.decode()}_{index}.JPEG".encode()),
        "image/encoded": strings(encoded),
    }
    feature = {key: value for key, value in feature.items() if key not in drop}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_imagenet(
    directory: str | Path,
    train: int = 48,
    validation: int = 16,
    train_shards: int = 2,
    validation_shards: int = 1,
    labels: tuple[int, int] = (1, 1000),
    shape: tuple[int, int] = (40, 50),
    seed: int = 0,
) -> Path:
    """Write ``train`` + ``validation`` random JPEG records in shards; labels uniform in ``labels``."""
    import tensorflow as tf

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    index = 0
    for split, count, shards in (("train", train, train_shards), ("validation", validation, validation_shards)):
        for shard in range(shards):
            per = range(shard * count // shards, (shard + 1) * count // shards)
            with tf.io.TFRecordWriter(str(directory / f"{split}-{shard:05d}-of-{shards:05d}")) as writer:
                for _ in per:
                    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
                    writer.write(example(image, int(rng.integers(labels[0], labels[1] + 1)), index))
                    index += 1
    return directory


def record_spans(path: str | Path) -> list[tuple[int, int]]:
    """(offset of the record's header, offset of its data) of every record of a shard."""
    data = Path(path).read_bytes()
    spans, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        spans.append((offset, offset + 12))
        offset += 12 + length + 4
    return spans


def foreign_example(image: np.ndarray, label: int) -> bytes:
    """A record of another converter (TFDS-style ``image`` and ``label``, the label 0-based)."""
    import tensorflow as tf

    encoded = tf.io.encode_jpeg(tf.constant(image)).numpy()
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def rewrite_first_record(path: str | Path, record: bytes) -> None:
    """Replace a shard's first record by ``record``, framed with valid CRCs (written by TensorFlow)."""
    import tensorflow as tf

    path = Path(path)
    spans = record_spans(path)
    rest = path.read_bytes()[spans[1][0] :] if len(spans) > 1 else b""
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(record)
    with open(path, "ab") as handle:
        handle.write(rest)
