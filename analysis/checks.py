"""The verdict's types, shared by every rule family of ``analysis.verify``: a row, the verdict, the comparisons.

A module of their own so that the rule families, the registry that lists
them (``analysis.verify.registry``) and the command (``analysis.verify``)
import them from below, and never each other in a circle.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel
from aiperf_mpi.results.stored_weights import file_sha256

OK, MISMATCH, NOT_RECORDED = "ok", "MISMATCH", "not recorded"
REHEARSAL_RULE = "training"
"""the validity rule only a rehearsal breaks (``aiperf_mpi/results/rules.py``: trained, not a rehearsal)"""
REL_TOLERANCE = 1e-12
"""relative difference allowed between a recomputed float and the recorded one (integers: none)"""
MAX_LINES = 20
"""problem lines printed per check (the rest are counted)"""
MAX_KEPT = 1000
"""problem lines kept per check (in ``--json``; the rest are counted)"""


class Lines(list):
    """Problem lines, at most :data:`MAX_KEPT` kept: a log of 500,000 bad epochs must not fill the memory."""

    def __init__(self, lines=()) -> None:
        super().__init__()
        self.dropped = 0
        self.extend(lines)

    def append(self, line: str) -> None:
        if len(self) < MAX_KEPT:
            super().append(line)
        else:
            self.dropped += 1

    def extend(self, lines) -> None:
        for line in lines:
            self.append(line)

    def __iadd__(self, lines):
        self.extend(lines)
        return self


class BadInput(Exception):
    """Not something that can be verified (exit status 2)."""


MAX_JSON_BYTES = 16 << 20
"""the most a run's small JSON files (score.json, best/metadata.json, verify.json, system.json) may hold: each is a
few kB; json reads a file whole, at about twice its size in memory, so a 4 GiB one padded with spaces would cost
9 GB to read"""


def read_json(path: Path) -> object:
    """A small JSON file's value; ValueError past :data:`MAX_JSON_BYTES` (read no further), OSError as ``open``."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"larger than {MAX_JSON_BYTES:,} bytes: not read")
    return json.loads(data.decode("utf-8"))


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (a symlink followed), False when there is none there — and
    :class:`BadInput` for a FIFO, a device or a socket, which is refused without being opened: reading one would
    block for ever (a FIFO no one writes) or never end (``/dev/zero``).  ``Path.is_file`` says False for those
    alike, and a run whose ``score.json`` is a FIFO is not a run that lacks one."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # none there, a symlink loop, a NUL byte: what is_file says False for
        return False
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISDIR(mode):
        return False
    raise BadInput(f"{path}: not a regular file (a FIFO, a device or a socket is never opened)")


@dataclass
class Check:
    """One row of the verdict table: what was checked, and every problem found."""

    name: str
    summary: str = ""
    problems: list[str] = field(default_factory=lambda: Lines())
    missing: list[str] = field(default_factory=lambda: Lines())
    """what the log does not record (an older log)"""
    notes: list[str] = field(default_factory=list)
    """facts a reviewer may want that do not change the verdict"""

    @property
    def verdict(self) -> str:
        if self.problems:
            return MISMATCH
        return NOT_RECORDED if self.missing else OK


