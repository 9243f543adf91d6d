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

from aiperf_mpi.results import runlog
from aiperf_mpi.results.stored_weights import file_sha256

AUDIT_RECORD = "audit.json"
"""the audit's record, in the run directory (``python -m analysis.audit RUN_DIR --sample K --record``)"""
EVENTS_SHA256 = "events_sha256"
"""the record's field: the sha256 of the ``events.jsonl`` the audit judged"""
MAX_RECORD_BYTES = 16 << 20
"""the most an audit record may hold (a few kB a sampled task): larger is refused unread"""
HOW = "python -m analysis.audit RUN_DIR --sample K --record, on the claimed kind of hardware"
"""how a site or a reviewer makes the record, for the lines that say it is missing"""


@dataclass(frozen=True)
class AuditStanding:
    """What the run directory's audit record is worth to the verdict."""

    counts: bool
    """a passing audit of this very log"""
    line: str
    """what it says (counts) or why it does not count, in words"""


def events_sha256(run_dir: Path) -> str:
    """The sha256 of a run directory's event log: what ties an audit record to the log it judged."""
    return file_sha256(runlog.log_path(Path(run_dir)))


def audit_standing(run_dir: Path) -> AuditStanding:
    """Whether ``run_dir/audit.json`` is a passing audit of this log (see the module's doc)."""
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
    machine = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    where = ", ".join(str(a) for a in machine.get("accelerators") or []) or str(machine.get("cpu", "?"))
    return AuditStanding(True, f"audited: {len(tasks)} task(s) timed on {where[:80]} (seed {record.get('seed')}, "
                               f"tolerance {record.get('tolerance')}), passed")  # fmt: skip
