"""The run directory's event log: append-only JSON lines, fsync'd, readable by anyone.

One JSON object per line, each with ``event`` (one of the schema's names),
``time`` (Unix seconds) and the event's fields.  The master is the only
writer.  Every epoch is flushed and fsync'd before the master answers the
group again, so an epoch that was reported is on disk even if the job is
killed the next instant.

A run killed mid-write leaves a cut last line (a prefix of one event, bytes
cut anywhere, even inside a multi-byte UTF-8 character; after a crash some
file systems leave NUL bytes instead).  A reader skips that one line and
reports it, never raises for it; a bad line anywhere else is an error.
Before ``--resume`` appends a new segment, :func:`repair_tail` sets the cut
line aside, so the log stays one JSON object per line.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.results.jsonline import line_encoder, object_text

# the event names and the common field names are the schema's (its one list), re-exported for the writer and
# the readers, who know them as ``runlog.EPOCH`` and so on
from aiperf_mpi.results.schema import EPOCH as EPOCH
from aiperf_mpi.results.schema import EVENT as EVENT
from aiperf_mpi.results.schema import EVENT_NAMES, check_event
from aiperf_mpi.results.schema import GROUP_LOST as GROUP_LOST
from aiperf_mpi.results.schema import LAYOUT as LAYOUT
from aiperf_mpi.results.schema import MODEL_DONE as MODEL_DONE
from aiperf_mpi.results.schema import MODEL_FAILED as MODEL_FAILED
from aiperf_mpi.results.schema import MODEL_PROPOSED as MODEL_PROPOSED
from aiperf_mpi.results.schema import MONITOR as MONITOR
from aiperf_mpi.results.schema import PEAK as PEAK
from aiperf_mpi.results.schema import RUN_START as RUN_START
from aiperf_mpi.results.schema import RUN_STOP as RUN_STOP
from aiperf_mpi.results.schema import SCORE as SCORE
from aiperf_mpi.results.schema import SEGMENT as SEGMENT
from aiperf_mpi.results.schema import STAGING as STAGING
from aiperf_mpi.results.schema import SYSTEM as SYSTEM
from aiperf_mpi.results.schema import TIME as TIME
from aiperf_mpi.results.schema import WEIGHTS_REMOVED as WEIGHTS_REMOVED

try:  # the log's readers parse with orjson (results.logmodel); the writer parses what senders encoded with it
    from orjson import loads as _fast_loads
except ImportError:  # a dependency; without it, the standard library (slower, the same answers)
    _fast_loads = None

EVENTS_FILE = "events.jsonl"
BUFFER_BYTES = 1 << 20
"""the writer's buffer: every event is in the OS by the next flush (a sync event's, a batch's end) whatever its size"""
CUT_FILE = EVENTS_FILE + ".cut-{segment}"
"""where :func:`repair_tail` keeps the cut end of the log that segment ``segment`` found"""
_BLANK = b" \t\n\r\x0b\x0c"
"""what ``bytes.isspace`` calls whitespace: a line of these alone is blank and skipped"""
_JUNK = _BLANK + b"\x00"
"""what may trail a complete event without making it a cut line (NULs: a crashed file system's fill)"""

SIGNAL_REASON = "signal "
"""how a ``run_stop`` reason starts when a signal ended the segment (``signal SIGTERM``): the segment then takes the
active axis as it ran (a resume goes on from there), where one the run ended itself takes its whole time limit;
either way the run is scored over no less than the time its segments declared (results/score.py)"""
HANG_REASON = "hang deadline"
"""the ``run_stop`` reason when fault tolerance is off and a group passed its hang deadline (job/faults.py): the
run ended early with its score, on the axis as it ran (as a signal's stop), and ``--resume`` continues it"""
CLOSED_REASON = "launch ended"
"""the ``run_stop`` reason when the launch ended before rank 0 could write one and the job script closed the
segment from its log (:mod:`aiperf_mpi.job.close`): on the axis as it ran, to the close (as a signal's stop), and
``--resume`` continues it"""


class UnreadableLog(Exception):
    """A log no reader can take safely: nested deeper than the JSON parser recurses, or not plain UTF-8 JSON lines
    (a byte-order mark).  Not a ``ValueError``: the readers treat that as one bad line they may skip or report;
    this ends the read, and the command line tools print it as one line with exit status 2."""


BOM = b"\xef\xbb\xbf"

