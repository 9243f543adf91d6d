"""Bounds from outside the run (analysis/verify/hardware.py): each forgery class is named, rescored consistently.

Every forgery here rescores the log with the package's own score code (``forge``), as a careful forger would;
before the ``hardware`` family, verify passed each of these with exit 0 (a raised probe raised the physics
row's own ceiling with it; nothing bounded validation; the layout was never held to the world).
"""

from __future__ import annotations

import copy

from aiperf_mpi.results import runlog
from analysis import checks, verify
from tests.support.verify_runs import HOST, PEAK, as_rehearsal, find, forge


def failing(run_dir) -> dict[str, list[str]]:
    result = verify.verify(run_dir)
    return {c.name: [*c.problems, *c.missing] for c in result.checks if c.verdict != checks.OK}


def _epochs(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == runlog.EPOCH]


def test_the_consistent_run_is_within_its_hardware(run) -> None:
    result = verify.verify(run)
    rows = {c.name: c for c in result.checks}
    assert rows["inventory"].verdict == rows["hardware bounds"].verdict == checks.OK, result.text()
    assert "hardware table" in rows["hardware bounds"].summary


def test_probes_raised_with_the_epochs_squeezed_under_twice_them_are_above_the_hardware(run) -> None:
    """The physics row follows the probe; the table does not: ×10 probes and epochs 8× faster pass physics."""

    def raise_and_squeeze(events: list[dict]) -> None:
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["ops_per_second"] = 10 * PEAK
        for epoch in _epochs(events):
            epoch["compute"] /= 8

    forge(run, raise_and_squeeze)
    bad = failing(run)
    assert "physics" not in bad, bad  # within twice its own (forged) probe
    lines = bad["hardware bounds"]
    assert any("the probe's" in line and "× what the hardware can compute" in line for line in lines), lines
    assert any("training rate" in line and "B200" in line for line in lines), lines
    assert verify.main([str(run)]) == 1


def test_validation_is_bounded_too(run) -> None:
    def instant_validation(events: list[dict]) -> None:
        for epoch in _epochs(events):
            epoch["evaluation"], epoch["compile"] = 1e-6, 0.0

    forge(run, instant_validation)
    lines = failing(run)["hardware bounds"]
    assert any("validation rate" in line for line in lines), lines


def test_one_group_listed_again_on_the_same_ranks_is_hardware_counted_twice(run) -> None:
    def again(events: list[dict]) -> None:
        layout = find(events, runlog.LAYOUT)
        layout["groups"].append({**copy.deepcopy(layout["groups"][1]), "index": 2})

    forge(run, again)
    lines = failing(run)["inventory"]
    assert any("hardware counted twice" in line for line in lines), lines


def test_a_world_larger_than_mpi_gave_is_named(run) -> None:
    def bigger(events: list[dict]) -> None:
        layout = find(events, runlog.LAYOUT)
        layout["world_size"] = 7
        layout["hosts"] += ["h0", "h0"]
        layout["nodes"] += [0, 0]
        layout["groups"].append({"index": 2, "node": 0, "host": "h0", "ranks": [5, 6], "leader": 5,
                                 "horovod_size": 2})  # fmt: skip

    forge(run, bigger)
    lines = failing(run)["inventory"]
    assert any("the system description gathered 5 ranks" in line for line in lines), lines


def test_hardware_the_table_does_not_know_is_not_recorded_and_so_not_verified(run) -> None:
    def unknown(events: list[dict]) -> None:
        find(events, runlog.SYSTEM)["hosts"] = [{**HOST, "accelerators": ["Imaginary X9000"] * 4}]

    forge(run, unknown)
    rows = {c.name: c for c in verify.verify(run).checks}
    assert rows["hardware bounds"].verdict == checks.NOT_RECORDED
    assert any("not in the hardware table" in line for line in rows["hardware bounds"].missing)
    assert verify.main([str(run)]) == 1


