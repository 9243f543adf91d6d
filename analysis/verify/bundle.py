"""The family ``bundle``: a bundle's own ``verify.*`` and ``system.json`` against what verify recomputes and
the log's segments (its rows: :data:`analysis.verify.registry.FAMILIES`; the manifest is read where the
bundle is unpacked, :func:`analysis.verify.unpack_bundle`)."""

from __future__ import annotations

from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel
from analysis.checks import MISMATCH, OK, Check, Verification, read_json, same, short

BUNDLE_RULE = "rule: the bundle's verdict is the one verify recomputes"
SYSTEM_RULE = "rule: system.json is the log's system description"
BUNDLE_ROWS = ("bundle manifest", "bundle verify.txt/json", "bundle system.json")
"""rows only a bundle has: the verdict written into the bundle was made before they existed"""
VERDICT_FILES = ("verify.txt", "verify.json")
SYSTEM_FILE = "system.json"


def system_segments(model: RunModel | None) -> list[dict]:
    """Each segment's system, layout, peaks and provenance, as the run's model holds them: what the bundle writes
    as ``system.json`` (:func:`analysis.bundle.system_description`) and verify compares it with, one code for
    both."""
    return [{"segment": s.logged_number, "provenance": s.logged_provenance, runlog.SYSTEM: s.system,
             runlog.LAYOUT: s.layout, runlog.PEAK: s.peaks} for s in (model.segment_records if model else [])]


# --------------------------------------------------------------------------- a bundle's own files


