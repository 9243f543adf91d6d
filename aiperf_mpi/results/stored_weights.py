"""Where a task's trained weights are in a run directory: its ``weights/task-N.npz``, or ``best/model.keras``.

The best model is stored once: the end-of-run export writes it to
``best/model.keras`` (float32, the same arrays: every precision keeps float32
variables) and removes the task's ``.npz``, saying so in
``best/metadata.json`` (``weights_file`` and ``weights_file_removed``).  The
log still names the ``.npz`` (``model_done``'s ``weights``; no
``weights_removed`` event), so the master's retention and ``--resume`` keep
believing the file exists: every reader of a task's weights — a training rank
loading its parent's, a re-export — asks :func:`weights_location` where they
are instead of opening the name.  One decision, one place; pure (no I/O, no
TensorFlow) so that it is unit-tested without a run.

Each file is tied to the log by its sha256: the training rank that writes a
task's ``.npz`` logs the file's sha256 in its ``model_done``
(``weights_sha256``), and the export records in ``best/metadata.json`` the
sha256 of the ``.npz`` it built ``model.keras`` from (``weights_sha256``) and
of the ``model.keras`` it wrote (``model_sha256``), so that a reviewer ties
``best/`` to the log without loading it (:func:`trusted_weights`).  The
shapes of an ``.npz``'s arrays are read from its headers alone
(:func:`npz_shapes`): a verifier holds them to the graph without TensorFlow
and without reading the arrays.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Collection, Iterable
from pathlib import Path

import numpy as np

BEST_DIR = "best"
BEST_MODEL = f"{BEST_DIR}/model.keras"
"""the published best model, relative to the run directory"""
BEST_METADATA = f"{BEST_DIR}/metadata.json"
WEIGHTS_FILE = "weights_file"
"""``best/metadata.json``: the weights file (relative to the run directory) the exported model was built from"""
WEIGHTS_FILE_REMOVED = "weights_file_removed"
"""``best/metadata.json``: true when that file is gone and ``model.keras`` is the only copy of its weights"""
WEIGHTS_SHA256 = "weights_sha256"
"""``model_done`` (the log) and ``best/metadata.json``: the sha256 of the task's ``.npz`` as its rank wrote it"""
MODEL_SHA256 = "model_sha256"
"""``best/metadata.json``: the sha256 of ``best/model.keras`` as the export wrote it"""
READ_BLOCK = 1 << 20
HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
"""an ``.npy`` header's version → its reader (``numpy.savez`` writes 1.0, and 2.0 past 64 KiB of header)"""


def weights_location(weights_file: str, best_metadata: dict | None, present: Collection[str]) -> str | None:
    """The file (relative to the run directory) that holds the weights logged as ``weights_file``; None: nowhere.

    ``present`` are the relative paths known to exist among ``weights_file`` and :data:`BEST_MODEL`;
    ``best_metadata`` is ``best/metadata.json`` (None when there is none or it cannot be read).  The ``.npz``
    wins whenever it exists; ``best/model.keras`` serves only when the metadata says it was built from exactly
    that file and that the file was removed (any other best model holds other weights).
    """
    if not weights_file:
        return None
    if weights_file in present:
        return weights_file
    holds_it = (isinstance(best_metadata, dict) and best_metadata.get(WEIGHTS_FILE) == weights_file
                and best_metadata.get(WEIGHTS_FILE_REMOVED) is True)  # fmt: skip
    return BEST_MODEL if holds_it and BEST_MODEL in present else None


