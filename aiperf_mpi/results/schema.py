"""One schema per event of ``events.jsonl``: the fields each must carry, and their JSON types.

The schema is data, versioned with :data:`SCHEMA_VERSION`, and serves four
readers at once: the writer (:class:`~aiperf_mpi.results.runlog.EventLog`
checks every event it writes, so a field renamed in the code fails the tests
instead of silently breaking other people's tools), the readers
(:func:`check_event`), ``analysis/`` (``docs/events.md`` is generated from
it) and a test that checks a real run's log against it.  Only required
fields are listed with a type; an event may carry more (new optional fields
do not break readers), and optional ones known today are listed apart.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping

SCHEMA_VERSION = 1

# the event names: the one list of them (runlog re-exports them for the writer and the readers; the writer
# refuses any other name, so a new event is added here, with its fields, or not at all)
RUN_START = "run_start"
SYSTEM = "system"
LAYOUT = "layout"
STAGING = "staging"
PEAK = "peak"
MONITOR = "monitor"
MODEL_PROPOSED = "model_proposed"
EPOCH = "epoch"
MODEL_DONE = "model_done"
MODEL_FAILED = "model_failed"
GROUP_LOST = "group_lost"
"""a group is out of the run (a rank died, or the group was silent past its deadline): see job/faults.py"""
WEIGHTS_REMOVED = "weights_removed"
"""weights files the search can no longer inherit from, removed (models, files); see job/retention.py"""
RUN_STOP = "run_stop"
SCORE = "score"

# the fields every event has, and the one that numbers a run's segments
EVENT = "event"
TIME = "time"
SEGMENT = "segment"

INT, NUM, STR, BOOL, LIST, DICT, NULL = numbers.Integral, numbers.Real, str, bool, (list, tuple), dict, type(None)
"""JSON types: as ``json.loads`` gives them, and as the writer holds them (NumPy scalars are numbers, tuples
arrays)"""

COMMON = {EVENT: STR, TIME: NUM}

REQUIRED: dict[str, dict[str, object]] = {
    RUN_START: {SEGMENT: INT, "resumed": BOOL, "config": DICT},
    SYSTEM: {"ranks": INT, "nodes": INT, "hosts": LIST},
    LAYOUT: {"world_size": INT, "master_rank": INT, "hosts": LIST, "nodes": LIST, "groups": LIST},
    STAGING: {"source": STR, "staged": STR, "seconds": NUM, "bytes": INT, "files": INT, "copied": INT,
                "host": STR},
    PEAK: {"group": INT, "host": STR, "precision": STR, "ranks": INT, "ops_per_second": NUM},
    MONITOR: {"group": INT, "host": STR, "node": INT, "source": STR, "devices": LIST},
    MODEL_PROPOSED: {"task": INT, "group": INT, "parent": (INT, NULL), "hparams": DICT, "description": STR,
                       "graph_file": STR, "search": DICT},
    EPOCH: {"task": INT, "group": INT, "epoch": INT, "train_loss": NUM, "val_accuracy": NUM, "start": NUM,
              "end": NUM, "ops": INT, "ops_train": INT, "ops_update": INT, "ops_validation": INT, "steps": INT,
              "train_samples": INT, "validation_samples": INT, "data_wait": NUM, "compute": NUM,
              "evaluation": NUM, "learning_rate": NUM},
    MODEL_DONE: {"task": INT, "group": INT, "model": DICT},
    MODEL_FAILED: {"task": INT, "group": INT, "model": INT, "rank": INT, "host": STR, "reason": STR,
                     "traceback": STR},
    GROUP_LOST: {"group": INT, "ranks": LIST, "host": STR, "task": (INT, NULL), "reason": STR},
    WEIGHTS_REMOVED: {"models": LIST, "files": LIST},
    RUN_STOP: {"reason": STR, "discarded_tasks": LIST, SEGMENT: INT},
    SCORE: {"score": NUM, "regulated_score": (NUM, NULL), "active_time": NUM, "total_ops": INT,
              "best_accuracy": (NUM, NULL), "models_trained": INT, "models_failed": INT, "epochs": INT,
              "segments": INT, "valid": BOOL, "rules": DICT},
}  # fmt: skip
OPTIONAL: dict[str, dict[str, object]] = {
    RUN_START: {"cut_tail": DICT, "provenance": DICT, "data": DICT},
    SYSTEM: {"startup": DICT, "energy": LIST},
    MONITOR: {"energy": LIST},
    STAGING: {"start": NUM},
    LAYOUT: {"relay_ranks": LIST},
    PEAK: {"threads": LIST},
    MODEL_PROPOSED: {"graph_sha256": STR, "graph_offset": INT, "graph_bytes": INT, "morphs": LIST, "seed": DICT},
    EPOCH: {"compile": NUM, "xla": BOOL, "correct": INT},
    MODEL_DONE: {"weights_sha256": STR},
    MODEL_FAILED: {"graph_hash": (STR, NULL)},
    GROUP_LOST: {"silent": NUM},
    RUN_STOP: {"groups_stopped_early": INT, "groups_lost": INT, "closed": DICT, "rank0_stalls": DICT},
    SCORE: {"rules_version": STR, "ops_cv_last_half": (NUM, NULL), "ops_change_last_quarter": (NUM, NULL),
            "energy": DICT},
}
"""fields some events carry (newer than the first logs, or only in some runs): typed when present"""
EVENT_NAMES = tuple(REQUIRED)
"""every event a run may write, in the order a run first writes them"""


def _type_name(kind: object) -> str:
    kinds = _flat(kind)
    names = {numbers.Integral: "integer", numbers.Real: "number", str: "string", bool: "boolean", list: "array",
             tuple: "array", dict: "object", type(None): "null"}  # fmt: skip
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def _flat(kind: object) -> tuple:
    """A type or a (nested) tuple of types as one flat tuple."""
    if not isinstance(kind, tuple):
        return (kind,)
    return tuple(k for part in kind for k in _flat(part))


def _is(value: object, kind: object) -> bool:
    kinds = _flat(kind)
    if isinstance(value, bool) and bool not in kinds:  # JSON true is not a number
        return False
    return isinstance(value, kinds)


def _plain(kinds: tuple) -> frozenset:
    """The built-in types that are surely of ``kinds``: tested by one set look-up, not the ABCs' isinstance."""
    exact = {int: numbers.Integral, float: numbers.Real, str: str, bool: bool, list: list, tuple: tuple,
             dict: dict, type(None): type(None)}  # fmt: skip
    return frozenset(t for t, kind in exact.items() if issubclass(t, kinds) and (t is not bool or bool in kinds))


