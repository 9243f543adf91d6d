"""Reading each data-set format into one interface, without TensorFlow.

A :class:`DataSource` knows its image shape, class count and split sizes and
yields a rank's shard of a split as uint8 NHWC arrays; the TensorFlow side
(:mod:`aiperf_mpi.train.pipeline`) turns that into a ``tf.data`` pipeline.
ImageNet TFRecords need TensorFlow to decode JPEGs (:mod:`aiperf_mpi.data.tfdata`);
here they are found, counted and checked without TensorFlow
(:mod:`aiperf_mpi.data.tfrecord`).

Only regular files are read (symbolic links to one are fine): a named pipe
blocks a read for ever and a character device like ``/dev/zero`` never
ends, so either is refused with the path before anything opens it.

HDF5 layout (what ``python -m aiperf_mpi.data convert`` writes)::

    /train/images        uint8  (N, H, W, C)
    /train/labels        int64  (N,)
    /validation/images   uint8  (M, H, W, C)
    /validation/labels   int64  (M,)
    attributes on /:     classes (int), source (str)
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiperf_mpi.results.datasets import CIFAR10, DIGITS, ILSVRC_2012, SYNTHETIC

SPLITS = ("train", "validation")
CIFAR_RECORD = 1 + CIFAR10.image_size * CIFAR10.image_size * CIFAR10.channels


class DataError(ValueError):
    """Bad or missing data; the message is the one line the user sees."""


@dataclass
class DataSource:
    """Common description of a data set."""

    name: str
    image_shape: tuple[int, int, int]
    classes: int
    sizes: dict[str, int]
    has_accuracy: bool = True
    """False for synthetic data: no accuracy, no regulated score"""
    files: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise :class:`DataError` for anything that would fail during training."""
        for split in SPLITS:
            if self.sizes.get(split, 0) < 1:
                raise DataError(f"{self.name}: the {split} split is empty")

    def total_bytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.files)


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISREG, "a regular file"))  # fmt: skip
    return next((text for test, text in kinds if test(mode)), "a special file")


def _stat(name: str, path: Path) -> os.stat_result | None:
    """``os.stat`` (following links); None when nothing is there; a broken link is a DataError."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DataError(f"{name}: {path} is a broken symbolic link (to {os.readlink(path)})") from None
        return None
    except OSError as exc:
        raise DataError(f"{name}: cannot read {path}: {exc.strerror or exc}") from None


def regular_file(name: str, path: str | Path) -> int:
    """The size of ``path`` if it is a regular file (or a link to one); a :class:`DataError` otherwise.

    A named pipe would block the reader for ever and a device never end, so
    they are refused by their type, before anything opens them.
    """
    info = _stat(name, Path(path))
    if info is None:
        raise DataError(f"{name}: no file {path}")
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"{name}: {path} is {_file_kind(info.st_mode)}, not a regular file")
    return info.st_size


def data_directory(name: str, path: str | Path, expected: str) -> Path:
    """``path`` if it is a directory (or a link to one); a :class:`DataError` saying what it is otherwise."""
    path = Path(path)
    info = _stat(name, path)
    if info is None or not stat.S_ISDIR(info.st_mode):
        what = "it does not exist" if info is None else f"it is {_file_kind(info.st_mode)}"
        raise DataError(f"{name}: {path} is not a directory ({what}; expected {expected})")
    return path


@dataclass
class ArraySource(DataSource):
    """A data set whose splits are (or are loaded as) uint8 arrays."""

    loader: Callable[[str, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    def shard(self, split: str, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's images and labels of ``split``: samples ``rank, rank+size, …``."""
        indices = np.arange(rank, self.sizes[split], size)
        return self.loader(split, indices)


def _check_arrays(name: str, images: np.ndarray, labels: np.ndarray, classes: int, split: str) -> None:
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise DataError(f"{name}: {split} images must be (N, H, W, 1 or 3), got shape {images.shape}")
    if images.dtype != np.uint8:
        raise DataError(f"{name}: {split} images must be uint8, got {images.dtype}")
    if labels.shape != (images.shape[0],):
        raise DataError(f"{name}: {split} has {images.shape[0]} images but labels of shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise DataError(
            f"{name}: {split} labels must be in [0, {classes - 1}], found {int(labels.min())}..{int(labels.max())}"
        )


