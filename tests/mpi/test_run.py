"""The real benchmark, end to end: mpirun -n 3 python -m aiperf_mpi on the embedded digits."""

import json
import os

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.schema import check_event
from aiperf_mpi.results.score import score_run
from tests.support.compliance import run_checker
from tests.support.mpirun import run_mpi
from tests.support.published_model import check_the_best_after_resume, check_the_published_model

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.tf]


def test_a_real_run_scores_and_resumes_with_new_ids(digits_run, tmp_path) -> None:
    """The shared run of tests/mpi/conftest.py (DIGITS_RUN_ARGS: 70 s on digits), checked whole, then resumed."""
    run_dir, first = digits_run.run_dir, digits_run
    assert "aiperf_mpi: score" in first.output and "regulated score" in first.output
    assert "1 relay rank(s) take the 1 groups' messages for rank 0 (--relays)" in first.output
    events = runlog.read_events(run_dir).events
    [layout] = [e for e in events if e["event"] == runlog.LAYOUT]
    assert layout["relay_ranks"] == [1] and [g["ranks"] for g in layout["groups"]] == [[2, 3]]
    done = [e["model"] for e in events if e["event"] == runlog.MODEL_DONE]
    assert len(done) >= 3, [e["event"] for e in events]
    assert all(e["ops"] > 0 for e in events if e["event"] == runlog.EPOCH)
    assert [p for e in events for p in check_event(e)] == []  # the log keeps to its schema, as read back
    assert {"compile", "xla"} <= set(next(e for e in events if e["event"] == runlog.EPOCH))
    [peak] = [e for e in events if e["event"] == runlog.PEAK]  # one group, probed once at start-up
    assert peak["ranks"] == 2 and peak["ops_per_second"] > 1e8 and peak["precision"] == "fp32"
    share = max(1, len(os.sched_getaffinity(0)) // 2)  # 2 unbound training ranks share this machine's cores
    assert peak["threads"] == [{"intra": share, "inter": share}] * 2, peak
    assert "TensorFlow threads per training rank: intra-op" in first.output
    assert "aiperf_mpi: precision auto → fp32: a training rank has no GPU" in first.output  # the default, on CPUs
    first_config = next(e for e in events if e["event"] == runlog.RUN_START)["config"]
    assert first_config["precision"] == "fp32"
    assert isinstance(first_config["seed"], int)  # no --seed: drawn at start, and the drawn value logged
    monitor = [e for e in events if e["event"] == runlog.MONITOR]
    assert len(monitor) >= 5 and all(m["devices"][0]["memory_used"] > 0 for m in monitor)
    system = next(e for e in events if e["event"] == runlog.SYSTEM)
    assert system["mpi"]["vendor"] and system["tensorflow"] and system["horovod"]
    written = json.loads((run_dir / "score.json").read_text())
    assert written["score"] == pytest.approx(score_run(run_dir).score, rel=1e-12)
    # a model given up at the time limit (its first epoch would end after it: seen on a loaded machine) has
    # a model_done with no epoch and does not count as trained
    assert written["models_trained"] == sum(model.get("status", "trained") == "trained" for model in done)
    assert {"ops_cv_last_half", "ops_change_last_quarter"} <= set(written)  # how settled the score is
    mllog = (run_dir / "mllog.log").read_text()
    for key in ("run_start", "epoch_start", "epoch_stop", "eval_accuracy", "run_stop", "number_of_nodes"):
        assert f'"key": "{key}"' in mllog, key
    check_compliant(run_dir)
    assert sorted(p.name for p in (run_dir / "graphs").iterdir()) == ["segment-1.jsonl"]  # one appended file
    assert all(e["graph_file"] == "graphs/segment-1.jsonl" for e in events if e["event"] == runlog.MODEL_PROPOSED)
    check_the_report(run_dir, first.output)
    check_verified(run_dir)
    check_the_published_model(run_dir, first.output, tmp_path / "published")

    second = run_mpi(4, ["-m", "aiperf_mpi", "--resume", str(run_dir), "--time-limit", "25"], timeout=240)
    assert second.returncode == 0, second.output
    assert "1 relay rank(s) take" in second.output  # a resume keeps the logged --relays, as it keeps --group-size
    events = runlog.read_events(run_dir).events
    starts = [e for e in events if e["event"] == runlog.RUN_START]
    assert [s["segment"] for s in starts] == [1, 2] and starts[1]["resumed"]
    assert {e["graph_file"] for e in events if e["event"] == runlog.MODEL_PROPOSED} == {
        "graphs/segment-1.jsonl", "graphs/segment-2.jsonl"}  # a resume appends to a file of its own
    assert starts[1]["config"]["seed"] == first_config["seed"]  # --resume keeps the logged seed
    ids = [e["model"]["id"] for e in events if e["event"] == runlog.MODEL_DONE]
    assert ids == list(range(len(ids))) and len(ids) > len(done)  # new models continue the numbering
    resumed_score = score_run(run_dir)
    assert resumed_score.segments == 2
    assert resumed_score.active_time < 90 + 25 + 90  # active time only, not the gap between the runs
    check_verified(run_dir)  # two segments, each closed and scored, one code and configuration
    check_the_best_after_resume(run_dir, second.output)
    check_mllog(run_dir, events)


def check_verified(run_dir) -> None:
    """A reviewer's python -m analysis.verify finds every epoch, score and rule as the run logged it."""
    from analysis.verify import verify

    result = verify(run_dir)
    assert result.ok, result.text()


def check_compliant(run_dir) -> None:
    """mlcommons' compliance checker passes mllog.log under this benchmark's ruleset, as a reviewer runs it."""
    done = run_checker(run_dir / "mllog.log")
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout


def check_mllog(run_dir, events: list[dict]) -> None:
    """mllog.log, read by mlperf-logging's own parser, agrees with events.jsonl line for line, in time order."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    check_compliant(run_dir)  # every segment, each described, started, stopped
    lines, errors = parse_file(str(run_dir / "mllog.log"), ruleset="6.1.0")
    assert errors == []
    times = [line.timestamp for line in lines]
    assert times == sorted(times), "time_ms goes back"

    def true_ms(line) -> int:
        return line.value["metadata"].get("event_time_ms", int(line.timestamp))

    def at(key: str) -> dict:
        return {(line.value["metadata"]["task"], line.value["metadata"]["epoch_num"]): (index, line)
                for index, line in enumerate(lines) if line.key == key}  # fmt: skip

    starts, stops, accuracies = at("epoch_start"), at("epoch_stop"), at("eval_accuracy")
    epochs = {(e["task"], e["epoch"]): e for e in events if e["event"] == runlog.EPOCH}
    assert set(stops) == set(accuracies) == set(epochs)
    discarded = {t for e in events if e["event"] == runlog.RUN_STOP for t in e["discarded_tasks"]}
    given_up = {e["task"] for e in events if e["event"] == runlog.MODEL_DONE} - {task for task, _ in epochs}
    # begun, then cut by the time limit: still running at the stop, or given up by the trainer's first-epoch probe
    assert {task for task, _ in set(starts) - set(epochs)} <= discarded | given_up
    for key, epoch in epochs.items():
        (start_at, start), (stop_at, stop) = starts[key], stops[key]
        assert start_at < stop_at and true_ms(start) == int(epoch["start"] * 1000), key
        assert true_ms(stop) == int(epoch["end"] * 1000) and stop.value["metadata"]["ops"] == epoch["ops"], key
        assert accuracies[key][1].value["value"] == epoch["val_accuracy"], key
        if (key[0], key[1] + 1) in starts:
            assert stop_at < starts[(key[0], key[1] + 1)][0], key
    batches = {line.value["metadata"]["task"]: line.value["value"] for line in lines if line.key == "global_batch_size"}
    assert batches and {t for t, _ in starts} == set(batches)
    for (task, _), epoch in epochs.items():
        assert batches[task] == epoch["train_samples"] // epoch["steps"], task  # the group's batch, not a rank's
    segments = [e["time"] for e in events if e["event"] in (runlog.RUN_START, runlog.RUN_STOP)]
    assert [int(line.timestamp) for line in lines if line.key in ("run_start", "run_stop")] == [
        int(t * 1000) for t in segments]


SECTIONS = ("Summary", "Validity", "Score over time", "Accuracy", "Timeline per group", "Time split",
            "Utilisation and memory", "Best model: operations by layer type", "Failures", "Data staging")
PLOTS = ("score.png", "best_accuracy.png", "accuracy_vs_ops.png", "timeline.png", "utilisation.png", "op_breakdown.png")


def check_the_report(run_dir, output: str) -> None:
    """The run wrote its report: every section, valid PNGs, and an HTML page a real browser renders whole."""
    from matplotlib.image import imread

    from tests.support.browser import check_report, ensure_chromium

    report = run_dir / "report"
    assert f"aiperf_mpi: report in {report / 'report.md'}" in output, output[-3000:]
    markdown = (report / "report.md").read_text()
    for section in SECTIONS:
        assert f"## {section}" in markdown, section
    assert "efficiency against the measured peak" in markdown and "not measured" not in markdown.split("## Validity")[0]
    for name in PLOTS:
        data = (report / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n"), name
        assert imread(report / name).shape[0] > 100, name
    ensure_chromium()
    check = check_report(report / "report.html")
    assert check.ok and check.images_total == len(PLOTS), check


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "cifar10", "--data-path", "/no/such/dir"], "is not a directory"),
        (["--time-limit", "-5", "--precision", "int8"], "time_limit must be > 0"),
        (["--dataset", "hdf5"], "needs data_path"),
        (["--seed-model", "vgg"], "seed_model must be one of"),
    ],
)
def test_bad_configuration_or_data_is_one_line_and_every_rank_exits(tmp_path, args, message) -> None:
    run = run_mpi(3, ["-m", "aiperf_mpi", "--run-dir", str(tmp_path / "r"), *args], timeout=60)
    assert run.returncode != 0
    assert run.elapsed < 30
    errors = [line for line in run.output.splitlines() if "aiperf_mpi: error:" in line]
    assert len(errors) == 1 and message in errors[0], run.output
    assert "Traceback" not in run.output


def test_a_run_needs_two_ranks(tmp_path) -> None:
    run = run_mpi(1, ["-m", "aiperf_mpi", "--run-dir", str(tmp_path / "r")], timeout=60)
    assert run.returncode != 0 and "at least 2 ranks" in run.output