class EventLog:
    """Append-only writer of ``events.jsonl``, and of every other event log of the package (a serving run's).

    A training run's log takes only the schema's events (:mod:`aiperf_mpi.results.schema`), each checked
    against its fields as it is written.  Another log gives its own file name, its event names and its check
    (``None``: none besides the names): one writer, so each log's lines are the same compact JSON, appended,
    flushed and fsync'd the same way (issue 51: serving wrote its own).
    """

    def __init__(self, run_dir: Path, stall_guard: Callable[[], AbstractContextManager] = nullcontext, *,
                 file_name: str = EVENTS_FILE, names: frozenset[str] | set[str] = EVENT_NAMES,
                 check: Callable[[dict], list[str]] | None = check_event) -> None:  # fmt: skip
        """``stall_guard()`` bounds each fsync (rank 0's watchdog: job/deadlines.py): a file system that hangs
        ends the job in one line, and nothing after the last fsync'd event is claimed."""
        self.stall_guard = stall_guard
        self._names, self._check = names, check
        self.path = Path(run_dir) / file_name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if ends_mid_line(self.path):  # appending would glue the first event onto the cut line
            raise ValueError(f"{self.path} does not end with a newline (a cut last line?): "
                             "runlog.repair_tail must set it aside before a new segment is appended")  # fmt: skip
        # open for the whole run; a buffer as large as a batch's events, so that the events between two flushes
        # (a batch's, at 65,536 groups tens of kB) go to the OS in one write, not one per 8 kB
        self._handle = open(self.path, "a", encoding="utf-8", buffering=BUFFER_BYTES)
        self._dirty = False
        # one encoder for the run: json.dumps and JSONEncoder.encode build one per call
        self._encode = log_encoder()

    def encode(self, value: object) -> str:
        """``value`` as this log's JSON text (for a part of a line :meth:`write_encoded` joins)."""
        return self._encode(value)

    def write(self, event: str, sync: bool = False, flush: bool = True, **fields: object) -> dict:
        """Append one event, flushed to the OS at once unless ``flush`` is false.

        ``sync`` asks for stable storage: the fsync happens at the next
        :meth:`sync` — the master calls it after each batch of messages and
        before it sends any reply, so an epoch is on disk before its group
        hears from the master again, and a burst of epochs costs one fsync.
        ``flush=False`` (the master's events, thousands a second at 65,536
        groups) leaves the flush to :meth:`take_sync` or :meth:`sync` at the
        batch's end, before any reply: one write call per batch, not per event.
        """
        if event not in self._names:  # readers let unknown events pass; the writer writes only the schema's
            raise ValueError(f"event {event!r} is not in the schema of {self.path.name}")
        record = {EVENT: event, TIME: fields.pop(TIME, time.time()), **fields}
        problems = self._check(record) if self._check is not None else []
        if problems:  # a writer that drifted from the schema breaks every reader: fail here, in the tests
            raise ValueError(f"event {event!r} does not match its schema: {'; '.join(problems)}")
        self._handle.write(self._encode(record) + "\n")
        if flush:
            self._handle.flush()
        self._dirty = self._dirty or sync
        return record

    def write_encoded(self, event: str, members: str = "{}", encoded: dict[str, str] | None = None,
                      sync: bool = False, flush: bool = True, given: dict | None = None,
                      decoded: dict[str, object] | None = None, **fields: object) -> dict:
        """Append one event part of which its sender encoded: as :meth:`write`, rank 0 only joins the texts.

        The line is ``fields`` (after ``event`` and ``time``), each field named in ``encoded`` taken as the
        JSON text given (:func:`~aiperf_mpi.results.jsonline.object_text`), then the members of the JSON
        object ``members`` (:func:`event_members`).  A sender is not trusted with the log: ``members`` is
        parsed as the readers will parse it (:func:`parse_members`; ``given``: the caller did so already),
        and so is each ``encoded`` text (``decoded``: the caller's values for them, parsed from exactly
        those texts), and the whole event as they will see it is checked against its schema, with no
        member named like a field of the writer's (readers keep the last of two equal keys).  Anything else
        raises ``ValueError`` before a byte is written, so a bad sender cannot make the log unreadable.
        Parsing (orjson) costs a fraction of what encoding did (BENCHMARKS.md, the master).  Returns the
        members, parsed.
        """
        if event not in self._names:
            raise ValueError(f"event {event!r} is not in the schema of {self.path.name}")
        if given is None:
            given = parse_members(event, members)
        record = {EVENT: event, TIME: fields.pop(TIME, time.time()), **fields}
        seen = dict(record)
        for name, text in (encoded or {}).items():
            seen[name] = decoded[name] if decoded is not None and name in decoded else parse_sent(text)
        del seen[EVENT]
        check_members(event, given, seen)
        text = object_text(self._encode, record, encoded) if encoded else self._encode(record)
        self._handle.write(f"{text[:-1]},{members[1:]}\n" if given else f"{text}\n")
        if flush:
            self._handle.flush()
        self._dirty = self._dirty or sync
        return given

    def write_tail(self, event: str, tail: str, sync: bool = False) -> None:
        """Append one event whose text after its time its writer made (``tail``: ``,"task":…}``), not flushed.

        For the master's lines whose other parts its vetting checked (:mod:`aiperf_mpi.job.vetting`): the line
        :meth:`write_encoded` writes from the same parts, with the event and the time prefixed here — the log
        encoder's own text (tests/unit/test_vetting.py checks every line of a run so made).
        """
        self._handle.write(f'{{"{EVENT}":"{event}","{TIME}":{time.time()!r}{tail}\n')
        self._dirty = self._dirty or sync

    def sync(self) -> None:
        """fsync if any event since the last sync asked for it (every event is flushed to the OS first)."""
        with self.stall_guard():
            self._handle.flush()
            if self._dirty:
                os.fsync(self._handle.fileno())
        self._dirty = False

    def take_sync(self) -> bool:
        """Whether an event since the last call asked for stable storage; for a writer that fsyncs elsewhere.

        The master's loop hands the fsync to its I/O thread (:meth:`fsync`),
        which may run it while the loop writes the next events: every event
        written before this call is already flushed to the OS, so that fsync
        covers them.
        """
        self._handle.flush()
        dirty, self._dirty = self._dirty, False
        return dirty

    def fsync(self) -> None:
        """fsync now (from any thread)."""
        with self.stall_guard():
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if not self._handle.closed:
            with self.stall_guard():
                self._handle.flush()
                os.fsync(self._handle.fileno())
            self._handle.close()


