"""The run directory's event log: append-only JSON lines, fsync'd, readable by anyone.

One JSON object per line, each with ``event`` (one of the names below),
``time`` (Unix seconds) and the event's fields.  The master is the only
writer.  Every epoch is flushed and fsync'd before the master answers the
group again, so an epoch that was reported is on disk even if the job is
killed the next instant.  A reader tolerates a truncated last line (a run
killed mid-write) and reports it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

EVENTS_FILE = "events.jsonl"

# event names
RUN_START = "run_start"
SYSTEM = "system"
LAYOUT = "layout"
MODEL_PROPOSED = "model_proposed"
EPOCH = "epoch"
MODEL_DONE = "model_done"
MODEL_FAILED = "model_failed"
STAGING = "staging"
MONITOR = "monitor"
PEAK = "peak"
GP_FAILURE = "gp_failure"
RUN_STOP = "run_stop"
SCORE = "score"

# common field names
EVENT = "event"
TIME = "time"
SEGMENT = "segment"


class EventLog:
    """Append-only writer of ``events.jsonl``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # open for the whole run
        self._dirty = False

    def write(self, event: str, sync: bool = False, **fields: object) -> dict:
        """Append one event (flushed to the OS at once).

        ``sync`` asks for stable storage: the fsync happens at the next
        :meth:`sync` — the master calls it after each batch of messages and
        before it sends any reply, so an epoch is on disk before its group
        hears from the master again, and a burst of epochs costs one fsync.
        """
        record = {EVENT: event, TIME: fields.pop(TIME, time.time()), **fields}
        self._handle.write(json.dumps(record, separators=(",", ":"), allow_nan=False, default=_jsonable) + "\n")
        self._handle.flush()
        self._dirty = self._dirty or sync
        return record

    def sync(self) -> None:
        """fsync if any event since the last sync asked for it."""
        if self._dirty:
            os.fsync(self._handle.fileno())
            self._dirty = False

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()


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
    :attr:`truncated_tail` / :attr:`truncated_line` say so once the iteration
    has ended; a bad line anywhere else raises ``ValueError``.  ``parse`` turns
    one line into an event (``json.loads`` by default).  A reader with its own
    storage (the report's columns) can pass a faster parser that raises
    ``ValueError`` where ``json.loads`` would and returns ``None`` for a line
    it has consumed itself; nothing is yielded for that line.
    """

    def __init__(self, path: Path, parse: Callable[[str], dict | None] = json.loads) -> None:
        self.path = log_path(path)
        self.parse = parse
        self.truncated_tail = False
        self.truncated_line = ""
        """the start of the skipped last line"""
        self.lines = 0

    def __iter__(self) -> Iterator[dict]:
        self.truncated_tail, self.truncated_line, self.lines = False, "", 0
        bad: tuple[int, str] | None = None
        parse = self.parse
        number = 0
        try:
            with open(self.path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if line.isspace():  # isspace, not strip: no copy of a 40 kB line
                        continue
                    if bad is not None:  # a non-blank line after a bad one: the bad one was not the last
                        raise ValueError(f"{self.path}:{bad[0]}: not a JSON line")
                    try:
                        event = parse(line)
                    except ValueError:  # json.JSONDecodeError is a ValueError
                        bad = (number, line)
                        continue
                    if event is not None:
                        yield event
        finally:
            self.lines = number
        if bad is not None:
            self.truncated_tail, self.truncated_line = True, bad[1][:200]


def read_events(path: Path) -> LogContents:
    """Read an event log (a run directory or the file); tolerate a truncated last line only."""
    stream = EventStream(path)
    events = list(stream)
    return LogContents(events, stream.truncated_tail)