def _checks(fields: Mapping[str, object]) -> tuple:
    """(field, kind, plain types) per field: what :func:`check_event` tests, prepared once."""
    return tuple((name, kind, _plain(_flat(kind))) for name, kind in fields.items())


_COMMON_CHECKS = _checks(COMMON)
_REQUIRED_CHECKS = {name: _checks(fields) for name, fields in REQUIRED.items()}
_OPTIONAL_CHECKS = {name: _checks(fields) for name, fields in OPTIONAL.items()}
"""the schema's tables, prepared for :func:`check_event`: the master checks every event it writes, thousands a
second at 65,536 groups, and ``isinstance`` against ``numbers.Integral`` costs an ABC look-up per field"""


def check_event(event: Mapping, missing_too: bool = True) -> list[str]:
    """What is wrong with ``event`` against its schema (empty when nothing); unknown event names pass.

    ``missing_too`` false: only the fields present are judged (a reader that defaults what is absent, and
    needs only that what it reads is of its kind)."""
    problems = [f"{name} must be {_type_name(kind)}" for name, kind, plain in _COMMON_CHECKS
                if type(event.get(name)) not in plain and not _is(event.get(name), kind)]  # fmt: skip
    name = event.get(EVENT)
    for field, kind, plain in _REQUIRED_CHECKS.get(name, ()):
        if field not in event:
            if missing_too:
                problems.append(f"{name}: missing {field}")
        elif type(event[field]) not in plain and not _is(event[field], kind):
            problems.append(f"{name}: {field} must be {_type_name(kind)}, got {type(event[field]).__name__}")
    for field, kind, plain in _OPTIONAL_CHECKS.get(name, ()):
        if field in event and type(event[field]) not in plain and not _is(event[field], kind):
            problems.append(f"{name}: {field} must be {_type_name(kind)}, got {type(event[field]).__name__}")
    return problems




