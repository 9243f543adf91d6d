"""tf.data pipelines: ImageNet TFRecords, shards, batches, tuned hyper-parameters applied for real."""

import os
import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from aiperf_mpi.data.sources import DataError, digits_source, imagenet_source  # noqa: E402
from aiperf_mpi.data.tfrecord import crc32c, jpeg_problem, masked_crc, parse_example, scan_shard  # noqa: E402
from aiperf_mpi.graph.model import with_kernel_size  # noqa: E402
from aiperf_mpi.graph.seeds import tiny_resnet  # noqa: E402
from aiperf_mpi.search.hpo import WARMUP_ROUNDS, HParams  # noqa: E402
from aiperf_mpi.search.registry import make_tuner  # noqa: E402
from aiperf_mpi.train.keras_model import build_keras_model  # noqa: E402
from aiperf_mpi.train.pipeline import Shard  # noqa: E402
from aiperf_mpi.train.trainer import precision_policy  # noqa: E402
from tests.support.imagenet_shards import write_imagenet  # noqa: E402

pytestmark = pytest.mark.tf


def test_imagenet_shards_are_counted_decoded_resized_and_relabelled(tmp_path) -> None:
    write_imagenet(tmp_path / "in", train=12, validation=6, labels=(1, 1000))
    source = imagenet_source(tmp_path / "in", image_size=32)
    assert source.sizes == {"train": 12, "validation": 6}
    shard = Shard(source, rank=0, size=1)
    images, labels = next(iter(shard.train(batch=4, seed=0, epoch=1)))
    assert images.shape == (4, 32, 32, 3) and images.dtype == tf.float32
    assert -1.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    assert 0 <= int(tf.reduce_min(labels)) and int(tf.reduce_max(labels)) <= 999
    assert sum(1 for _ in shard.train(batch=4, seed=0, epoch=1)) == 3
    assert sum(int(y.shape[0]) for _, y in shard.validation(batch=4)) == 6
    two = [Shard(source, r, 2) for r in range(2)]
    assert {s.steps(3) for s in two} == {2}


def test_imagenet_labels_1_and_1000_are_classes_0_and_999(tmp_path) -> None:
    """The documented convention: the standard converter's 1..1000 become classes 0..999."""
    write_imagenet(tmp_path / "lo", train=4, validation=2, train_shards=1, labels=(1, 1))
    write_imagenet(tmp_path / "hi", train=4, validation=2, train_shards=1, labels=(1000, 1000))
    for name, expected in (("lo", 0), ("hi", 999)):
        shard = Shard(imagenet_source(tmp_path / name, image_size=32), rank=0, size=1)
        labels = np.concatenate([y.numpy() for _, y in shard.validation(batch=2)])
        assert labels.tolist() == [expected, expected], name


