"""What a servable is given: the built-in sets, an HDF5 file, a directory of images — read by contiguous slice.

``--data`` names one input:

* ``digits`` (its 360 validation images; ``digits:train`` the 1,437 others, ``digits:all`` all 1,797), the
  benchmark's own split (:func:`aiperf_mpi.data.sources.digits_arrays`), with labels;
* ``synthetic`` or ``synthetic:N`` (default 1,024): random uint8 images of the bundle's shape, made in blocks of
  :data:`SYNTHETIC_BLOCK` seeded by the block's number, so any slice of them is the same bytes however the
  input is split among ranks; no labels;
* ``PATH.h5`` / ``PATH.hdf5`` (``PATH.h5:train``; default the validation split): a file in the benchmark's
  layout, checked by :func:`aiperf_mpi.data.sources.hdf5_source`, each rank reading only its slice, with labels;
* a directory of ``.png`` / ``.jpg`` / ``.jpeg`` images, in the order of their names, no labels; each must be
  of the bundle's height and width (no resizing: the bundle's preprocessing is what the run's pipeline did).

* a directory of ImageNet-style TFRecord shards (``DIR`` for its ``validation-*-of-*``, ``DIR:train`` for the
  other split): each JPEG decoded to RGB and resized to the bundle's size exactly as the training pipeline does
  (:func:`aiperf_mpi.data.tfdata._decode`: bilinear, antialiased, clipped to 0..255, kept as float32 pixels, so
  the bundle's preprocessing gives the very values training saw), labels ``image/class/label − 1``; the records
  are counted from the shards' headers and a rank reads only its slice's records.

``run`` names the validation split of the data set the bundle's run trained on (the manifest's ``source``):
``digits``, or its HDF5 file; other data sets are named explicitly.

Each rank reads its own contiguous slice (:meth:`Input.read`), so the input is never sent through rank 0.
"""

from __future__ import annotations

import glob
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiperf_mpi.data.sources import IMAGENET_LABELS, DataError, digits_arrays, hdf5_source
from aiperf_mpi.data.tfrecord import FOOTER, HEADER, RecordError, parse_example, scan_shard
from aiperf_mpi.serve import ServeError

SYNTHETIC_BLOCK = 256
SYNTHETIC_DEFAULT = 1024
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
HDF5_SUFFIXES = (".h5", ".hdf5")


