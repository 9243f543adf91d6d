"""The audit's record, and whether it stands for this run's log: counted only when the reviewer names it.

A verdict may say "a valid run" only after the checks a reviewer can do have
been done (issue 45; docs/verify.md, "The reviewer's procedure"): the claimed
best model re-evaluated on the reviewer's data (``analysis.verify
--reevaluate``) and an audit on the claimed kind of hardware
(``analysis.audit RUN_DIR --sample K --record``, run by a reviewer who has that hardware).  The audit writes
what it found, with the sha256 of the event log it judged, the seed of its draw and its tolerance.

Issue 52: a record in the run directory is a file the submitter can write (five hand-written ones were counted,
and a genuine one made at ``--tolerance 9.99`` after every clock was divided by 4), and a draw from seed 0 is one
the submitter can predict and steer (tasks renumbered so that it lands on fabricated ones).  So verify counts an
audit only from the record its reviewer names (``python -m analysis.verify RUN_DIR --audit RECORD``); a record
found in the run directory is the submitter's claim, listed as such and never counted.  The audit draws from a
fresh seed by default (the record says which).  A record counts when it judged this log (its sha256), passed
(every sampled task judged on its claimed kind of hardware and within its ceilings), names the draw its seed and
sample make from this log, and was made at the default tolerance; a looser one is named with the factor it
allows.  No TensorFlow here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.results.logmodel import RunModel, read_model
from analysis.checks import AUDIT_RECORD, EVENTS_SHA256, MAX_RECORD_BYTES, events_sha256

HOW = ("python -m analysis.audit RUN_DIR --sample K --record RECORD on the claimed kind of hardware, then "
       "python -m analysis.verify RUN_DIR --audit RECORD")
"""how a reviewer makes the record and has it counted, for the lines that say it is missing"""
DEFAULT_TOLERANCE = 0.25
"""the audit's default tolerance (``analysis.audit.TOLERANCE``, held equal by a test): the only one that counts"""


@dataclass(frozen=True)
class AuditStanding:
    """What the run directory's audit record is worth to the verdict."""

    counts: bool
    """a passing audit of this very log"""
    line: str
    """what it says (counts) or why it does not count, in words"""
    ratio: float | None = None
    """(counts) the highest logged rate over the ceiling the reviewer measured, over the sampled tasks' epochs:
    the claimed rate over the highest the reviewer's evidence supports (the timings' factor: ``analysis/trusted``);
    None when the record names no finite one"""


def highest_ratio(tasks: list) -> float | None:
    """The highest ``ratio`` of the record's tasks' bounds; None when there is none, or when any is no finite,
    non-negative number (a forger's review: one ``Infinity`` beside a 0.9 had been dropped, and ×1 printed)."""
    ratios = [bound.get("ratio") for task in tasks if isinstance(task, dict)
              for bound in (task.get("bounds") if isinstance(task.get("bounds"), list) else [])
              if isinstance(bound, dict) and "ratio" in bound]  # fmt: skip
    found = []
    for ratio in ratios:
        if not isinstance(ratio, int | float) or isinstance(ratio, bool):
            return None
        try:
            value = float(ratio)
        except OverflowError:  # an integer of hundreds of digits
            return None
        if not math.isfinite(value) or value < 0:
            return None
        found.append(value)
    return max(found) if found else None