def test_a_segment_on_other_hardware_than_the_first_is_named(run) -> None:
    def faster(events: list[dict]) -> None:
        system = find(events, runlog.SYSTEM)
        events.insert(events.index(system) + 1, {**copy.deepcopy(system), "time": system["time"] + 0.01})
        events[events.index(system) + 1]["hosts"] = [{**HOST, "accelerators": ["NVIDIA H100"] * 4}]

    forge(run, faster)  # a second system event in the segment: the bounds must not read another description
    lines = failing(run)["inventory"]
    assert any("second system description" in line for line in lines), lines


def test_a_second_layout_in_a_segment_is_named_and_the_inventory_reads_the_first(run) -> None:
    """The shared view keeps a segment's first layout and counts the others (the run's model keeps the last)."""

    def again(events: list[dict]) -> None:
        layout = find(events, runlog.LAYOUT)
        bigger = {**copy.deepcopy(layout), "time": layout["time"] + 0.01, "world_size": 7}
        bigger["hosts"] += ["h0", "h0"]
        bigger["nodes"] += [0, 0]
        bigger["groups"].append({"index": 2, "node": 0, "host": "h0", "ranks": [5, 6], "leader": 5,
                                 "horovod_size": 2})  # fmt: skip
        events.insert(events.index(layout) + 1, bigger)
        system = find(events, runlog.SYSTEM)  # after both layouts: the bounds are set from the first when it comes
        events.remove(system)
        events.insert(events.index(bigger) + 1, {**system, "time": bigger["time"]})

    forge(run, again)
    lines = failing(run)["inventory"]
    assert any("has a second layout (one a segment)" in line for line in lines), lines
    assert not any("gathered 5 ranks" in line for line in lines), lines  # the second one's world was not read


def test_a_resumed_segment_on_hardware_the_first_did_not_have_is_named() -> None:
    """The inventory is a function of a segment: its run_start, system and layout events, and the run's first
    system from before it (the unit stream's ``first_system``)."""
    from aiperf_mpi.results.logmodel import Segment
    from analysis.verify.hardware import inventory
    from analysis.verify.units import Logged, SegmentUnit, lines

    layout = {"event": runlog.LAYOUT, "world_size": 5, "master_rank": 0, "hosts": ["h0"] * 5,
              "groups": [{"index": 0, "ranks": [1, 2]}, {"index": 1, "ranks": [3, 4]}]}  # fmt: skip
    system = {"event": runlog.SYSTEM, "ranks": 5, "nodes": 1, "hosts": [HOST]}
    first, problems = None, []
    for segment, hosts in ((1, [HOST]), (2, [{**HOST, "host": "h9"}]), (3, [{**HOST, "accelerators": ["H100"] * 4}])):
        described = {**system, "hosts": [{**h, "host": "h0"} for h in hosts]}
        unit = SegmentUnit(Segment(segment, 0.0, 0.0, {"precision": "fp16"}, None), (), first_system=first)
        unit.run_starts.append(Logged({"event": runlog.RUN_START, "segment": segment,
                                       "config": {"precision": "fp16"}}, 1))  # fmt: skip
        unit.systems.append(Logged(described, 2))
        unit.layouts.append(Logged(layout, 3))
        problems += lines(inventory(unit))
        first = first if first is not None else described
    assert len(problems) == 1 and "segment 3: hosts of kinds the first segment did" in problems[0], problems


def test_a_rehearsal_is_noted_not_bounded(run) -> None:
    def rehearsal(events: list[dict]) -> None:
        as_rehearsal(events)
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["ops_per_second"] = 100 * PEAK

    forge(run, rehearsal)
    result = verify.verify(run)
    rows = {c.name: c for c in result.checks}
    assert rows["hardware bounds"].verdict == checks.OK and "rehearsal" in rows["hardware bounds"].summary
    assert "training" in result.broken_rules and not result.valid


def test_cpu_groups_on_one_host_share_its_bound(run) -> None:
    """Two groups training at once on one CPU host together get the host, not one host each."""

    def on_cpus(events: list[dict]) -> None:
        find(events, runlog.SYSTEM)["hosts"] = [{**HOST, "accelerators": [], "cores": 256}]
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["ops_per_second"] = 1e12
        for epoch in _epochs(events):  # each group at 0.9 × the whole host: 1.8 × its share, past the allowance
            epoch["compute"] = epoch["ops_train"] / (0.9 * 256 * 5.7e9 * 64)

    forge(run, on_cpus)
    lines = failing(run)["hardware bounds"]
    assert any("training rate" in line and "2 of its 4 training ranks' share" in line for line in lines), lines


