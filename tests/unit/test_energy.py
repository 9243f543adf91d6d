"""The energy reader (aiperf_mpi/results/energy.py, issue 53) on the meters' documented layouts, made under tmp_path.

HPE's Cray EX ``/sys/cray/pm_counters/`` files hold ``VALUE UNIT TIMESTAMP`` (microseconds); the kernel's powercap
tree has a zone per RAPL package (``intel-rapl:N``) and its sub-zones flat beside it (``intel-rapl:N:M``), each
with ``name``, ``energy_uj`` and ``max_energy_range_uj``; ``sacct -n -P -X -o ConsumedEnergyRaw`` prints the job's
joules on one line, or nothing, or 0, without an energy plugin.  No meter exists on the development machine.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from aiperf_mpi.results.energy import (
    EnergyFigures,
    EnergyLedger,
    Reading,
    Unreadable,
    energy_between,
    energy_line,
    from_record,
    lie_factor,
    node_line,
    node_sources,
    parse_sacct_energy,
    read_pm_counters,
    read_powercap,
    series_energy,
    to_record,
)
from aiperf_mpi.results.score import compute_score


def pm_tree(root: Path, energy: int, stamp_us: int, accels: int = 2) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "energy").write_text(f"{energy} J {stamp_us}\n")
    (root / "cpu_energy").write_text(f"{energy // 4} J {stamp_us}\n")
    (root / "memory_energy").write_text(f"{energy // 10} J {stamp_us}\n")
    (root / "power").write_text(f"512 W {stamp_us}\n")  # read by nobody here: power, not energy
    for index in range(accels):
        (root / f"accel{index}_energy").write_text(f"{energy // 8} J {stamp_us}\n")
    return root


def powercap_tree(root: Path, package_uj: int, dram_uj: int, range_uj: int = 262_143_328_850) -> Path:
    for zone, name, value in (("intel-rapl:0", "package-0", package_uj), ("intel-rapl:0:0", "dram", dram_uj)):
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "name").write_text(name + "\n")
        (root / zone / "energy_uj").write_text(f"{value}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    (root / "intel-rapl").mkdir(exist_ok=True)  # the control type's own directory: no zone
    return root


def test_cray_pm_counters_are_read_per_domain_with_their_own_timestamps(tmp_path) -> None:
    readings = read_pm_counters(pm_tree(tmp_path / "pm", 1_000_000, 1_796_000_000_250_000))
    assert [(r.domain, r.joules) for r in readings] == [("node", 1e6), ("cpu", 250_000), ("memory", 100_000),
                                                        ("accel0", 125_000), ("accel1", 125_000)]  # fmt: skip
    assert {r.time for r in readings} == {1_796_000_000.25} and {r.source for r in readings} == {"pm_counters"}
    assert read_pm_counters(tmp_path / "absent") == []
    (tmp_path / "pm" / "energy").write_text("lots of joules\n")
    with pytest.raises(Unreadable, match="is not 'VALUE J TIMESTAMP'"):
        read_pm_counters(tmp_path / "pm")


def test_powercap_zones_are_named_and_know_where_they_wrap(tmp_path) -> None:
    readings = read_powercap(powercap_tree(tmp_path / "powercap", 5_000_000, 2_000_000), now=100.0)
    assert [(r.domain, r.joules, r.wraps_at, r.time) for r in readings] == [
        ("package-0", 5.0, 262_143.32885, 100.0), ("package-0/dram", 2.0, 262_143.32885, 100.0)]  # fmt: skip
    (tmp_path / "powercap" / "intel-rapl:0" / "energy_uj").chmod(0)
    if os.geteuid() != 0:  # root reads a file of mode 0: the root-only case is not made here
        with pytest.raises(Unreadable):
            read_powercap(tmp_path / "powercap")


def test_a_wrap_and_a_reset_between_two_readings(tmp_path) -> None:
    """A package counter of range 262,143 J read at 262,000 J then at 100 J wrapped: 243.3 J; a GPU counter read
    at 5,000 J then 40 J (a driver reload) was reset: only 40 J are known, and said."""
    before = Reading("powercap", "package-0", 262_000.0, 0.0, 262_143.32885)
    after = Reading("powercap", "package-0", 100.0, 60.0, 262_143.32885)
    assert energy_between(before, after) == (pytest.approx(243.32885), "wrapped")
    gpu = [Reading("nvml", "gpu0", 5_000.0, 0.0), Reading("nvml", "gpu0", 40.0, 60.0),
           Reading("nvml", "gpu0", 1_040.0, 120.0)]  # fmt: skip
    joules, notes = series_energy(gpu)
    assert joules == 1_040.0 and notes == ["nvml gpu0 reset (a lower bound) at 60"]
    with pytest.raises(ValueError, match="two counters"):
        energy_between(before, gpu[0])


def test_sacct_energy_in_its_real_format() -> None:
    assert parse_sacct_energy("123456\n") == 123456.0  # -n -P -X: the job's line alone, no header
    assert parse_sacct_energy("") is None and parse_sacct_energy("0\n") is None  # no acct_gather_energy plugin
    assert parse_sacct_energy("18446744073709551614\n") is None  # Slurm's NO_VAL64: no value, not 1.8e19 J
    with pytest.raises(Unreadable):
        parse_sacct_energy("16.5K\n")  # ConsumedEnergy (not Raw) prints units: the reader asks for the raw joules


def test_the_figures_match_a_hand_calculation(tmp_path) -> None:
    """Node energy from pm_counters at the window's start and end: 1,000,000 J → 1,360,000 J over 600 s is
    360 kJ, 600 W; 7.2e15 operations (score 12 TOPS) are 2e10 operations per joule."""
    first = read_pm_counters(pm_tree(tmp_path / "a", 1_000_000, 1_000_000_000_000))[0]
    last = read_pm_counters(pm_tree(tmp_path / "b", 1_360_000, 1_000_600_000_000))[0]
    joules, notes = series_energy([first, last])
    figures = EnergyFigures(joules, last.time - first.time, 7.2e15, 3.6e15)
    assert (figures.joules, figures.watts, figures.ops_per_joule, figures.regulated_ops_per_joule) == (
        360_000.0, 600.0, 2e10, 1e10) and not notes  # fmt: skip
    assert math.isnan(EnergyFigures(0.0, 0.0, 1.0, 1.0).ops_per_joule)


def test_a_node_without_meters_says_energy_is_not_measured_and_why(tmp_path) -> None:
    readings, problems = node_sources(tmp_path / "no-pm", tmp_path / "no-powercap", gpus=list)
    line = node_line(readings, problems, host="n1")
    assert readings == [] and line.startswith("aiperf_mpi: energy: not measured on node n1: no NVML GPU"), line
    readings, problems = node_sources(pm_tree(tmp_path / "pm", 10, 1, accels=0), tmp_path / "no-powercap", gpus=list)
    assert node_line(readings, problems, host="n1") == ("aiperf_mpi: energy: node n1 reads pm_counters node, "
                                                        "pm_counters cpu, pm_counters memory")  # fmt: skip


# -- the readings in the log, and the figures beside the score (issue 53, items 2-4) ----------------------------


def pm_record(joules: float, when: float) -> dict:
    """A Cray ``node`` counter reading as the log holds it."""
    return to_record(Reading("pm_counters", "node", joules, when))


def energy_log(readings: dict[str, list[tuple[float, float]]], stop: float = 100.0, unmeasured: tuple[str, ...] = (),
               interval: float = 0.0) -> list[dict]:  # fmt: skip
    """A segment's events: run_start at 0, the system event with each node's first reading (or why none), a
    monitor event a later reading, run_stop at ``stop``."""
    nodes = [{"host": host, "readings": [pm_record(*series[0])], "problems": []} for host, series in readings.items()]
    nodes += [{"host": host, "readings": [], "problems": ["no meter"]} for host in unmeasured]
    events = [{"event": "run_start", "time": 0.0, "segment": 1, "resumed": False,
               "config": {"time_limit": stop, "monitor_interval": interval}},
              {"event": "system", "time": 0.1, "ranks": 2, "nodes": len(nodes),
               "hosts": [{"host": node["host"]} for node in nodes], "energy": nodes}]  # fmt: skip
    for host, series in readings.items():
        events += [{"event": "monitor", "time": when, "host": host, "energy": [pm_record(joules, when)]}
                   for joules, when in series[1:]]  # fmt: skip
    events.sort(key=lambda e: e["time"])
    return [*events, {"event": "run_stop", "time": stop, "reason": "time limit", "discarded_tasks": [], "segment": 1}]


def ledger_of(events) -> EnergyLedger:
    ledger = EnergyLedger()
    for event in events:
        ledger.event(event)
    return ledger


def test_two_nodes_readings_give_the_hand_calculated_figures() -> None:
    """node a: 1,000 J → 31,000 J over 0 → 100 s (300 W); node b: 500 J → 20,500 J over 0 → 100 s (200 W): 500 W,
    so 100 s of active time is 50 kJ, and 1e15 operations are 2e10 per joule (5e14 regulated: 1e10)."""
    ledger = ledger_of(energy_log({"a": [(1_000, 0.0), (11_000, 33.3), (31_000, 100.0)],
                                   "b": [(500, 0.0), (20_500, 100.0)]}))  # fmt: skip
    record = ledger.figures([100.0], 1e15, 5e14)
    assert record["measured"] and record["watts"] == pytest.approx(500.0) and record["joules"] == pytest.approx(5e4)
    assert record["ops_per_joule"] == pytest.approx(2e10) and record["regulated_ops_per_joule"] == pytest.approx(1e10)
    assert record["nodes"] == 2 and record["covers"] == ["the node (Cray pm_counters)"] and not ledger.problems()
    assert "50 kJ over the scored window at 500 W mean (2 node(s)" in energy_line(record)
    assert lie_factor(record, ledger.bound_watts()) == pytest.approx(2 * 12_000 / 500)


def test_segments_are_weighed_by_their_scored_seconds() -> None:
    """Segment 1: 1 kW for 100 s; segment 2: 100 W for 100 s (a node of the first lost): 110 kJ, 550 W mean —
    never the shortest span's weight (a forger's ghost node of 1 ms made it 50 W)."""
    events = energy_log({"a": [(0, 0.0), (100_000, 100.0)]})
    second = [{**e, "time": e["time"] + 200} for e in energy_log({"a": [(500_000, 0.0), (510_000, 100.0)]})]
    for event in second:
        for key in ("energy",):
            for record in (event.get(key) or []):
                for reading in record.get("readings", [record]):
                    reading["time"] += 200
    record = ledger_of([*events, *second]).figures([100.0, 100.0], 1e15, None)
    assert record["watts"] == pytest.approx(550.0) and record["joules"] == pytest.approx(110_000.0)


def test_what_no_honest_meter_logs_is_named_and_gives_no_figure() -> None:
    """A counter down, 20 kW on a node, a node under its floor, a wrap range on a counter that has none, a host not
    the system event's: each a problem, and no figure."""
    cases = {
        "went down from 5000 J to 4000 J": energy_log({"a": [(5_000, 0.0), (4_000, 50.0), (9_000, 100.0)]}),
        "above the table's 12,000 W for a node": energy_log({"a": [(0, 0.0), (2_000_000, 100.0)]}),
        "below the floor of its counted domains": energy_log({"a": [(0, 0.0), (1, 100.0)]}),
    }
    wrapped = energy_log({"a": [(0, 0.0), (30_000, 100.0)]})
    wrapped[2]["energy"][0]["wraps_at"] = 1e9  # a Cray counter has no range to wrap through
    cases["only powercap's counters wrap"] = wrapped
    ghost = energy_log({"a": [(0, 0.0), (30_000, 100.0)]})
    ghost[1]["energy"].append({"host": "ghost", "readings": [pm_record(0, 0.0)], "problems": []})
    cases["each host once"] = ghost
    for said, events in cases.items():
        ledger = ledger_of(events)
        assert any(said in line for line in ledger.problems()), (said, ledger.problems())
        record = ledger.figures([100.0], 1e15, None)
        assert record["measured"] is False and "do not hold together" in record["why"], (said, record)


