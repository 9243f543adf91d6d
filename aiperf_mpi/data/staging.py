"""Copy a data set to node-local storage before training (``--stage-dir``).

On a shared parallel file system every rank of every node reading the same
files at once is slow; one copy per node to local disk (or a RAM disk) makes
each epoch read locally.  Staging is timed and its bytes counted, and both
go to the event log and the MLLOG.  A file already staged with the same size
(a resumed run) is not copied again.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.data.sources import DataError

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
        return sorted(path.glob("*.bin")), Path(path.name)
    if dataset == "imagenet":
        return sorted([*path.glob("train-*-of-*"), *path.glob("validation-*-of-*")]), Path(path.name)
    raise DataError(f"{dataset} data is embedded or generated: there is nothing to stage")


def stage(dataset: str, data_path: str, stage_dir: str) -> StagingReport:
    """Copy ``data_path`` of ``dataset`` under ``stage_dir``; return where it now is and what it cost."""
    source = Path(data_path)
    files, name = _files_of(dataset, source)
    if not files:
        raise DataError(f"{dataset}: nothing to stage in {source}")
    root = Path(stage_dir)
    target = root / name
    started = time.monotonic()
    total = copied = 0
    try:
        (target if dataset != "hdf5" else root).mkdir(parents=True, exist_ok=True)
        for path in files:
            destination = target if dataset == "hdf5" else target / path.name
            size = path.stat().st_size
            total += size
            if destination.exists() and destination.stat().st_size == size:
                continue
            partial = destination.with_name(destination.name + ".partial")
            shutil.copyfile(path, partial)
            os.replace(partial, destination)
            copied += 1
    except OSError as exc:
        raise DataError(f"staging {source} to {root} failed: {exc.strerror or exc}") from None
    return StagingReport(str(source), str(target), time.monotonic() - started, total, len(files), copied)
