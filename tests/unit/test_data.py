"""Data sources in every array format, and one clear error for each kind of bad data."""

import os
import re

import numpy as np
import pytest

from aiperf_mpi.data.__main__ import main as convert_main
from aiperf_mpi.data.sources import (
    CIFAR_RECORD,
    DataError,
    cifar10_source,
    digits_source,
    hdf5_source,
    in_memory,
    open_source,
    synthetic_source,
)
from tests.support.data_files import special, write_cifar, write_h5


def test_digits_is_embedded_32x32x3_with_a_fixed_split() -> None:
    source = digits_source()
    assert source.image_shape == (32, 32, 3) and source.classes == 10
    assert source.sizes == {"train": 1437, "validation": 360}
    first, _ = source.shard("validation", 0, 1)
    again, _ = digits_source().shard("validation", 0, 1)
    assert np.array_equal(first, again)
    a, _ = source.shard("train", 0, 2)
    b, _ = source.shard("train", 1, 2)
    assert len(a) + len(b) == 1437


def test_synthetic_has_no_accuracy_and_the_requested_shape() -> None:
    source = synthetic_source(image_size=16, channels=3, classes=4, train=64, validation=16)
    images, labels = source.shard("train", 0, 4)
    assert images.shape == (16, 16, 16, 3) and labels.max() < 4
    assert not source.has_accuracy


def test_cifar10_binary(tmp_path) -> None:
    write_cifar(tmp_path / "c")
    source = cifar10_source(tmp_path / "c")
    assert source.sizes == {"train": 40, "validation": 20}
    images, labels = source.shard("train", 0, 1)
    assert images.shape == (40, 32, 32, 3) and images.dtype == np.uint8
    raw = np.fromfile(tmp_path / "c" / "data_batch_1.bin", dtype=np.uint8).reshape(-1, CIFAR_RECORD)
    assert labels[0] == raw[0, 0]
    assert np.array_equal(images[0, :, :, 0], raw[0, 1:1025].reshape(32, 32))  # channel-major on disk


def test_hdf5_and_the_converter(tmp_path, capsys) -> None:
    write_cifar(tmp_path / "c")
    assert convert_main(["convert", "--from", "cifar10", str(tmp_path / "c"), "--to", str(tmp_path / "c.h5")]) == 0
    assert "cifar10 train" in capsys.readouterr().err  # the progress bar
    converted = hdf5_source(tmp_path / "c.h5")
    original = cifar10_source(tmp_path / "c")
    assert converted.sizes == original.sizes
    assert np.array_equal(converted.shard("train", 1, 3)[0], original.shard("train", 1, 3)[0])
    assert not (tmp_path / "c.h5.partial").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "not a directory"),
        (lambda p: (p / "c").mkdir() or p / "c", "no data_batch"),
    ],
)
def test_cifar_missing(tmp_path, make, message) -> None:
    with pytest.raises(DataError, match=message):
        cifar10_source(make(tmp_path))


def test_cifar_truncated_and_bad_labels(tmp_path) -> None:
    write_cifar(tmp_path / "t")
    with open(tmp_path / "t" / "data_batch_2.bin", "ab") as handle:
        handle.write(b"\x00" * 100)
    with pytest.raises(DataError, match="truncated"):
        cifar10_source(tmp_path / "t")
    write_cifar(tmp_path / "l", bad_label=True)
    with pytest.raises(DataError, match=r"labels must be in \[0, 9\]"):
        cifar10_source(tmp_path / "l")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"labels_high": 9}, "labels must be in"),
        ({"validation": (10, 6, 6, 3)}, "differ in shape"),
        ({"train": (0, 8, 8, 3)}, "train split is empty"),
        ({"dtype": np.float32}, "must be uint8"),
        ({"classes": 1}, "classes"),
    ],
)
def test_bad_hdf5(tmp_path, kwargs, message) -> None:
    with pytest.raises(DataError, match=message):
        hdf5_source(write_h5(tmp_path / "bad.h5", **kwargs))


def test_truncated_hdf5_and_missing_paths(tmp_path) -> None:
    path = write_h5(tmp_path / "t.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(DataError, match="cannot read"):
        hdf5_source(path)
    with pytest.raises(DataError, match="no file"):
        hdf5_source(tmp_path / "nope.h5")
    with pytest.raises(DataError, match="--data-path"):
        open_source("cifar10")
    with pytest.raises(DataError, match="unknown data set"):
        open_source("mnist")


def test_in_memory_checks_shapes() -> None:
    good = (np.zeros((4, 8, 8, 3), np.uint8), np.zeros(4, np.int64))
    with pytest.raises(DataError, match=r"\(N, H, W"):
        in_memory("x", {"train": (np.zeros((4, 8, 8), np.uint8), np.zeros(4)), "validation": good}, 2)
    with pytest.raises(DataError, match="labels of shape"):
        in_memory("x", {"train": (good[0], np.zeros(3, np.int64)), "validation": good}, 2)


KINDS = {"fifo": "is a named pipe (FIFO), not a regular file", "dev-zero": "is a character device",
         "directory": "is a directory, not a regular file", "broken-link": "is a broken symbolic link"}  # fmt: skip


@pytest.mark.timeout(20)  # a read of a named pipe would block for ever
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dataset", ["cifar10", "hdf5", "imagenet"])
def test_special_files_are_refused_before_they_are_opened(tmp_path, dataset: str, kind: str) -> None:
    if dataset == "cifar10":
        write_cifar(tmp_path / "c")
        bad, path = tmp_path / "c" / "data_batch_3.bin", tmp_path / "c"
    elif dataset == "hdf5":
        bad = path = tmp_path / "d.h5"
    else:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "validation-00000-of-00001").write_bytes(b"")
        bad, path = tmp_path / "in" / "train-00000-of-00001", tmp_path / "in"
    special(kind, bad)
    with pytest.raises(DataError, match=re.escape(f"{dataset}: {bad} {KINDS[kind]}")):
        open_source(dataset, str(path))


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("kind", "what"), [("fifo", "a named pipe (FIFO)"), ("dev-zero", "a character device"),
                                            ("broken-link", "is a broken symbolic link")])  # fmt: skip
@pytest.mark.parametrize("dataset", ["cifar10", "imagenet"])
def test_a_data_directory_that_is_a_special_file(tmp_path, dataset: str, kind: str, what: str) -> None:
    special(kind, tmp_path / "data")
    with pytest.raises(DataError, match=re.escape(what)):
        open_source(dataset, str(tmp_path / "data"))


def test_links_to_regular_files_and_directories_are_fine(tmp_path) -> None:
    write_cifar(tmp_path / "real")
    (tmp_path / "linked").mkdir()
    for name in ("data_batch_1.bin", "data_batch_2.bin", "test_batch.bin"):
        os.symlink(tmp_path / "real" / name, tmp_path / "linked" / name)
    os.symlink(tmp_path / "linked", tmp_path / "dir-link")
    assert cifar10_source(tmp_path / "dir-link").sizes == cifar10_source(tmp_path / "real").sizes
    os.symlink(write_h5(tmp_path / "d.h5"), tmp_path / "h5-link")
    assert hdf5_source(tmp_path / "h5-link").sizes == {"train": 40, "validation": 10}


def test_a_text_file_is_not_hdf5(tmp_path) -> None:
    (tmp_path / "notes.h5").write_text("these are not the images you are looking for\n")
    with pytest.raises(DataError, match=re.escape(f"hdf5: {tmp_path / 'notes.h5'} is not an HDF5 file")):
        hdf5_source(tmp_path / "notes.h5")
