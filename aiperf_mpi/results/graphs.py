"""Where a model's graph is stored, and reading it back: one function for every reader.

Two layouts, both read here:

* **one appended file per run segment** (``graphs/segment-N.jsonl``): the
  master appends each accepted graph as one line, in the order accepted, and
  its ``model_proposed`` event names the file, the graph's byte offset
  (``graph_offset``) and its length in bytes without the newline
  (``graph_bytes``). Creating one file per model cost rank 0 0.4–1.0 ms of
  kernel CPU each, and 100,000 files in one directory is a defect on a shared
  file system; an append costs tens of microseconds. A resumed run starts a
  new file: the old one may end in a cut line past the last logged offset.
* **one file per model** (``graphs/task-N.json``, the whole file the graph):
  runs written before the change, which must still verify and export.

``graph_sha256`` (logged at ``model_proposed``) is the hash of the bytes read
here, in either layout: what a reader checks. Pure: no TensorFlow, no MPI.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

GRAPHS_DIR = "graphs"
OFFSET, LENGTH = "graph_offset", "graph_bytes"
"""the ``model_proposed`` fields that place a graph in its segment's file"""


class GraphFileError(ValueError):
    """A graph cannot be read as its event says: the message names the file and what is wrong (no task)."""


def segment_graph_file(segment: int) -> str:
    """The run-relative name of segment ``segment``'s appended graphs file."""
    return f"{GRAPHS_DIR}/segment-{segment}.jsonl"


def graph_place(event: Mapping) -> str:
    """How a message names where the event's graph lies: the file, and its byte range when it has one."""
    name = str(event.get("graph_file", ""))
    offset, length = event.get(OFFSET), event.get(LENGTH)
    if offset is None and length is None:
        return name
    return f"{name} at byte {offset} (+{length})"


def read_graph(run_dir: Path, event: Mapping) -> bytes:
    """The stored bytes of a ``model_proposed`` event's graph, in either layout (module docstring).

    Raises :class:`GraphFileError` when the name lies outside the run
    directory, cannot be resolved, or is missing, when the offset and length
    are not two non-negative integers, when the file ends before the range
    (cut), or when the range is not a whole line of the file. Whether the
    bytes are the logged ones is the caller's check (``graph_sha256``).
    """
    name = event.get("graph_file")
    if not isinstance(name, str) or not name:
        raise GraphFileError(f"graph_file {str(name)[:80]!r} is not a file name")
    root = run_dir.resolve()
    try:
        path = (root / name).resolve()
    except (RuntimeError, OSError, ValueError) as exc:  # a symlink loop (RuntimeError in 3.11), too long, a NUL byte
        raise GraphFileError(f"{name} cannot be resolved: {' '.join(str(exc).split())[:120]}") from None
    if root not in path.parents:
        raise GraphFileError(f"graph_file {name!r} lies outside the run directory")
    if not path.is_file():
        raise GraphFileError(f"{name} is missing")
    offset, length = event.get(OFFSET), event.get(LENGTH)
    if offset is None and length is None:  # one file per model: the whole file is the graph
        try:
            return path.read_bytes()
        except OSError as exc:
            raise GraphFileError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, length)):
        raise GraphFileError(f"{name}: {OFFSET} {str(offset)[:40]} and {LENGTH} {str(length)[:40]} are not two "
                             "non-negative integers")  # fmt: skip
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if offset + length + 1 > size:  # the line's newline is part of it: a line cut before it is cut
                raise GraphFileError(f"{name} ends at byte {size}, before the graph at byte {offset} (+{length} "
                                     "and its newline): the file was cut")  # fmt: skip
            start = max(offset - 1, 0)
            handle.seek(start)
            data = handle.read(offset + length + 1 - start)
    except OSError as exc:
        raise GraphFileError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if (offset and data[:1] != b"\n") or data[-1:] != b"\n":
        raise GraphFileError(f"{name}: byte {offset} (+{length}) is not a whole line of the file")
    return data[1 if offset else 0 : -1]


def read_logged_graph(run_dir: Path, event: Mapping) -> str:
    """The graph a ``model_proposed`` event placed, as text, checked against the sha256 the event logged.

    For the readers that take the graph as the run's (``--resume``'s history, the report's best model):
    :class:`GraphFileError` when :func:`read_graph` fails, when the event logged no ``graph_sha256`` (every
    run whose ``model_done`` carries no graph logs one), when the bytes are not the ones hashed, or when they
    are not UTF-8.  verify reads with :func:`read_graph` and reports each of these as its own row.
    """
    data = read_graph(run_dir, event)
    logged = event.get("graph_sha256")
    if not isinstance(logged, str):
        raise GraphFileError(f"{graph_place(event)}: its model_proposed logged no graph_sha256 to check it against")
    if hashlib.sha256(data).hexdigest() != logged:
        raise GraphFileError(f"{graph_place(event)} is not the graph its model_proposed hashed")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise GraphFileError(f"{graph_place(event)} is not UTF-8 text") from None


def append_graph(run_dir: Path, name: str, text: str) -> dict:
    """Append ``text`` as one line of ``run_dir/name``; returns the ``model_proposed`` fields that place it.

    For a log written by hand (tests, benchmarks): the master does the same on its I/O thread, tracking the
    offset itself (:mod:`aiperf_mpi.job.batchio`).
    """
    data = text.encode("utf-8")
    path = run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        offset = handle.tell()
        handle.write(data + b"\n")
    return {"graph_file": name, OFFSET: offset, LENGTH: len(data), "graph_sha256": hashlib.sha256(data).hexdigest()}