@dataclass
class Verification:
    """Every check of one run, in the table's order."""

    source: str
    checks: list[Check]
    valid: bool | None = None
    """the run's validity as recomputed (None: no score could be computed)"""
    broken_rules: list[str] = field(default_factory=list)
    rules_version: str = ""
    """the version of verify's rules that judged it (``analysis.verify.registry.VERIFY_RULES_VERSION``)"""
    reevaluated: bool = False
    """the claimed best model was re-evaluated in this verify (``--reevaluate``) and its row passed"""
    audit: tuple[bool, str] = (False, "")
    """(a passing audit record of this log, what it says or why not: :mod:`analysis.audit_record`)"""
    trust: Callable[[bool], list] | None = None
    """the claims the verdict rests on, given whether the best model was re-evaluated (:mod:`analysis.trusted`)"""

    @property
    def trusted(self) -> list:
        """The :class:`~analysis.trusted.TrustedClaim` list under the verdict (empty when none was computed)."""
        return [] if self.trust is None else self.trust(self.reevaluated)

    @property
    def ok(self) -> bool:
        return all(check.verdict == OK for check in self.checks)

    @property
    def unchecked(self) -> list[str]:
        """The reviewer's checks not done, each in words: a run is *valid* only once both are (issue 45)."""
        missing = []
        if not self.reevaluated:
            missing.append("the best model re-evaluated on the reviewer's data (python -m analysis.verify RUN_DIR "
                           "--reevaluate)")  # fmt: skip
        if not self.audit[0]:
            missing.append(self.audit[1] or "no audit record")
        return missing

    @property
    def valid_and_checked(self) -> bool:
        """Valid by the log's rules, and re-evaluated and audited: the only run the verdict calls valid."""
        return bool(self.valid) and not self.unchecked

    def to_dict(self) -> dict:
        return {"source": self.source, "rules_version": self.rules_version, "verified": self.ok,
                "valid": self.ok and self.valid_and_checked, "valid_by_log": self.valid,
                "checked": {"reevaluated": self.reevaluated, "audit": self.audit[1] if self.audit[0] else None,
                            "missing": self.unchecked},
                "verdict": self.verdict_line().removeprefix("verdict: "),
                "trusted": [claim.to_dict() for claim in self.trusted], "trusted_together": together(self.trusted),
                "trusted_unbounded": unbounded(self.trusted),
                "broken_rules": self.broken_rules,
                "checks": [{**asdict(c), "verdict": c.verdict, "problems_not_kept": c.problems.dropped}
                           for c in self.checks]}  # fmt: skip

    def text(self) -> str:
        """The verdict table, then every problem line, then the verdict."""
        width = max(len(c.name) for c in self.checks)
        lines = [f"analysis.verify: {self.source}", "",
                 f"{'check':<{width}}  {'verdict':<12}  what", f"{'-' * width}  {'-' * 12}  {'-' * 40}"]  # fmt: skip
        lines += [f"{c.name:<{width}}  {c.verdict:<12}  {c.summary}" for c in self.checks]
        details = []
        for check in self.checks:
            for kind, items in ((MISMATCH, check.problems), (NOT_RECORDED, check.missing), ("note", check.notes)):
                details += [f"{kind:<12}  {check.name}: {item}" for item in items[:MAX_LINES]]
                more = len(items) - MAX_LINES + getattr(items, "dropped", 0)
                if more > 0:
                    details.append(f"{kind:<12}  {check.name}: … and {more} more")
        if details:
            lines += ["", *details]
        trusted = self.trusted
        lines += ["", self.verdict_line(), *(claim.line() for claim in trusted)]
        together = together_line(trusted)
        if together:
            lines.append(together)
        return "\n".join(lines) + "\n"

    def verdict_line(self) -> str:
        if not self.ok:
            bad = sum(c.verdict == MISMATCH for c in self.checks)
            missing = sum(c.verdict == NOT_RECORDED for c in self.checks)
            return f"verdict: NOT VERIFIED ({bad} check(s) with mismatches, {missing} not recorded)"
        if self.valid and not self.unchecked:
            return f"verdict: VERIFIED, a valid run (best model re-evaluated; {self.audit[1]})"
        if self.valid:
            return (f"verdict: VERIFIED, consistent with a valid run, NOT YET VALID: missing "
                    f"{'; '.join(self.unchecked)} (docs/verify.md, \"The reviewer's procedure\")")  # fmt: skip
        rehearsal = ", a REHEARSAL: a stand-in's operations and accuracies, never a result" \
            if REHEARSAL_RULE in self.broken_rules else ""  # fmt: skip
        return (f"verdict: VERIFIED, an unofficial run{rehearsal} (rules not met: "
                f"{', '.join(self.broken_rules) or '-'})")  # fmt: skip


def together(claims: list) -> float | None:
    """The product of the factors the claims name (None: none names one)."""
    factors = [claim.factor for claim in claims if claim.factor is not None]
    return math.prod(factors) if factors else None


