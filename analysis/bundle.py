"""A submission bundle of one run: ``python -m analysis.bundle RUN_DIR [--out FILE]``.

One ``.tar.gz`` holding one folder named after the run, with what a
reviewer needs to check the score and nothing that only retraining needs:

* ``events.jsonl`` (and any ``events.jsonl.cut-N`` a resume set aside),
  ``mllog.log`` (and its ``.cut-N``), ``score.json``;
* ``graphs/``: every model's graph, which the verifier recounts (one appended
  ``segment-N.jsonl`` per run segment, or one ``task-N.json`` per model in a
  run from before that file);
* ``report/``: the report (written into the bundle if the run has none);
* ``system.json``: the system description of each segment — the ``system``,
  ``layout`` and ``peak`` events and the ``run_start`` provenance;
* ``verify.txt`` and ``verify.json``: what ``python -m analysis.verify`` said
  about the run when the bundle was made;
* ``best/``, when the run published its best model: the small files only
  (graph JSON, model card, metadata: :data:`BEST_SUFFIXES`), never the Keras
  model file — the bundle holds no weights, and ``weights/`` stays out;
* ``MANIFEST``: ``sha256  path`` for every other file, the format of
  ``sha256sum``, so ``sha256sum -c MANIFEST`` inside the folder checks it as
  well as ``python -m analysis.verify BUNDLE`` does.

The bundle is written whether or not the verifier agrees, so a reviewer
sees the same verdict the submitter saw; the exit status says which: 0
verified, 1 written but not verified, 2 bad input.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import read_model
from aiperf_mpi.results.mllog_format import MLLOG_FILE
from analysis.checks import AUDIT_RECORD, BadInput, Verification
from analysis.guard import guarded
from analysis.verify import MANIFEST, verify_dir
from analysis.verify.bundle import system_segments
from analysis.verify.score import SCORE_FILE

BEST_SUFFIXES = (".json", ".md", ".txt", ".csv")
"""what of ``best/`` goes in: descriptions of the model, not the model (``.keras`` and other weights stay out)"""
TOP_FILES = (runlog.EVENTS_FILE, MLLOG_FILE, SCORE_FILE, AUDIT_RECORD)
"""the run directory's own files a bundle holds (the audit's record too: it names the log it judged by its sha256)"""
SIDE_FILES = (runlog.EVENTS_FILE + ".cut-", "mllog.log.cut-")
"""a resume's set-aside cut lines: part of the log's history"""
FOLDERS = ("graphs", "report")


@dataclass
class BundleResult:
    path: Path
    files: int
    bytes: int
    verification: Verification
    left_out: list[str] = field(default_factory=list)
    """'name (why)' for what of the run directory was not put in"""


def _member(relative: str) -> bool:
    """Whether ``relative`` (a file of the run directory) belongs in a bundle."""
    parts = relative.split("/")
    if len(parts) == 1:
        return relative in TOP_FILES or relative.startswith(SIDE_FILES)
    if parts[0] in FOLDERS:
        return True
    return parts[0] == "best" and relative.endswith(BEST_SUFFIXES)


def select(run_dir: Path) -> tuple[list[str], list[str]]:
    """(files to bundle, 'name (why)' left out), relative to the run directory, sorted."""
    chosen, left_out, weights = [], [], [0, 0]
    for path in sorted(run_dir.rglob("*")):
        if path.is_symlink() or path.is_dir():
            continue
        relative = path.relative_to(run_dir).as_posix()
        if not path.is_file():  # a FIFO or a device: never opened (reading one may block or never end)
            left_out.append(f"{relative} (not a regular file)")
            continue
        if _member(relative):
            chosen.append(relative)
        elif relative.startswith("weights/"):
            weights[0] += 1
            weights[1] += path.stat().st_size
        elif relative.startswith("best/"):
            left_out.append(f"{relative} (a model file: the bundle holds no weights)")
        else:
            left_out.append(f"{relative} (not part of a submission)")
    if weights[0]:
        files = f"{weights[0]} file{'s' if weights[0] != 1 else ''}"
        left_out.insert(0, f"weights/ ({files}, {weights[1] / 1e6:.1f} MB: the bundle holds no weights)")
    return chosen, left_out


def system_description(run_dir: Path) -> dict:
    """Each segment's system, layout, peaks and provenance, from the run's model (verify compares the same)."""
    return {"segments": system_segments(read_model(run_dir, require_start=False, keep_ended=False))}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    tar.addfile(info, io.BytesIO(data))


class _Hashing(io.RawIOBase):
    """A file read through once: what tarfile reads is what is hashed (a log of half a gigabyte is never whole
    in memory, and the manifest is of the very bytes the archive holds)."""

    def __init__(self, handle) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> str:
    """Add a file; returns the sha256 of what went in."""
    with open(path, "rb") as handle:
        stat = os.fstat(handle.fileno())
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        reader = _Hashing(handle)
        tar.addfile(info, reader)
    return reader.digest.hexdigest()


def make_bundle(run_dir: Path, out: Path | None = None) -> BundleResult:
    """Verify ``run_dir`` and write its bundle (see the module's doc); BadInput when it is not a run."""
    run_dir = Path(run_dir)
    verification = verify_dir(run_dir)  # BadInput for no run: before anything is written
    name = run_dir.resolve().name
    out = Path(out) if out is not None else run_dir.resolve().parent / f"{name}-bundle.tar.gz"
    if out.resolve().is_relative_to(run_dir.resolve()):
        raise BadInput(f"{out}: the bundle cannot be written inside the run directory it bundles")
    chosen, left_out = select(run_dir)
    now = time.time()
    generated = {
        "system.json": json.dumps(system_description(run_dir), indent=2, ensure_ascii=False).encode("utf-8"),
        "verify.txt": verification.text().encode("utf-8"),
        "verify.json": json.dumps(verification.to_dict(), indent=2, ensure_ascii=False).encode("utf-8"),
    }
    with tempfile.TemporaryDirectory(prefix="aiperf-bundle-") as scratch:
        if not any(c.startswith("report/") for c in chosen):  # a run without its report: write one for the bundle
            from analysis.report import write_report

            write_report(run_dir, Path(scratch) / "report")
        extra = {f"report/{p.name}": p for p in sorted((Path(scratch) / "report").glob("*")) if p.is_file()}
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        manifest = []
        with tarfile.open(partial, "w:gz") as tar:
            for relative in chosen:
                manifest.append((relative, _add_file(tar, f"{name}/{relative}", run_dir / relative)))
            for relative, path in extra.items():
                manifest.append((relative, _add_file(tar, f"{name}/{relative}", path)))
            for relative, data in generated.items():
                _add_bytes(tar, f"{name}/{relative}", data, now)
                manifest.append((relative, hashlib.sha256(data).hexdigest()))
            text = "".join(f"{digest}  {relative}\n" for relative, digest in sorted(manifest))
            _add_bytes(tar, f"{name}/{MANIFEST}", text.encode("utf-8"), now)
        os.replace(partial, out)
    return BundleResult(out, len(manifest) + 1, out.stat().st_size, verification, left_out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory")
    parser.add_argument("--out", type=Path, default=None,
                        help="the archive to write (default: RUN_DIR-bundle.tar.gz beside the run directory)")
    options = parser.parse_args(argv)
    return guarded("analysis.bundle", options.run_dir, lambda: _main(options))


def _main(options: argparse.Namespace) -> int:
    try:
        result = make_bundle(options.run_dir, options.out)
    except BadInput as exc:
        print(f"analysis.bundle: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"analysis.bundle: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {result.path}: {result.bytes / 1e3:,.1f} kB, {result.files} files")
    for line in result.left_out:
        print(f"  left out: {line}")
    print(result.verification.verdict_line() + ("" if result.verification.ok else
          f" (details in verify.txt inside the bundle, or: python -m analysis.verify {result.path})"))  # fmt: skip
    return 0 if result.verification.ok else 1


if __name__ == "__main__":
    sys.exit(main())
