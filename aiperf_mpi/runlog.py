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


def read_events(path: Path) -> LogContents:
    """Read an event log (a run directory or the file); tolerate a truncated last line only."""
    path = Path(path)
    if path.is_dir():
        path = path / EVENTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no event log at {path}")
    lines = path.read_text(encoding="utf-8").split("\n")
    events, truncated = [], False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            if all(not rest.strip() for rest in lines[number:]):  # only the last line may be cut off
                truncated = True
                continue
            raise ValueError(f"{path}:{number}: not a JSON line") from None
    return LogContents(events, truncated)
