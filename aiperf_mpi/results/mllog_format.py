"""The ``:::MLLOG`` line, written and read: one home for mlperf-logging's line format as this project uses it.

The master writes ``mllog.log`` (:mod:`aiperf_mpi.job.mllog`, which takes
mlperf-logging's key names and event types) and verify reads it back
against the event log (``analysis/verify/mllog.py``); both take the file's
name, the line's shape and its times from here, so a change to one is a
change to the other.  A line is ``:::MLLOG`` and one JSON object, as
``json.dumps`` writes ``{"namespace": "", "time_ms": …, "event_type": …,
"key": …, "value": …, "metadata": {…}}`` (mlperf-logging's spacing: its
parser and the compliance checker read it).  ``time_ms`` never goes back: a
line written after a later one carries its own time in
``metadata.event_time_ms``.  Pure, and light: a relay rank composes epoch
lines with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from aiperf_mpi.results.epochs import LEARNING_RATE_WARMUP_EPOCHS
from aiperf_mpi.results.inventory import group_ranks_by_host
from aiperf_mpi.results.jsonline import loads

MLLOG_FILE = "mllog.log"
PREFIX = ":::MLLOG "
FLUSH_SECONDS = 1.0
"""the writer flushes its lines to the OS at most this often: a segment killed without ``run_stop`` may lack
the lines of its last second (the reader tolerates that much, no more)"""
LINE_START = PREFIX + '{"namespace": "", "time_ms": '
EVENT_TIME_MS = "event_time_ms"
EVENT_TIME = f'"{EVENT_TIME_MS}": '
"""a late line's metadata member with its true time, as its JSON text and separator"""


def time_ms(seconds: float) -> int:
    """A Unix time in seconds as a line's milliseconds (truncated, as mlperf-logging's ``time_ms``)."""
    return int(seconds * 1000)


def line_middle(event_type_text: str, key_text: str) -> str:
    """The constant middle of a line of one event type and key, given as their JSON texts: what lies between its
    ``time_ms`` and its value (a writer makes it once per kind and key)."""
    return f', "event_type": {event_type_text}, "key": {key_text}, "value": '


def line(ms: int, middle: str, value: str, members: str) -> str:
    """One line, newline included: its ``time_ms``, its :func:`line_middle`, its value's JSON text and its
    metadata's members' text (``"a": 1, "b": 2``)."""
    return f'{LINE_START}{ms}{middle}{value}, "metadata": {{{members}}}}}\n'


def late_members(members: str, event_ms: int) -> str:
    """A late line's metadata members: its own, then its true time (``json.dumps`` of ``{**metadata,
    "event_time_ms": …}``)."""
    return f"{members}, {EVENT_TIME}{event_ms}" if members else f"{EVENT_TIME}{event_ms}"


def whole_line(ms: int, event_type: str, key: str, value: object, metadata: dict) -> str:
    """One line from its values, newline included, as ``json.dumps`` writes its object (for a writer of a few
    lines, serving's: the master composes its many with :func:`line`, to the same text)."""
    record = {"namespace": "", "time_ms": ms, "event_type": event_type, "key": key, "value": value,
              "metadata": metadata}  # fmt: skip
    return PREFIX + json.dumps(record) + "\n"


def read_lines(path: Path) -> list[dict]:
    """Every MLLOG line's record of the file, in order (lines of other text, which the format allows, left out;
    a line that starts as one and is not raises :class:`NotAnMLLogLine`)."""
    if not Path(path).is_file():  # a FIFO would hold the reader for ever, a device feed it without end
        raise OSError(f"{path} is not a regular file")
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [read_line(text) for text in lines if text.startswith(PREFIX)]


class NotAnMLLogLine(ValueError):
    """A line of ``mllog.log`` that is not an MLLOG line; its text says how."""


def read_line(text: str) -> dict:
    """One line's record: the JSON object after :data:`PREFIX`, with a text ``key``; :class:`NotAnMLLogLine`
    otherwise."""
    if not text.startswith(PREFIX):
        raise NotAnMLLogLine("not a ':::MLLOG' line")
    try:
        record = loads(text[len(PREFIX):])
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("key"), str):
        raise NotAnMLLogLine("not an MLLOG JSON object")
    return record