@dataclass
class Input:
    """``count`` images of ``shape`` (H, W, C), readable by slice, labelled or not."""

    description: str
    count: int
    shape: tuple[int, int, int]
    labelled: bool
    reader: Callable[[int, int], tuple[np.ndarray, np.ndarray | None]]

    def read(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Images ``start..end-1`` (N×H×W×C: uint8 pixels, or float32 0..255 for resized TFRecord JPEGs) and
        their labels (None when the input has none)."""
        return self.reader(start, end)


def _digits(split: str) -> Input:
    splits = digits_arrays()
    if split == "all":
        images = np.concatenate([splits["train"][0], splits["validation"][0]])
        labels = np.concatenate([splits["train"][1], splits["validation"][1]])
    elif split in splits:
        images, labels = splits[split]
    else:
        raise ServeError(f"--data digits:{split}: the digits have the splits train, validation and all")
    return Input(
        f"digits:{split}",
        len(images),
        tuple(images.shape[1:]),
        True,
        lambda start, end: (images[start:end], labels[start:end]),
    )


def _synthetic(count_text: str, shape: tuple[int, int, int]) -> Input:
    if not count_text.isdigit() or int(count_text) < 1:
        raise ServeError(f"--data synthetic:{count_text}: give a positive number of images")
    count = int(count_text)

    def read(start: int, end: int) -> tuple[np.ndarray, None]:
        first, last = start // SYNTHETIC_BLOCK, (max(end, start + 1) - 1) // SYNTHETIC_BLOCK
        blocks = [
            np.random.default_rng([46, block]).integers(0, 256, (SYNTHETIC_BLOCK, *shape), dtype=np.uint8)
            for block in range(first, last + 1)
        ]
        images = np.concatenate(blocks)[start - first * SYNTHETIC_BLOCK : end - first * SYNTHETIC_BLOCK]
        return images, None

    return Input(f"synthetic:{count}", count, shape, False, read)


def _hdf5(path: Path, split: str) -> Input:
    import h5py

    try:
        source = hdf5_source(path)
    except DataError as exc:
        raise ServeError(str(exc)) from None
    if split not in source.sizes:
        raise ServeError(f"--data {path}:{split}: the file has the splits {', '.join(source.sizes)}")

    def read(start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        with h5py.File(path, "r") as handle:
            return handle[f"{split}/images"][start:end], handle[f"{split}/labels"][start:end].astype(np.int64)

    return Input(f"{path}:{split}", source.sizes[split], source.image_shape, True, read)


def _shard_records(path: str) -> list[tuple[int, int]]:
    """(offset, length) of every record of a TFRecord shard, from its headers (lengths' CRCs checked)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        scan_shard(fd, size)  # every length CRC, and record 0's data CRC
        spans, offset = [], 0
        while offset < size:
            (length,) = struct.unpack("<Q", os.pread(fd, 8, offset))
            spans.append((offset + HEADER, length))
            offset += HEADER + length + FOOTER
        return spans
    finally:
        os.close(fd)


def _tfrecords(path: Path, split: str, shape: tuple[int, int, int]) -> Input:
    shards = sorted(f for f in glob.glob(str(path / f"{split}-*-of-*")) if not f.endswith(".partial"))
    try:
        records = [(shard, offset, length) for shard in shards for offset, length in _shard_records(shard)]
    except RecordError as exc:
        raise ServeError(f"--data {path}: {exc}") from None

    def read(start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        import tensorflow as tf

        images, labels = [], []
        for shard, offset, length in records[start:end]:
            with open(shard, "rb") as handle:
                handle.seek(offset)
                features = parse_example(handle.read(length))
            image = tf.io.decode_jpeg(features["image/encoded"][0], channels=3)
            image = tf.image.resize(image, shape[:2], antialias=True)
            images.append(np.asarray(tf.cast(tf.clip_by_value(image, 0.0, 255.0), tf.float32)))
            labels.append(int(features["image/class/label"][0]) - IMAGENET_LABELS[0])
        pixels = np.stack(images) if images else np.zeros((0, *shape), np.float32)
        return pixels, np.array(labels, dtype=np.int64)

    return Input(f"{path}:{split} ({len(shards)} TFRecord shards)", len(records), shape, True, read)


def _tfrecord_dir(spec: str) -> tuple[Path, str] | None:
    """``DIR`` or ``DIR:split`` when DIR holds ``split-*-of-*`` shards (default split: validation)."""
    head, _, tail = spec.rpartition(":")
    path, split = (Path(head), tail) if head and Path(head).is_dir() else (Path(spec), "validation")
    if path.is_dir() and glob.glob(str(path / f"{split}-*-of-*")):
        return path, split
    return None


def _directory(path: Path, shape: tuple[int, int, int]) -> Input:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ServeError(f"--data {path}: no {', '.join(IMAGE_SUFFIXES)} image in the directory")
    from PIL import Image

    mode = "RGB" if shape[2] == 3 else "L"

    def load(file: Path) -> np.ndarray:
        try:
            with Image.open(file) as image:
                pixels = np.asarray(image.convert(mode), dtype=np.uint8)
        except OSError as exc:
            raise ServeError(f"--data {path}: {file.name} is not a readable image ({exc})") from None
        return pixels.reshape(*pixels.shape[:2], shape[2])

    first = load(files[0])

    def read(start: int, end: int) -> tuple[np.ndarray, None]:
        images = [load(file) for file in files[start:end]]
        for file, image in zip(files[start:end], images, strict=True):
            if image.shape != first.shape:
                raise ServeError(
                    f"--data {path}: {file.name} is {image.shape[1]}×{image.shape[0]}, {files[0].name} "
                    f"{first.shape[1]}×{first.shape[0]}: the images differ in size"
                )
        return (np.stack(images) if images else np.zeros((0, *first.shape), np.uint8)), None

    return Input(f"{path} ({len(files)} images)", len(files), tuple(first.shape), False, read)


def run_data(manifest: dict) -> str:
    """``--data run``: the validation split of the data set the bundle's run trained on."""
    source = manifest.get("source", {})
    if source.get("dataset") == "digits":
        return "digits:validation"
    if source.get("dataset") == "hdf5" and source.get("data_path"):
        return f"{source['data_path']}:validation"
    raise ServeError(
        f"--data run: the bundle's run trained on {source.get('dataset')!r}; name its images with "
        "--data (digits, FILE.h5[:split], a directory)"
    )


def open_input(spec: str, shape: tuple[int, int, int], manifest: dict | None = None) -> Input:
    """The input ``spec`` names (module doc); ``shape`` is the bundle's (H, W, C), which synthetic images take."""
    if spec == "run":
        spec = run_data(manifest or {})
    name, _, option = spec.partition(":")
    if name == "digits":
        return _digits(option or "validation")
    if name == "synthetic":
        return _synthetic(option or str(SYNTHETIC_DEFAULT), shape)
    path = Path(spec)
    records = _tfrecord_dir(spec)
    if records is not None:
        return _tfrecords(*records, shape)
    if path.is_dir():
        return _directory(path, shape)
    head, _, tail = spec.rpartition(":")
    stem, split = (head, tail) if Path(head).suffix in HDF5_SUFFIXES else (spec, "")
    if Path(stem).suffix in HDF5_SUFFIXES:
        return _hdf5(Path(stem), split or "validation")
    if not path.exists():
        raise ServeError(
            f"--data {spec}: no such file or directory (give digits, synthetic[:N], FILE.h5[:split] "
            "or a directory of images)"
        )
    raise ServeError(
        f"--data {spec}: not an input this command reads (digits, synthetic[:N], FILE.h5[:split], "
        "a directory of .png/.jpg images)"
    )
