"""Copy a data set to node-local storage before training (``--stage-dir``).

On a shared parallel file system every rank of every node reading the same
files at once is slow; one copy per node to local disk (or a RAM disk) makes
each epoch read locally.  Staging is timed and its bytes counted, and both
go to the event log and the MLLOG.  A file already staged with the same size
(a resumed run) is not copied again.  Only regular files are copied (a
named pipe would block the copy, ``/dev/zero`` would fill the disk).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.data.sources import CIFAR_FILES, DataError, regular_file

STAGED_FORMATS = ("cifar10", "imagenet", "hdf5")


@dataclass(frozen=True)
class StagingReport:
    """What staging did on one node."""

    source: str
    staged: str
    seconds: float
    bytes: int
    files: int
    copied: int


def _files_of(dataset: str, path: Path) -> tuple[list[Path], Path]:
    """(files to copy, the path that names the data set afterwards, relative to the stage dir)."""
    if dataset == "hdf5":
        return [path], Path(path.name)
    if dataset == "cifar10":
        return sorted(f for pattern in CIFAR_FILES.values() for f in path.glob(pattern)), Path(path.name)
    if dataset == "imagenet":
        shards = [*path.glob("train-*-of-*"), *path.glob("validation-*-of-*")]
        return sorted(f for f in shards if f.suffix != ".partial"), Path(path.name)
    raise DataError(f"{dataset} data is embedded or generated: there is nothing to stage")


def stage(dataset: str, data_path: str, stage_dir: str) -> StagingReport:
    """Copy ``data_path`` of ``dataset`` under ``stage_dir``; return where it now is and what it cost."""
    source = Path(data_path)
    files, name = _files_of(dataset, source)
    if not files:
        raise DataError(f"{dataset}: nothing to stage in {source}")
    sizes = [regular_file(dataset, path) for path in files]  # before anything is copied
    root = Path(stage_dir)
    target = root / name
    started = time.monotonic()
    total = copied = 0
    try:
        (target if dataset != "hdf5" else root).mkdir(parents=True, exist_ok=True)
        for path, size in zip(files, sizes, strict=True):
            destination = target if dataset == "hdf5" else target / path.name
            total += size
            if _same_regular_file(destination, size):
                continue
            partial = destination.with_name(destination.name + ".partial")
            shutil.copyfile(path, partial)
            os.replace(partial, destination)
            copied += 1
    except OSError as exc:
        raise DataError(f"staging {source} to {root} failed: {exc.strerror or exc}") from None
    return StagingReport(str(source), str(target), time.monotonic() - started, total, len(files), copied)


def _same_regular_file(path: Path, size: int) -> bool:
    """``path`` is already a regular file of ``size`` bytes (a staged copy kept from before)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size