def test_a_wrap_through_its_range_is_counted_and_noted() -> None:
    events = energy_log({})
    first = to_record(Reading("powercap", "package-0", 900.0, 0.0, 1000.0))
    events[1]["energy"] = [{"host": "a", "readings": [first], "problems": []}]
    events[1]["hosts"] = [{"host": "a"}]
    # 900 J → 1000 J (the range) → 50 J: 150 J in 10 s, 15 W; then 50 J → 950 J in 90 s, 10 W
    events.insert(2, {"event": "monitor", "time": 10.0, "host": "a",
                      "energy": [to_record(Reading("powercap", "package-0", 50.0, 10.0, 1000.0))]})
    events.insert(3, {"event": "monitor", "time": 100.0, "host": "a",
                      "energy": [to_record(Reading("powercap", "package-0", 950.0, 100.0, 1000.0))]})
    ledger = ledger_of(events)
    assert not ledger.problems() and ledger.figures([100.0], 1.0, None)["watts"] == pytest.approx(10.5)
    assert ledger.notes() == ["segment 1: 1 counter wrap(s) counted through their range"]


def test_a_node_not_measured_over_the_window_gives_no_figure_and_says_which() -> None:
    """A node that counted no joules, readings that stop early, a reading whose time is far from its event's (a
    stale meter clock, or a forged one that stretched the span): no figure (operations per joule would be raised by
    what was not counted, or by the stretch), no problem."""
    record = ledger_of(energy_log({"a": [(0, 0.0), (30_000, 100.0)]}, unmeasured=("b",))).figures([100.0], 1e15, None)
    assert record["measured"] is False and "not measured over the window, e.g. segment 1: b: no meter" in record["why"]
    assert energy_line(record).startswith("aiperf_mpi: energy: not measured: 1 node(s) not measured")
    early = ledger_of(energy_log({"a": [(0, 0.0), (3_000, 10.0)]}, interval=2.0))  # the monitor stopped at 10 s
    assert not early.problems() and "stop 90 s before the segment's end" in early.figures([100.0], 1.0, None)["why"]
    stretched = energy_log({"a": [(0, 0.0), (30_000, 100.0)]})
    stretched[2]["energy"][0]["time"] = 1e6  # a reading a million seconds after its event: 300 W → 0.03 W
    record = ledger_of(stretched).figures([100.0], 1.0, None)
    assert record["measured"] is False and "outside its event's" in record["why"], record
    nothing = ledger_of(energy_log({})).figures([100.0], 1e15, None)
    assert nothing["measured"] is False
    old = ledger_of([e for e in energy_log({"a": [(0, 0.0), (30_000, 100.0)]}) if e["event"] != "monitor"])
    assert old.figures([100.0], 1.0, None)["measured"] is False  # read once: no span


