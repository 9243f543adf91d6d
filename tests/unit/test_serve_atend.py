"""``--serve-at-end`` without MPI or TensorFlow: the option, when a run's end serves, the ``serve run`` command the
training ranks are given, and ``serve.json``, which holds inference figures and never a figure of the score.

The serving itself (publish, every training rank serving, the check, verify) is tests/mpi/test_serve_at_end.py
(long: it launches the benchmark with TensorFlow).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aiperf_mpi.cli import build_parser, check_mode
from aiperf_mpi.errors import UsageError
from aiperf_mpi.results.score import Score
from aiperf_mpi.serve.atend import (
    END_MARGIN,
    LEAST_SECONDS,
    UNBOUNDED,
    ServePaths,
    figures_line,
    serve_arguments,
    serve_options,
    serve_record,
    time_left,
    why_not_serve,
)
from aiperf_mpi.serve.runner import checked_options, default_log_dir


def test_the_option_is_off_by_default_and_takes_an_optional_ensemble_size() -> None:
    parser = build_parser()
    assert parser.parse_args([]).serve_at_end is None
    assert parser.parse_args(["--serve-at-end"]).serve_at_end == 1
    assert parser.parse_args(["--serve-at-end", "4"]).serve_at_end == 4


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_ensemble_size_is_one_usage_error_naming_the_option(value: str) -> None:
    with pytest.raises(UsageError, match="argument --serve-at-end: ") as caught:
        build_parser().parse_args(["--serve-at-end", value])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--serve-at-end", "--no-report"], "--serve-at-end does not apply with --no-report"),
    (["--serve-at-end", "2", "--layout"], "--serve-at-end does not apply to --layout"),
])  # fmt: skip
def test_the_option_is_refused_where_it_would_be_ignored(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_mode(build_parser().parse_args(argv))


def test_with_resume_the_option_applies_to_the_resumed_segments_end() -> None:
    check_mode(build_parser().parse_args(["--resume", "runs/x", "--serve-at-end", "2"]))  # no error


@pytest.mark.parametrize(("outcome", "rehearse", "dataset", "why"), [
    ("done", False, "digits", ""),
    ("done", False, "hdf5", ""),
    ("done", False, "imagenet", "reads digits and hdf5 data, not imagenet"),
    ("done", True, "digits", "a rehearsal trains no model"),
    ("done", False, "synthetic", "synthetic data has no accuracy"),
    ("terminated", False, "digits", "did not end normally (terminated)"),
    ("grace expired", False, "digits", "did not end normally (grace expired)"),
])  # fmt: skip
def test_a_run_serves_at_its_end_only_when_the_export_would_run(outcome, rehearse, dataset, why) -> None:
    found = why_not_serve(outcome, rehearse, dataset)
    assert (found == "") == (why == "") and why in found


def test_serving_takes_what_is_left_of_the_end_deadline_less_a_margin() -> None:
    assert time_left(None) == UNBOUNDED
    assert time_left(900.0) == 900.0 - END_MARGIN
    assert time_left(END_MARGIN + LEAST_SECONDS - 1) < LEAST_SECONDS  # too little: skipped with a line


def test_the_training_ranks_run_serve_runs_own_options_on_the_runs_folder(tmp_path) -> None:
    paths = ServePaths(tmp_path / "run", 2)
    options = checked_options(serve_options(serve_arguments(paths, "digits:validation", 32, 5.0)))
    assert options.bundle == tmp_path / "run" / "serve" / "segment-2" / "bundle"
    assert options.log_dir == paths.log_dir and options.out.parent == paths.log_dir  # the check finds it there
    assert options.log_dir != default_log_dir(options.out)
    assert (options.data, options.scenarios, options.batch, options.peak_seconds) == ("digits:validation", "offline",
                                                                                      32, 0.0)  # fmt: skip
    assert options.progress_interval == 5.0
    assert paths.record == tmp_path / "run" / "serve.json"


SUMMARY = {
    "servable": "run-top2", "type": "ensemble", "ranks": 3, "host": "vm", "data": "digits:validation",
    "samples": 360, "forward_ops_per_sample": 1000,
    "offline": {"batch": 32, "samples": 360, "seconds": 0.5, "samples_per_second": 720.0, "ops": 360_000,
                "ops_per_second": 720_000.0, "peak_ratio": None},
    "samples_per_second_per_rank": [250.0, 240.0, 230.0], "peak_ops_per_second": None, "time_to_solution": 3.0,
    "accuracy": {"ensemble": 0.5, "members": {"task-7": 0.45, "task-1": 0.4}},
}  # fmt: skip
"""a serving log's summary.json (:func:`aiperf_mpi.serve.check.summary_of`) as an in-job serving writes it"""