def audit_standing(run_dir: Path, record: Path | None = None, draw_too: bool = True) -> AuditStanding:
    """Whether ``record`` (the reviewer's, named on verify's command line) is a passing audit of this log at the
    default tolerance; without one, what the run directory holds is named, never counted (see the module's doc).

    ``draw_too``: the record's tasks must also be the draw its ``seed`` and ``sample`` make from this log (the
    log is read once more, for the audit's own model of it; :func:`analysis.audit.sample_tasks`).
    """
    if record is None:
        own = Path(run_dir) / AUDIT_RECORD
        if own.is_file() and not own.is_symlink():
            return AuditStanding(False, f"{AUDIT_RECORD} in the run directory is the submitter's claim, not counted "
                                        f"(a reviewer's own audit counts: {HOW})")  # fmt: skip
        return AuditStanding(False, f"no audit named ({HOW})")
    path = Path(record)
    if not path.is_file() or path.is_symlink():
        return AuditStanding(False, f"the audit record {str(path)[:120]} is not a regular file ({HOW})")
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise ValueError(f"more than {MAX_RECORD_BYTES:,} bytes")
        found = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(found, dict):
            raise ValueError("not a JSON object")
        logged = events_sha256(run_dir)
    except (OSError, ValueError, RecursionError) as exc:
        return AuditStanding(False, f"the audit record is not readable ({' '.join(str(exc).split())[:120]})")
    if found.get(EVENTS_SHA256) != logged:
        return AuditStanding(False, f"the audit record judged another log (its {EVENTS_SHA256} is not this log's): "
                                    f"audit again ({HOW})")  # fmt: skip
    verdict = found.get("verdict")
    if verdict != "pass":
        return AuditStanding(False, f"the audit record's audit did not pass (verdict {str(verdict)[:20]!r})")
    tolerance = found.get("tolerance")
    if tolerance != DEFAULT_TOLERANCE:
        allows = (f"a logged rate up to ×{(1 + tolerance) / (1 + DEFAULT_TOLERANCE):.3g} the default's"
                  if isinstance(tolerance, int | float) and not isinstance(tolerance, bool) and tolerance >= 0
                  else "no bound")  # fmt: skip
        return AuditStanding(False, f"the audit record was made at tolerance {str(tolerance)[:20]} (the default "
                                    f"{DEFAULT_TOLERANCE:g}, the only one counted): it allows {allows}")
    tasks = found.get("tasks") if isinstance(found.get("tasks"), list) else []
    if draw_too:
        try:
            drawn = _the_draw(read_model(Path(run_dir)), found)
        except (OSError, ValueError, TypeError, KeyError, ArithmeticError, RecursionError) as exc:
            return AuditStanding(False, f"the audit's draw cannot be made from this log ({type(exc).__name__}): "
                                        "not counted")  # fmt: skip
        listed = sorted(t.get("task") for t in tasks if isinstance(t, dict) and isinstance(t.get("task"), int))
        if drawn is None or listed != drawn:
            return AuditStanding(False, f"the audit record's tasks {listed[:8]} are not the draw its seed and sample "
                                        f"make from this log ({(drawn or [])[:8]}): not an audit of it")  # fmt: skip
    ratio = highest_ratio(tasks)
    if ratio is not None and ratio > 1 + DEFAULT_TOLERANCE:
        return AuditStanding(False, f"the audit record says pass, yet a logged rate lies ×{ratio:.3g} its ceiling, "
                                    f"above the tolerance's ×{1 + DEFAULT_TOLERANCE:g}: not a pass")  # fmt: skip
    machine = found.get("machine") if isinstance(found.get("machine"), dict) else {}
    where = ", ".join(str(a) for a in machine.get("accelerators") or []) or str(machine.get("cpu", "?"))
    return AuditStanding(True, f"audited by the reviewer's record: {len(tasks)} task(s) timed on {where[:80]} "
                               f"(seed {found.get('seed')}, tolerance {tolerance}), passed", ratio)  # fmt: skip


def _the_draw(model: RunModel, record: dict) -> list[int] | None:
    """The tasks ``analysis.audit`` draws from this log with the record's seed and sample (None: not numbers)."""
    from analysis.audit import candidates, sample_tasks, task_strata  # the audit imports this module

    seed, sample = record.get("seed"), record.get("sample")
    if not isinstance(seed, int) or not isinstance(sample, int) or isinstance(seed, bool) or sample < 1:
        return None
    weights = candidates(model)
    return sample_tasks(weights, sample, seed, task_strata(model, sorted(weights)))
