"""The run report, scaling and comparison on hand-made logs with answers worked out by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.image import imread

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import parse_line
from aiperf_mpi.results.logmodel import read_model as load_run
from aiperf_mpi.results.score import active_times, compute_score, score_run
from analysis import compare, report, scaling
from analysis.metrics import group_times, load_summary, measured_peak, no_monitor_reason, run_score, time_split
from analysis.report import write_report
from tests.support.browser import static_offenders
from tests.support.event_logs import epoch, known_run, model_done, proposed, scaled_run, start, write_log

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SECTIONS = (
    "Summary", "Validity", "Score over time", "Accuracy", "Timeline per group", "Time split",
    "Utilisation and memory", "Best model: operations by layer type", "Failures", "Data staging", "The event log",
)  # fmt: skip


def test_known_run_scores_exactly_on_the_grid(tmp_path) -> None:
    run = load_run(known_run(tmp_path / "run"))
    score = run_score(run)
    assert [s.active_time for s in score.grid] == [50.0, 100.0]
    assert [s.ops for s in score.grid] == [600, 1800]
    assert [s.ops_per_second for s in score.grid] == [12.0, 18.0]
    assert score.score == 18.0 and score.total_ops == 1800
    assert score.best_accuracy == 0.75
    assert score.regulated_score == pytest.approx(18.0 * -math.log(0.25), rel=1e-15)
    assert score.grid[0].regulated == pytest.approx(12.0 * -math.log(0.5), rel=1e-15)
    assert (score.models_trained, score.models_failed, score.epochs, score.segments) == (1, 1, 3, 1)
    assert score.valid and [name for name, rule in score.rules.items() if rule["ok"]] == [
        "dataset", "error", "precision", "algorithms", "training"]  # fmt: skip
    assert score.rules["error"]["value"] == pytest.approx(0.25)


def test_the_streamed_score_is_the_list_score(tmp_path) -> None:
    """The report's reader feeds the score module as the run's own score_run does: same Score."""
    run_dir = known_run(tmp_path / "run")
    events = runlog.read_events(run_dir).events
    listed = compute_score(events, step=50.0)
    assert run_score(load_run(run_dir)).to_dict() == listed.to_dict()
    assert score_run(run_dir).to_dict() == listed.to_dict()


@pytest.mark.parametrize(
    ("dataset", "precision", "hpo", "accuracy", "broken"),
    [
        ("cifar10", "fp16", "tpe", 0.75, ["dataset"]),
        ("imagenet", "fp16", "tpe", 0.69, ["error"]),
        ("imagenet", "fp8", "tpe", 0.75, ["precision"]),
        ("imagenet", "bf16", "random", 0.75, ["algorithms"]),
        ("synthetic", "fp32", "tpe", 0.9, ["dataset", "error"]),
    ],
)
def test_each_validity_rule(tmp_path, dataset, precision, hpo, accuracy, broken) -> None:
    write_log(tmp_path, [start(0, dataset=dataset, precision=precision, hpo=hpo),
                         epoch(0, 0, 1, 0, 10, 100, accuracy), {"event": "run_stop", "time": 20}])  # fmt: skip
    score = run_score(load_run(tmp_path))
    assert [name for name, rule in score.rules.items() if not rule["ok"]] == broken
    assert score.valid is False
    if dataset == "synthetic":
        assert score.regulated_score is None and score.best_accuracy is None


def test_efficiency_time_split_and_group_times(tmp_path) -> None:
    run = load_run(known_run(tmp_path / "run"))
    score = run_score(run)
    peak = measured_peak(run)
    assert peak.ops_per_second == 400.0 and peak.groups_measured == 2
    summary = load_summary(tmp_path / "run")
    assert summary.efficiency == 18.0 / 400.0
    assert summary.models_per_minute == pytest.approx(1 / (100 / 60))
    assert summary.ops_per_group == 9.0 and summary.staging_seconds == 2.5
    groups = group_times(run, score.active_time)
    assert [g.idle for g in groups] == [40.0, 5.0]
    assert [g.longest_gap for g in groups] == [30.0, 5.0]
    assert groups[1].failures.tolist() == [96.0]
    split = time_split(run, groups, score.active_time)
    assert split.group_seconds == 200.0
    assert (split.compute, split.evaluation, split.data_wait) == (125.0, 11.0, 1.5)
    assert split.compile == 0.75  # one epoch carries it; the others predate the field
    assert split.other_in_epochs == pytest.approx(1.75)
    assert groups[0].compile[1].tolist() == [5.75] and len(groups[1].compile[0]) == 0
    assert (split.search, split.setup, split.idle) == (3.0, 12.0, 45.0)


def test_no_peak_and_no_monitor_say_why(tmp_path) -> None:
    run_dir = known_run(tmp_path / "run", monitor=False, peaks=False)
    peak = measured_peak(load_run(run_dir))
    assert peak.ops_per_second is None and "no group reported" in peak.why_not
    text = write_report(run_dir).read_text()
    assert "**No monitor samples**: the monitor was on (every 10 s) but no sample reached the log" in text
    assert "not measured: the probe was on but no group reported a peak" in text
    off = load_run(write_log(tmp_path / "off", [start(0, monitor_interval=0.0, peak_probe=False),
                                                epoch(0, 0, 1, 0, 5, 10, 0.5),
                                                {"event": "run_stop", "time": 10}]))  # fmt: skip
    assert no_monitor_reason(off, 10.0) == "the monitor was off (`monitor_interval` = 0)"
    assert measured_peak(off).why_not == "the peak probe was off (`--no-peak-probe`)"
    short = load_run(write_log(tmp_path / "short", [start(0, monitor_interval=60.0),
                                                    {"event": "run_stop", "time": 10}]))  # fmt: skip
    assert no_monitor_reason(short, 10.0) == "the run (10 s active) was shorter than one monitor interval (60 s)"
    old = write_log(tmp_path / "old", [{"event": "run_start", "time": 0, "config": {"dataset": "digits"}},
                                       {"event": "run_stop", "time": 10}])  # fmt: skip
    text = write_report(old).read_text()  # no group, no epoch, no model: still every section
    assert "without the utilisation monitor" in text and "the log has no peak events" in text
    assert all(f"\n## {section}\n" in text for section in SECTIONS)


def test_a_resumed_run_counts_only_active_time(tmp_path) -> None:
    run_dir = write_log(tmp_path, [
        start(0), epoch(0, 0, 1, 10, 50, 1000, 0.5), {"event": "run_stop", "time": 100},
        start(1000), epoch(1, 0, 1, 1010, 1040, 1000, 0.8), epoch(1, 0, 2, 1045, 1070, 999, 0.9),
    ])  # fmt: skip  (the second segment was killed: it ends at its last event, 1070.5)
    run = load_run(run_dir)
    score = run_score(run, step=60.0)
    assert run.segments == [(0, 100), (1000, 1070.5)]
    assert score.segments == 2 and score.active_time == 170.5
    assert [s.active_time for s in score.grid] == [60.0, 120.0, 170.5]
    assert [s.ops for s in score.grid] == [1000, 1000, 2999]
    assert score.score == 2999 / 170.5
    assert run.active(run.column("end")).tolist() == [50.0, 140.0, 170.0]
    assert run.active(run.column("start")).tolist() == [10.0, 110.0, 145.0]
    text = write_report(run_dir).read_text()
    assert "2 segment(s)" in text and "The last segment has no `run_stop`: it was killed" in text


def test_active_times_matches_the_one_by_one_definition() -> None:
    segments = [(0.0, 100.0), (1000.0, 1070.0), (2000.0, 2010.0)]

    def one(t: float) -> float:
        total = 0.0
        for s, e in segments:
            if t <= s:
                break
            total += min(t, e) - s
        return total

    times = np.random.default_rng(1).uniform(-50, 2100, 1000)
    assert active_times(times, segments).tolist() == [one(t) for t in times]


def test_a_truncated_last_line_is_tolerated_and_reported(tmp_path) -> None:
    run_dir = known_run(tmp_path / "run", tail='{"event":"epoch","time":1099.5,"task":0,"gro')
    run = load_run(run_dir)
    assert run.truncated_tail and run.truncated_line.startswith('{"event":"epoch","time":1099.5')
    assert run_score(run).truncated_log and run_score(run).total_ops == 1800
    text = write_report(run_dir).read_text()
    assert "**The log's last line was cut off** (the run was killed mid-write); it was skipped" in text
    assert '`{"event":"epoch","time":1099.5,"task":0,"gro…`' in text
    assert "| log | last line truncated (killed mid-write), skipped |" in text
    lines = (run_dir / runlog.EVENTS_FILE).read_text().splitlines()
    (run_dir / runlog.EVENTS_FILE).write_text("\n".join([lines[0], "{broken", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"events.jsonl:2: not a JSON line"):
        load_run(run_dir)


def test_a_line_that_starts_as_an_epoch_but_is_not_one_is_not_counted(tmp_path) -> None:
    """The fast epoch reader trusts the line's prefix only to choose its parser: a later "event" key (every
    reader keeps the last of two) makes the line another event, as verify and the score read it."""
    run_dir = known_run(tmp_path / "run")
    honest = load_run(run_dir)
    lines = (run_dir / runlog.EVENTS_FILE).read_text().splitlines()
    fake = json.dumps(epoch(0, 0, 3, 1071.0, 1072.0, 10**15, 0.99), separators=(",", ":"))[:-1] + ',"event":"note"}'
    assert fake.startswith('{"event":"epoch",') and json.loads(fake)["event"] == "note"
    (run_dir / runlog.EVENTS_FILE).write_text("\n".join([*lines[:-1], fake, lines[-1]]) + "\n")
    forged = load_run(run_dir)
    assert len(forged.epochs) == len(honest.epochs) and run_score(forged).total_ops == run_score(honest).total_ops


def test_model_done_is_read_without_its_epoch_list() -> None:
    event = {"event": "model_done", "time": 1.0, "model": {"id": 3, "graph": '{"a":[1,2]}', "epochs": [
        {"epoch": 1, "ops": 5}, {"epoch": 2, "ops": 6}], "accuracy": 0.5}, "task": 3, "group": 0}  # fmt: skip
    slim = parse_line(json.dumps(event, separators=(",", ":")))
    assert slim["model"]["epochs"] is None and slim["model"]["graph"] == '{"a":[1,2]}' and slim["task"] == 3
    event["model"]["epochs"][0]["note"] = [1]  # not a flat epoch: parsed whole instead
    assert parse_line(json.dumps(event))["model"]["epochs"] == event["model"]["epochs"]
    with pytest.raises(ValueError):
        parse_line(json.dumps(event)[:-5])


def _check_png(path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    pixels = imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 500, (path, pixels.shape)
    assert float(pixels[..., :3].std()) > 0.01, f"{path} is blank"


def test_the_report_has_every_section_and_valid_images(tmp_path) -> None:
    markdown = write_report(known_run(tmp_path / "run"))
    assert markdown == tmp_path / "run" / "report" / "report.md"
    text = markdown.read_text()
    html = (markdown.parent / "report.html").read_text()
    for section in SECTIONS:
        assert f"\n## {section}\n" in text, section
        assert f">{section}</h2>" in html.replace("&#x27;", "'"), section
    images = ["score.png", "best_accuracy.png", "accuracy_vs_ops.png", "timeline.png", "utilisation.png",
              "op_breakdown.png"]  # fmt: skip
    for name in images:
        assert f"]({name})" in text
        _check_png(markdown.parent / name)
    offenders, count = static_offenders(html)
    assert offenders == [] and count == len(images) == html.count('src="data:image/png;base64,')
    assert "data-images-loaded" in html
    for expected in (
        "| score | **18 OPS** (18 operations/s) |",
        "| verdict | **valid run** |",
        "| efficiency against the measured peak | 4.5 % of the measured peak 400 OPS (fp16 matrix multiply, 2 of 2",
        "| models trained / failed | 1 / 1 |",
        "| best error | 0.2500 (accuracy 0.7500) |",
        "| data staging | 2.50 s (slowest node; 1 MB on 1 node(s)) |",
        "| idle | 45.00 s | 22.5 % |",
        "| search | 3.00 s | 1.5 % |",
        "| error | 0.2500 | ≤ 0.3 | ✔ ok |",
        "| 96.00 s | 1 | 1 | 3 | h0 | ResourceExhaustedError: OOM |",
        "The recount matches the forward count the run logged.",
        "| 0 | h0 | 2 | 1 | 0 | 2 | 55.0 % | 40.0 % | 2 | 30.00 s | 100 OPS |",
        "| 1 | h0 | 2 | 0 | 1 | 1 | 85.0 % | 5.0 % | 1 | 5.00 s | 300 OPS |",
    ):
        assert expected in text, expected


def test_a_big_layout_draws_a_heat_map_and_aggregated_monitor(tmp_path) -> None:
    from tests.support.synthetic_log import write_synthetic_log

    held = write_synthetic_log(tmp_path / "run", models=120, epochs=1200, groups=40)
    markdown = write_report(tmp_path / "run", tmp_path / "out")
    text = markdown.read_text()
    assert "a heat map: the share of each time bin each group spent in epochs" in text
    assert "… 8 more groups." in text
    for name in ("timeline.png", "utilisation.png", "score.png"):
        _check_png(tmp_path / "out" / name)
    run = load_run(tmp_path / "run")
    assert len(run.epochs) == held["epochs"] == 1200 and len(run.models) + len(run.failures) == 120


def test_scaling_over_three_runs(tmp_path, capsys) -> None:
    runs = [scaled_run(tmp_path / name, groups, ops) for name, groups, ops in
            (("large", 4, 800), ("small", 1, 1000), ("medium", 2, 900))]  # fmt: skip
    rows = scaling.scaling([load_summary(r) for r in runs])
    assert [r.summary.name for r in rows] == ["small", "medium", "large"]
    assert [r.summary.ops_per_group for r in rows] == [10.0, 9.0, 8.0]
    assert [r.efficiency for r in rows] == [1.0, 0.9, 0.8]
    assert [r.summary.models_per_minute for r in rows] == [pytest.approx(0.6), pytest.approx(1.2), pytest.approx(2.4)]
    assert scaling.main([str(r) for r in runs] + ["--out", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out
    assert "| small | 3 | 1 | 10 OPS | 10 OPS | 0.6 | 100.0 % |" in table
    assert "| medium | 5 | 2 | 18 OPS | 9 OPS | 1.2 | 90.0 % |" in table
    assert "| large | 9 | 4 | 32 OPS | 8 OPS | 2.4 | 80.0 % |" in table
    _check_png(tmp_path / "out" / "scaling.png")
    assert table in (tmp_path / "out" / "scaling.md").read_text()


def test_compare_two_runs(tmp_path, capsys) -> None:
    a, b = scaled_run(tmp_path / "a", 1, 1000), scaled_run(tmp_path / "b", 2, 900)
    assert compare.main([str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    table = capsys.readouterr().out
    assert "| score | 10 OPS | 18 OPS | 1.8× |" in table
    assert "| OPS per group | 10 OPS | 9 OPS | 0.9× |" in table
    assert "| groups | 1 | 2 | 2× |" in table
    assert "| verdict | unofficial (error) | unofficial (error) |  |" in table
    assert (tmp_path / "out" / "compare.md").read_text().endswith(table)
    assert compare.main([str(a), str(tmp_path / "missing")]) == 2


def test_the_cli_and_write_report_import_neither_tensorflow_nor_mpi(tmp_path) -> None:
    run_dir = known_run(tmp_path / "run")
    code = (
        "import sys; from analysis import write_report; path = write_report(sys.argv[1], sys.argv[2]); "
        "print(path); assert 'tensorflow' not in sys.modules and 'mpi4py' not in sys.modules, 'heavy import'"
    )
    done = subprocess.run([sys.executable, "-c", code, str(run_dir), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "out" / "report.md")


def test_the_cli_names_a_missing_log(tmp_path, capsys) -> None:
    assert report.main([str(tmp_path / "nothing")]) == 2
    assert "analysis.report: error: no event log at" in capsys.readouterr().err


def test_a_model_given_up_at_the_time_limit_and_a_failed_set_up_are_accounted(tmp_path) -> None:
    """Group 0 trains 5–30, then a model proposed at 40 ends with no epoch at 58 (given up at the time limit);
    group 1's model fails at 20 before its first epoch (set-up 2–20). Before, both showed as idle."""
    e1 = epoch(0, 0, 1, 1005, 1030, 600, 0.5, compute=25)
    given_up = {**model_done(2, 0, 1058, 0.0, []), "model": {**model_done(2, 0, 1058, 0.0, [])["model"],
                                                            "status": "failed", "accuracy": None}}  # fmt: skip
    events = [start(1000), proposed(0, 0, 1001, 1.0), proposed(1, 1, 1002, 2.0), e1,
              model_done(0, 0, 1031, 0.5, [e1]), proposed(2, 0, 1040, 1.0), given_up,
              {"event": runlog.MODEL_FAILED, "time": 1020, "task": 1, "group": 1, "model": 1, "rank": 3, "host": "h0",
               "reason": "ResourceExhaustedError: OOM", "traceback": "Traceback ..."},
              {"event": runlog.RUN_STOP, "time": 1060, "reason": "time limit", "discarded_tasks": [], "segment": 1}]
    run = load_run(write_log(tmp_path, events))
    groups = group_times(run, 60.0)
    assert groups[0].given_up[0].tolist() == [40.0] and groups[0].given_up[1].tolist() == [58.0]
    assert groups[1].setup[0].tolist() == [2.0] and groups[1].setup[1].tolist() == [20.0]
    split = time_split(run, groups, 60.0)
    assert (split.given_up, split.setup) == (18.0, 4.0 + 18.0)
    assert [g.idle for g in groups] == [9.0 + 2.0, 40.0]  # 30–39 (a search 39–40) and 58–60; 20–60


def test_by_group_slices_as_a_mask_per_group_would() -> None:
    """The per-group pass's slices (one sort, linear in the log) hold what a mask per group held, in order;
    values outside the groups (none in a log that verifies) fall in no group, as before."""
    from analysis.metrics import by_group

    rng = np.random.default_rng(0)
    groups = rng.integers(-1, 12, size=500)
    of = by_group(groups, 10)
    for group in range(10):
        assert of(group).tolist() == np.flatnonzero(groups == group).tolist()
    assert by_group(np.array([], dtype=int), 3)(2).tolist() == []