def parse_sent(text: str) -> object:
    """A JSON text a sender encoded, parsed as the log's readers parse a line, or ``ValueError``.

    One value, on one line (the log is one event per line), without NaN or Infinity (the writer's encoder
    refuses them, and a reader's ``int()`` of one would end the score); orjson first, as the log's readers
    parse, then the standard library for what orjson refuses.  orjson reads an integer of 2⁶⁴ or more as a
    float (the standard library exactly): such a number then fails every field the schema wants an int, and
    the master's bounds (``ops`` < 2⁶³), so the master and the verifier, both reading with orjson, never write
    or accept one where the two readings would differ.  Of two equal keys the last is kept, as by every reader.
    """
    if "\n" in text or "\r" in text:
        raise ValueError("a sent JSON text spans more than one line")
    if _fast_loads is not None:
        try:
            return _fast_loads(text)
        except ValueError:  # orjson.JSONDecodeError is one
            pass
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent, refused where it overflows a float (``1e400``: infinity)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a number a log line may hold (it overflows a float)")
    return value


def parse_members(event: str, members: str) -> dict:
    """A sender's members of ``event`` (:func:`event_members`), parsed (:func:`parse_sent`), or ``ValueError``.

    The text must be one JSON object, from its first character to its last: its inside is then exactly its
    members, which :meth:`EventLog.write_encoded` joins after the writer's fields.
    """
    if len(members) < 2 or members[0] != "{" or members[-1] != "}":
        raise ValueError(f"event {event!r}: the members sent are not one JSON object")
    given = parse_sent(members)
    if type(given) is not dict:
        raise ValueError(f"event {event!r}: the members sent are not one JSON object")
    return given


def check_members(event: str, given: dict, writer_fields: dict) -> None:
    """``ValueError`` unless ``given`` (a sender's members, parsed) joined after ``writer_fields`` is a valid ``event``.

    The check :meth:`EventLog.write_encoded` makes before it writes, made apart (``writer_fields``: the writer's
    own, or placeholders of their types): no member named like the writer's fields, and the whole event as the
    readers will see it matches its schema.
    """
    clash = given.keys() & {EVENT, TIME, *writer_fields}
    if clash:  # a field twice: readers would take the sender's
        raise ValueError(f"event {event!r}: {sorted(clash)} are the writer's fields, not the sender's")
    problems = check_event({EVENT: event, TIME: 0.0, **writer_fields, **given})
    if problems:
        raise ValueError(f"event {event!r} does not match its schema: {'; '.join(problems)}")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number a log line may hold")