def beyond_floats(value: object) -> bool:
    """An integer no float can hold (``10**400``: valid JSON, which Python reads exactly)."""
    if not isinstance(value, int):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def non_finite_numbers(value: object, where: str = "", found: list[str] | None = None,
                       refused: Callable[[object], bool] | None = None) -> list[str]:  # fmt: skip
    """Where in an event (``epochs[3].data_wait``) a number is NaN or infinite: empty for every event this package
    writes.  JSON has no NaN or Infinity and the log's writer refuses them (``allow_nan=False``), but the standard
    parser reads the tokens; one in a timing field switched bounds off (a comparison with NaN is false: issue 45),
    so a reader that judges a log refuses any event holding one, in any field, whatever rule would read it.
    ``refused``: what else to find instead (:func:`non_finite_problems` asks for the integers beyond the floats).
    A walk of the whole event: for the readers (verify, compare), not the writer's hot path."""
    found = [] if found is None else found
    if refused is None:
        def refused(number: object) -> bool:
            return isinstance(number, float) and not math.isfinite(number)
    if isinstance(value, dict):
        for key, item in value.items():
            non_finite_numbers(item, f"{where}.{key}" if where else str(key), found, refused)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            non_finite_numbers(item, f"{where}[{index}]", found, refused)
    elif refused(value):
        found.append(where or "the value")
    return found


def non_finite_problems(event: Mapping) -> list[str]:
    """:func:`non_finite_numbers` of an event, as problems in words (at most three named), and the same of its
    integers beyond the float range (rules version 2026.12-7): every rule computes with floats, so one such
    integer (a layout's time at ``-10**400``) raised ``OverflowError`` in whichever rule met it first; refused
    here, the event reaches no rule (issue 45's class: every numeric field finite and within its range)."""
    problems = []
    for found, why in ((non_finite_numbers(event), "not a finite number (JSON has no NaN or Infinity; the package "
                                                   "never writes one)"),
                       (non_finite_numbers(event, refused=beyond_floats),
                        "an integer beyond the float range (±1.8e308: valid JSON, but no rule can compute with it; "
                        "the package never writes one)")):  # fmt: skip
        if found:
            more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
            problems.append(f"{', '.join(found[:3])}{more}: {why}")
    return problems

def admit_only_schema_events(event: Mapping) -> bool:
    """A reader's ``admit`` (:func:`~aiperf_mpi.results.logmodel.read_model`) that refuses a log with any event
    off its schema, as ``ValueError`` naming what is wrong: a reviewer's tool (``analysis.compare``) reads logs
    it did not write, and a string time, a list for a configuration or a null op count must be one line
    there, not a traceback from deep in the arithmetic (issue 45).  Fields that are absent are the reader's to
    default (older logs lack some); a field present with the wrong kind is refused.  Verify has its own judge,
    which reports every such event instead of stopping at the first."""
    problems = check_event(event, missing_too=False) + non_finite_problems(event)
    if problems:
        raise ValueError(f"a {event.get(EVENT)!s:.40} event is off its schema: {'; '.join(problems[:3])}")
    return True

def markdown() -> str:
    """The schema as a Markdown table (``docs/events.md``)."""
    lines = [f"Event schema, version {SCHEMA_VERSION} (`aiperf_mpi/results/schema.py`). Every event has "
             "`event` (string) and `time` (number, Unix seconds).", "",
             "| event | required fields | optional fields |", "|---|---|---|"]  # fmt: skip
    for name, fields in REQUIRED.items():
        required = ", ".join(f"`{f}` ({_type_name(k)})" for f, k in fields.items())
        optional = ", ".join(f"`{f}` ({_type_name(k)})" for f, k in OPTIONAL.get(name, {}).items()) or "–"
        lines.append(f"| `{name}` | {required} | {optional} |")
    return "\n".join(lines) + "\n"