def test_the_score_carries_the_figures_computed_from_the_log() -> None:
    """The score's ``energy`` record is the ledger's over the score's own active time and operations."""
    events = energy_log({"a": [(1_000, 0.0), (31_000, 100.0)]})
    events.insert(-1, {"event": "epoch", "time": 50.0, "task": 0, "group": 0, "epoch": 1, "end": 50.0,
                       "ops": 6_000_000_000_000, "val_accuracy": 0.5, "start": 1.0})  # fmt: skip
    score = compute_score(events, step=10.0)
    assert score.energy["watts"] == pytest.approx(300.0) and score.energy["joules"] == pytest.approx(3e4)
    assert score.energy["ops_per_joule"] == pytest.approx(6e12 / 3e4)


def test_a_malformed_record_is_named_never_raised() -> None:
    """A record of a shape no writer makes (a reading's joules a string or 10**400, a problems field 5, an entry
    not an object): named; the scorer and every reader of the log go on (a TypeError here once dropped the
    whole system event from verify's model)."""
    with pytest.raises(ValueError, match="not a counter's value"):
        from_record({"source": "pm_counters", "domain": "node", "joules": -1, "time": 0.0})
    with pytest.raises(ValueError, match="not a counter's value"):
        from_record({"source": "pm_counters", "domain": "node", "joules": 10**400, "time": 0.0})
    events = energy_log({"a": [(0, 0.0), (30_000, 100.0)]})
    events[2]["energy"] = [{"source": "pm_counters", "domain": "node", "joules": "many", "time": 50.0}]
    assert any("not a counter's value" in p for p in ledger_of(events).problems())
    for entry in ({"host": "a", "readings": [], "problems": 5}, "a", None):
        events = energy_log({"a": [(0, 0.0), (30_000, 100.0)]})
        events[1]["energy"] = [entry]
        ledger = ledger_of(events)  # no exception
        assert ledger.figures([100.0], 1.0, None)["measured"] is False


