"""``python -m aiperf_mpi.data convert --from cifar10|imagenet|digits SRC --to FILE.h5``.

Writes the HDF5 layout documented in :mod:`aiperf_mpi.data.sources`, chunk
by chunk, with a progress bar on stderr, to ``FILE.h5.partial`` renamed to
``FILE.h5`` when complete.  Every error (bad source data, a destination that
cannot be written) is one line ``aiperf_mpi.data: error: …`` and exit
status 2, with no ``.partial`` left behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from aiperf_mpi.data.sources import SPLITS, DataError, cifar10_source, digits_source, imagenet_source
from aiperf_mpi.errors import OneLineParser

CHUNK = 1024


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, max(total, 1), 0
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()

    def update(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.done < self.total and now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        width = 30
        filled = int(width * self.done / self.total)
        rate = self.done / max(now - self.start, 1e-9)
        line = f"{self.label}: [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} ({rate:.0f}/s)"
        sys.stderr.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _array_chunks(source, split: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    images, labels = source.shard(split, 0, 1)
    for start in range(0, len(labels), CHUNK):
        yield images[start : start + CHUNK], labels[start : start + CHUNK]


def _imagenet_chunks(source, split: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    import tensorflow as tf

    from aiperf_mpi.data.tfdata import imagenet_split

    try:
        for images, labels in imagenet_split(source, split, 0, 1, CHUNK, None):
            yield ((images.numpy() + 1.0) * 127.5).round().astype(np.uint8), labels.numpy().astype(np.int64)
    except tf.errors.OpError as exc:  # a corrupt record past the first of a shard
        raise DataError(f"imagenet: {split}: {' '.join(exc.message.split())[:300]}") from None


def _check_destination(dst: Path) -> Path:
    """The ``.partial`` file beside ``dst``, created empty, or a DataError saying why it cannot be."""
    if dst.is_dir():
        raise DataError(f"{dst} is a directory (--to names the HDF5 file to write)")
    parent = dst.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a directory"
        raise DataError(f"cannot write {dst}: the directory {parent} {what}")
    tmp = dst.with_name(dst.name + ".partial")
    try:
        tmp.unlink(missing_ok=True)  # a leftover (even a named pipe, which open() would block on)
        with open(tmp, "wb"):
            pass
    except OSError as exc:
        raise DataError(f"cannot write {tmp}: {exc.strerror or exc}") from None
    return tmp


def convert(kind: str, src: str, dst: Path, image_size: int) -> None:
    import h5py

    if kind in ("cifar10", "imagenet") and not src:
        raise DataError(f"--from {kind} needs the source directory (SRC)")
    tmp = _check_destination(dst)  # before a long read of the source
    try:
        if kind == "digits":
            source, chunks = digits_source(), _array_chunks
        elif kind == "cifar10":
            source, chunks = cifar10_source(src), _array_chunks
        elif kind == "imagenet":
            source, chunks = imagenet_source(src, image_size), _imagenet_chunks  # counted and checked
        else:
            raise DataError(f"cannot convert from {kind!r}")
        _write(h5py, tmp, kind, src, source, chunks)
        os.replace(tmp, dst)  # never leave a half-written file under the final name
    except OSError as exc:
        raise DataError(f"cannot write {dst}: {exc.strerror or ' '.join(str(exc).split())}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write(h5py, tmp: Path, kind: str, src: str, source, chunks) -> None:
    with h5py.File(tmp, "w") as handle:
        handle.attrs["classes"] = source.classes
        handle.attrs["source"] = f"{kind}:{src}"
        for split in SPLITS:
            total = source.sizes[split]
            images = handle.create_dataset(f"{split}/images", (total, *source.image_shape), np.uint8,
                                           chunks=(min(total, 256), *source.image_shape))  # fmt: skip
            labels = handle.create_dataset(f"{split}/labels", (total,), np.int64)
            progress = Progress(f"{kind} {split}", total)
            offset = 0
            for chunk_images, chunk_labels in chunks(source, split):
                images[offset : offset + len(chunk_labels)] = chunk_images
                labels[offset : offset + len(chunk_labels)] = chunk_labels
                offset += len(chunk_labels)
                progress.update(len(chunk_labels))
            if offset != total:
                raise DataError(f"{kind}: {split} yielded {offset} samples, expected {total}")


def _image_size(text: str) -> int:
    """argparse type: a whole number of pixels the run accepts too (config.NUMERIC_RANGES)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"must be between 1 and 4096, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    # bad options are one line, like every other error of the converter (not usage + error)
    parser = OneLineParser(prog="python -m aiperf_mpi.data", description=__doc__, name="aiperf_mpi.data",
                           hint=" (see python -m aiperf_mpi.data convert --help)",
                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    conv = commands.add_parser("convert", help="convert a data set to one HDF5 file")
    conv.add_argument("--from", dest="kind", required=True, choices=["cifar10", "imagenet", "digits"])
    conv.add_argument("src", nargs="?", default="", help="source directory (not needed for digits)")
    conv.add_argument("--to", dest="dst", required=True, type=Path, help="the HDF5 file to write")
    conv.add_argument("--image-size", type=_image_size, default=224,
                      help="resize ImageNet images to this size (1 to 4096)")  # fmt: skip
    options = parser.parse_args(argv)
    try:
        convert(options.kind, options.src, options.dst, options.image_size)
    except DataError as exc:
        print(f"aiperf_mpi.data: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {options.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
