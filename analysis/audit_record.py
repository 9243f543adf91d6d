"""The audit's record in the run directory (``audit.json``), and whether it stands for this run's log.

A verdict may say "a valid run" only after the checks a reviewer can do have
been done (issue 45; docs/verify.md, "The reviewer's procedure"): the claimed
best model re-evaluated on the reviewer's data (``analysis.verify
--reevaluate``) and an audit on the claimed kind of hardware
(``analysis.audit RUN_DIR --sample K --record``, run by the site where it ran
the benchmark, and again by a reviewer who has that hardware).  The audit
writes what it found to ``RUN_DIR/audit.json`` with the sha256 of the event
log it judged; verify counts the record only when that is this log's sha256
and its verdict is ``pass`` (every sampled task judged on its claimed kind of
hardware and within its ceilings).  A record of another log, or of an audit
that failed or could not judge, is named, not counted.  No TensorFlow here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.results.logmodel import RunModel, read_model
from analysis.checks import AUDIT_RECORD, EVENTS_SHA256, MAX_RECORD_BYTES, events_sha256

HOW = "python -m analysis.audit RUN_DIR --sample K --record, on the claimed kind of hardware"
"""how a site or a reviewer makes the record, for the lines that say it is missing"""


@dataclass(frozen=True)
class AuditStanding:
    """What the run directory's audit record is worth to the verdict."""

    counts: bool
    """a passing audit of this very log"""
    line: str
    """what it says (counts) or why it does not count, in words"""


def audit_standing(run_dir: Path, draw_too: bool = True) -> AuditStanding:
    """Whether ``run_dir/audit.json`` is a passing audit of this log (see the module's doc).

    ``draw_too``: the record's tasks must also be the draw its ``seed`` and ``sample`` make from this log (the
    log is read once more, for the audit's own model of it; :func:`analysis.audit.sample_tasks`).  A record is the
    site's word, which only a rerun checks (the verdict's ``trusted: audit record`` line says so), but it cannot
    name tasks the audit would not have drawn.
    """
    path = Path(run_dir) / AUDIT_RECORD
    if not path.is_file() or path.is_symlink():
        return AuditStanding(False, f"no audit record ({HOW})")
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise ValueError(f"more than {MAX_RECORD_BYTES:,} bytes")
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        logged = events_sha256(run_dir)
    except (OSError, ValueError, RecursionError) as exc:
        return AuditStanding(False, f"{AUDIT_RECORD} is not readable ({' '.join(str(exc).split())[:120]})")
    if record.get(EVENTS_SHA256) != logged:
        return AuditStanding(False, f"{AUDIT_RECORD} judged another log (its {EVENTS_SHA256} is not this log's): "
                                    f"audit again ({HOW})")  # fmt: skip
    verdict = record.get("verdict")
    if verdict != "pass":
        return AuditStanding(False, f"{AUDIT_RECORD}'s audit did not pass (verdict {str(verdict)[:20]!r})")
    tasks = record.get("tasks") if isinstance(record.get("tasks"), list) else []
    if draw_too:
        drawn = _the_draw(read_model(Path(run_dir)), record)
        listed = sorted(t.get("task") for t in tasks if isinstance(t, dict) and isinstance(t.get("task"), int))
        if drawn is None or listed != drawn:
            return AuditStanding(False, f"{AUDIT_RECORD}'s tasks {listed[:8]} are not the draw its seed and sample "
                                        f"make from this log ({(drawn or [])[:8]}): not an audit of it")  # fmt: skip
    machine = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    where = ", ".join(str(a) for a in machine.get("accelerators") or []) or str(machine.get("cpu", "?"))
    return AuditStanding(True, f"audited: {len(tasks)} task(s) timed on {where[:80]} (seed {record.get('seed')}, "
                               f"tolerance {record.get('tolerance')}), passed")  # fmt: skip


def _the_draw(model: RunModel, record: dict) -> list[int] | None:
    """The tasks ``analysis.audit`` draws from this log with the record's seed and sample (None: not numbers)."""
    from analysis.audit import candidates, sample_tasks, task_strata  # the audit imports this module

    seed, sample = record.get("seed"), record.get("sample")
    if not isinstance(seed, int) or not isinstance(sample, int) or isinstance(seed, bool) or sample < 1:
        return None
    weights = candidates(model)
    return sample_tasks(weights, sample, seed, task_strata(model, sorted(weights)))