def test_the_counters_are_the_start_lines_and_each_sample_must_read_them_all() -> None:
    """A node's counted counters are fixed at the start line: a sample without one (a GPU read at the start only,
    which would have counted 0 W) leaves the node without a figure, and a counter that appears later (NVML beside
    a Cray node counter that went unreadable) is never added to the node it is inside."""
    gpu_start = [to_record(Reading("powercap", "package-0", 0.0, 0.0, 1e9)),
                 to_record(Reading("nvml", "gpu0", 0.0, 0.0))]
    events = energy_log({})
    events[1]["energy"] = [{"host": "a", "readings": gpu_start, "problems": []}]
    events[1]["hosts"] = [{"host": "a"}]
    events.insert(2, {"event": "monitor", "time": 100.0, "host": "a",
                      "energy": [to_record(Reading("powercap", "package-0", 5_000.0, 100.0, 1e9))]})
    record = ledger_of(events).figures([100.0], 1.0, None)
    assert record["measured"] is False and "lacks nvml gpu0" in record["why"], record
    events = energy_log({"a": [(0, 0.0)]})
    events.insert(2, {"event": "monitor", "time": 100.0, "host": "a",
                      "energy": [pm_record(30_000, 100.0), to_record(Reading("nvml", "gpu0", 50_000.0, 100.0))]})
    record = ledger_of(events).figures([100.0], 1.0, None)
    assert record["watts"] == pytest.approx(300.0), record  # the node's counter alone: the GPU is inside it