def event_members(event: str, members: dict, writer_fields: dict) -> str:
    """``members`` of ``event`` as the JSON object text :meth:`EventLog.write_encoded` appends to the writer's fields.

    Made where the members are known (a leader's epoch), so that rank 0 does not encode them: the whole event —
    ``writer_fields`` (what the writer will put first: a placeholder of the right type will do) and the
    members — is checked against its schema here, and encoded as the writer would (no NaN, numpy scalars as
    numbers).  A member named like a writer's field is refused: the line would hold the name twice.
    """
    if event not in EVENT_NAMES:
        raise ValueError(f"event {event!r} is not in the schema (aiperf_mpi/results/schema.py)")
    check_members(event, members, writer_fields)
    return log_encoder()(members)


def value_text(value: object) -> str:
    """A value as the event log encodes it (for a field its sender encodes: :meth:`EventLog.write_encoded`)."""
    return log_encoder()(value)


def log_encoder() -> Callable[[object], str]:
    """The event log's encoder (compact, ASCII, no NaN, numpy scalars as numbers): make one and keep it."""
    return line_encoder(",", ":", default=_jsonable, allow_nan=False)


def _jsonable(value: object) -> object:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


@dataclass
class LogContents:
    """What :func:`read_events` found."""

    events: list[dict]
    truncated_tail: bool
    """the last line was cut off (a run killed mid-write) and was skipped"""
    truncated_bytes: int = 0
    """how long the skipped end was"""


PARTIAL_SUFFIX = ".partial"
"""the name's end of the file :func:`write_whole` writes before it renames it over the file"""


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a partial file beside it, fsync'd, then renamed over it.

    A run killed while it writes (Slurm's SIGTERM at the job's time limit, then its SIGKILL) leaves the previous
    file or the new one, never an empty or half one: a resumed run stopped by ``timeout`` left a 0-byte
    ``score.json`` (2026-12-03), whose verify could only say "not readable".
    """
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    with open(partial, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)


def log_path(path: Path) -> Path:
    """The event log of a run directory (or the file itself); FileNotFoundError if there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / EVENTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no event log at {path}")
    return path


class EventStream:
    """The events of a log one at a time, in constant memory.

    A log of a long run on a large machine holds hundreds of thousands of
    epochs; a list of their dicts would take gigabytes, so the score and the
    report walk the file instead.  Like :func:`read_events`, only the last
    line may be cut off (a run killed mid-write): it is skipped and
    :attr:`truncated_tail` / :attr:`truncated_line` / :attr:`truncated_bytes`
    say so once the iteration has ended; a bad line anywhere else raises
    ``ValueError``.  The file is read as bytes and each line decoded on its
    own, so a line cut inside a multi-byte UTF-8 character is one more cut
    line, not a ``UnicodeDecodeError``.  What counts as cut is exactly what
    :func:`repair_tail` sets aside: the last non-blank line when it does not
    parse — after trailing NUL bytes are dropped, so a complete event
    followed by a crashed file system's NULs is kept (and the NULs
    reported) — and a last line of whitespace without its newline.

    ``parse`` turns one line into an event (``json.loads`` by default).  A
    reader with its own storage (the report's columns) can pass a faster
    parser that raises ``ValueError`` where ``json.loads`` would and returns
    ``None`` for a line it has consumed itself; nothing is yielded for that
    line.
    """

    def __init__(self, path: Path, parse: Callable[[str], dict | None] = json.loads) -> None:
        self.path = log_path(path)
        self.parse = parse
        self.truncated_tail = False
        self.truncated_line = ""
        """the start of the skipped end, printable (control bytes and bad UTF-8 escaped)"""
        self.truncated_bytes = 0
        self.lines = 0
        self.line_start = 0
        """the byte offset in the file of the line the last event yielded came from (a reader that keeps where
        a record lies, to read it again later, rather than the record)"""

    def __iter__(self) -> Iterator[dict]:
        self.truncated_tail, self.truncated_line, self.truncated_bytes, self.lines = False, "", 0, 0
        bad: tuple[int, bytes, int] | None = None
        parse = self.parse
        number, line, position = 0, b"", 0
        try:
            with open(self.path, "rb") as handle:
                for number, line in enumerate(handle, start=1):
                    start, position = position, position + len(line)
                    if line.isspace():  # isspace, not strip: no copy of a 40 kB line
                        continue
                    if bad is not None:  # a non-blank line after a bad one: the bad one was not the last
                        raise ValueError(f"{self.path}:{bad[0]}: not a JSON line")
                    if number == 1 and line.startswith(BOM):
                        raise UnreadableLog(f"{self.path} starts with a UTF-8 byte-order mark: an event log is "
                                            "JSON lines in plain UTF-8, without one")  # fmt: skip
                    self.line_start = start
                    try:
                        event = parse(line.decode("utf-8"))  # UnicodeDecodeError is a ValueError
                    except ValueError:  # json.JSONDecodeError is a ValueError
                        bad = (number, line, start)
                        continue
                    except RecursionError:  # the standard parser recurses once per level: 100,000 '[' end it
                        raise UnreadableLog(f"{self.path}:{number}: JSON nested deeper than the parser can "
                                            "read (no event of this benchmark nests more than a few levels)") from None
                    if event is not None:
                        yield event
        finally:
            self.lines = number
        if bad is not None:
            raw = bad[1]
            body = raw.rstrip(_JUNK)
            if len(body) < len(raw.rstrip(_BLANK)):  # NULs after the line: is what precedes them an event?
                self.line_start = bad[2]
                try:
                    event = parse(body.decode("utf-8"))
                except ValueError:
                    pass
                else:  # a complete event, then NULs: the event stands, the NULs are the cut
                    raw = raw[len(body) :]
                    if event is not None:
                        yield event
            self._cut(raw)
        elif line and not line.endswith(b"\n") and line.isspace():  # whitespace with no newline: a cut too
            self._cut(line)

    def _cut(self, raw: bytes) -> None:
        self.truncated_tail, self.truncated_bytes = True, len(raw)
        self.truncated_line = printable(raw[:200])


