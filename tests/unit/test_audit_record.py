""""Valid" only when checked (issue 45): the audit's record tied to the log by its sha256, and the verdict's words.

The record itself is written by ``python -m analysis.audit RUN_DIR --sample K --record`` (its real run, with a real
re-evaluation beside it, is ``tests/integration/test_audit.py``, marked long); here verify's reading of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import read_model
from analysis import verify
from analysis.audit import candidates, sample_tasks, task_strata
from analysis.audit_record import audit_standing
from analysis.checks import AUDIT_RECORD, EVENTS_SHA256, events_sha256
from tests.support.verify_runs import consistent_run, write_best


@pytest.fixture
def run(tmp_path) -> Path:
    run_dir = consistent_run(tmp_path / "run")  # ImageNet: valid by its log's rules once its best model is there
    write_best(run_dir)
    return run_dir


def _record(run_dir: Path, where: Path | None = None, **fields: object) -> Path:
    """An audit record as ``analysis.audit --record RECORD`` writes it: the draw of seed 7, sample 2 from this log,
    at the default tolerance; written to ``where`` (the reviewer's file), else into the run directory."""
    model = read_model(run_dir)
    weights = candidates(model)
    drawn = sample_tasks(weights, 2, 7, task_strata(model, sorted(weights)))
    record = {"verdict": "pass", "seed": 7, "sample": 2, "tolerance": 0.25, "machine": {"cpu": "AMD EPYC 7B13"},
              "tasks": [{"task": t} for t in drawn], EVENTS_SHA256: events_sha256(run_dir), **fields}  # fmt: skip
    path = where or run_dir / AUDIT_RECORD
    path.write_text(json.dumps(record))
    return path


def test_a_record_in_the_run_directory_is_the_submitters_claim_and_never_counts(run) -> None:
    """Issue 52: five hand-written audit.json files were counted.  Whatever the run directory holds, even a
    record that would pass, verify counts only the record its reviewer names."""
    _record(run)
    result = verify.verify(run)
    assert not result.audit[0] and "in the run directory is the submitter's claim, not counted" in result.audit[1]
    assert not any(c.name == "audit record" for c in result.trusted)
    assert verify.verify(run, run.parent / "mine.json").audit[0] is False  # named, but no such file
    counted = verify.verify(run, _record(run, run.parent / "mine.json"))
    assert counted.audit[0] and any(c.name == "audit record" for c in counted.trusted)


def test_a_record_whose_tasks_are_not_its_seeds_draw_does_not_count(run) -> None:
    """A record must at least name the tasks the audit would draw with its seed."""
    mine = _record(run, run.parent / "mine.json", tasks=[{"task": 99}, {"task": 98}])
    result = verify.verify(run, mine)
    assert not result.audit[0] and "are not the draw its seed and sample make" in result.audit[1]


def test_a_looser_tolerance_is_named_with_what_it_allows_and_does_not_count(run) -> None:
    """A genuine record made at --tolerance 9.99 was counted after every clock was divided by 4 (issue 52)."""
    standing = audit_standing(run, _record(run, run.parent / "mine.json", tolerance=9.99))
    assert not standing.counts and "tolerance 9.99" in standing.line and "×8.79" in standing.line, standing.line


def test_no_record_is_named_and_does_not_count(run) -> None:
    standing = audit_standing(run)
    assert not standing.counts and standing.line.startswith("no audit named (python -m analysis.audit")


def test_a_passing_record_of_this_log_counts(run) -> None:
    standing = audit_standing(run, _record(run, run.parent / "mine.json"))
    assert standing.counts and standing.line == ("audited by the reviewer's record: 2 task(s) timed on AMD EPYC 7B13 "
                                                 "(seed 7, tolerance 0.25), passed")  # fmt: skip


def test_the_timings_factor_is_the_audits_highest_logged_rate_over_its_ceiling(run) -> None:
    """Issue 52, item 3: the claimed rate over the highest the reviewer's evidence supports, not the headroom."""
    record = json.loads(_record(run, run.parent / "mine.json").read_text())

    def with_ratios(*ratios: list) -> Path:
        for task, found in zip(record["tasks"], ratios, strict=True):
            task["bounds"] = [{"ratio": r} for r in found]
        (run.parent / "mine.json").write_text(json.dumps(record))
        return run.parent / "mine.json"

    standing = audit_standing(run, with_ratios([0.91, 1.12], [1.05]))
    assert standing.counts and standing.ratio == pytest.approx(1.12)
    [timings] = [c for c in verify.verify(run, run.parent / "mine.json").trusted if c.name == "timings"]
    assert timings.factor == pytest.approx(1.12) and "reach ×1.12 of them" in timings.check
    [unaudited] = [c for c in verify.verify(run).trusted if c.name == "timings"]
    assert unaudited.factor is None and "no file shows the true rate" in unaudited.check
    # a forger's review: one unreadable ratio beside a 0.9 had been dropped and ×1 printed; now the record names no
    # bound; a ratio past the tolerance is no pass; an integer of 401 digits is no crash
    for odd in (float("nan"), float("inf"), -3.0, "2.0", True, 10**400):
        standing = audit_standing(run, with_ratios([0.9, odd], [0.9]))
        assert standing.ratio is None, odd
    past = audit_standing(run, with_ratios([0.9, 1.3], [0.9]))
    assert not past.counts and "×1.3 its ceiling, above the tolerance's ×1.25: not a pass" in past.line


@pytest.mark.parametrize(("fields", "said"), [
    ({EVENTS_SHA256: "0" * 64}, "judged another log"),
    ({"verdict": "fail"}, "did not pass"),
    ({"verdict": "not judged"}, "did not pass"),
])  # fmt: skip
def test_a_record_of_another_log_or_a_failed_audit_does_not_count(run, fields, said) -> None:
    standing = audit_standing(run, _record(run, run.parent / "mine.json", **fields))
    assert not standing.counts and said in standing.line


def test_a_log_changed_after_its_audit_is_no_longer_audited(run) -> None:
    mine = _record(run, run.parent / "mine.json")
    log = run / runlog.EVENTS_FILE
    log.write_bytes(log.read_bytes() + b"\n")  # one byte more: another log
    assert not audit_standing(run, mine).counts


def test_an_unreadable_or_huge_record_is_named(run) -> None:
    mine = run.parent / "mine.json"
    mine.write_text("[1, 2")
    assert "is not readable" in audit_standing(run, mine).line
    with open(mine, "wb") as handle:
        handle.truncate(1 << 40)  # sparse: refused by its size, never read
    assert "is not readable" in audit_standing(run, mine).line


def test_the_verdict_says_valid_only_when_reevaluated_and_audited(run) -> None:
    result = verify.verify(run)
    assert result.ok and result.valid
    assert result.verdict_line().startswith("verdict: VERIFIED, consistent with a valid run, NOT YET VALID: missing "
                                            "the best model re-evaluated")  # fmt: skip
    assert "no audit named" in result.verdict_line() and not result.to_dict()["valid"]
    result.reevaluated = True  # what --reevaluate sets when its row passes (tests/integration/test_audit.py)
    assert "NOT YET VALID: missing no audit named" in result.verdict_line()
    result = verify.verify(run, _record(run, run.parent / "mine.json"))
    assert "NOT YET VALID: missing the best model re-evaluated" in result.verdict_line()  # audited, not re-evaluated
    result.reevaluated = True
    assert result.verdict_line() == ("verdict: VERIFIED, a valid run (best model re-evaluated; audited by the "
                                     "reviewer's record: 2 task(s) timed on AMD EPYC 7B13 (seed 7, tolerance 0.25), "
                                     "passed)")  # fmt: skip
    said = result.to_dict()
    assert said["valid"] and said["valid_by_log"] and said["checked"]["missing"] == []


def test_an_unofficial_run_is_unofficial_whatever_was_checked(tmp_path) -> None:
    run_dir = consistent_run(tmp_path / "run", dataset="digits")  # digits: unofficial by the rules
    result = verify.verify(run_dir, _record(run_dir, tmp_path / "mine.json"))
    result.reevaluated = True
    assert result.verdict_line().startswith("verdict: VERIFIED, an unofficial run") and not result.to_dict()["valid"]


def test_the_records_default_tolerance_is_the_audits() -> None:
    from analysis.audit import TOLERANCE
    from analysis.audit_record import DEFAULT_TOLERANCE

    assert DEFAULT_TOLERANCE == TOLERANCE