def test_serve_json_holds_the_inference_figures_and_nothing_of_the_score(tmp_path) -> None:
    paths = ServePaths(tmp_path, 1)
    record = serve_record(SUMMARY, [], paths, 2, 3, 7.5)
    assert (record["bundle"], record["log_dir"]) == ("serve/segment-1/bundle", "serve/segment-1/log")  # relative
    assert record["samples_per_second"] == 720.0 and record["samples_per_second_per_rank"] == [250.0, 240.0, 230.0]
    assert record["inference_ops_per_second"] == 720_000.0 and record["accuracy"] == SUMMARY["accuracy"]
    assert record["time_to_solution"] == 7.5 + 3.0 and record["check"] == "PASS" and record["groups"] == 3
    score_fields = set(Score(0.0, None, 0.0, 0, None, 0, 0, 0, 1, False).to_dict())
    assert not score_fields & set(record), score_fields & set(record)  # beside the score, never in it
    assert serve_record(SUMMARY, ["a problem"], paths, 2, 3, 7.5)["check"] == "FAIL"
    unlabelled = {k: v for k, v in SUMMARY.items() if k != "accuracy"}
    assert "accuracy" not in serve_record(unlabelled, [], paths, 2, 3, 7.5)


def test_the_figures_line_names_every_figure(tmp_path) -> None:
    line = figures_line(serve_record(SUMMARY, [], ServePaths(tmp_path, 1), 2, 3, 7.5), Path(tmp_path))
    for shown in ("ensemble of 2 on 3 rank(s) of 3 group(s)", "720.0 samples/s (230.0–250.0 per rank)",
                  "0.001 G inference ops/s", "accuracy 0.5000 (members task-7 0.4500, task-1 0.4000)",
                  "time to solution 10.5 s (publish 7.5 s)", "check PASS",
                  "beside the score, never in it"):  # fmt: skip
        assert shown in line, (shown, line)


def test_a_run_end_with_too_little_of_its_deadline_left_serves_nothing_and_says_so(tmp_path, capsys) -> None:
    """The end's own watchdog (a clock the test holds still): 40 s left of --end-deadline is less than the margin
    for MPI's end and the least serving is begun with, so nothing is published; one warning line."""
    from aiperf_mpi.config import RunConfig
    from aiperf_mpi.job.deadlines import THE_END, Watchdog
    from aiperf_mpi.job.session import ServingAtEnd
    from aiperf_mpi.serve.atend import plan_on_master

    fired: list[int] = []
    watchdog = Watchdog(0, "h0", fired.append, clock=lambda: 1000.0)
    watchdog.enter(THE_END, END_MARGIN + LEAST_SECONDS - 10, "the score is on disk", 5)
    end = ServingAtEnd(None, "master", tmp_path, 1, 2, RunConfig(dataset="digits"), "done", watchdog)
    plan = plan_on_master(end, 2)
    assert plan == {"skip": f"only {END_MARGIN + LEAST_SECONDS - 10:.0f} s of --end-deadline are left"}
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"aiperf_mpi: warning: no serving at the end: {plan['skip']}"]
    assert not (tmp_path / "serve").exists() and fired == []


def test_the_report_has_a_serving_section_only_when_the_run_served(tmp_path) -> None:
    """analysis.report reads serve.json beside score.json into a section of its own (the section alone is built
    here: a whole report's plots cost seconds)."""
    import json

    from aiperf_mpi.results.logmodel import read_model
    from analysis.metrics import run_score
    from analysis.report import _Builder
    from tests.support.event_logs import known_run

    run_dir = known_run(tmp_path / "run")
    run = read_model(run_dir)

    def section() -> str:
        builder = _Builder(run, run_score(run), tmp_path)
        builder.serving()
        return builder.doc.markdown(tmp_path)

    assert "Serving at the end" not in section()
    (run_dir / "serve.json").write_text(json.dumps(serve_record(SUMMARY, [], ServePaths(run_dir, 1), 2, 3, 7.5)))
    text = section()
    assert "## Serving at the end (inference, not part of the score)" in text
    for row in ("| servable | ensemble of 2 (run-top2) |",
                "| served on | 3 training rank(s) of 3 group(s), segment 1 |",
                "| samples/s | 720.0 in all; per rank 230.0 – 250.0 |",
                "| inference ops/s | 720 kOPS (1 k analytic",
                "| accuracy | 0.5000 (members: task-7 0.4500, task-1 0.4000) |",
                "| reviewer's check | PASS at the run's end"):  # fmt: skip
        assert row in text, (row, text)
    (run_dir / "serve.json").write_text("{")
    assert "`serve.json` cannot be read: JSONDecodeError" in section()


def test_an_unexpected_error_on_rank_0_is_one_warning_line_never_an_exception(capsys) -> None:
    from aiperf_mpi.serve.atend import guarded

    def broken() -> dict:
        raise KeyError("members")

    assert guarded(broken, {"skip": "an error"}) == {"skip": "an error"}
    assert capsys.readouterr().err == "aiperf_mpi: warning: no serving at the end: KeyError: 'members'\n"
    assert guarded(lambda: {"argv": []}, None) == {"argv": []}