def read_events(path: Path) -> LogContents:
    """Read an event log (a run directory or the file); tolerate a cut last line only (see :class:`EventStream`)."""
    stream = EventStream(path)
    events = list(stream)
    return LogContents(events, stream.truncated_tail, stream.truncated_bytes)


def printable(raw: bytes) -> str:
    """Bytes of a log line as text for a message: bad UTF-8, NULs and other control bytes escaped."""
    text = raw.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


@dataclass(frozen=True)
class TailRepair:
    """What :func:`repair_tail` found at the end of a log, and did, before a new segment."""

    cut_bytes: int = 0
    """bytes after the last complete event that were set aside (0: none)"""
    side_file: str = ""
    """the file beside the log that keeps them, byte for byte ('' when none)"""
    newline_added: bool = False
    """the last event was complete but had no newline: one was added (nothing removed for it)"""
    log_bytes: int = 0
    """the log's length after the repair: where the new segment begins"""
    head: str = ""
    """the start of what was set aside, printable"""
    earlier: tuple[str, ...] = ()
    """side files of this segment left by an earlier ``--resume`` that set a cut aside but logged no
    ``run_start`` (it stopped before its run began): reported again so the log records them"""

    @property
    def changed(self) -> bool:
        return bool(self.cut_bytes or self.newline_added or self.earlier)

    def to_dict(self) -> dict:
        """The ``cut_tail`` field of the new segment's ``run_start``."""
        return {"cut_bytes": self.cut_bytes, "side_file": self.side_file, "newline_added": self.newline_added,
                "log_bytes": self.log_bytes, "head": self.head, "earlier": list(self.earlier)}  # fmt: skip

    def message(self) -> str:
        """The one line rank 0 prints ('' when nothing was found)."""
        parts = []
        if self.cut_bytes:
            parts.append(f"{EVENTS_FILE} ended in a cut line ({self.cut_bytes} bytes, kept in {self.side_file}); "
                         "resuming after the last complete line")  # fmt: skip
        if self.newline_added:
            parts.append(f"{EVENTS_FILE}'s last event had no newline; added one (the event is kept)")
        if self.earlier:
            parts.append(f"an earlier --resume set a cut line aside in {', '.join(self.earlier)}")
        return "aiperf_mpi: warning: " + "; ".join(parts) if parts else ""