def read_best_metadata(run_dir: Path) -> dict | None:
    """``best/metadata.json`` of ``run_dir``, or None when it is missing or unreadable (no best model to fall to)."""
    try:
        data = json.loads((Path(run_dir) / BEST_METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def locate_weights(run_dir: Path, weights_file: str) -> Path | None:
    """:func:`weights_location` on the disk: the path to read ``weights_file``'s weights from, or None.

    None too for a name that leaves the run directory (absolute, or with ``..``): the name comes from a
    leader's message or a log, and what a run or an export reads as weights is the run's own.
    """
    run_dir = Path(run_dir)
    if Path(weights_file).is_absolute() or ".." in Path(weights_file).parts:
        return None
    present = {name for name in (weights_file, BEST_MODEL) if name and (run_dir / name).is_file()}
    if weights_file in present:  # the common case: no metadata to read
        return run_dir / weights_file
    where = weights_location(weights_file, read_best_metadata(run_dir), present)
    return None if where is None else run_dir / where


def file_sha256(path: Path, most_bytes: int | None = None) -> str:
    """The sha256 of a file's bytes, read in blocks (a ResNet-50's weights are 100 MB).

    ``most_bytes``: the most the file may hold (:func:`most_weights_bytes` of its graph's shapes); a larger one
    raises :class:`WeightsFileError` before a byte is read, so a reviewer's tool is not held for minutes by a
    sparse terabyte or an inflated HDF5 user block (issue 45).
    """
    if most_bytes is not None:
        size = path.stat().st_size
        if size > most_bytes:
            raise WeightsFileError(f"is {size:,} bytes, more than its graph's arrays can take ({most_bytes:,}): "
                                   "refused unread")  # fmt: skip
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(READ_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


class WeightsFileError(ValueError):
    """A file that is not weights as :func:`aiperf_mpi.train.transfer.save_weights` writes them."""


BYTES_PER_ARRAY = 64 << 10
"""the most one array may add besides its elements: its ``.npy`` header (at most 64 KiB in version 2.0) and its
zip or HDF5 entry"""
FILE_SLACK = 64 << 20
"""what a weights file may hold besides its arrays: a ``.keras`` file's ``config.json`` (the whole graph, a few
MB for a deep morphed model) and ``metadata.json``, the zip's directory"""


def most_weights_bytes(shapes: Iterable[tuple[int, ...]]) -> int:
    """The most bytes a file of arrays of these shapes can need: 8 bytes an element (float64, the widest a
    model is saved at), :data:`BYTES_PER_ARRAY` an array and :data:`FILE_SLACK`.  Generous by design: it is
    there to refuse a file orders of magnitude too large before it is hashed, not to judge its contents."""
    elements = arrays = 0
    for shape in shapes:
        elements += int(np.prod(shape, dtype=np.int64)) if shape else 1
        arrays += 1
    return 8 * elements + BYTES_PER_ARRAY * arrays + FILE_SLACK


def npz_shapes(path: Path) -> dict[str, list[tuple[int, ...]]]:
    """``{layer: [array shapes]}`` of an ``.npz`` of weights (``layer::index`` members), from each array's header
    alone: no array is read, so a verifier checks a file of any size in a few kilobytes of reading.

    :class:`WeightsFileError` for anything else: not a zip, a member that is not a ``.npy``, a name that is not
    ``layer::index``, indices that are not 0, 1, …
    """
    found: dict[str, dict[int, tuple[int, ...]]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                name, sep, index = member.removesuffix(".npy").rpartition("::")
                if not member.endswith(".npy") or not sep or not index.isdigit():
                    raise WeightsFileError(f"its member {member[:80]!r} is not a layer's array (layer::index.npy)")
                with archive.open(member) as handle:
                    read_header = HEADER_READERS.get(np.lib.format.read_magic(handle))
                    if read_header is None:
                        raise WeightsFileError(f"its member {member[:80]!r} is an .npy of an unknown version")
                    shape, _, _ = read_header(handle)  # the header alone
                found.setdefault(name, {})[int(index)] = tuple(int(n) for n in shape)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        if isinstance(exc, WeightsFileError):
            raise
        raise WeightsFileError(f"not an .npz of weights ({' '.join(str(exc).split())[:120]})") from None
    shapes = {}
    for name, arrays in found.items():
        if sorted(arrays) != list(range(len(arrays))):
            raise WeightsFileError(f"layer {name!r} has arrays {sorted(arrays)}, not 0..{len(arrays) - 1}")
        shapes[name] = [arrays[i] for i in range(len(arrays))]
    return shapes


def trusted_weights(run_dir: Path, weights_file: str, logged_sha256: object) -> tuple[Path | None, str]:
    """The file to read ``weights_file``'s weights from, once it is tied to the sha256 the log records for it;
    else None and why not (one line): missing, no sha256 logged, or bytes that are not the logged ones.

    The ``.npz``'s own sha256 must be the logged one.  ``best/model.keras``, where a single-copy export removed
    the ``.npz``, is tied through ``best/metadata.json``: the sha256 of the ``.npz`` it was built from must be
    the logged one, and the sha256 of ``model.keras`` the one the export recorded.
    """
    run_dir = Path(run_dir)
    path = locate_weights(run_dir, weights_file) if weights_file else None
    if path is None:
        return None, (f"{weights_file or 'its weights file'} is missing (nor does best/model.keras hold it): the "
                      "weights saved at that epoch are not in the run directory")  # fmt: skip
    if not isinstance(logged_sha256, str) or not logged_sha256:
        return None, f"the log records no {WEIGHTS_SHA256} for {weights_file}: nothing ties the file to the run"
    if path.suffix != ".keras":
        found = file_sha256(path)
        if found != logged_sha256:
            return None, f"{weights_file} has sha256 {found[:16]}…, the log {logged_sha256[:16]}…: not the saved file"
        return path, ""
    meta = read_best_metadata(run_dir) or {}
    if meta.get(WEIGHTS_SHA256) != logged_sha256:
        return None, (f"{BEST_METADATA} says {BEST_MODEL} was built from weights of sha256 "
                      f"{str(meta.get(WEIGHTS_SHA256))[:16]}…, the log's {weights_file} has {logged_sha256[:16]}…")
    found = file_sha256(path)
    if found != meta.get(MODEL_SHA256):
        return None, (f"{BEST_MODEL} has sha256 {found[:16]}…, {BEST_METADATA} {str(meta.get(MODEL_SHA256))[:16]}…: "
                      "not the file the export wrote")  # fmt: skip
    return path, ""


KERAS_WEIGHTS_MEMBER = "model.weights.h5"
"""the member of a ``.keras`` file (a zip, Keras 3) that holds the arrays, under ``layers/<name>/vars/<i>``"""
MAX_KERAS_WEIGHTS_BYTES = 8 << 30
"""the most a best model's weights may hold (ResNet-50's are ≈ 100 MB): larger is not read"""


def keras_shapes(path: Path) -> list[tuple[int, ...]]:
    """The shapes of every array in a ``.keras`` model file, sorted, read with h5py (no TensorFlow, no Keras).

    Keras names a layer by its kind and a counter (``conv2d_3``), not by the graph's node, so the shapes are
    compared as a multiset with :func:`aiperf_mpi.graph.model.param_shapes`': a file of other bytes, or of
    another model, does not hold the logged graph's arrays.  :class:`WeightsFileError` for anything that is not
    such a file.
    """
    import h5py

    shapes: list[tuple[int, ...]] = []

    def gather(name: str, item: object) -> None:
        if isinstance(item, h5py.Dataset):
            shapes.append(tuple(int(n) for n in item.shape))

    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(KERAS_WEIGHTS_MEMBER)
            if info.file_size > MAX_KERAS_WEIGHTS_BYTES:
                raise WeightsFileError(f"its {KERAS_WEIGHTS_MEMBER} of {info.file_size:,} bytes is past the "
                                       f"{MAX_KERAS_WEIGHTS_BYTES:,} a best model's may be")  # fmt: skip
            with archive.open(info) as member, h5py.File(member, "r") as weights:
                layers = weights.get("layers")
                if not isinstance(layers, h5py.Group):
                    raise WeightsFileError(f"its {KERAS_WEIGHTS_MEMBER} holds no layers")
                layers.visititems(gather)
    except (OSError, KeyError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        if isinstance(exc, WeightsFileError):
            raise
        raise WeightsFileError(f"not a Keras model file ({' '.join(str(exc).split())[:120]})") from None
    return sorted(shapes)
