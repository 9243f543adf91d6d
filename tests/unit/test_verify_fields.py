"""Issue 45: every field a probe or the system event logs is checked or named as trusted (threads included).

The table (:mod:`analysis.verify.fields`) against the schema and what the writers emit, its rows against the
registry's rows and the trusted claims, the rule that checks what no other row read, and the audit's threads:
a probe claiming 64 threads a rank is judged with its share of its host, no longer "not judged".
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from aiperf_mpi.config import RunConfig
from aiperf_mpi.mpi.plan import GroupPlan, LayoutPlan
from aiperf_mpi.results import provenance, runlog
from aiperf_mpi.results.machine import local_description
from aiperf_mpi.results.schema import COMMON, OPTIONAL, REQUIRED
from analysis import verify
from analysis.audit import Lineage, cannot_judge, claimed_hardware, read_run, request, sampled
from analysis.checks import MISMATCH, OK
from analysis.trusted import CLAIM_NAMES, trusted_claims
from analysis.verify import fields as field_audit
from analysis.verify.fields import (
    CHECKED,
    CONFIG_PREFIX,
    EVENTS_WALKED,
    FIELDS,
    NOT_A_CLAIM,
    ROW,
    TRUSTED,
    host_share,
    rank_threads,
    segment_field_problems,
    unjudged,
)
from analysis.verify.registry import FAMILIES
from tests.support.verify_runs import HOST, consistent_run, find, rewrite_log

REPO = Path(__file__).resolve().parents[2]


def _dict_keys(path: str, function: str) -> set[str]:
    """The string keys of the dict literals ``function`` in ``path`` builds, a nested dict's as ``key.inner``: what
    the writer emits, read from its source (the writers run under MPI and TensorFlow, which a unit test does not
    start)."""
    tree = ast.parse((REPO / path).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    nested = {id(v) for d in ast.walk(node) if isinstance(d, ast.Dict) for v in d.values if isinstance(v, ast.Dict)}
    keys: set[str] = set()

    def collect(d: ast.Dict, prefix: str) -> None:
        for key, value in zip(d.keys, d.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(prefix + key.value)
                if isinstance(value, ast.Dict):
                    collect(value, f"{prefix}{key.value}.")

    for d in ast.walk(node):
        if isinstance(d, ast.Dict) and id(d) not in nested:
            collect(d, "")
    return keys


def logged_fields() -> set[str]:
    """Every field path the schema names for the walked events, and every one their writers emit."""
    paths = {f"{event}.{name}" for event in EVENTS_WALKED
             for name in (*COMMON, *REQUIRED[event], *OPTIONAL.get(event, {}))}  # fmt: skip
    host = {*local_description(), "ranks"}
    paths |= {f"system.hosts[].{key}" for key in host}
    system = _dict_keys("aiperf_mpi/mpi/system.py", "system_description") - {"ranks"} | {"ranks"}
    system |= _dict_keys("aiperf_mpi/mpi/run.py", "_startup") | _dict_keys("aiperf_mpi/mpi/run.py", "_agree_precision")
    system |= _dict_keys("aiperf_mpi/job/local.py", "one_host_layout") - {"world_size", "master_rank", "hosts",
                                                                         "nodes", "group_size", "groups",
                                                                         "node_count", "index", "node", "host",
                                                                         "leader", "horovod_size", "cores"}
    paths |= {f"system.{key}" for key in system}
    peak = _dict_keys("aiperf_mpi/train/peak.py", "group_peak") | _dict_keys("aiperf_mpi/mpi/rehearsal.py",
                                                                             "rehearsal_peak") | {"group", "host"}
    paths |= {f"peak.{key}" for key in peak}
    paths |= {f"peak.threads[].{key}" for key in _dict_keys("aiperf_mpi/train/threads.py", "current_threads")}
    plan = LayoutPlan(3, 0, ("h0",) * 3, (0, 0, 0), 2, (GroupPlan(0, 0, "h0", (1, 2)),), relay_ranks=())
    emitted = plan.to_dict()
    paths |= {f"layout.{key}" for key in emitted}
    paths |= {f"layout.groups[].{key}" for key in emitted["groups"][0]}
    paths |= {f"run_start.provenance.{key}" for key in provenance.FIELDS}
    return paths


def test_every_field_the_system_probe_and_layout_events_log_has_a_row() -> None:
    found = logged_fields()
    assert {"peak.threads", "peak.threads[].intra", "system.hosts[].cores", "system.startup",
            "system.precision.chosen", "system.mpi.library", "layout.groups[].leader"} <= found  # the walk reaches
    assert unjudged(found) == [], "fields no row of analysis/verify/fields.py judges: give each its standing"


def test_a_field_without_a_row_is_what_the_walk_refuses() -> None:
    assert unjudged(["peak.threads", "peak.new_field", "system.hosts[].clock"]) == ["peak.new_field",
                                                                                     "system.hosts[].clock"]


def test_each_row_names_a_rule_that_exists_a_trusted_claim_verdicts_print_or_why_it_is_none() -> None:
    rows = {row.name for entry in FAMILIES for row in entry.rows}
    config = {f.name for f in dataclasses.fields(RunConfig)}
    assert len({entry.path for entry in FIELDS}) == len(FIELDS), "a field listed twice"
    for entry in FIELDS:
        if entry.standing == CHECKED:
            assert entry.by in rows, entry
        elif entry.standing == TRUSTED:
            assert entry.by in CLAIM_NAMES, entry
        else:
            assert entry.standing == NOT_A_CLAIM and not entry.by and entry.how, entry
        if entry.path.startswith(CONFIG_PREFIX):
            assert entry.path.removeprefix(CONFIG_PREFIX) in config, entry
    assert field_audit.counts()[TRUSTED] >= 7 and "peak.threads[].intra" in {
        e.path for e in FIELDS if e.standing == TRUSTED}


def test_the_docs_carry_the_table_as_generated() -> None:
    text = (REPO / "docs" / "verify.md").read_text()
    marker = "<!-- generated from analysis/verify/fields.py: "
    begin, end = marker + "begin -->\n", marker + "end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    assert text[text.index(begin) + len(begin):text.index(end)] == field_audit.markdown(), (
        "docs/verify.md is stale: regenerate its field table from analysis/verify/fields.py")


# -- threads: a share of the host, never a refusal


def _system(cores: int, ranks: list[int], accelerators: list | None = None) -> dict:
    return {"ranks": len(ranks), "nodes": 1,
            "hosts": [{**HOST, "cores": cores, "accelerators": accelerators or [], "ranks": ranks}]}  # fmt: skip


def _layout(*groups: list[int]) -> dict:
    world = 1 + sum(len(g) for g in groups)
    return {"world_size": world, "master_rank": 0, "hosts": ["h0"] * world, "nodes": [0] * world,
            "groups": [{"index": i, "node": 0, "host": "h0", "ranks": g, "leader": g[0], "horovod_size": len(g)}
                       for i, g in enumerate(groups)]}  # fmt: skip


def _peak(group: int, ranks: int, intra: int) -> dict:
    return {"group": group, "host": "h0", "ranks": ranks, "threads": [{"intra": intra, "inter": intra}] * ranks}


def test_a_ranks_threads_count_as_at_most_its_share_of_its_host() -> None:
    # three training ranks on two cores (--oversubscribe): a group of two and a group of one
    system, layout = _system(2, [0, 1, 2, 3]), _layout([1, 2], [3])
    assert host_share(system, layout, 0) == 1 and host_share(system, layout, 1) == 2
    assert rank_threads(system, layout, _peak(0, 2, 64), 0) == 1
    assert rank_threads(system, layout, _peak(1, 1, 64), 1) == 2
    assert rank_threads(system, layout, _peak(1, 1, 1), 1) == 1  # a claim below the share is the claim
    assert rank_threads(system, layout, {"group": 1}, 1) == 2  # no threads logged: the share
    assert rank_threads({"hosts": []}, layout, _peak(1, 1, 3), 1) == 3  # no host to share: the claim
    three_cores = _system(3, [0, 1, 2])
    assert host_share(three_cores, _layout([1, 2]), 0) == 2  # 1.5 cores a rank: rounded up, never below


def _cpu_run(tmp_path: Path, cores: int, intra: int | None) -> Path:
    """The consistent run on a CPU host of ``cores`` logical processors, its probes claiming ``intra`` threads."""
    run = consistent_run(tmp_path / "run")

    def change(events: list[dict]) -> None:
        find(events, runlog.SYSTEM)["hosts"] = [{**HOST, "cores": cores, "accelerators": []}]
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            if intra is not None:
                peak["threads"] = [{"intra": intra, "inter": intra}] * peak["ranks"]

    rewrite_log(run, change)
    return run


def test_the_audit_judges_a_rank_claiming_64_threads_with_its_share_of_the_submitters_processor(tmp_path) -> None:
    """Issue 45: 64 threads a rank made the audit call every task "not judged", even on the submitter's own
    processor (×5.15 of squeezed clocks then went untimed).  Now the rank counts as its share of its host."""
    here = {"host": "here", "cpu": HOST["cpu"], "cores": 2, "accelerators": []}
    model, lineage = read_run(_cpu_run(tmp_path, 2, 64))
    claim = claimed_hardware(model, 0)
    assert (claim.kind, claim.cores, claim.threads) == ("cpu", 2, 1)  # two ranks of its group on two cores
    assert cannot_judge(claim, here) == ""
    task = sampled(model, lineage, 0, 20.0, here)
    assert task.not_judged == "" and request([task], 1.0, here)["threads"] == {"intra": 1, "inter": 1}
    # a machine smaller than the rank's share is still not the claimed kind
    big, _ = read_run(_cpu_run(tmp_path / "big", 128, 64))
    assert "64 threads busy" in cannot_judge(claimed_hardware(big, 0), here)


def test_a_probe_without_threads_is_timed_with_its_share(tmp_path) -> None:
    model, _ = read_run(_cpu_run(tmp_path, 8, None))
    assert claimed_hardware(model, 0).threads == 4


def test_the_verdict_names_the_threads_and_what_they_can_buy(tmp_path) -> None:
    model, _ = read_run(_cpu_run(tmp_path, 2, 64))
    here = {"host": "here", "cpu": HOST["cpu"], "cpu_vendor": "AuthenticAMD", "cpu_flags": HOST["cpu_flags"],
            "cores": 2, "accelerators": []}  # fmt: skip
    claims = {c.name: c for c in trusted_claims(model, here, False, False, None)}
    assert set(claims) <= set(CLAIM_NAMES)
    line = claims["threads a rank"]
    assert line.factor == 1.0 and "64 (counted as 1)" in line.said, line


# -- the rule: what no other row read


def _problems(system: dict, layout: dict, peaks: list[dict], prov: object = None) -> list[str]:
    return segment_field_problems(1, system, layout, peaks, prov)[0]


def test_the_fields_rule_passes_what_the_writers_write_and_notes_threads_above_the_share() -> None:
    system, layout = {**_system(2, [0, 1, 2, 3]), "accelerators_per_node": 0, "mpi4py": "4.1.2"}, _layout([1, 2], [3])
    layout["node_count"] = 1
    peaks = [_peak(0, 2, 1), _peak(1, 1, 2), {"group": 0, "host": "h0", "ranks": 2, "threads": []}]
    assert segment_field_problems(1, system, layout, peaks, {"mpi4py": "4.1.2"}) == ([], [])
    layout = {**layout, "nodes": [0, 0, 0, 3], "node_count": 2}  # one host name on two nodes: containers may
    layout["groups"][1] = {**layout["groups"][1], "node": 3}  # repeat a name, and the planner trusts the nodes
    assert segment_field_problems(1, system, layout, peaks, None) == ([], [])
    problems, notes = segment_field_problems(1, system, layout, [_peak(0, 2, 8)], None)
    assert problems == [] and notes == ["segment 1: peak of group 0: 8 threads a rank claimed, counted as 1 (its "
                                        "share of its host's logical processors: what the audit times it with)"]


@pytest.mark.parametrize(("change", "words"), [
    (lambda s, lay, p: p[0].update(host="h9"), "logged on host 'h9', its leader (rank 1) is on 'h0'"),
    (lambda s, lay, p: p[0].update(threads=[{"intra": 64, "inter": 2}]), "threads lists 1 entries for its 2 ranks"),
    (lambda s, lay, p: p[0].update(threads=[{"intra": "64", "inter": 2}] * 2), "not a positive intra-op"),
    (lambda s, lay, p: p[0].update(threads=[{"intra": 0, "inter": 1}] * 2), "not a positive intra-op"),
    (lambda s, lay, p: s.update(accelerators_per_node=8), "accelerators_per_node 8, its hosts list at most 0"),
    (lambda s, lay, p: s.update(mpi4py="9.9"), "mpi4py '9.9', its provenance '4.1.2'"),
    (lambda s, lay, p: lay["groups"][0].update(leader=2), "group 0's leader 2 is not its first rank 1"),
    (lambda s, lay, p: lay["groups"][1].update(host="h1"), "group 1 on host 'h1'"),
    (lambda s, lay, p: lay["groups"][1].update(node=1), "group 1 on node 1"),
    (lambda s, lay, p: (s["hosts"][0].update(ranks=[0, 1, 2]), s["hosts"].append({**HOST, "host": "h1", "ranks": [3]}),
                        lay["hosts"].__setitem__(3, "h1"), lay["groups"][1].update(host="h1")), "node(s) ['0'] span"),
    (lambda s, lay, p: lay.update(node_count=4), "node_count 4, nodes holds 1"),
])  # fmt: skip
def test_the_fields_rule_refuses_each_field_forged(change, words) -> None:
    system, layout = {**_system(2, [0, 1, 2, 3]), "mpi4py": "4.1.2"}, _layout([1, 2], [3])
    peaks = [_peak(0, 2, 1), _peak(1, 1, 2)]
    change(system, layout, peaks)
    problems = _problems(system, layout, peaks, {"mpi4py": "4.1.2"})
    assert problems and words in problems[0], problems


def test_hostile_values_are_named_by_the_inventory_not_a_traceback_here() -> None:
    system, layout = _system(2, [0, 1, 2, 3]), _layout([1, 2], [3])
    layout["groups"][0].update(index=[0], ranks=[{"a": 1}, 2], leader={"b": 2}, node=[1], host=None)
    layout["nodes"] = [[0], {"n": 1}, 0, 0]
    peaks = [{**_peak(0, 2, 1), "threads": {"intra": 1}}, {**_peak(1, 1, 1), "host": None}]
    problems = _problems({**system, "accelerators_per_node": "x"}, layout, peaks, ["not", "a", "record"])
    assert any("threads lists" in p for p in problems) and any("accelerators_per_node 'x'" in p for p in problems)


def test_verify_fills_the_row_and_a_forged_probe_host_fails_it(tmp_path) -> None:
    honest = verify.verify_dir(consistent_run(tmp_path / "honest"))
    row = next(c for c in honest.checks if c.name == ROW)
    assert row.verdict == OK, row.problems
    forged = consistent_run(tmp_path / "forged")
    rewrite_log(forged, lambda events: find(events, runlog.PEAK).update(host="h9"))
    row = next(c for c in verify.verify_dir(forged).checks if c.name == ROW)
    assert row.verdict == MISMATCH and "logged on host 'h9'" in row.problems[0]


def test_lineage_is_rebuilt_for_the_sampled_task(tmp_path) -> None:
    """The audit's sampled task on the CPU run still rebuilds its graph (the threads change touched only the claim)."""
    model, _ = read_run(_cpu_run(tmp_path, 2, 64))
    task = sampled(model, Lineage(), 1, 20.0, {"cpu": HOST["cpu"], "cores": 2, "accelerators": []})
    assert task.graph and not task.problems
