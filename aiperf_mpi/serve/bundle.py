"""The servable bundle's manifest: what it holds, how to call it, and the check every load makes first.

A bundle is a directory a user copies anywhere::

    manifest.json                      this contract (below)
    model_card.md                      the same for a person
    members/task-N/model.keras         each member, Keras 3 (built-in layers only)
    members/task-N/savedmodel/...      the same model as a TensorFlow SavedModel (``serve`` endpoint)
    members/task-N/graph.json          its graph (aiperf_mpi.graph/1), as trained
    members/task-N/ops.json            its analytic operations per sample (docs/counting.md)

The manifest's fields follow what model repositories hold: a servable's type
and name (TF Serving, KServe), a signature with each input's and output's
name, dtype and shape (a SavedModel's ``serving_default``, MLflow's
``signature``), the preprocessing from stored pixels, the output's classes,
and a model card's sections (model details, intended use, metrics, training
and evaluation data, limitations).  An ensemble says how it combines: the
mean of its members' softmax probabilities.

``files`` lists every other file of the bundle with its sha256 and size.
Loading (:func:`open_bundle`) checks all of them before any model is read:
a manifest of another format, a missing, extra, larger, smaller or altered
file is a :class:`~aiperf_mpi.serve.ServeError` (one line, exit 2).  A file
larger than its logged size is refused from its ``stat``, before a byte of
it is read, and a file is never read past its logged size plus one byte
(a file growing while it is hashed is caught, not read to its end).

Pure: no TensorFlow, no MPI; the reviewer's check uses it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from aiperf_mpi.serve import ServeError

FORMAT = "aiperf_mpi.serve/1"
MANIFEST = "manifest.json"
MEMBERS_DIR = "members"
READ_BLOCK = 1 << 20
COMBINE = "mean of the members' softmax probabilities (a member whose graph ends in logits is softmaxed first)"


def digest(path: Path, limit: int | None = None) -> tuple[str, int]:
    """sha256 and length of ``path``'s bytes, reading at most ``limit`` + 1 bytes when a limit is given."""
    sha, seen = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        while True:
            want = READ_BLOCK if limit is None else min(READ_BLOCK, limit + 1 - seen)
            if want <= 0:
                break
            block = handle.read(want)
            if not block:
                break
            sha.update(block)
            seen += len(block)
    return sha.hexdigest(), seen


def bundle_files(root: Path) -> list[str]:
    """Every file under ``root`` but the manifest, as sorted POSIX paths relative to it (links refused)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if relative != MANIFEST:
                found.append(relative)
    return sorted(found)


def file_table(root: Path) -> dict[str, dict]:
    """``{path: {"sha256", "bytes"}}`` of every file of the bundle but the manifest."""
    table = {}
    for relative in bundle_files(root):
        sha, size = digest(root / relative)
        table[relative] = {"sha256": sha, "bytes": size}
    return table


def write_manifest(root: Path, manifest: dict) -> dict:
    """Add the file table to ``manifest`` and write it (last: its table covers every other file)."""
    manifest = {**manifest, "files": file_table(root)}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def read_manifest(root: Path) -> dict:
    """The manifest, of this format; nothing else is checked here (:func:`open_bundle` checks the files)."""
    path = Path(root) / MANIFEST
    if not Path(root).is_dir():
        raise ServeError(f"{root} is not a directory (a bundle is the directory `serve publish` wrote)")
    if not path.is_file():
        raise ServeError(f"{root} has no {MANIFEST}: not a bundle `python -m aiperf_mpi.serve publish` wrote")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServeError(f"{path} is not JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ServeError(f"{path} is not a JSON object")
    if manifest.get("format") != FORMAT:
        raise ServeError(f"{path} is format {manifest.get('format')!r}; this aiperf_mpi reads {FORMAT!r}")
    for key in ("servable", "signature", "members", "files"):
        if key not in manifest:
            raise ServeError(f"{path} lacks {key!r}")
    return manifest


def check_files(root: Path, files: dict) -> None:
    """Every listed file present, a regular file of its logged size and sha256; no file unlisted."""
    root = Path(root)
    for relative, logged in sorted(files.items()):
        path = root / relative
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise ServeError(f"{root}: {relative} is missing (the manifest lists it)") from None
        if not stat.S_ISREG(info.st_mode):
            raise ServeError(f"{root}: {relative} is not a regular file")
        given = logged.get("bytes") if isinstance(logged, dict) else logged
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ServeError(f"{root}: {relative}'s size in the manifest is {given!r}, not a number of bytes")
        size = given
        if info.st_size != size:  # a larger file is refused here, before a byte of it is read
            raise ServeError(f"{root}: {relative} has {info.st_size} bytes, the manifest says {size}")
        sha, seen = digest(path, limit=size)
        if seen != size:
            raise ServeError(f"{root}: {relative} changed while it was read ({seen} bytes, the manifest says {size})")
        if sha != logged["sha256"]:
            raise ServeError(f"{root}: {relative} has sha256 {sha}, the manifest says {logged['sha256']}: altered")
    extra = sorted(set(bundle_files(root)) - set(files))
    if extra:
        raise ServeError(f"{root}: {extra[0]} is not in the manifest ({len(extra)} unlisted file(s))")


def open_bundle(root: Path | str) -> dict:
    """The manifest of the bundle at ``root``, once every file checked out (:func:`check_files`)."""
    root = Path(root)
    manifest = read_manifest(root)
    check_files(root, manifest["files"])
    return manifest


def input_spec(manifest: dict) -> dict:
    """The signature's one input (name, dtype, shape with -1 for the batch, preprocessing)."""
    return manifest["signature"]["inputs"][0]


def check_input_shape(manifest: dict, shape: tuple[int, ...], where: str) -> None:
    """Images of ``shape`` (N, H, W, C) fit the bundle's input, or one line saying what it takes."""
    expected = [int(d) for d in input_spec(manifest)["shape"][1:]]
    if list(shape[1:]) != expected:
        got = "×".join(str(d) for d in shape[1:])
        raise ServeError(
            f"{where} has images of {got}; the bundle takes {'×'.join(map(str, expected))} "
            "(height×width×channels, uint8 pixels)"
        )


def forward_ops(manifest: dict) -> int:
    """Analytic forward operations per sample of the whole servable: the members' sum (each sees every sample)."""
    return sum(int(member["forward_ops_per_sample"]) for member in manifest["members"])
