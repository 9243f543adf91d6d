"""Small data files written for tests: CIFAR-10 binaries, HDF5 files, special files in the way.

Shared by the data, staging and converter tests (unit and integration) and the
MPI runs that stage or train on a file, so none of them imports another test module.
"""

from __future__ import annotations

import os

import numpy as np

from aiperf_mpi.data.sources import CIFAR_RECORD, digits_arrays


def write_cifar(directory, batches: int = 2, per_file: int = 20, bad_label: bool = False) -> None:
    rng = np.random.default_rng(0)
    directory.mkdir(exist_ok=True)
    for name in [f"data_batch_{i}.bin" for i in range(1, batches + 1)] + ["test_batch.bin"]:
        records = rng.integers(0, 256, (per_file, CIFAR_RECORD), dtype=np.uint8)
        records[:, 0] = rng.integers(0, 10, per_file)
        if bad_label:
            records[0, 0] = 12
        records.tofile(directory / name)


def write_h5(path, train=(40, 8, 8, 3), validation=(10, 8, 8, 3), classes=5, labels_high=5, dtype=np.uint8):
    import h5py

    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as handle:
        handle.attrs["classes"] = classes
        for split, shape in (("train", train), ("validation", validation)):
            handle[f"{split}/images"] = rng.integers(0, 255, shape).astype(dtype)
            handle[f"{split}/labels"] = rng.integers(0, labels_high, shape[0]).astype(np.int64)
    return path


def small_h5(path, count: int = 256) -> str:
    import h5py

    with h5py.File(path, "w") as handle:
        handle.attrs["classes"] = 10
        for split, (images, labels) in digits_arrays().items():
            handle[f"{split}/images"] = images[:count]
            handle[f"{split}/labels"] = labels[:count]
    return str(path)


def special(kind: str, path) -> None:
    """Put a named pipe, a link to /dev/zero, a directory or a broken link at ``path``."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        os.symlink(path.with_name("nothing-here"), path)
