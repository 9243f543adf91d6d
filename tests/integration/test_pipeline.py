"""tf.data pipelines: ImageNet TFRecords, shards, batches, tuned hyper-parameters applied for real."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from aiperf_mpi.data.sources import DataError, digits_source, imagenet_source  # noqa: E402
from aiperf_mpi.graph.model import with_kernel_size  # noqa: E402
from aiperf_mpi.graph.seeds import tiny_resnet  # noqa: E402
from aiperf_mpi.search.hpo import WARMUP_ROUNDS, HParams, Tuner  # noqa: E402
from aiperf_mpi.train.keras_model import build_keras_model  # noqa: E402
from aiperf_mpi.train.pipeline import Shard  # noqa: E402
from aiperf_mpi.train.trainer import precision_policy  # noqa: E402

pytestmark = pytest.mark.tf


def example(image: np.ndarray, label: int) -> bytes:
    encoded = tf.io.encode_jpeg(tf.constant(image)).numpy()
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_shards(directory, per_shard: int = 6, labels=(1, 1000), train_shards: int = 2) -> None:
    rng = np.random.default_rng(0)
    directory.mkdir(exist_ok=True)
    names = [f"train-{i:05d}-of-{train_shards:05d}" for i in range(train_shards)] + ["validation-00000-of-00001"]
    for name in names:
        with tf.io.TFRecordWriter(str(directory / name)) as writer:
            for _ in range(per_shard):
                image = rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)
                writer.write(example(image, int(rng.integers(labels[0], labels[1] + 1))))


def test_imagenet_shards_are_counted_decoded_resized_and_relabelled(tmp_path) -> None:
    write_shards(tmp_path / "in")
    source = imagenet_source(tmp_path / "in", image_size=32)
    shard = Shard(source, rank=0, size=1)
    assert source.sizes == {"train": 12, "validation": 6}
    images, labels = next(iter(shard.train(batch=4, seed=0, epoch=1)))
    assert images.shape == (4, 32, 32, 3) and images.dtype == tf.float32
    assert -1.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    assert 0 <= int(tf.reduce_min(labels)) and int(tf.reduce_max(labels)) <= 999
    assert sum(1 for _ in shard.train(batch=4, seed=0, epoch=1)) == 3
    assert sum(int(y.shape[0]) for _, y in shard.validation(batch=4)) == 6
    two = [Shard(source, r, 2) for r in range(2)]
    assert {s.steps(3) for s in two} == {2}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("garbage", "unreadable or corrupt"),
        ("truncate", "unreadable or corrupt"),
        ("label", "outside 1..1000"),
        ("empty", "no validation"),
    ],
)
def test_bad_imagenet_is_one_clear_error(tmp_path, damage: str, message: str) -> None:
    directory = tmp_path / "in"
    write_shards(directory, labels=(1001, 1001) if damage == "label" else (1, 1000))
    validation = directory / "validation-00000-of-00001"
    if damage == "garbage":
        validation.write_bytes(b"this is not a tfrecord" * 10)
    elif damage == "truncate":
        validation.write_bytes(validation.read_bytes()[:-30])
    elif damage == "empty":
        validation.unlink()
    with pytest.raises(DataError, match=message):
        Shard(imagenet_source(directory, image_size=32), 0, 1)


def test_tuned_kernel_and_batch_are_what_is_built_and_delivered() -> None:
    tuner = Tuner("tpe", [16, 32, 64], seed=3, default=HParams(32, 3))
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
