"""verify's rules as a versioned registry (``analysis/verify/registry.py``): what each family declares is what it
reads and fills, the verdict records the version, and a new rule is one entry and the method that checks it."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from analysis import bundle, checks, verify
from analysis.verify.registry import (
    FAMILIES,
    VERIFY_RULES_VERSION,
    By,
    Family,
    family,
    family_of,
    markdown,
)  # fmt: skip
from analysis.verify.units import UNITS, Findings, RowFindings, TaskUnit, count, most, problem
from tests.support.verify_runs import find, rewrite_log


def _unpacked_bundle(run_dir: Path, tmp_path: Path) -> Path:
    archive = bundle.make_bundle(run_dir, tmp_path / "bundle.tar.gz").path
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    return tmp_path / "unpacked" / run_dir.name


def test_every_row_of_a_verdict_is_a_rule_of_the_registry_in_its_order(pristine, tmp_path) -> None:
    result = verify.verify_dir(_unpacked_bundle(pristine, tmp_path), before=[checks.Check("bundle manifest")],
                               bundle=True)  # fmt: skip
    names = [check.name for check in result.checks]
    places = {entry.name: place for place, entry in enumerate(FAMILIES)}
    assert [places[family_of(name).name] for name in names] == sorted(places[family_of(n).name] for n in names)
    registered = {row.name for entry in FAMILIES for row in entry.rows} - {"rule *name*", "re-evaluation"}
    assert registered == {name for name in names if not name.startswith("rule ")}
    assert family_of("rule dataset") is family("score") and family_of("mllog.log") is family("mllog")
    with pytest.raises(KeyError):
        family_of("no such row")


def test_every_rule_is_a_function_of_a_unit_and_no_walk_framework_is_left() -> None:
    """Issue 51: every entry of the registry is a (row, function) pair, the function a plain one of a unit; there are
    no event-named methods, no ``finish``, no walk order and no ``run.judges`` in analysis/verify."""
    import inspect

    for entry in FAMILIES:
        assert [row.name for row in entry.rows], entry.name
        for rule in entry.rules:
            assert isinstance(rule, By) and inspect.isfunction(rule.rule), rule
    room = Path(__file__).resolve().parents[2] / "analysis" / "verify"
    framework = re.compile(r"def finish|run\.judges|WALK_ORDER|def each\(|def unreadable\(")
    found = [f"{path.name}:{number}" for path in sorted(room.glob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if framework.search(line)]  # fmt: skip
    assert not found, f"the event walk's framework is back: {found}"


def test_the_verdict_records_the_version_of_the_rules_that_judged_it(pristine, tmp_path) -> None:
    assert re.fullmatch(r"\d{4}\.\d{2}-\d+", VERIFY_RULES_VERSION)
    assert verify.main([str(pristine), "--json", str(tmp_path / "checks.json")]) == 0
    assert json.loads((tmp_path / "checks.json").read_text())["rules_version"] == VERIFY_RULES_VERSION
    root = _unpacked_bundle(pristine, tmp_path)
    recorded = json.loads((root / "verify.json").read_text())
    assert recorded["rules_version"] == VERIFY_RULES_VERSION
    row = next(c for c in verify.verify_dir(root, bundle=True).checks if c.name == "bundle verify.txt/json")
    assert row.verdict == checks.OK and not any("rules" in note for note in row.notes)
    recorded["rules_version"] = "2026.01-1"  # made by other rules: said, and the rows compared all the same
    (root / "verify.json").write_text(json.dumps(recorded))
    row = next(c for c in verify.verify_dir(root, bundle=True).checks if c.name == "bundle verify.txt/json")
    assert row.verdict == checks.OK
    assert f"verify.json was made by verify's rules \"2026.01-1\", these are {VERIFY_RULES_VERSION}" in row.notes


def _hour_long_epochs(task: TaskUnit) -> Findings:
    """every epoch's end − start ≤ 3,600 s"""
    for epoch in task.epochs:
        event = epoch.event
        if event["end"] - event["start"] > 3600:
            yield problem(epoch.number, f"event {epoch.number}: epoch {event['epoch']} of task {event['task']} ran "
                                        f"{event['end'] - event['start']:.0f} s")  # fmt: skip


def test_a_rule_is_one_function_of_a_unit_and_one_registry_line(run) -> None:
    """Issue 51: a rule is ``def rule(unit) -> findings``, its row's text its docstring, one (row, function) line
    in the registry; it keeps no state (what needs the log's order is on its unit)."""
    families = (*FAMILIES, Family("hour", None, rules=(By("epochs under an hour", _hour_long_epochs),)))
    assert "| epochs under an hour | every epoch's end − start ≤ 3,600 s |" in markdown(families)
    hour = lambda result: next(c for c in result.checks if c.name == "epochs under an hour")  # noqa: E731
    assert hour(verify.verify_dir(run, families=families)).verdict == checks.OK

    def longer(events: list[dict]) -> None:
        find(events, runlog.EPOCH, task=0, epoch=1)["start"] -= 4000

    rewrite_log(run, longer)
    row = hour(verify.verify_dir(run, families=families))
    assert row.verdict == checks.MISMATCH and row.problems[0].endswith("epoch 1 of task 0 ran 4010 s"), row.problems


def test_every_function_rule_reads_a_unit_and_its_row_says_what_it_holds() -> None:
    """Each (row, function) line's function names its unit by its first parameter; the first function of a row
    says what must hold (the docs' table), a later one which row it adds to."""
    seen: set[str] = set()
    functions = [rule for entry in FAMILIES for rule in entry.rules if isinstance(rule, By)]
    assert len(functions) >= 10
    for rule in functions:
        assert rule.unit in UNITS, rule
        if rule.row in seen:
            assert rule.holds.startswith(f"({rule.row.split(' *')[0]}"), rule
        else:
            assert rule.holds and not rule.holds.startswith("("), rule
            seen.add(rule.row)
    with pytest.raises(TypeError, match="names no unit"):
        _ = By("x", lambda event: ()).unit