def repair_tail(run_dir: Path, segment: int) -> TailRepair:
    """End the log at its last complete line before segment ``segment`` appends to it.

    The master appends, so a cut last line (see :class:`EventStream`) would
    get the new segment's first event glued onto it: one bad line in the
    middle of the log, which every reader must refuse.  Two ways out lose
    nothing; this takes the first:

    * copy the cut bytes to ``events.jsonl.cut-SEGMENT`` beside the log
      (fsync'd, directory too), then truncate the log after its last
      complete line.  The log stays one JSON object per line that any JSON
      lines reader (jq, pandas) takes, and the strict rule — a bad line
      before the last one is corruption, an error — keeps its meaning; the
      bytes are kept verbatim, and the new ``run_start`` names the file.
    * write a newline and append after the cut line.  Nothing moves, but
      the log then holds a bad line in its middle for ever: every reader
      would have to learn which bad lines are allowed (those just before a
      resumed ``run_start``), and a reader that does not would refuse the
      whole run — the very failure this repairs.

    A last event that is complete but lacks its newline is kept and ended
    with a newline; NULs after it are set aside like a cut line (the readers
    take the event and skip the NULs), and so is a last line of whitespace
    without its newline.  A log that ends with a newline after a complete
    event is not touched.  Idempotent: a repair
    killed after the copy and before the truncation is redone with the same
    side file.  Only the log's end is read.
    """
    path = log_path(run_dir)
    side_name = CUT_FILE.format(segment=segment)
    earlier = tuple(sorted(p.name for p in path.parent.glob(side_name + "*") if _is_side_file(p.name, side_name)))
    with open(path, "r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        start, tail = _last_line(handle, size)
        line = tail.split(b"\n", 1)[0]
        body = line.rstrip(_JUNK)
        if _is_event(line):  # the readers take the line as it is
            if tail.endswith(b"\n"):
                return TailRepair(log_bytes=size, earlier=earlier)
            newline = tail == line  # else a newline, then a last line of whitespace: cut
            keep = start + len(line) + (not newline)
        elif body and _is_event(body):  # an event, then NULs: the readers take the event, skip the NULs
            keep, newline = start + len(body), True
        else:
            keep, newline = start, False
        cut = tail[keep - start :]
        side = _set_aside(path.parent, side_name, cut) if cut else ""
        handle.truncate(keep)
        if newline:
            handle.seek(keep)
            handle.write(b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    earlier = tuple(name for name in earlier if name != side)
    return TailRepair(len(cut), side, newline, keep + newline, printable(cut[:120]), earlier)


def _last_line(handle, size: int) -> tuple[int, bytes]:
    """(offset, bytes) of the log's last non-blank line and all after it; only blanks: what follows the last newline."""
    block, position, data = 1 << 16, size, b""
    while position > 0:
        step = min(block, position)
        position -= step
        handle.seek(position)
        data = handle.read(step) + data
        block *= 2  # a cut line can be long (a model_done line, a run of NULs): few reads, no quadratic copy
        content = len(data.rstrip(_BLANK))
        if content:
            start = data.rfind(b"\n", 0, content) + 1
            if start or position == 0:
                return position + start, data[start:]
    start = data.rfind(b"\n") + 1
    return start, data[start:]


def _is_event(raw: bytes) -> bool:
    """The test every reader applies to a line: UTF-8 that ``json.loads`` takes."""
    try:
        json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # nested too deep: no event either
        return False
    return True


def _set_aside(folder: Path, name: str, data: bytes) -> str:
    """Write ``data`` to ``name`` (or ``name-2``, … when taken by other bytes), durably; the name used."""
    for number in range(1, 1000):
        candidate = folder / (name if number == 1 else f"{name}-{number}")
        try:
            with open(candidate, "xb") as side:
                side.write(data)
                side.flush()
                os.fsync(side.fileno())
        except FileExistsError:
            if candidate.read_bytes() == data:  # a repair killed before its truncation: the copy is there
                return candidate.name
            continue
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return candidate.name
    raise FileExistsError(f"{folder / name}: too many side files")


def _is_side_file(name: str, side_name: str) -> bool:
    """``name`` is ``side_name`` or one of its numbered siblings (``…cut-1-2``, not ``…cut-12``)."""
    return name == side_name or (name.startswith(side_name + "-") and name[len(side_name) + 1 :].isdigit())


def ends_mid_line(path: Path) -> bool:
    """The file exists, is not empty, and its last byte is not a newline."""
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except FileNotFoundError:
        return False