def bundle_checks(root: Path, recomputed: Verification, mine_segments: list[dict]) -> list[Check]:
    """verify.txt/verify.json against ``recomputed``, system.json against the log's segments (a bundle only:
    :func:`system_segments`)."""
    verdict = Check("bundle verify.txt/json")
    rows = {c.name: c.verdict for c in recomputed.checks if c.name not in BUNDLE_ROWS}
    verified = all(v == OK for v in rows.values())
    try:
        recorded = read_json(root / "verify.json")
        if not isinstance(recorded, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        verdict.problems.append(f"verify.json is not readable: {' '.join(str(exc).split())[:160]} ({BUNDLE_RULE})")
        recorded = None
    if recorded is not None:
        # "valid_by_log": the run's rules as its log meets them ("valid", before issue 45, said the same; it now
        # says re-evaluated and audited too, which a bundle's verify cannot redo: no weights in a bundle)
        for field, mine in (("verified", verified), ("valid_by_log", recomputed.valid),
                            ("broken_rules", recomputed.broken_rules)):  # fmt: skip
            if field == "valid_by_log" and field not in recorded:
                field = "valid"  # a verify.json from before the field
            if not same(recorded.get(field), mine):
                verdict.problems.append(f"verify.json: {field} {short(recorded.get(field))}, recomputed "
                                        f"{short(mine)} ({BUNDLE_RULE})")  # fmt: skip
        made_by = recorded.get("rules_version")
        if made_by != recomputed.rules_version:  # the rows are compared all the same
            made_by = "no version (an older verifier)" if made_by is None else short(made_by)
            verdict.notes.append(f"verify.json was made by verify's rules {made_by}, these are "
                                 f"{recomputed.rules_version}")  # fmt: skip
        listed = recorded.get("checks") or []
        if not isinstance(listed, list):
            verdict.problems.append(f"verify.json: checks {short(listed)} is not a list of rows ({BUNDLE_RULE})")
            listed = []
        named = [c for c in listed if isinstance(c, dict) and isinstance(c.get("name"), str)]
        if len(named) != len(listed):
            verdict.problems.append(f"verify.json: {len(listed) - len(named)} of its checks are not rows with a name "
                                    f"({BUNDLE_RULE})")  # fmt: skip
        theirs = {c["name"]: c.get("verdict") for c in named}
        for name, mine in rows.items():
            if name not in theirs:
                verdict.notes.append(f"verify.json has no row {name!r} (made by an older verifier)")
            elif theirs[name] != mine:
                verdict.problems.append(f"verify.json: row {name!r} says {short(theirs[name])}, recomputed {mine} "
                                        f"({BUNDLE_RULE})")  # fmt: skip
    try:
        text = (root / "verify.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        verdict.problems.append(f"verify.txt is not readable: {exc.__class__.__name__} ({BUNDLE_RULE})")
        text = None
    if text is not None:
        lines = text.splitlines()
        shown = next((line for line in reversed(lines) if line.startswith("verdict: ")), None)
        mine = _verdict_line(verified, recomputed)
        older = recorded is not None and recorded.get("rules_version") != recomputed.rules_version
        if shown != mine and not (older and shown is not None and _verdict_kind(shown) == _verdict_kind(mine)):
            verdict.problems.append(f"verify.txt: {short(shown)}, recomputed {short(mine)} ({BUNDLE_RULE})")
        elif shown != mine:  # another version's words for the same verdict (what is missing is said otherwise)
            verdict.notes.append(f"verify.txt's verdict is in the words of rules {short(recorded.get('rules_version'))}"
                                 f": {short(shown)}")  # fmt: skip
        width = max(len(name) for name in rows) if rows else 0
        for line in lines:
            for name, row in rows.items():
                if line.startswith(name + " ") and len(line) > width + 2 and line[:width].rstrip() == name:
                    said = MISMATCH if line[width + 2:].startswith(MISMATCH) else (
                        OK if line[width + 2:].startswith(OK + " ") else line[width + 2:width + 14].strip())
                    if said != row:
                        verdict.problems.append(f"verify.txt: row {name!r} says {said}, recomputed {row} "
                                                f"({BUNDLE_RULE})")  # fmt: skip
    verdict.summary = f"the verdict written into the bundle against this one ({len(rows)} rows)"
    described = Check("bundle system.json")
    try:
        recorded_system = read_json(root / SYSTEM_FILE)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        described.problems.append(f"system.json is not readable: {' '.join(str(exc).split())[:160]} "
                                  f"({SYSTEM_RULE})")  # fmt: skip
        recorded_system = None
    if recorded_system is not None:
        theirs_segments = recorded_system.get("segments") if isinstance(recorded_system, dict) else None
        if not isinstance(theirs_segments, list) or len(theirs_segments) != len(mine_segments):
            described.problems.append(f"system.json: {short(len(theirs_segments) if isinstance(theirs_segments, list) else None)} segments, the log {len(mine_segments)} ({SYSTEM_RULE})")  # noqa: E501
        else:
            for index, (theirs, mine) in enumerate(zip(theirs_segments, mine_segments, strict=True), start=1):
                keys = ("provenance", runlog.SYSTEM, runlog.LAYOUT, runlog.PEAK, "segment")
                bad = [k for k in keys if not isinstance(theirs, dict) or not same(theirs.get(k), mine.get(k))]
                if bad:
                    described.problems.append(f"system.json: segment {index}: {', '.join(bad)} differ from the "
                                              f"log's events ({SYSTEM_RULE})")  # fmt: skip
    described.summary = f"{len(mine_segments)} segment(s): system, layout, peaks and provenance as in the log"
    return [verdict, described]


def _verdict_kind(line: str) -> str:
    """A verdict line without its details: what it decides (``verdict: VERIFIED, consistent with a valid run, NOT
    YET VALID``), which an older verifier's words for what is missing do not change."""
    return line.split(": missing", 1)[0].split(" (", 1)[0]


def _verdict_line(verified: bool, recomputed: Verification) -> str:
    """The verdict line the bundle's verify.txt shows, for the run's rows (not the bundle's own)."""
    rows = [Check("x")] if verified else [c for c in recomputed.checks if c.name not in BUNDLE_ROWS]
    return Verification(recomputed.source, rows, recomputed.valid, recomputed.broken_rules,
                        reevaluated=recomputed.reevaluated, audit=recomputed.audit).verdict_line()  # fmt: skip
