"""verify's before/after corpus: every run the unit tests verify, kept, then verified again by other code.

Moving or reshaping verify's rules (issue 44) must not change one verdict.  This compares them over a corpus:

``record``
    Run pytest (``tests/unit`` by default) with ``AIPERF_VERIFY_CORPUS=FOLDER`` set: ``tests/unit/conftest.py``
    then calls :func:`install`, which wraps the constructor of ``analysis.checks.Run`` (what every verification
    builds, whatever family or entry point) and ``analysis.verify.unpack_bundle`` (what verifying a bundle
    reads) to copy what is verified into ``FOLDER`` as it is verified: a run directory (one with an
    ``events.jsonl``) at most :data:`MAX_RUN_BYTES`, a bundle at most as many bytes.  Each copy is named by the
    sha256 of its contents, so the same run verified twice is kept once.  Test-side only: the product knows
    nothing of it.  ``python -m tests.support.verify_corpus record FOLDER [PYTEST ARGS...]`` does this.

    Symlinks are kept as symlinks: one whose absolute target lies inside the run directory points to the same
    place in the copy (relatively), any other target is kept as it is (one into another temporary folder of a
    test dangles once pytest removes it: the copy is still the same input before and after). FIFOs are made
    again as FIFOs, device files and sockets are left out.

    Real runs are added by hand: copy a run directory (or a bundle) into ``FOLDER/real/``.

``snapshot FOLDER OUT.jsonl``
    Verify every entry of ``FOLDER`` (and ``FOLDER/real``) with the code importable now, in this process
    (``analysis.verify.verify``: a directory or a bundle), and write one JSON line per entry: its name, the
    verdict's text (``Verification.text()``) and ``to_dict()``, or the error (``BadInput`` and its message, or
    any other exception's type and message).  The temporary folder a bundle was unpacked into is written
    ``<unpacked bundle>/``: its name differs each time; the provenance row's note on the verifier's own source
    (the same as the run's or other) is written ``<its own aiperf_mpi source>``: an edit anywhere in
    ``aiperf_mpi/`` (a docstring) changes that hash, and with it the note, without changing a rule.

``compare BEFORE.jsonl AFTER.jsonl``
    The entries whose line differs, with a unified diff of their text and dicts; exit status 1 when any does.

The usual use (issue 44): ``record`` and ``snapshot`` at the untouched commit, keep both outside git, then
``snapshot`` and ``compare`` after every step of a move.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = "AIPERF_VERIFY_CORPUS"
"""the environment variable naming the corpus folder while the tests record"""
MAX_RUN_BYTES = 64 << 20
"""the largest run directory (or bundle) kept: a test's run is a few kB to a few MB"""
EVENTS = "events.jsonl"
UNPACKED = re.compile(r"/tmp/aiperf-verify-[A-Za-z0-9_]+/")
"""the temporary folder a bundle is unpacked into, whose name differs each time (a problem line may name it)"""
OWN_SOURCE = re.compile(r"this verifier runs (?:the same aiperf_mpi source as the run|other aiperf_mpi source "
                        r"\([0-9a-f]+\\u2026\): its counter may differ from the run's)")
"""the provenance row's note on the verifier's own source (``aiperf_mpi/``'s sha256 against the run's): any edit of
the package changes it, a moved rule does not; the snapshot writes it as one placeholder"""
REAL = "real"
"""the corpus's sub-folder of real runs, added by hand"""


def _entries(run_dir: Path) -> list[tuple[Path, os.stat_result]] | None:
    """Every entry under ``run_dir`` with its lstat, sorted; None past :data:`MAX_RUN_BYTES`."""
    found, total = [], 0
    for root, dirs, files in os.walk(run_dir):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            path = Path(root) / name
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > MAX_RUN_BYTES:
                    return None
            found.append((path, info))
    return found


def _digest(run_dir: Path, entries: list[tuple[Path, os.stat_result]]) -> str:
    digest = hashlib.sha256()
    for path, info in entries:
        digest.update(str(path.relative_to(run_dir)).encode() + b"\0" + oct(info.st_mode).encode() + b"\0")
        if stat.S_ISLNK(info.st_mode):
            digest.update(os.readlink(path).encode())
        elif stat.S_ISREG(info.st_mode):
            digest.update(path.read_bytes())
        digest.update(b"\1")
    return digest.hexdigest()[:20]


def _link_target(link: Path, run_dir: Path) -> str:
    """A symlink's target for the copy: one that names a place inside the run directory by its absolute path
    (a test's link into its own temporary folder) names the same place in the copy, relatively; any other is
    kept as it is."""
    target = os.readlink(link)
    if os.path.isabs(target) and Path(target).is_relative_to(run_dir):
        return os.path.relpath(target, link.parent)
    return target


