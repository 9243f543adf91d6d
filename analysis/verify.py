"""A reviewer's check of a run from its files alone: ``python -m analysis.verify RUN_DIR|BUNDLE``.

A score is a claim; this recomputes it from what the run left behind — the
event log, the graph files and ``score.json`` — without rerunning anything
and without trusting any number that can be derived.  What it checks, row
by row, and what each rule reads, is one list under a version:
:data:`analysis.verify_registry.FAMILIES` (``docs/verify.md`` shows it);
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
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiperf_mpi.results import runlog
from analysis import reevaluation
from analysis.checks import BadInput, Check, Run, Verification, is_hex, is_regular_file
from analysis.guard import guarded
from analysis.side_files import bundle_checks
from analysis.verify_registry import FAMILIES, VERIFY_RULES_VERSION, Family, walk

MANIFEST = "MANIFEST"
"""the bundle's list of files: ``sha256sum`` lines, so ``sha256sum -c MANIFEST`` checks it too"""
SCORE_FILE = "score.json"
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- directories and bundles


def verify_dir(run_dir: Path, source: str | None = None, before: list[Check] | None = None,
               bundle: bool = False, families: tuple[Family, ...] = FAMILIES) -> Verification:  # fmt: skip
    """Every check of a run directory (``bundle``: an unpacked bundle, whose verify.* and system.json are checked),
    by the rules of ``families`` (:mod:`analysis.verify_registry`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BadInput(f"{run_dir}: no such run directory")
    if not is_regular_file(run_dir / runlog.EVENTS_FILE):
        raise BadInput(f"{run_dir}: not a run directory (no {runlog.EVENTS_FILE})")
    run = Run(run_dir)
    result = Verification(source or str(run_dir), [*(before or []), *walk(run, families)],
                          rules_version=VERIFY_RULES_VERSION)
    score = getattr(run.judges.get("score"), "score", None)
    if score is not None:
        result.valid = score.valid
        result.broken_rules = [name for name, rule in score.rules.items() if not rule["ok"]]
    if bundle:
        result.checks += bundle_checks(run_dir, result, run.judges["bundle"])
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


def check_manifest(root: Path) -> Check:
    """Every file under ``root`` listed in its MANIFEST with its sha256, and nothing listed that is absent."""
    check = Check("bundle manifest")
    manifest = root / MANIFEST
    if not manifest.is_file():
        check.problems.append(f"the bundle has no {MANIFEST}")
        return check
    try:
        listed = read_manifest(manifest.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        check.problems.append(str(exc))
        return check
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {MANIFEST}
    for name in sorted(present - set(listed)):
        check.problems.append(f"{name}: in the bundle, not in {MANIFEST} (added after the bundle was made)")
    for name in sorted(set(listed) - present):
        check.problems.append(f"{name}: in {MANIFEST}, not in the bundle")
    good = 0
    for name in sorted(present & set(listed)):
        if sha256_file(root / name) != listed[name]:
            check.problems.append(f"{name}: sha256 differs from {MANIFEST} (changed after the bundle was made)")
        else:
            good += 1
    check.summary = f"{good} of {len(listed)} files as {MANIFEST} lists them"
    return check


@contextmanager
def unpacked(archive: Path) -> Iterator[Path]:
    """The bundle's files in a temporary folder (links, devices and paths outside it refused)."""
    with tempfile.TemporaryDirectory(prefix="aiperf-verify-") as folder:
        try:
            with tarfile.open(archive, "r:*") as tar:
                for member in tar.getmembers():
                    if not (member.isfile() or member.isdir()):
                        raise BadInput(f"{archive}: {member.name} is not a plain file (a bundle holds only files)")
                tar.extractall(folder, filter="data")  # refuses absolute paths and ..
        except (tarfile.TarError, OSError) as exc:
            raise BadInput(f"{archive}: not a readable bundle: {' '.join(str(exc).split())[:200]}") from None
        yield Path(folder)


def bundle_root(folder: Path, archive: Path) -> Path:
    """The one top folder of an unpacked bundle."""
    tops = [p for p in folder.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise BadInput(f"{archive}: not a bundle (it must hold one folder with the run and its {MANIFEST})")
    return tops[0]


def verify(path: Path) -> Verification:
    """Verify a run directory or a bundle archive."""
    path = Path(path)
    if path.is_dir():
        return verify_dir(path)
    if not path.exists():
        raise BadInput(f"{path}: no such run directory or bundle")
    if not is_regular_file(path) or not tarfile.is_tarfile(path):
        raise BadInput(f"{path}: neither a run directory nor a bundle archive")
    with unpacked(path) as folder:
        root = bundle_root(folder, path)
        manifest = check_manifest(root)
        return verify_dir(root, source=f"{path} (bundle)", before=[manifest], bundle=True)


def reevaluation_check(options: argparse.Namespace) -> Check:
    """The ``re-evaluation`` row: the best model's logged count against a recount from its weights (a child)."""
    if not Path(options.run).is_dir():
        raise BadInput(f"{options.run}: --reevaluate needs the run directory: a bundle leaves the weights out")
    try:
        answer = reevaluation.run_child(options.run, options.data_path, options.precision, options.reevaluate_timeout)
    except reevaluation.ReevaluationFailed as exc:
        raise BadInput(f"--reevaluate: {exc}") from None
    row = reevaluation.compare(answer)
    check = Check("re-evaluation", row.summary)
    check.problems += row.problems
    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory, or a bundle made by python -m analysis.bundle")
    parser.add_argument("--json", type=Path, default=None, help="also write the checks as JSON to this file")
    parser.add_argument("--reevaluate", action="store_true",
                        help="also recount the best model's correct predictions from best/model.keras (TensorFlow, "
                             "in a child process; docs/verify.md)")  # fmt: skip
    parser.add_argument("--data-path", type=Path, default=None,
                        help="with --reevaluate: the run's data set (cifar10, imagenet, hdf5; digits is embedded)")
    parser.add_argument("--precision", choices=("fp32",), default=None,
                        help="with --reevaluate: evaluate in float32 instead of the run's precision")
    parser.add_argument("--reevaluate-timeout", type=float, default=reevaluation.DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"with --reevaluate: give the recount up after this long (default "
                             f"{reevaluation.DEFAULT_TIMEOUT:g})")  # fmt: skip
    options = parser.parse_args(argv)
    if not options.reevaluate and (options.data_path is not None or options.precision is not None):
        parser.error("--data-path and --precision apply to --reevaluate only")
    return guarded("analysis.verify", options.run, lambda: _main(options))


def _main(options: argparse.Namespace) -> int:
    try:
        result = verify(options.run)
        if options.reevaluate:
            result.checks.append(reevaluation_check(options))
    except BadInput as exc:
        print(f"analysis.verify: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(result.text())
    if options.json is not None:
        options.json.write_text(json.dumps(result.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