def in_memory(name: str, splits: dict[str, tuple[np.ndarray, np.ndarray]], classes: int, **extra) -> ArraySource:
    """An :class:`ArraySource` over arrays already in memory (validated here)."""
    for split in SPLITS:
        if split not in splits:
            raise DataError(f"{name}: no {split} split")
        _check_arrays(name, *splits[split], classes, split)
    shapes = {splits[s][0].shape[1:] for s in SPLITS}
    if len(shapes) != 1:
        raise DataError(f"{name}: train and validation images differ in shape: {sorted(shapes)}")
    source = ArraySource(
        name=name,
        image_shape=tuple(int(d) for d in splits["train"][0].shape[1:]),
        classes=classes,
        sizes={s: int(splits[s][0].shape[0]) for s in SPLITS},
        loader=lambda split, idx: (splits[split][0][idx], splits[split][1][idx]),
        **extra,
    )
    source.check()
    return source


# --------------------------------------------------------------------------- digits (embedded default)

DIGITS_SIZE = DIGITS.image_size
DIGITS_VALIDATION = DIGITS.validation
"""the digits' side and validation split: the documented table's (aiperf_mpi/results/datasets.py), which the
verifier holds every digits run to"""


def digits_arrays() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's 1,797 bundled 8×8 digits, as 32×32×3 uint8, split 1,437/360 with a fixed permutation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)  # 0..16 → 0..255
    images = np.kron(images, np.ones((DIGITS_SIZE // 8, DIGITS_SIZE // 8), dtype=np.uint8))
    images = np.repeat(images[..., None], DIGITS.channels, axis=-1)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    valid, train = order[:DIGITS_VALIDATION], order[DIGITS_VALIDATION:]
    return {"train": (images[train], labels[train]), "validation": (images[valid], labels[valid])}


def digits_source() -> ArraySource:
    return in_memory("digits", digits_arrays(), classes=DIGITS.classes)


# --------------------------------------------------------------------------- synthetic


def synthetic_source(
    image_size: int = SYNTHETIC.image_size,
    channels: int = SYNTHETIC.channels,
    classes: int = SYNTHETIC.classes,
    train: int = SYNTHETIC.train,
    validation: int = SYNTHETIC.validation,
    seed: int = 0,
) -> ArraySource:
    """Random images and labels, generated per shard on demand (nothing held in memory).

    The defaults, which a run's ``synthetic`` data set takes, are the documented table's (the verifier's).
    """
    shape = (image_size, image_size, channels)

    def load(split: str, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, SPLITS.index(split), int(indices[0]) if indices.size else 0])
        images = rng.integers(0, 256, (indices.size, *shape), dtype=np.uint8)
        return images, rng.integers(0, classes, indices.size).astype(np.int64)

    source = ArraySource("synthetic", shape, classes, {"train": train, "validation": validation},
                         has_accuracy=False, loader=load)  # fmt: skip
    source.check()
    return source


# --------------------------------------------------------------------------- CIFAR-10 (binary version)


CIFAR_FILES = {"train": "data_batch_*.bin", "validation": "test_batch.bin"}


def _cifar_files(path: Path) -> dict[str, list[Path]]:
    data_directory("cifar10", path, "data_batch_1.bin … test_batch.bin")
    train = sorted(path.glob(CIFAR_FILES["train"]))
    test = sorted(path.glob(CIFAR_FILES["validation"]))
    if not train:
        raise DataError(f"cifar10: no data_batch_*.bin in {path}")
    if not test:
        raise DataError(f"cifar10: no test_batch.bin in {path}")
    return {"train": train, "validation": test}


def read_cifar_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary file: records of 1 label byte + 3×32×32 channel-major pixels."""
    size = regular_file("cifar10", path)
    if size == 0 or size % CIFAR_RECORD:
        raise DataError(f"cifar10: {path} is truncated or not CIFAR-10 binary ({size} bytes, "
                        f"not a multiple of {CIFAR_RECORD})")  # fmt: skip
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise DataError(f"cifar10: cannot read {path}: {exc.strerror or exc}") from None
    if raw.size != size:
        raise DataError(f"cifar10: {path} changed while it was read ({raw.size} of {size} bytes)")
    records = raw.reshape(-1, CIFAR_RECORD)
    labels = records[:, 0].astype(np.int64)
    side = CIFAR10.image_size
    images = records[:, 1:].reshape(-1, CIFAR10.channels, side, side).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def cifar10_source(path: str | Path) -> ArraySource:
    files = _cifar_files(Path(path))
    splits = {}
    for split, paths in files.items():
        parts = [read_cifar_file(p) for p in paths]
        splits[split] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    names = tuple(str(p) for ps in files.values() for p in ps)
    return in_memory("cifar10", splits, classes=CIFAR10.classes, files=names)


# --------------------------------------------------------------------------- HDF5


def hdf5_source(path: str | Path) -> ArraySource:
    """An HDF5 file in the documented layout; each rank reads only its shard."""
    import h5py

    path = Path(path)
    regular_file("hdf5", path)
    try:
        if not h5py.is_hdf5(path):
            raise DataError(f"hdf5: {path} is not an HDF5 file (no HDF5 signature)")
        with h5py.File(path, "r") as handle:
            classes = int(handle.attrs.get("classes", 0))
            if classes < 2:
                raise DataError(f"hdf5: {path} has no valid 'classes' attribute on /")
            sizes, shapes = {}, set()
            for split in SPLITS:
                if f"{split}/images" not in handle or f"{split}/labels" not in handle:
                    raise DataError(f"hdf5: {path} lacks /{split}/images or /{split}/labels")
                images, labels = handle[f"{split}/images"], handle[f"{split}/labels"]
                if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] not in (1, 3):
                    raise DataError(f"hdf5: /{split}/images must be uint8 (N, H, W, 1|3), got "
                                    f"{images.dtype} {images.shape}")  # fmt: skip
                if labels.shape != (images.shape[0],):
                    raise DataError(f"hdf5: /{split} has {images.shape[0]} images but labels {labels.shape}")
                values = labels[...]
                if values.size and (values.min() < 0 or values.max() >= classes):
                    raise DataError(f"hdf5: /{split}/labels must be in [0, {classes - 1}], found "
                                    f"{int(values.min())}..{int(values.max())}")  # fmt: skip
                sizes[split] = int(images.shape[0])
                shapes.add(images.shape[1:])
            if len(shapes) != 1:
                raise DataError(f"hdf5: train and validation images differ in shape: {sorted(shapes)}")
    except OSError as exc:
        raise DataError(f"hdf5: cannot read {path}: {exc}") from None

    def load(split: str, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with h5py.File(path, "r") as handle:
            return handle[f"{split}/images"][indices], handle[f"{split}/labels"][indices].astype(np.int64)

    source = ArraySource("hdf5", tuple(int(d) for d in shapes.pop()), classes, sizes, loader=load, files=(str(path),))
    source.check()
    return source


# --------------------------------------------------------------------------- ImageNet (TFRecord shards)

IMAGENET_CLASSES = ILSVRC_2012.classes
IMAGENET_LABELS = (1, IMAGENET_CLASSES)
"""``image/class/label`` as the standard converter (build_imagenet_data.py) writes it: 1..1000, 0 was background"""


@dataclass
class TFRecordSource(DataSource):
    """ImageNet-style TFRecord shards; decoded on the TensorFlow side."""

    split_files: dict[str, tuple[str, ...]] | None = None
    label_offset: int = IMAGENET_LABELS[0]
    """subtracted from ``image/class/label`` to give the class 0..999"""


def _imagenet_shards(path: Path, split: str) -> tuple[str, ...]:
    found = sorted(glob.glob(str(path / f"{split}-*-of-*")))
    return tuple(f for f in found if not f.endswith(".partial"))  # an interrupted staging copy is no shard


def imagenet_source(path: str | Path, image_size: int = ILSVRC_2012.image_size,
                    sizes: dict[str, int] | None = None) -> TFRecordSource:  # fmt: skip
    """The ``train-*-of-*`` and ``validation-*-of-*`` shards under ``path``.

    Without ``sizes`` every shard is counted and checked (:func:`count_imagenet`,
    what rank 0 does before a run); with ``sizes`` (rank 0's counts, handed
    to every other rank) the shards are only listed.
    """
    path = data_directory("imagenet", path, "train-*-of-* and validation-*-of-* TFRecord shards")
    split_files = {}
    for split in SPLITS:
        found = _imagenet_shards(path, split)
        if not found:
            raise DataError(f"imagenet: no {split}-*-of-* shards in {path}")
        split_files[split] = found
    return TFRecordSource(
        name="imagenet",
        image_shape=(image_size, image_size, ILSVRC_2012.channels),
        classes=IMAGENET_CLASSES,
        sizes=dict(sizes) if sizes is not None else count_imagenet(split_files),
        files=split_files["train"] + split_files["validation"],
        split_files=split_files,
    )


def count_imagenet(split_files: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """The records of each split, counted from the shards' headers (no TensorFlow).

    Every shard must be a regular file of whole TFRecords with valid length
    CRCs; the first record of each shard must have a valid data CRC, be a
    ``tf.train.Example`` with a JPEG in ``image/encoded`` and a label
    1..1000 in ``image/class/label``.  Anything else is a :class:`DataError`
    naming the shard and the problem.
    """
    return {split: _count_split(split, files) for split, files in split_files.items()}


def _count_split(split: str, files: tuple[str, ...]) -> int:
    from aiperf_mpi.data.tfrecord import RecordError, parse_example, scan_shard

    total = 0
    for path in files:
        size = regular_file("imagenet", path)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                scan = scan_shard(fd, size)
            finally:
                os.close(fd)
            if scan.first is not None:
                _check_imagenet_example(parse_example(scan.first))
        except RecordError as exc:
            raise DataError(f"imagenet: {path}: {exc}") from None
        except OSError as exc:
            raise DataError(f"imagenet: cannot read {path}: {exc.strerror or exc}") from None
        total += scan.records
    if total == 0:
        raise DataError(f"imagenet: the {split} shards hold no records")
    return total


def _check_imagenet_example(features: dict[str, list]) -> None:
    from aiperf_mpi.data.tfrecord import RecordError, jpeg_problem

    encoded = features.get("image/encoded")
    if not encoded or not isinstance(encoded[0], bytes):
        raise RecordError("record 0 has no image/encoded (not a shard of the standard ImageNet converter)")
    problem = jpeg_problem(encoded[0])
    if problem:
        raise RecordError(f"record 0: image/encoded {problem}")
    labels = features.get("image/class/label")
    if not labels:
        raise RecordError("record 0 has no image/class/label (not a shard of the standard ImageNet converter)")
    if len(labels) != 1 or not isinstance(labels[0], int):
        raise RecordError(f"record 0: image/class/label must be one int64, got {labels[:3]}")
    low, high = IMAGENET_LABELS
    if labels[0] == 0:
        raise RecordError(f"record 0: label 0 outside {low}..{high} (labels here are 1-based as written by the "
                          "standard build_imagenet_data.py converter, 0 being its background class; a 0-based "
                          "set (TFDS-style) must be written with label + 1)")  # fmt: skip
    if not low <= labels[0] <= high:
        raise RecordError(f"record 0: label {labels[0]} outside {low}..{high}")


# --------------------------------------------------------------------------- lookup

DATASETS = ("digits", "synthetic", "cifar10", "imagenet", "hdf5")


def open_source(
    name: str, path: str | None = None, image_size: int | None = None, sizes: dict[str, int] | None = None
) -> DataSource:
    """The data set ``name`` (with ``path`` for the on-disk formats).

    ``sizes``: the split sizes rank 0 found (``Prepared.data_sizes``); only
    ImageNet uses them, so that its shards are counted once per run, not
    once per rank.
    """
    if name == "digits":
        return digits_source()
    if name == "synthetic":
        return synthetic_source(image_size=image_size or SYNTHETIC.image_size)
    if name in ("cifar10", "imagenet", "hdf5") and not path:
        raise DataError(f"{name}: give the data location with --data-path")
    if name == "cifar10":
        return cifar10_source(path)
    if name == "hdf5":
        return hdf5_source(path)
    if name == "imagenet":
        return imagenet_source(path, image_size or ILSVRC_2012.image_size, sizes)
    raise DataError(f"unknown data set {name!r} (known: {', '.join(DATASETS)})")
