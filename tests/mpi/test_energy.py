"""Energy to solution through ``mpirun … python -m aiperf_mpi`` (issue 53), on a Cray pm_counters tree the test
keeps counting.

No meter exists on the development machine, so the node's meter is a tree in HPE's documented layout
(``/sys/cray/pm_counters/energy``: ``VALUE J TIMESTAMP_US``) that a thread of this test advances at a known
power, named to the ranks by ``AIPERF_PM_COUNTERS`` (what a site whose sysfs is mounted elsewhere sets).  The
run's readings, its figures beside the score and verify's recomputation are the product's own; the counter's
law is the hand calculation they must match.  A run without the variable is the development machine's: energy
not measured, said why, the score unchanged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from tests.support.mpirun import run_mpi

WATTS = 350
"""the fixture meter's node power"""
REHEARSAL = ["-m", "aiperf_mpi", "--rehearse", "--rehearse-rate", "2e10", "--group-size", "1", "--seed-model",
             "tiny", "--time-limit", "20", "--score-step", "5", "--monitor-interval", "2", "--no-report",
             "--progress-interval", "10"]  # fmt: skip


class CountingMeter:
    """A pm_counters tree whose ``energy`` counts ``WATTS`` from a base, rewritten every 0.2 s with the time it
    was read at (each file replaced whole, as the kernel's read of it is)."""

    def __init__(self, root: Path, base: int = 5_000_000) -> None:
        self.root, self.base, self.start = root, base, time.time()
        root.mkdir(parents=True)
        self._stop = threading.Event()
        self._write()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _write(self) -> None:
        now = time.time()
        joules = self.base + int(WATTS * (now - self.start))
        for name, value in (("energy", joules), ("cpu_energy", joules // 3), ("accel0_energy", joules // 2)):
            scratch = self.root / f".{name}"
            scratch.write_text(f"{value} J {int(now * 1e6)}\n")
            os.replace(scratch, self.root / name)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._write()

    def __enter__(self) -> CountingMeter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.timeout(400)
def test_a_node_meter_gives_the_hand_calculated_figures_and_verify_recomputes_them(tmp_path) -> None:
    run_dir = tmp_path / "run"
    with CountingMeter(tmp_path / "pm_counters") as meter:
        done = run_mpi(3, [*REHEARSAL, "--run-dir", str(run_dir)], timeout=300,
                       env={"AIPERF_PM_COUNTERS": str(meter.root), "AIPERF_POWERCAP": str(tmp_path / "none")})
    assert done.returncode == 0, done.output[-4000:]
    assert "aiperf_mpi: energy: measured on 1 of 1 node(s) by pm_counters, covering the node" in done.output
    events = runlog.read_events(run_dir).events
    [system] = [e for e in events if e[runlog.EVENT] == runlog.SYSTEM]
    [node] = system["energy"]
    assert {r["domain"] for r in node["readings"]} == {"node", "cpu", "accel0"}  # every counter read, one counted
    samples = [e for e in events if e[runlog.EVENT] == runlog.MONITOR and e.get("energy")]
    assert len(samples) >= 3, "the node's monitor read the meter at its samples"
    score = json.loads((run_dir / "score.json").read_text())
    energy = score["energy"]
    assert energy["measured"] is True and energy["nodes"] == 1, energy
    # the hand calculation: the counter's law is WATTS (whole joules: under 1 J of rounding over seconds)
    assert energy["watts"] == pytest.approx(WATTS, rel=0.01), energy
    assert energy["joules"] == pytest.approx(WATTS * score["active_time"], rel=0.01), energy
    assert energy["ops_per_joule"] == pytest.approx(score["total_ops"] / energy["joules"], rel=1e-9), energy
    assert "aiperf_mpi: energy: " in done.output and "G operations per joule" in done.output
    from analysis.verify import verify

    result = verify(run_dir)
    assert result.ok, result.text()
    assert any(c.name == "energy" and c.verdict == "ok" for c in result.checks), result.text()
    assert any(claim.name == "energy readings" for claim in result.trusted), result.text()
    from analysis.report import write_report

    report = write_report(run_dir, tmp_path / "report").read_text()  # the report: the figures, power over time
    assert "## Energy" in report and "G operations per joule" in report
    assert (tmp_path / "report" / "power.png").is_file()
    mllog_power_lines_are_mlperfs_and_verify_holds_them(run_dir, events)

    # a forged reading: the node's counter lower at one monitor sample than at the one before
    lines = runlog.log_path(run_dir).read_text().splitlines()
    metered = [i for i, line in enumerate(lines) if (e := json.loads(line))["event"] == "monitor" and e.get("energy")]
    at = metered[1]
    forged = json.loads(lines[at])
    for reading in forged["energy"]:
        reading["joules"] = 1.0
    lines[at] = json.dumps(forged)
    runlog.log_path(run_dir).write_text("\n".join(lines) + "\n")
    forged_result = verify(run_dir)
    [row] = [c for c in forged_result.checks if c.name == "energy"]
    assert row.verdict != "ok" and any("went down" in p for p in row.problems), forged_result.text()


@pytest.mark.timeout(300)
def test_without_a_meter_energy_is_not_measured_and_the_line_says_why(tmp_path) -> None:
    run_dir = tmp_path / "run"
    done = run_mpi(3, [*REHEARSAL, "--time-limit", "8", "--run-dir", str(run_dir)], timeout=240,
                   env={"AIPERF_PM_COUNTERS": str(tmp_path / "none"), "AIPERF_POWERCAP": str(tmp_path / "none")})
    assert done.returncode == 0, done.output[-4000:]
    assert "aiperf_mpi: energy: not measured on node " in done.output and "no /sys/cray/pm_counters" in done.output
    assert "aiperf_mpi: energy: not measured: 1 node(s) not measured" in done.output
    score = json.loads((run_dir / "score.json").read_text())
    assert score["energy"]["measured"] is False and score["score"] > 0


def mllog_power_lines_are_mlperfs_and_verify_holds_them(run_dir: Path, events: list[dict]) -> None:
    """mllog.log's power lines (issue 53) as mlcommons' own parser and result summarizer read them: one
    ``power_reading`` per stepping sample at the counter's law, between ``power_measurement_start`` and
    ``_stop``; the summarizer's node energy is that power over the readings' span; a doubled reading fails verify's
    ``mllog.log`` row, which recomputes each line from the log's readings."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer.result_summarizer import _compute_power_node

    from analysis.verify import verify

    mllog = run_dir / "mllog.log"
    loglines, errors = parse_file(str(mllog), ruleset="4.1.0")
    assert not errors, errors
    power = [line for line in loglines if line.key.startswith("power_")]
    keys = [line.key for line in power]
    assert keys[0] == "power_measurement_start" and keys[-1] == "power_measurement_stop", keys
    readings = [line for line in power if line.key == "power_reading"]
    samples = [e for e in events if e[runlog.EVENT] == runlog.MONITOR and e.get("energy")]
    assert 3 <= len(readings) <= len(samples), (len(readings), len(samples))  # a sample that steps: one line
    assert {line.value["metadata"]["host"] for line in readings} == {samples[0]["host"]}
    assert all(line.value["value"] == pytest.approx(WATTS, rel=0.05) for line in readings), readings
    start, stop = power[0].timestamp, power[-1].timestamp
    last = max(line.timestamp for line in readings)
    joules = _compute_power_node(power, stop - start)  # mlcommons' integration: watts × ms since the line before
    assert joules == pytest.approx(WATTS * (last - start) / 1000, rel=0.03), joules
    from tests.support.compliance import run_checker

    checked = run_checker(mllog)  # the package's ruleset still passes the file with its power lines
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout[-3000:]
    text = mllog.read_text().splitlines()
    at = next(i for i, line in enumerate(text) if '"power_reading"' in line)
    record = json.loads(text[at].split(":::MLLOG ", 1)[1])
    record["value"] *= 2  # a forger's doubled power: the log's readings give the honest step
    text[at] = ":::MLLOG " + json.dumps(record)
    mllog.write_text("\n".join(text) + "\n")
    forged = verify(run_dir)
    [row] = [c for c in forged.checks if c.name == "mllog.log"]
    assert row.verdict != "ok" and any("power_reading of" in p for p in row.problems), forged.text()
    mllog.write_text("\n".join([*text[:at], *text[at + 1:]]) + "\n")  # a reading dropped: the step has no line
    [row] = [c for c in verify(run_dir).checks if c.name == "mllog.log"]
    assert any("no power_reading for" in p for p in row.problems), row.problems