def test_a_gpu_probe_on_a_host_listing_none_is_not_recorded_rather_than_a_mismatch(run) -> None:
    def no_nvml(events: list[dict]) -> None:
        find(events, runlog.SYSTEM)["hosts"] = [{**HOST, "accelerators": []}]
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["device"] = "/device:GPU:0"

    forge(run, no_nvml)
    rows = {c.name: c for c in verify.verify(run).checks}
    assert rows["hardware bounds"].verdict == checks.NOT_RECORDED, rows["hardware bounds"]
    assert any("does not list" in line for line in rows["hardware bounds"].missing)


def test_hostile_system_fields_are_named_never_a_traceback(run) -> None:
    for change in ({"accelerators": 4}, {"accelerators": [None]}, {"cpu_flags": "avx2"}):
        def hostile(events: list[dict], change=change) -> None:
            find(events, runlog.SYSTEM)["hosts"] = [{**HOST, **change}]
            find(events, runlog.RUN_START)["config"]["precision"] = "tf32"

        forge(run, hostile)
        assert verify.main([str(run)]) == 1, change


FASTER = {**HOST, "accelerators": ["NVIDIA GB200"] * 4}
"""a node of the first's processor with a faster accelerator than its B200s"""
SLOWER = {**HOST, "accelerators": ["NVIDIA V100"] * 4}


def _resumed_on(run_dir, host: dict, reason: str) -> None:
    """Forge a second segment, resumed on ``host`` (``reason``: its ``--hardware-changed``), probed as the first."""

    def resume(events: list[dict]) -> list[dict]:
        first, t = events[0], 2000.0
        config = {**first["config"], "hardware_changed": reason}
        peaks = [e for e in events if e["event"] == runlog.PEAK]
        probes = [{**p, "time": t + 0.3 + i / 100} for i, p in enumerate(peaks)]
        return [*events, dict(first, time=t, segment=2, resumed=True, config=config),
                {**copy.deepcopy(find(events, runlog.SYSTEM)), "time": t + 0.1, "hosts": [host]},
                {**copy.deepcopy(find(events, runlog.LAYOUT)), "time": t + 0.2}, *probes,
                {"event": runlog.RUN_STOP, "time": t + 100.0, "reason": "time limit", "discarded_tasks": [],
                 "segment": 2},
                {"event": runlog.SCORE, "time": t + 100.1}]  # fmt: skip

    forge(run_dir, resume)


def test_a_resume_on_faster_hardware_without_a_reason_fails_naming_the_rule(run) -> None:
    _resumed_on(run, FASTER, "")
    lines = failing(run)["inventory"]
    assert any("segment 2: hosts of kinds the first segment did" in line and
               "rule: a resume on other hardware says why (--hardware-changed)" in line for line in lines), lines
    assert verify.main([str(run)]) == 1


def test_a_resume_on_other_hardware_that_says_why_verifies_and_shows_the_reason(run) -> None:
    _resumed_on(run, FASTER, "the B200 partition was drained; resumed on GB200 nodes")
    result = verify.verify(run)
    inventory = next(c for c in result.checks if c.name == "inventory")
    assert inventory.verdict == checks.OK and failing(run) == {}, result.text()
    assert any("as its resume says: 'the B200 partition was drained; resumed on GB200 nodes'" in note
               for note in inventory.notes), inventory.notes
    assert "resumed on GB200 nodes" in result.text()
    assert verify.main([str(run)]) == 0


def test_a_resume_that_says_why_is_bounded_by_its_own_hardware_not_the_first_segments(run) -> None:
    """Resumed on V100s with a reason, its probes (the B200s' figure, copied) are above what V100s can compute."""
    _resumed_on(run, SLOWER, "the B200 nodes were reserved")
    bad = failing(run)
    assert "inventory" not in bad, bad
    lines = bad["hardware bounds"]
    assert lines and all("the probe's" in line and "V100" in line for line in lines), lines
