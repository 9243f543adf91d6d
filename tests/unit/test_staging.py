"""Staging file-based data to node-local storage."""

import os
import re

import pytest

from aiperf_mpi.data.sources import DataError, cifar10_source, hdf5_source
from aiperf_mpi.data.staging import stage
from tests.support.data_files import special, write_cifar, write_h5


def test_hdf5_is_copied_once_and_reads_the_same(tmp_path) -> None:
    original = write_h5(tmp_path / "data.h5")
    report = stage("hdf5", str(original), str(tmp_path / "local"))
    assert report.bytes == original.stat().st_size and report.copied == 1 and report.seconds >= 0
    staged = hdf5_source(report.staged)
    assert staged.sizes == hdf5_source(original).sizes
    again = stage("hdf5", str(original), str(tmp_path / "local"))
    assert again.copied == 0 and again.bytes == report.bytes  # a resumed run does not copy again


def test_cifar_directory(tmp_path) -> None:
    write_cifar(tmp_path / "cifar")
    report = stage("cifar10", str(tmp_path / "cifar"), str(tmp_path / "local"))
    assert report.files == 3 and report.copied == 3
    assert cifar10_source(report.staged).sizes == cifar10_source(tmp_path / "cifar").sizes
    assert not list((tmp_path / "local").rglob("*.partial"))


def test_staging_refuses_what_cannot_be_staged(tmp_path) -> None:
    with pytest.raises(DataError, match="nothing to stage"):
        stage("digits", "", str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="nothing to stage"):
        stage("cifar10", str(tmp_path / "empty"), str(tmp_path / "local"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataError, match="failed"):
        stage("hdf5", str(write_h5(tmp_path / "d.h5")), str(blocker / "sub"))


@pytest.mark.timeout(20)  # a named pipe would block the copy, /dev/zero would fill the disk
@pytest.mark.parametrize(("kind", "what"), [("fifo", "is a named pipe (FIFO)"), ("dev-zero", "is a character device")])
def test_special_files_are_not_staged(tmp_path, kind: str, what: str) -> None:
    write_cifar(tmp_path / "cifar")
    bad = tmp_path / "cifar" / "data_batch_3.bin"
    special(kind, bad)
    with pytest.raises(DataError, match=re.escape(f"cifar10: {bad} {what}, not a regular file")):
        stage("cifar10", str(tmp_path / "cifar"), str(tmp_path / "local"))
    assert not (tmp_path / "local").exists()  # refused before anything was copied
    special(kind, tmp_path / "d.h5")
    with pytest.raises(DataError, match=re.escape(f"hdf5: {tmp_path / 'd.h5'} {what}")):
        stage("hdf5", str(tmp_path / "d.h5"), str(tmp_path / "local"))


def test_only_the_data_set_files_are_staged_and_a_special_file_in_the_way_is_replaced(tmp_path) -> None:
    write_cifar(tmp_path / "cifar")
    special("fifo", tmp_path / "cifar" / "readme.bin")  # not a CIFAR-10 file: neither read nor staged
    os.makedirs(tmp_path / "local" / "cifar")
    special("fifo", tmp_path / "local" / "cifar" / "test_batch.bin")  # left in the stage dir: replaced
    report = stage("cifar10", str(tmp_path / "cifar"), str(tmp_path / "local"))
    assert report.files == report.copied == 3
    assert cifar10_source(report.staged).sizes == cifar10_source(tmp_path / "cifar").sizes
