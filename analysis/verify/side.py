"""The row ``side files``: every file of the run directory (or of the bundle) that no other row reads, named.

A verdict covers what it was given.  The rows above read the event log, ``mllog.log``, ``score.json``, the graph
and weights files, ``best/``'s model and descriptions and a bundle's own ``verify.*``, ``system.json`` and
``MANIFEST``; anything else a run directory or a bundle holds — the report, serving's record, a resume's
set-aside cut lines, a note someone added — is the submitter's words, which a reviewer might read as evidence.
Issue 52: a report showing ten times the score verified, inside a verified bundle too.  This row reads none of
them and says so, file by file, with what would check each where something does: it never fails (no file of these
is evidence either way), it makes the verdict say what it did not judge.

Streaming and bounded: one ``os.scandir`` per folder, at most :data:`MAX_NAMED` files named, the rest counted; a
folder the rows read by pattern (``graphs/``, ``weights/``) is listed for the names that are not the pattern's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.mllog_format import MLLOG_FILE
from analysis.checks import AUDIT_RECORD, Check

ROW = "side files"
LOCK_FILE = "running.lock"
"""the run's lock (``aiperf_mpi.job.runlock.LOCK_FILE``, a room analysis does not import: a test holds them equal)"""
MAX_NAMED = 40
"""files named one by one; past these, counted by folder"""
READ = {
    runlog.EVENTS_FILE: "the log row and every rule",
    MLLOG_FILE: "mllog.log",
    "score.json": "score",
    "best/metadata.json": "best/ (exported model), weights files",
    "best/ops.json": "best/ (exported model)",
    "best/graph.json": "best/ (exported model)",
    "best/model.keras": "weights files",
}
"""the files a row reads, by their path in the run directory → the row"""
BUNDLE_READ = {
    "MANIFEST": "bundle manifest",
    "verify.txt": "bundle verify.txt/json",
    "verify.json": "bundle verify.txt/json",
    "system.json": "bundle system.json",
}
"""what the bundle rows read, in a bundle only (in a run directory these are side files like any other)"""
WEIGHTS = re.compile(r"weights/task-[0-9]+\.npz")
"""what the weights row reads by its logged names (one it does not name is its own note)"""
WHY = (
    (AUDIT_RECORD, "an audit record in the run directory is the submitter's claim: only the reviewer's own, named "
                   "by --audit RECORD, counts"),
    (LOCK_FILE, "the run's lock, which the close reads: it claims nothing"),
    ("graphs/", "a graph file no proposal of the log names"),
    ("report/", "the report's figures and plots, made at the run's end: the rows above hold the log they were made "
                "from; python -m analysis.report RUN_DIR --out DIR makes them again from it"),
    ("serve", "serving's record: python -m aiperf_mpi.serve check RUN_DIR reads it"),
    (runlog.EVENTS_FILE + ".cut-", "a resume's set-aside cut line (the segment's run_start records its size)"),
    (MLLOG_FILE + ".cut-", "a resume's set-aside cut line of mllog.log"),
    ("best/", "a description of the best model beside the ones the best/ row reads"),
)
"""why a kind of side file is not evidence, and what reads it where something does, by the start of its path"""


def _why(relative: str) -> str:
    return next((why for start, why in WHY if relative.startswith(start)), "no row reads it")


def shown(name: str) -> str:
    """A file's name as a note may print it: one that holds a control character (a newline would write its own
    lines into the verdict) or bytes that are not UTF-8 is written as a JSON string's escapes."""
    if name.isprintable():
        try:
            name.encode("utf-8")
            return name
        except UnicodeEncodeError:
            pass
    return json.dumps(name)[1:-1]


def _files(run_dir: Path, unlisted: list[str]):
    """Every path below ``run_dir`` that is not a folder, relative, as ``os.scandir`` finds it (symlinks not
    followed into folders); a folder that cannot be listed goes to ``unlisted`` with why, and is named."""
    stack = [""]
    while stack:
        prefix = stack.pop()
        try:
            entries = sorted(os.scandir(run_dir / prefix if prefix else run_dir), key=lambda entry: entry.name)
        except OSError as exc:
            unlisted.append(f"{shown(prefix or './')} ({exc.strerror or type(exc).__name__})")
            continue
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            try:
                folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                folder = False
            if folder:
                stack.append(relative + "/")
            else:
                yield relative


def side_files(run_dir: Path, graph_files: set[str] | frozenset[str] = frozenset(), bundle: bool = False) -> Check:
    """The ``side files`` row of ``run_dir`` (a run directory, or a bundle as unpacked, ``bundle``): one note for
    each reason a file is not evidence, naming its files (at most :data:`MAX_NAMED` in all, the rest counted);
    ``graph_files``: the graph files the log's proposals name (what the graph row reads)."""
    check = Check(ROW)
    read = unread = 0
    groups: dict[str, tuple[list[str], list[int]]] = {}
    """why → (the files named, [how many in all])"""
    unlisted: list[str] = []
    for relative in _files(Path(run_dir), unlisted):
        if relative in READ or (bundle and relative in BUNDLE_READ) or relative in graph_files \
                or WEIGHTS.fullmatch(relative):  # fmt: skip
            read += 1
            continue
        unread += 1
        names, count = groups.setdefault(_why(relative), ([], [0]))
        count[0] += 1
        if unread <= MAX_NAMED:
            names.append(shown(relative))
    for why, (names, count) in groups.items():
        more = f" and {count[0] - len(names)} more" if count[0] > len(names) else ""
        check.notes.append(f"{', '.join(names) or 'files'}{more}: not read by verify ({why}): the submitter's words, "
                           "not evidence")  # fmt: skip
    if unlisted:
        check.notes.append(f"{', '.join(unlisted[:MAX_NAMED])}: a folder verify could not list: what it holds is "
                           "neither read nor named")  # fmt: skip
    named = "each named" if unread <= MAX_NAMED else f"{MAX_NAMED} named, the rest counted"
    check.summary = (f"{read} file(s) the rows above read; {unread} not read, {named}: a side file's figures are not "
                     "evidence" if unread else f"{read} file(s), every one read by a row above")  # fmt: skip
    if unlisted:
        check.summary += f"; {len(unlisted)} folder(s) not listed"
    return check