def true_time_ms(record: dict) -> int | None:
    """A read line's true time: ``metadata.event_time_ms`` on a late line, else ``time_ms`` (None: neither is an
    integer)."""
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    value = meta.get(EVENT_TIME_MS, record.get("time_ms"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def logged_ms(seconds: object) -> int | None:
    """The milliseconds a line logs for a time in the event log (:func:`time_ms`); None for what is not a time."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return None
    return time_ms(seconds)


# --------------------------------------------------------------------------- a segment's description lines

EVENT_TYPES = {"start": "INTERVAL_START", "end": "INTERVAL_END", "event": "POINT_IN_TIME"}
"""mlperf-logging's event types (``mllog.constants``' values): what its ``start``, ``end`` and ``event`` write"""
HOST_FIELDS = ("host", "cpu", "cpu_vendor", "cpu_flags", "cores", "accelerators")
"""what ``aiperf_system`` keeps of each host of the ``system`` event: what the hardware table bounds it by"""


def hardware_description(config: dict, system: dict, layout: dict) -> dict:
    """``aiperf_system``'s metadata: the precision, the hosts (their bounding fields) and each group's ranks per
    host, indexed by group (what :func:`aiperf_mpi.results.hardware.group_bound` reads)."""
    hosts = [{name: host[name] for name in HOST_FIELDS if name in host}
             for host in system.get("hosts") or [] if isinstance(host, dict)]  # fmt: skip
    by_group = group_ranks_by_host(layout, system)
    return {"precision": config.get("precision"), "rehearse": bool(config.get("rehearse")), "hosts": hosts,
            "groups": [by_group.get(index, {}) for index in range(len(layout.get("groups") or []))]}  # fmt: skip


Record = tuple[str, str, object, "dict | None"]
"""one line as the writer composes it: (kind: ``start``, ``end`` or ``event``; key; value; metadata)"""
Space = Callable[[dict], dict]
"""a configuration's widest search space as ``aiperf_search_space`` states it
(:func:`aiperf_mpi.graph.model.search_space`, passed in: this room imports no graph)"""
Maker = tuple[str, str, Callable[[dict, dict, dict, dict, Space], tuple[object, "dict | None"]]]
"""one description line: its kind, its key, and what makes its (value, metadata) of a segment's configuration,
``system`` and ``layout`` events, data check and search space; a field the segment lacks raises (KeyError,
TypeError)"""
PRELUDE: tuple[Maker, ...] = (
    ("event", "submission_benchmark", lambda config, system, layout, data, space: ("aiperf_mpi", None)),
    ("event", "number_of_nodes", lambda config, system, layout, data, space: (system["nodes"], None)),  # MLPerf HPC
    ("event", "accelerators_per_node",
     lambda config, system, layout, data, space: (system["accelerators_per_node"], None)),
    ("event", "seed", lambda config, system, layout, data, space: (config["seed"], None)),
    ("event", "opt_name", lambda config, system, layout, data, space: ("sgd", None)),
    ("event", "opt_base_learning_rate",
     lambda config, system, layout, data, space: (config["base_lr"], {"per": "256 samples of global batch"})),
    # the trainer's warm-up of every model's learning rate, not the search's --search-warmup-epochs
    ("event", "opt_learning_rate_warmup_epochs",
     lambda config, system, layout, data, space: (LEARNING_RATE_WARMUP_EPOCHS, None)),
)  # fmt: skip
"""a segment's lines before its ``run_start``, with mlperf-logging's key names: the description of the submission,
from the segment's configuration and ``system`` event alone, so that verify makes them again from the log (issue
52: ``number_of_nodes`` and ``accelerators_per_node`` are the hardware an mlcommons reader believes)"""
DESCRIPTION: tuple[Maker, ...] = (
    ("event", "aiperf_dataset",
     lambda config, system, layout, data, space: (data.get("dataset"), {"classes": data.get("classes")})),
    ("event", "train_samples", lambda config, system, layout, data, space: (data.get("train"), None)),
    ("event", "eval_samples", lambda config, system, layout, data, space: (data.get("validation"), None)),
    ("event", "aiperf_time_limit",
     lambda config, system, layout, data, space: (config["time_limit"], {"grace": config["grace"]})),
    ("event", "aiperf_search_space", lambda config, system, layout, data, space: (None, space(config))),
    ("event", "aiperf_system",
     lambda config, system, layout, data, space: (None, hardware_description(config, system, layout))),
)  # fmt: skip
"""a segment's lines right after its ``run_start``: what the compliance ruleset judges the segment's lines by, from
the segment's configuration, data check, ``system`` and ``layout`` events alone: the data check's counts, the time
limit and grace, the tuner's widest space and the hardware with each group's ranks on it (the ruleset bounds each
epoch's rate by the hardware table, aiperf_mpi/results/hardware.py, for these hosts, not by a figure the run
measured)"""


def records(makers: tuple[Maker, ...], config: dict, system: dict, layout: dict, data: dict,
            space: Space) -> list[Record]:  # fmt: skip
    """The lines ``makers`` make of a segment (:data:`PRELUDE`, :data:`DESCRIPTION`)."""
    return [(kind, key, *make(config, system, layout, data, space)) for kind, key, make in makers]