def together_line(claims: list) -> str:
    """One line with the product of every factor the claims name (issue 52: claims that stack multiply, and each
    line states only its own); '' when fewer than two have one."""
    factors = [claim.factor for claim in claims if claim.factor is not None]
    names = unbounded(claims)
    if len(factors) < 2 and not names:
        return ""
    if not factors:
        return f"trusted: together, no bound verify can hold (the claims with no bound: {', '.join(names)})"
    product = math.prod(factors)
    shown = f"{product:.3g}" if product < 1000 else f"{product:,.0f}"
    line = (f"trusted: together, up to ×{shown} (the product of the {len(factors)} factors above: false claims that "
            "stack multiply what they buy)")
    if names:
        line += f", times what the claims with no bound bought ({', '.join(names)})"
    return line


def unbounded(claims: list) -> list[str]:
    """The claims that raise a score with no bound verify can hold (:data:`BUYING`), each once, in order
    (``verify.json``'s ``trusted_unbounded``: beside ``trusted_together``, which their lies multiply)."""
    return list(dict.fromkeys(claim.name for claim in claims if claim.factor is None and claim.name in BUYING))


BUYING = ("timings", "the data")
"""the claims whose lie raises a score with no bound verify can hold (an audit record's buys what the timings do,
so it is not named twice)"""


def same(recorded: object, recomputed: object) -> bool:
    """Equal as a verifier means it: integers and strings exactly, floats to :data:`REL_TOLERANCE`, deeply."""
    if isinstance(recorded, bool) or isinstance(recomputed, bool):
        return recorded is recomputed
    if isinstance(recorded, int) and isinstance(recomputed, int):
        return recorded == recomputed
    if isinstance(recorded, int | float) and isinstance(recomputed, int | float):
        if isinstance(recorded, int) != isinstance(recomputed, int) and float(recorded) != float(recomputed):
            return False  # an integer field written as a float (or the reverse) must still be the same number
        return math.isclose(recorded, recomputed, rel_tol=REL_TOLERANCE, abs_tol=0.0)
    if isinstance(recorded, Mapping) and isinstance(recomputed, Mapping):
        return recorded.keys() == recomputed.keys() and all(same(recorded[k], recomputed[k]) for k in recorded)
    if isinstance(recorded, list | tuple) and isinstance(recomputed, list | tuple):
        return len(recorded) == len(recomputed) and all(same(a, b) for a, b in zip(recorded, recomputed, strict=True))
    return recorded == recomputed


def differences(recorded: Mapping, recomputed: Mapping, fields: tuple[str, ...]) -> list[str]:
    """'field: recorded X, recomputed Y' for each of ``fields`` that differs (a missing field differs)."""
    out = []
    for name in fields:
        if name not in recorded:
            out.append(f"{name}: not in the record (recomputed {short(recomputed.get(name))})")
        elif not same(recorded[name], recomputed.get(name)):
            out.append(f"{name}: recorded {short(recorded[name])}, recomputed {short(recomputed.get(name))}")
    return out


def short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "…"


def is_hex(text: object, length: int) -> bool:
    return isinstance(text, str) and len(text) == length and all(c in "0123456789abcdef" for c in text)


@dataclass
class Run:
    """What the rule families of one verification share: the run directory, whether its log ends in a cut line,
    the score recomputed from the whole log (the command reads it), the run's model as the walk has read it
    (:mod:`aiperf_mpi.results.logmodel`; None before its first event) and the graph files the log names."""

    run_dir: Path
    truncated: bool = False
    model: RunModel | None = None
    graph_files: frozenset[str] = frozenset()
    """every graph file a first proposal names (the side files row does not name them), once the walk has ended"""
    score: Any = None
    """the score recomputed from the whole log (:class:`aiperf_mpi.results.score.Score`; None: it cannot be, or
    the walk has not ended), the run unit's (:mod:`analysis.verify.units`)"""


# ----------------------------------------------------------------------- the audit's record (analysis/audit_record.py)

AUDIT_RECORD = "audit.json"
"""the audit's record, in the run directory (``python -m analysis.audit RUN_DIR --sample K --record``)"""
EVENTS_SHA256 = "events_sha256"
"""the record's field: the sha256 of the ``events.jsonl`` the audit judged"""
MAX_RECORD_BYTES = 16 << 20
"""the most an audit record may hold (a few kB a sampled task): larger is refused unread"""


def events_sha256(run_dir: Path) -> str:
    """The sha256 of a run directory's event log: what ties an audit record to the log it judged."""
    return file_sha256(runlog.log_path(Path(run_dir)))