def test_a_row_s_run_function_reads_its_counts_and_the_largest_of_a_value() -> None:
    """A rule's running figures are findings, not state: ``count`` adds one, ``most`` keeps the largest (the
    physics row's highest rate ratio), none of them a line of the row."""
    row = RowFindings("physics")
    for finding in (count("rates"), most("ratio", 1.5), count("rates"), most("ratio", 0.25)):
        row.add(finding)
    assert row.counts == {"rates": 2, "ratio": 1.5}
    assert row.check().problems == [] and row.check().verdict == checks.OK


RULE_MODULES = (*sorted(f"analysis/verify/{path.name}" for path in (Path(__file__).resolve().parents[2] / "analysis"
                                                                     / "verify").glob("*.py")),
                "analysis/checks.py", "analysis/reevaluation.py", "analysis/audit_record.py", "analysis/trusted.py",
                "aiperf_mpi/results/schema.py", "aiperf_mpi/results/mllog_format.py",
                "aiperf_mpi/results/resumable.py")  # fmt: skip
"""the modules whose code decides a verdict (docstrings and comments aside): every module of analysis/verify/ (one
added is fingerprinted too) and the shared ones it calls"""
RULES_FINGERPRINTS = {
    ("2026.12-5", "3.11"): "ca77714e",  # a move into analysis/verify/ (issue 44): verdicts compared equal
    ("2026.12-6", "3.11"): "8f3aebf1",  # the fields row (issue 45); then moves (issue 44): verdicts compared equal
    ("2026.12-7", "3.11"): "67f4adb8",  # the log row refuses huge integers (issue 45); then the times row's TimesRule
    # pulled out, the evidence run facts moved into the view, its four rules listed, the settle hook dropped (issue
    # 44): the corpus compared 385 of 385 identical
    ("2026.12-8", "3.11"): "e492f232",  # the job script's close, reason "launch ended" (issue 43)
    ("2026.12-9", "3.11"): "3cb862ec",  # rank0_stalls; a resume may change the two new options (issue 50)
    ("2026.12-10", "3.11"): "d576003b",  # energy (53); NR_CPUS, --audit only (52)
    ("2026.12-11", "3.11"): "aad47117",  # mllog.log lines, side files, best accuracy, host ranks, timings, kernels (52)
    ("2026.12-12", "3.11"): "913feff9",  # mllog.log's power lines (issue 53): the corpus, 374 entries, no verdict or
    # row changed (10 bundles gained the note on the version)
    ("2026.12-13", "3.11"): "4be70115",  # rules as functions of units (issue 51): the corpus, 386 entries, identical;
    # and a resume may change --hang-margin (RESUME_MAY_CHANGE, aiperf_mpi/results/resumable.py, now fingerprinted)
}
"""(VERIFY_RULES_VERSION, Python minor) → the first 8 hex digits of :func:`_rules_fingerprint`: a change of the rules'
code records its new fingerprint here together with a new version (issue 44)"""


def _rules_fingerprint() -> str:
    """The sha256 of the rule modules' syntax trees without their docstrings: their code, not their prose."""
    import ast
    import hashlib
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    for name in RULE_MODULES:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):  # fmt: skip
                body[0] = ast.Pass()
        digest.update(name.encode() + ast.dump(tree, annotate_fields=False).encode())
    return digest.hexdigest()[:8]


def test_a_rule_changed_without_a_new_rules_version_is_caught() -> None:
    """Issue 44: VERIFY_RULES_VERSION changes when any rule changes.  The rules' code (not their docstrings) is
    fingerprinted; a fingerprint this version has not recorded means a rule changed under an old version."""
    import sys

    key = (VERIFY_RULES_VERSION, f"{sys.version_info.major}.{sys.version_info.minor}")
    if not any(minor == key[1] for _, minor in RULES_FINGERPRINTS):
        pytest.skip(f"no fingerprint recorded for Python {key[1]} (the trees differ between Python versions)")
    found = _rules_fingerprint()
    assert RULES_FINGERPRINTS.get(key) == found, (
        f"the rules' code changed (fingerprint {found}) under VERIFY_RULES_VERSION {VERIFY_RULES_VERSION}: give "
        f"analysis/verify/registry.py a new version and record {found} for it in RULES_FINGERPRINTS")


def test_each_row_is_filled_by_its_own_functions_and_a_template_row_names_its_rows(pristine) -> None:
    """Each row of a verdict comes from the functions listed for it, and only those: dropping a row's lines from the
    registry drops the row and changes no other; ``rule *name*`` names one row a validity rule of the score."""
    whole = verify.verify_dir(pristine)
    without = tuple(Family(entry.name, rows=entry.rows, events=entry.events, files=entry.files,
                           rules=tuple(rule for rule in entry.rules if rule.row != "ops recount"))
                    if entry.name == "record" else entry for entry in FAMILIES)  # fmt: skip
    fewer = verify.verify_dir(pristine, families=without)
    assert [c.name for c in whole.checks if c.name != "ops recount"] == [c.name for c in fewer.checks]
    assert [c.summary for c in whole.checks if c.name != "ops recount"] == [c.summary for c in fewer.checks]
    assert {c.name for c in whole.checks if c.name.startswith("rule ")} >= {"rule dataset", "rule error"}
