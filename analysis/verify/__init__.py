"""A reviewer's check of a run from its files alone: ``python -m analysis.verify RUN_DIR|BUNDLE``.

A score is a claim; this recomputes it from what the run left behind — the
event log, the graph files and ``score.json`` — without rerunning anything
and without trusting any number that can be derived.  What it checks, row
by row, and what each rule reads, is one list under a version:
:data:`analysis.verify.registry.FAMILIES` (``docs/verify.md`` shows it);
this module reads the argument (a directory or a bundle), runs the walk and
prints the verdict.

A check is ``ok``, ``MISMATCH`` or ``not recorded`` (a log written before the
field existed: nothing was tampered with, but nothing can be checked
either).  A submission must be checkable, so *not recorded fails the
verdict* like a mismatch does.  Exit status: 0 when every check is ``ok``,
1 otherwise (each problem named by its epoch, task, segment or rule), 2 for
bad input (no such path, not a run, not a bundle).

The argument may also be a bundle (``python -m analysis.bundle``): its
``MANIFEST`` is checked first — every file listed with its sha256, nothing
unlisted — and the run inside it is then verified like a directory.
Nothing here imports TensorFlow or MPI.

The room ``analysis/verify/``: this module (the command, the bundle's
reading), ``registry.py`` (the families, their rows as (row, function) pairs,
the walk), ``units.py`` (the run as finished units, which every rule is a
function of, and the stream that makes them; ``view.py``, ``bounds.py``,
``tuner.py``, ``lineage.py`` and ``mllog_reader.py`` what it keeps of the
log's order) and one module per family, named for it: ``record``,
``evidence``, ``hardware``, ``data``, ``search``, ``score``, ``provenance``,
``energy``, ``mllog``, ``best``, ``weights``, ``fields``, ``bundle`` (a
bundle's own files).  The verdict's types are one floor down, in ``analysis/checks.py``,
which the audit and the bundle writer share.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from aiperf_mpi.results import runlog
from aiperf_mpi.results.machine import local_description
from analysis import reevaluation
from analysis.audit_record import audit_standing
from analysis.checks import MAX_JSON_BYTES, OK, BadInput, Check, Run, Verification, is_hex, is_regular_file
from analysis.guard import guarded
from analysis.trusted import trusted_claims
from analysis.verify.bundle import bundle_checks, system_segments
from analysis.verify.registry import FAMILIES, VERIFY_RULES_VERSION, Family, walk
from analysis.verify.side import side_files

MANIFEST = "MANIFEST"
"""the bundle's list of files: ``sha256sum`` lines, so ``sha256sum -c MANIFEST`` checks it too"""
SCORE_FILE = "score.json"
MAX_BUNDLE_BYTES = 4 << 30
"""the most a bundle may unpack to, headers and skipped files included (a bundle holds no weights, and its log
grows by about 1 kB an epoch); the work of reading one is bounded by it"""
MAX_MANIFEST_BYTES = 16 << 20
"""the most its MANIFEST may hold (100,000 files at 160 characters a line)"""
SMALL_FILES = (SCORE_FILE, "verify.json", "verify.txt", "system.json", "best/metadata.json")
"""the files verify reads whole (a few kB each in a run): in a bundle each is held to checks.MAX_JSON_BYTES by its
header, before anything is unpacked"""
MAX_MEMBERS = 100_000
"""the most files and folders a bundle may hold (a run from before the graphs file has one per model)"""
MAX_READ_BYTES = 64 << 10
"""the largest single read of the archive (tarfile reads a pax or long-name header whole; a file is copied in
blocks of this size)"""
MAX_HEADER_BYTES = 16 << 20
"""the most the members' names and pax records may hold in all (tarfile keeps every member's header)"""
DECOMPRESSORS: tuple[tuple[bytes, Callable[[BinaryIO], BinaryIO]], ...] = (
    (b"\x1f\x8b", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
    (b"BZh", lambda raw: bz2.BZ2File(raw)),
    (b"\xfd7zXZ\x00", lambda raw: lzma.LZMAFile(raw)),
)
"""what a bundle may be compressed with, by its first bytes (``analysis.bundle`` writes gzip)"""


# --------------------------------------------------------------------------- directories and bundles


BEST_ROW = "best/ (exported model)"
"""the row a valid run's best model is judged in"""
NO_BEST_MODEL = "best model (best/ not present)"
BEST_MODEL_FILE = "best/model.keras"
"""what a valid run's best/ must hold in a run directory (a bundle holds no model file: its run's copy is
re-evaluated)"""
"""the rule a run that meets every other one breaks without its best model: it is then an unofficial run"""


def verify_dir(run_dir: Path, source: str | None = None, before: list[Check] | None = None,
               bundle: bool = False, families: tuple[Family, ...] = FAMILIES,
               audit: Path | None = None) -> Verification:  # fmt: skip
    """Every check of a run directory (``bundle``: an unpacked bundle, whose verify.* and system.json are checked),
    by the rules of ``families`` (:mod:`analysis.verify.registry`); ``audit``: the reviewer's audit record, the only
    one that counts (:mod:`analysis.audit_record`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run directory")
    if not is_regular_file(run_dir / runlog.EVENTS_FILE):
        raise BadInput(f"{run_dir}: not a run directory (no {runlog.EVENTS_FILE})")
    run = Run(run_dir)
    result = Verification(source or str(run_dir), [*(before or []), *walk(run, families)],
                          rules_version=VERIFY_RULES_VERSION)
    score = run.score
    if score is not None:
        result.valid = score.valid
        result.broken_rules = [name for name, rule in score.rules.items() if not rule["ok"]]
    best = next((c for c in result.checks if c.name == BEST_ROW), None)
    without_model = not bundle and best is not None and not is_regular_file(run_dir / BEST_MODEL_FILE)
    if result.valid and best is not None and (best.summary == "not present" or without_model):  # unbacked
        result.valid = False
        result.broken_rules.append(NO_BEST_MODEL)
        best.notes.append("a valid run needs its best model, which a reviewer re-evaluates: this one is unofficial "
                          "until python -m aiperf_mpi.export --single-copy RUN_DIR makes best/ from its weights")
    standing = audit_standing(run_dir, audit)
    result.audit = (standing.counts, standing.line)
    if run.model is not None:
        here, model = local_description(), run.model
        ops_per_second = score.score if score is not None else None
        best = score.best_accuracy if score is not None and score.regulated_score is not None else None
        result.trust = lambda reevaluated: trusted_claims(model, here, standing.counts, reevaluated, ops_per_second,
                                                          best, standing.ratio)  # fmt: skip
    result.checks.append(side_files(run_dir, set(run.graph_files), bundle))
    if bundle:
        result.checks += bundle_checks(run_dir, result, system_segments(run.model))
    return result


def read_manifest(text: str) -> dict[str, str]:
    """``sha256  path`` lines → {path: sha256}; ValueError on a line that is not one."""
    entries = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        if not sep or not is_hex(digest, 64) or not name:
            raise ValueError(f"{MANIFEST} line {number} is not 'sha256  path'")
        entries[name] = digest
    return entries


class _BoundedArchive:
    """The decompressed bytes of an archive as tarfile reads them, refused past :data:`MAX_BUNDLE_BYTES` and in
    no single read past :data:`MAX_READ_BYTES`.

    ``tarfile`` skips a member by seeking past its declared size and reads a pax or GNU long-name header whole:
    a 9 MiB gzip of zeros declares gigabytes.  Every seek and read goes through here, so the work stays
    bounded by the cap (a forward seek on a gzip stream decompresses, in small blocks) and the memory by the
    largest read.
    """

    def __init__(self, stream: BinaryIO, archive: Path) -> None:
        self.stream, self.archive = stream, archive

    def _refuse_past(self, end: int) -> None:
        if end > MAX_BUNDLE_BYTES:
            raise BadInput(f"{self.archive}: more than {MAX_BUNDLE_BYTES:,} bytes unpacked: refused (a bundle "
                           "holds no weights)")  # fmt: skip

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_READ_BYTES:
            raise BadInput(f"{self.archive}: a tar header of {size:,} bytes: refused (a bundle's are small)")
        self._refuse_past(self.stream.tell() + size)
        return self.stream.read(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise BadInput(f"{self.archive}: not a readable bundle (a relative seek)")
        self._refuse_past(offset)
        return self.stream.seek(offset)

    def tell(self) -> int:
        return self.stream.tell()


@contextmanager
def _archive(archive: Path) -> Iterator[tarfile.TarFile]:
    """The bundle as a tar file read through :class:`_BoundedArchive` (gzip, bzip2, xz or none, by its magic)."""
    with open(archive, "rb") as raw:
        magic = raw.read(6)
        raw.seek(0)
        opener = next((o for m, o in DECOMPRESSORS if magic.startswith(m)), None)
        stream = opener(raw) if opener is not None else raw
        try:
            try:
                tar = tarfile.open(fileobj=_BoundedArchive(stream, archive), mode="r:")  # type: ignore[arg-type]
            except tarfile.ReadError:
                if opener is not None:
                    raise
                raise BadInput(f"{archive}: neither a run directory nor a bundle archive") from None
            with tar:
                yield tar
        finally:
            stream.close()


def _listing(tar: tarfile.TarFile, archive: Path, folder: Path) -> tuple[str, dict[str, tarfile.TarInfo]]:
    """(the bundle's one top folder, {path below it: member} of its files), from the headers alone — but for
    the MANIFEST, unpacked under ``folder`` as it passes (``analysis.bundle`` writes it last: a gzip stream read
    again to reach it would be decompressed again)."""
    files: dict[str, tarfile.TarInfo] = {}
    tops: set[str] = set()
    header_bytes = 0
    for count, member in enumerate(iter(tar.next, None), start=1):
        header_bytes += len(member.name) + len(member.linkname)
        header_bytes += sum(len(key) + len(value) for key, value in member.pax_headers.items())
        if count > MAX_MEMBERS or header_bytes > MAX_HEADER_BYTES or tar.pax_headers:
            raise BadInput(f"{archive}: more than {MAX_MEMBERS:,} members, {MAX_HEADER_BYTES:,} bytes of names and "
                           "pax records, or a pax global header: refused")  # fmt: skip
        if not (member.isfile() or member.isdir()) or member.issparse():
            raise BadInput(f"{archive}: {member.name} is not a plain file (a bundle holds only files)")
        top, _, relative = member.name.partition("/")
        tops.add(top)
        if member.isfile():
            if relative in files:
                raise BadInput(f"{archive}: {member.name} is in the bundle twice")
            files[relative] = member
            if relative in SMALL_FILES and member.size > MAX_JSON_BYTES:
                raise BadInput(f"{archive}: its {relative} of {member.size:,} bytes is past the {MAX_JSON_BYTES:,} "
                               "such a file may be (a few kB in a run)")  # fmt: skip
            if relative == MANIFEST:
                if member.size > MAX_MANIFEST_BYTES:
                    raise BadInput(f"{archive}: its {MANIFEST} of {member.size:,} bytes is past the "
                                   f"{MAX_MANIFEST_BYTES:,} a bundle's may be")  # fmt: skip
                _copy(tar, member, folder, archive)
    if len(tops) != 1 or "" in files or tops & {"", ".", ".."}:
        raise BadInput(f"{archive}: not a bundle (it must hold one folder with the run and its {MANIFEST})")
    return tops.pop(), files


def _copy(tar: tarfile.TarFile, member: tarfile.TarInfo, folder: Path, archive: Path) -> str:
    """Unpack one file member under ``folder`` in blocks, exactly its declared size; its sha256."""
    tarfile.data_filter(member, str(folder))  # refuses absolute paths, .. and other escapes
    target = folder / member.name
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, written = hashlib.sha256(), 0
    source = tar.extractfile(member)
    assert source is not None  # a file member
    with source, open(target, "xb") as out:
        for block in iter(lambda: source.read(MAX_READ_BYTES), b""):
            digest.update(block)
            out.write(block)
            written += len(block)
    if written != member.size:
        raise BadInput(f"{archive}: {member.name} ends at byte {written:,} of the {member.size:,} its header states")
    return digest.hexdigest()


def unpack_bundle(archive: Path, folder: Path) -> tuple[Path, Check]:
    """Unpack the files ``archive``'s MANIFEST lists into ``folder``: (the run's folder, the manifest's row).

    The tar headers are read first, then the MANIFEST (wherever it lies in the archive; ``analysis.bundle``
    writes it last), and only then are the files it lists unpacked, each its declared size, in all at most
    :data:`MAX_BUNDLE_BYTES`.  A file it does not list is named in the row, never unpacked.
    """
    check = Check("bundle manifest")
    try:
        with _archive(archive) as tar:
            top, files = _listing(tar, archive, folder)
            if MANIFEST not in files:
                raise BadInput(f"{archive}: not a bundle: {top}/ has no {MANIFEST}")
            root = folder / top
            try:
                listed = read_manifest((root / MANIFEST).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise BadInput(f"{archive}: not a bundle: {' '.join(str(exc).split())[:200]}") from None
            present = set(files) - {MANIFEST}
            for name in sorted(present - set(listed)):
                check.problems.append(f"{name}: in the bundle, not in {MANIFEST} (added after the bundle was made)")
            for name in sorted(set(listed) - present):
                check.problems.append(f"{name}: in {MANIFEST}, not in the bundle")
            good = 0
            for name in sorted(present & set(listed), key=lambda n: files[n].offset):  # in the archive's order
                if _copy(tar, files[name], folder, archive) != listed[name]:
                    check.problems.append(f"{name}: sha256 differs from {MANIFEST} (changed after the bundle was made)")
                else:
                    good += 1
    except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:  # EOFError: a gzip cut short
        said = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise BadInput(f"{archive}: not a readable bundle: {said}") from None
    check.summary = f"{good} of {len(listed)} files as {MANIFEST} lists them"
    return root, check


def verify(path: Path, audit: Path | None = None) -> Verification:
    """Verify a run directory or a bundle archive; ``audit``: the reviewer's audit record (``--audit``)."""
    path = Path(path)
    if path.is_dir():
        return verify_dir(path, audit=audit)
    if not path.exists():
        raise BadInput(f"{path}: no such run directory or bundle")
    if not is_regular_file(path):
        raise BadInput(f"{path}: neither a run directory nor a bundle archive")
    with tempfile.TemporaryDirectory(prefix="aiperf-verify-") as folder:
        root, manifest = unpack_bundle(path, Path(folder))
        return verify_dir(root, source=f"{path} (bundle)", before=[manifest], bundle=True, audit=audit)


def reevaluation_check(options: argparse.Namespace) -> Check:
    """The ``re-evaluation`` row: the claimed best epoch's logged count against a recount from the weights saved
    at it (a child: :mod:`analysis.reevaluation`).  A claim that cannot be recounted fails the row; only bad input
    is :class:`BadInput` (exit 2)."""
    if not Path(options.run).is_dir():
        raise BadInput(f"{options.run}: --reevaluate needs the run directory: a bundle leaves the weights out")
    check = Check("re-evaluation")
    try:
        claim, failed = reevaluation.before_the_recount(Path(options.run))
    except ValueError as exc:  # a log that cannot be read: the log row names it, and no claim can be recounted
        failed = reevaluation.Row("the log cannot be read: nothing recounted",
                                  [f"{' '.join(str(exc).split())[:200]} ({reevaluation.CLAIM_RULE})"])
        claim = None
    if claim is None and failed is None:
        raise BadInput(f"--reevaluate: {options.run} claims no accuracy (synthetic data, or no epoch with one): "
                       "nothing to re-evaluate")  # fmt: skip
    if failed is None:
        try:
            answer = reevaluation.run_child(options.run, options.data_path, options.precision,
                                            options.reevaluate_timeout)  # fmt: skip
        except reevaluation.ReevaluationFailed as exc:
            raise BadInput(f"--reevaluate: {exc}") from None
        except reevaluation.RecountFailed as exc:
            failed = reevaluation.Row("not recounted", [f"{exc} ({reevaluation.COUNT_RULE})"])
        else:
            failed = reevaluation.compare(answer, options.reevaluate_tolerance)
    check.summary = failed.summary
    check.problems += failed.problems
    return check


def share(text: str) -> float:
    """``--reevaluate-tolerance``: a share of the validation samples, in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share in [0, 1)")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory, or a bundle made by python -m analysis.bundle")
    parser.add_argument("--json", type=Path, default=None, help="also write the checks as JSON to this file")
    parser.add_argument("--audit", type=Path, default=None, metavar="RECORD",
                        help="the reviewer's own audit record (python -m analysis.audit RUN --sample K --record "
                             "RECORD): the only audit a verdict counts; one in the run directory is the submitter's "
                             "claim")  # fmt: skip
    parser.add_argument("--reevaluate", action="store_true",
                        help="also recount the claimed best epoch's correct predictions from the weights saved at it "
                             "(TensorFlow, in a child process; docs/verify.md)")  # fmt: skip
    parser.add_argument("--data-path", type=Path, default=None,
                        help="with --reevaluate: the run's data set (cifar10, imagenet, hdf5; digits is embedded)")
    parser.add_argument("--precision", choices=("fp32",), default=None,
                        help="with --reevaluate: evaluate in float32 instead of the run's precision")
    parser.add_argument("--reevaluate-timeout", type=float, default=reevaluation.DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"with --reevaluate: give the recount up after this long (default "
                             f"{reevaluation.DEFAULT_TIMEOUT:g})")  # fmt: skip
    parser.add_argument("--reevaluate-tolerance", type=share, default=None, metavar="SHARE",
                        help=f"with --reevaluate: the share of the validation samples the recount may differ by "
                             f"(default {reevaluation.ALLOWED_SHARE:g}; 0: exactly the logged count)")  # fmt: skip
    options = parser.parse_args(argv)
    if not options.reevaluate and (options.data_path is not None or options.precision is not None
                                   or options.reevaluate_tolerance is not None):  # fmt: skip
        parser.error("--data-path, --precision and --reevaluate-tolerance apply to --reevaluate only")
    if options.reevaluate_tolerance is None:
        options.reevaluate_tolerance = reevaluation.ALLOWED_SHARE
    return guarded("analysis.verify", options.run, lambda: _main(options))


def _main(options: argparse.Namespace) -> int:
    try:
        result = verify(options.run, options.audit)
        if options.reevaluate:
            check = reevaluation_check(options)
            result.checks.append(check)
            result.reevaluated = check.verdict == OK
    except BadInput as exc:
        print(f"analysis.verify: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(result.text())
    if options.json is not None:
        options.json.write_text(json.dumps(result.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return 0 if result.ok else 1

