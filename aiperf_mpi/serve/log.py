"""A serving run's record: ``serve_events.jsonl`` (named apart from a benchmark run's ``events.jsonl``, which
only :mod:`aiperf_mpi.results` parses) (JSON lines, each fsync'd), ``mllog.log`` (``:::MLLOG`` lines with
mlperf-logging's key names) and ``summary.json`` — written by rank 0 into the run's log directory.

The event log is the record the reviewer's check (:mod:`aiperf_mpi.serve.check`) recounts: every figure of the
summary and of the ``:::MLLOG`` lines is recomputed from the events and the bundle.  Event names:
``serve_start``, ``peak``, ``shard`` (one per rank), ``offline``, ``accuracy``, ``predictions``,
``batch_sweep``, ``single_stream``, ``server``, ``serve_stop``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from mlperf_logging.mllog import constants

from aiperf_mpi.results import mllog_format
from aiperf_mpi.results.runlog import EventLog

EVENTS = "serve_events.jsonl"
MLLOG = "mllog.log"
SUMMARY = "summary.json"
MLLOG_KEYS = {
    "offline": ("result_samples_per_second", "samples_per_second"),
    "single_stream": ("result_90.00_percentile_latency_ns", "p90"),
    "server": ("result_scheduled_samples_per_sec", "best_rate"),
}
"""scenario → (the MLPerf Inference result key its ``:::MLLOG`` line carries, the figure of the summary)"""


SERVE_EVENTS = frozenset({"serve_start", "peak", "shard", "offline", "accuracy", "predictions", "batch_sweep",
                          "single_stream", "server", "serve_stop"})  # fmt: skip
"""the events a serving log holds (the writer refuses any other name)"""


class ServeLog:
    """Rank 0's writer of the three files: the events by the run log's writer (:class:`~aiperf_mpi.results.runlog.
    EventLog`), each flushed and fsync'd as it is written; the ``:::MLLOG`` lines in the one format's text
    (:mod:`aiperf_mpi.results.mllog_format`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._events = EventLog(self.folder, file_name=EVENTS, names=SERVE_EVENTS, check=None)
        self._mllog = open(self.folder / MLLOG, "w", encoding="utf-8")

    def event(self, name: str, **fields: object) -> dict:
        record = self._events.write(name, sync=True, **fields)
        self._events.sync()
        return record

    def mllog(self, key: str, value: object, kind: str = constants.POINT_IN_TIME, **metadata: object) -> None:
        self._mllog.write(mllog_format.whole_line(mllog_format.time_ms(time.time()), kind, key, value, metadata))
        self._mllog.flush()

    def summary(self, summary: dict) -> None:
        (self.folder / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    def close(self) -> None:
        self._events.close()
        self._mllog.flush()
        os.fsync(self._mllog.fileno())
        self._mllog.close()


def read_serve_events(folder: Path) -> list[dict]:
    """The event log's records, in order (a line that is not a JSON object naming its event is an error of the log,
    raised as ValueError)."""
    records = []
    with open(Path(folder) / EVENTS, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ValueError(f"{EVENTS} line {number} is not JSON ({exc})") from None
            if not isinstance(record, dict) or not isinstance(record.get("event"), str):
                raise ValueError(f"{EVENTS} line {number} is not an event (a JSON object with its 'event' name)")
            records.append(record)
    return records


def read_mllog(folder: Path) -> list[dict]:
    """The ``:::MLLOG`` lines' records, in order (:func:`aiperf_mpi.results.mllog_format.read_lines`)."""
    return mllog_format.read_lines(Path(folder) / MLLOG)