def test_mllogs_power_lines_are_each_nodes_steps_between_the_measurement_marks(tmp_path) -> None:
    """MLPerf's power keys (issue 53, item 3) from the events as logged: node a steps 1,000 → 11,000 J over 33.3 s
    (300.3 W) then → 31,000 J at 99 s (304.4 W); node b 500 → 20,500 J over 100 s (200 W); the start at the
    system event, the stop at run_stop; a segment with no measured node has none of them."""
    from aiperf_mpi.job.mllog import MLLogWriter
    from aiperf_mpi.results.mllog_format import read_lines

    def lines_of(events: list[dict], folder: Path) -> list[dict]:
        folder.mkdir()
        writer = MLLogWriter(folder)
        for event in events[:-1]:
            writer.energy(event)
        writer.run_stop("time limit", events[-1]["time"])
        writer.close()
        return [r for r in read_lines(folder / "mllog.log") if r["key"].startswith("power_")]

    events = energy_log({"a": [(1_000, 0.0), (11_000, 33.3), (31_000, 99.0)], "b": [(500, 0.0), (20_500, 100.0)]})
    power = lines_of(events, tmp_path / "measured")
    assert [r["key"] for r in power] == ["power_measurement_start", *["power_reading"] * 3, "power_measurement_stop"]
    assert (power[0]["time_ms"], power[-1]["time_ms"]) == (100, 100_000)  # the system event, run_stop
    readings = [(r["metadata"]["host"], r["time_ms"], r["value"]) for r in power[1:-1]]
    assert readings == [("a", 33_300, pytest.approx(10_000 / 33.3)), ("a", 99_000, pytest.approx(20_000 / 65.7)),
                        ("b", 100_000, pytest.approx(200.0))]  # fmt: skip
    assert lines_of(energy_log({}, unmeasured=("a",)), tmp_path / "unmeasured") == []


def metered_run(tmp_path: Path) -> Path:
    """A consistent run (tests/support/verify_runs.py) whose node h0 read a Cray node counter at the start line and
    at four monitor samples, 3 kW throughout, rescored and its mllog.log written again as the master writes it."""
    from tests.support.verify_runs import consistent_run, forge

    run_dir = consistent_run(tmp_path / "run", dataset="digits")

    def metered(events: list[dict]) -> None:
        system = next(e for e in events if e["event"] == "system")
        start = system["time"]
        system["energy"] = [{"host": "h0", "readings": [pm_record(1e6, start)], "problems": []}]
        samples = [{"event": "monitor", "time": when, "group": 0, "host": "h0", "node": 0, "source": "none",
                    "devices": [], "energy": [pm_record(1e6 + 3000 * (when - start), when)]}
                   for when in (1020.0, 1040.0, 1060.0, 1080.0)]  # fmt: skip
        events[:] = sorted([*events, *samples], key=lambda e: e["time"])

    forge(run_dir, metered)
    return run_dir


def mllog_row(run_dir: Path):
    from analysis.verify import verify

    return next(c for c in verify(run_dir).checks if c.name == "mllog.log")