def test_a_label_0_past_the_checked_records_fails_the_epoch_with_its_reason(tmp_path) -> None:
    """Only the first record of each shard is checked up front; a 0-based label later is an error, not a NaN."""
    write_imagenet(tmp_path / "in", train=4, validation=4, train_shards=1, labels=(1, 1))
    shard_file = tmp_path / "in" / "validation-00000-of-00001"
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(shard_file))]
    records[2].features.feature["image/class/label"].int64_list.value[0] = 0
    with tf.io.TFRecordWriter(str(shard_file)) as writer:
        for record in records:
            writer.write(record.SerializeToString())
    shard = Shard(imagenet_source(tmp_path / "in", image_size=32), rank=0, size=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside 1..1000"):
        for _ in shard.validation(batch=2):
            pass


def test_other_ranks_take_the_counts_and_do_not_read_the_shards(tmp_path) -> None:
    write_imagenet(tmp_path / "in", train=8, validation=4, train_shards=2)
    counted = imagenet_source(tmp_path / "in", image_size=32)
    for shard in counted.files:
        with open(shard, "r+b") as handle:  # any read of these shards would now fail
            handle.write(b"broken")
    handed = imagenet_source(tmp_path / "in", image_size=32, sizes=counted.sizes)
    assert handed.sizes == counted.sizes == {"train": 8, "validation": 4}
    with pytest.raises(DataError, match="length CRC mismatch"):
        imagenet_source(tmp_path / "in", image_size=32)


def test_the_reader_decodes_what_tensorflow_wrote(tmp_path) -> None:
    """The TF-free Example decoder against TensorFlow's own parser, field by field."""
    write_imagenet(tmp_path / "in", train=3, validation=1, train_shards=1, labels=(7, 7))
    shard = tmp_path / "in" / "train-00000-of-00001"
    fd = os.open(shard, os.O_RDONLY)
    try:
        scan = scan_shard(fd, shard.stat().st_size)
    finally:
        os.close(fd)
    assert scan.records == 3
    mine = parse_example(scan.first)
    theirs = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(shard)))).numpy())
    for key, feature in theirs.features.feature.items():
        kind = feature.WhichOneof("kind")
        assert mine[key] == pytest.approx(list(getattr(feature, kind).value)), key
    assert mine["image/class/label"] == [7] and mine["image/encoded"][0][:2] == b"\xff\xd8"
    assert jpeg_problem(mine["image/encoded"][0]) is None
    negative = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(int64_list=tf.train.Int64List(value=[-3, 2**40])),
    })).SerializeToString()  # fmt: skip
    assert parse_example(negative) == {"x": [-3, 2**40]}
    assert masked_crc(b"") == tf_masked_crc(b"") and crc32c(b"123456789") == 0xE3069283


def tf_masked_crc(data: bytes) -> int:
    """TensorFlow's masked CRC of ``data``: the footer of a record written by TFRecordWriter."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        with tf.io.TFRecordWriter(f"{scratch}/r") as writer:
            writer.write(data)
        return int.from_bytes(Path(f"{scratch}/r").read_bytes()[-4:], "little")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("garbage", "not a TFRecord file (record 0 length CRC mismatch)"),
        ("truncate", "truncated at byte"),
        ("label", "label 1001 outside 1..1000"),
        ("empty", "no validation"),
    ],
)
def test_bad_imagenet_is_one_clear_error(tmp_path, damage: str, message: str) -> None:
    directory = tmp_path / "in"
    write_imagenet(directory, train=12, validation=6, labels=(1001, 1001) if damage == "label" else (1, 1000))
    validation = directory / "validation-00000-of-00001"
    if damage == "garbage":
        validation.write_bytes(b"this is not a tfrecord" * 10)
    elif damage == "truncate":
        validation.write_bytes(validation.read_bytes()[:-30])
    elif damage == "empty":
        validation.unlink()
    with pytest.raises(DataError, match=re.escape(message)):
        imagenet_source(directory, image_size=32)


def test_tuned_kernel_and_batch_are_what_is_built_and_delivered() -> None:
    tuner = make_tuner("tpe", [16, 32, 64], seed=3, default=HParams(32, 3))
    for _ in range(WARMUP_ROUNDS):
        tuner.tell(tuner.ask(), 0.5)
    params = tuner.ask()
    while params.kernel_size == 3:  # make sure the check is about a non-default kernel
        tuner.tell(params, 0.1)
        params = tuner.ask()
    model = build_keras_model(with_kernel_size(tiny_resnet(), params.kernel_size))
    assert model.get_layer("b1_conv1").kernel.shape[:2] == (params.kernel_size, params.kernel_size)
    images, labels = next(iter(Shard(digits_source(), 0, 1).train(params.batch_size, seed=0, epoch=1)))
    assert images.shape[0] == labels.shape[0] == params.batch_size


def test_precision_narrower_than_fp16_is_refused() -> None:
    assert precision_policy("bf16") == "mixed_bfloat16"
    with pytest.raises(ValueError, match="nothing narrower than FP16"):
        precision_policy("fp8")
    model = build_keras_model(tiny_resnet(), dtype=precision_policy("fp16"))
    assert model.get_layer("b1_conv1").compute_dtype == "float16"
    assert model.get_layer("softmax").compute_dtype == "float32"