def keep_run(run_dir: Path, corpus: Path) -> Path | None:
    """Copy ``run_dir`` into ``corpus`` under its contents' hash (None: not a run, too large, or unreadable)."""
    run_dir = Path(run_dir)
    try:
        if not (run_dir / EVENTS).is_file() or run_dir.resolve() == Path.cwd().resolve():
            return None
        entries = _entries(run_dir)
        if entries is None:
            return None
        target = corpus / f"run-{_digest(run_dir, entries)}"
        if target.exists():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=".copy-", dir=corpus))
        for path, info in entries:
            copy = scratch / path.relative_to(run_dir)
            if stat.S_ISDIR(info.st_mode):
                copy.mkdir()
            elif stat.S_ISLNK(info.st_mode):
                copy.symlink_to(_link_target(path, run_dir))
            elif stat.S_ISREG(info.st_mode):
                shutil.copyfile(path, copy)
            elif stat.S_ISFIFO(info.st_mode):
                os.mkfifo(copy)
        try:
            scratch.rename(target)
        except OSError:  # kept meanwhile by another test process
            shutil.rmtree(scratch, ignore_errors=True)
        return target
    except OSError:
        return None


def keep_bundle(archive: Path, corpus: Path) -> Path | None:
    """Copy a bundle file into ``corpus`` under its contents' hash, keeping its suffixes (None: not kept)."""
    archive = Path(archive)
    try:
        if not archive.is_file() or archive.stat().st_size > MAX_RUN_BYTES:
            return None
        data = archive.read_bytes()
        target = corpus / f"bundle-{hashlib.sha256(data).hexdigest()[:20]}{''.join(archive.suffixes)[-16:]}"
        if not target.exists():
            target.write_bytes(data)
        return target
    except OSError:
        return None


def install(corpus: Path) -> None:
    """Record into ``corpus`` every run a verification is built for, and every bundle verified, from now on."""
    import analysis.checks
    import analysis.verify

    corpus = Path(corpus)
    corpus.mkdir(parents=True, exist_ok=True)
    run_init = analysis.checks.Run.__init__
    unpack = analysis.verify.unpack_bundle

    def recording_init(self, run_dir, *args, **kwargs):
        keep_run(Path(run_dir), corpus)
        run_init(self, run_dir, *args, **kwargs)

    def recording_unpack(archive, folder):
        keep_bundle(Path(archive), corpus)
        return unpack(archive, folder)

    analysis.checks.Run.__init__ = recording_init
    analysis.verify.unpack_bundle = recording_unpack


def corpus_entries(corpus: Path) -> list[Path]:
    """The corpus's runs and bundles, recorded ones first, then the real ones, each sorted by name."""
    corpus = Path(corpus)
    recorded = sorted(p for p in corpus.iterdir() if p.name.startswith(("run-", "bundle-")))
    real = corpus / REAL
    return recorded + (sorted(p for p in real.iterdir() if not p.name.endswith(".out")) if real.is_dir() else [])


def snapshot(corpus: Path, out: Path) -> int:
    """Verify every corpus entry with the code importable now; one JSON line each into ``out``.  The count."""
    from analysis.checks import BadInput
    from analysis.verify import verify

    entries = corpus_entries(corpus)
    with open(out, "w", encoding="utf-8") as handle:
        for path in entries:
            line: dict = {"entry": str(path.relative_to(corpus))}
            try:
                result = verify(path)
                line["text"] = result.text()
                line["dict"] = result.to_dict()
            except BadInput as exc:
                line["bad_input"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - a crash is a verdict too, and must not change either
                line["error"] = f"{type(exc).__name__}: {exc}"
            text = json.dumps(line, sort_keys=True, default=str)
            text = OWN_SOURCE.sub("this verifier runs <its own aiperf_mpi source>", text)
            handle.write(UNPACKED.sub("<unpacked bundle>/", text) + "\n")
    return len(entries)


def _lines(path: Path) -> dict[str, dict]:
    with open(path, encoding="utf-8") as handle:
        return {line["entry"]: line for line in map(json.loads, handle)}


def compare(before: Path, after: Path) -> int:
    """Print the entries that differ between two snapshots; the number that do."""
    old, new = _lines(before), _lines(after)
    differ = 0
    for entry in sorted(old.keys() | new.keys()):
        if old.get(entry) == new.get(entry):
            continue
        differ += 1
        print(f"== {entry}: differs")
        as_text = [json.dumps(s.get(entry), indent=1, sort_keys=True).splitlines() for s in (old, new)]
        sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(*as_text, "before", "after", lineterm=""))
    same = len(old.keys() & new.keys()) - sum(1 for e in old.keys() & new.keys() if old[e] != new[e])
    print(f"{len(old)} before, {len(new)} after, {same} identical, {differ} differ")
    return differ


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "record":
        pytest_args = argv[2:] or ["tests/unit", "-q", "-p", "no:cacheprovider"]
        env = {**os.environ, ENV: str(Path(argv[1]).resolve())}
        return subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env)
    if len(argv) == 3 and argv[0] == "snapshot":
        count = snapshot(Path(argv[1]), Path(argv[2]))
        print(f"{count} entries verified into {argv[2]}")
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return 1 if compare(Path(argv[1]), Path(argv[2])) else 0
    print(__doc__.split("\n\n")[0], file=sys.stderr)
    print("usage: python -m tests.support.verify_corpus record FOLDER [PYTEST ARGS...] | snapshot FOLDER OUT.jsonl"
          " | compare BEFORE.jsonl AFTER.jsonl", file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