def test_verify_holds_mllogs_power_lines_to_the_readings_and_names_what_no_reading_makes(tmp_path) -> None:
    """Issue 53's power lines in a whole run: each of the four steps at 3 kW, between the marks, passes; a line of
    a host that is no string, a second start, and a reading the log does not make are each named, never a crash."""
    from aiperf_mpi.results.mllog_format import read_lines

    run_dir = metered_run(tmp_path)
    row = mllog_row(run_dir)
    assert row.verdict == "ok" and "4 of 4 power steps equal their nodes' readings" in row.summary, row.problems
    power = [r for r in read_lines(run_dir / "mllog.log") if r["key"] == "power_reading"]
    assert [r["value"] for r in power] == [pytest.approx(3000.0)] * 4
    honest = (run_dir / "mllog.log").read_text()
    lines = honest.splitlines()
    at = next(i for i, line in enumerate(lines) if '"power_reading"' in line)
    forgeries = {
        "a host no string": (lines[at].replace('"host": "h0"', '"host": ["h0"]'), "power_reading: no host"),
        "a second start": (next(x for x in lines if '"power_measurement_start"' in x),
                           "power_measurement_start"),  # its time or its repetition
        "an added reading": (lines[at].replace('"host": "h0"', '"host": "h1"'), "that no monitor sample of segment 1"),
        "a second reading of the sample": (lines[at].replace('"value": 3000', '"value": 9999'),
                                           'power_reading of "h0"'),  # after its match: one no sample gives
        "another event type": (lines[at].replace("POINT_IN_TIME", "INTERVAL_START"), "event type"),
    }  # fmt: skip
    for name, (added, said) in forgeries.items():
        (run_dir / "mllog.log").write_text("\n".join([*lines[: at + 1], added, *lines[at + 1:]]) + "\n")
        row = mllog_row(run_dir)
        assert row.verdict != "ok" and any(said in p for p in row.problems), (name, row.problems)
    # review's forgeries of place and time (each passed once): a duplicate read ahead of the honest line, a reading
    # whose time_ms the summarizer integrates by is not the writer's (its true time kept in event_time_ms), and a
    # power line before the segment's run_start
    record = json.loads(lines[at].split(":::MLLOG ", 1)[1])
    early = json.loads(lines[at].split(":::MLLOG ", 1)[1])
    early["value"] = 99999.0
    moved = {**record, "time_ms": 1, "metadata": {**record["metadata"], "event_time_ms": record["time_ms"]}}
    opened = next(i for i, line in enumerate(lines) if '"key": "run_start"' in line)
    cases = {
        "read ahead": ([*lines[:at - 3], ":::MLLOG " + json.dumps(early), *lines[at - 3:]], 'power_reading of "h0"'),
        "time_ms": ([*lines[:at], ":::MLLOG " + json.dumps(moved), *lines[at + 1:]], "time_ms 1, the writer's"),
        "before run_start": ([*lines[:opened], lines[at].replace('"h0"', '"h9"'), *lines[opened:]],
                             "a power line before its segment's run_start"),
    }  # fmt: skip
    for name, (text, said) in cases.items():
        (run_dir / "mllog.log").write_text("\n".join(text) + "\n")
        row = mllog_row(run_dir)
        assert row.verdict != "ok" and any(said in p for p in row.problems), (name, row.problems)


@pytest.mark.parametrize(("first", "second"), [(True, True), (True, False), (False, True)],
                         ids=["both measured", "the first only", "the second only"])  # fmt: skip
def test_a_resumed_runs_power_lines_pass_segment_by_segment(tmp_path, first: bool, second: bool) -> None:
    """A forger's review: a resumed run whose first segment was measured failed its start line (its node count was
    read after the ledger had opened the second segment). Each measured segment's lines pass; one not measured
    has none."""
    from tests.support.verify_runs import consistent_run, forge, resumed_events

    def metered(events: list[dict], at: int, times: tuple[float, ...]) -> list[dict]:
        system = next(e for e in events[at:] if e["event"] == "system")
        start = system["time"]
        system["energy"] = [{"host": "h0", "readings": [pm_record(1e6, start)], "problems": []}]
        return [{"event": "monitor", "time": t, "group": 0, "host": "h0", "node": 0, "source": "none", "devices": [],
                 "energy": [pm_record(1e6 + 3000 * (t - start), t)]} for t in times]  # fmt: skip

    run_dir = consistent_run(tmp_path / "run", dataset="digits")

    def resumed(events: list[dict]) -> list[dict]:
        both = resumed_events([e for e in events if e["event"] != "score"], run_dir, lambda again: None)
        second_start = [i for i, e in enumerate(both) if e["event"] == "run_start"][1]
        samples = metered(both, 0, (1020.0, 1040.0, 1060.0, 1080.0)) if first else []
        samples += metered(both, second_start, (1220.0, 1240.0, 1260.0, 1280.0)) if second else []
        return sorted([*both, *samples], key=lambda e: e["time"])

    forge(run_dir, resumed)
    row = mllog_row(run_dir)
    steps = 4 * (first + second)
    assert row.verdict == "ok" and f"{steps} of {steps} power steps" in row.summary, (row.problems, row.summary)
