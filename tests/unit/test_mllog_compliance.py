"""mlcommons' compliance checker, with this benchmark's ruleset, passes a log as MLLogWriter writes it and rejects
edited ones, each for the rule it breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlperf_logging import compliance_checker

from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter
from aiperf_mpi.results.compliance import RULESET_VERSION, ruleset_path
from tests.support.compliance import run_checker

T0 = 1_796_000_000.0
CONFIG = {"seed": 7, "base_lr": 0.1, "warmup_epochs": 2}
SYSTEM = {"nodes": 2, "accelerators_per_node": 0}


def _epoch(number: int, start: float, end: float, correct: int = 37) -> dict:
    return {"epoch": number, "start": start, "end": end, "ops": 123 * number, "val_accuracy": correct / 100,
            "train_samples": 640, "validation_samples": 100}  # fmt: skip


def _write_two_segments(run_dir: Path) -> Path:
    """A staged, resumed run: two groups' epochs interleaved, one arriving late, one cut by the time limit."""
    writer = MLLogWriter(run_dir)
    writer.staging({"host": "node1", "bytes": 10, "files": 1, "seconds": 2.0, "start": T0 - 5.0})
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.epoch_start(0, 1, T0 + 1.0, 64)
    writer.epoch_start(1, 1, T0 + 1.5, 128)
    writer.epoch_stop(0, _epoch(1, T0 + 1.0, T0 + 10.0))
    writer.epoch_start(0, 2, T0 + 10.001, 64)
    writer.epoch_start(2, 1, T0 + 9.5, 64)  # reached the master after a later line: held at that line's time
    writer.epoch_stop(1, _epoch(1, T0 + 1.5, T0 + 12.0, correct=100))
    writer.epoch_stop(0, _epoch(2, T0 + 10.001, T0 + 15.0, correct=0))
    writer.run_stop("time limit", T0 + 20.0)  # task 2's epoch 1 was cut
    writer.run_start(CONFIG, SYSTEM, 2, T0 + 100.0)
    writer.epoch_start(3, 1, T0 + 101.0, 64)
    writer.epoch_stop(3, _epoch(1, T0 + 101.0, T0 + 110.0))
    writer.run_stop("done", T0 + 120.0)
    writer.close()
    return run_dir / MLLOG_FILE


def _lines(path: Path) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in path.read_text().splitlines()]


def _rewrite(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(":::MLLOG " + json.dumps(line) + "\n" for line in lines))


def _index(lines: list[dict], key: str, occurrence: int = 0) -> int:
    return [i for i, line in enumerate(lines) if line["key"] == key][occurrence]


def test_the_ruleset_is_versioned_and_found_by_absolute_path() -> None:
    """The checker joins --config to its own folder: only an absolute path reaches ours."""
    path = ruleset_path()
    assert path.is_absolute() and path.is_file() and path.name == f"aiperf_mpi_{RULESET_VERSION}.yaml"


def test_the_ruleset_ships_in_the_package_data() -> None:
    """An installed package has the YAML: setup.cfg's package_data names it (a wheel holds only .py otherwise)."""
    from setuptools.config.setupcfg import read_configuration

    setup_cfg = Path(__file__).resolve().parents[2] / "setup.cfg"
    patterns = read_configuration(setup_cfg)["options"]["package_data"]["aiperf_mpi.results.compliance"]
    assert any(ruleset_path().match(pattern) for pattern in patterns), patterns


def test_the_checker_passes_a_log_as_written_and_its_own_training_ruleset_does_not(tmp_path) -> None:
    mllog = _write_two_segments(tmp_path)
    done = run_checker(mllog)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout
    theirs = Path(compliance_checker.__file__).parent / "training_6.1.0" / "common.yaml"  # as the checker ships it
    refused = run_checker(mllog, config=theirs)
    assert refused.returncode == 1 and "submission_org" in refused.stdout, refused.stdout


def _drop_last_run_stop(lines: list[dict]) -> None:
    del lines[_index(lines, "run_stop", 1)]


def _accuracy_above_one(lines: list[dict]) -> None:
    lines[_index(lines, "eval_accuracy")]["value"] = 1.5


def _stop_without_start(lines: list[dict]) -> None:
    del lines[_index(lines, "epoch_start")]


def _negative_ops(lines: list[dict]) -> None:
    lines[_index(lines, "epoch_stop")]["metadata"]["ops"] = -5


def _fractional_ops(lines: list[dict]) -> None:
    lines[_index(lines, "epoch_stop")]["metadata"]["ops"] = 123.5


def _no_training_samples(lines: list[dict]) -> None:
    lines[_index(lines, "epoch_stop")]["metadata"]["train_samples"] = 0


def _samples_not_whole_batches(lines: list[dict]) -> None:
    lines[_index(lines, "epoch_stop")]["metadata"]["train_samples"] = 650


def _accuracy_not_a_count(lines: list[dict]) -> None:
    lines[_index(lines, "eval_accuracy")]["value"] = 0.375  # of 100 samples


def _other_benchmark_in_second_segment(lines: list[dict]) -> None:
    lines[_index(lines, "submission_benchmark", 1)]["value"] = "resnet"


def _no_status(lines: list[dict]) -> None:
    del lines[_index(lines, "run_stop")]["metadata"]["status"]


def _epoch_skipped(lines: list[dict]) -> None:
    lines[_index(lines, "epoch_start", 2)]["metadata"]["epoch_num"] = 3


def _time_goes_back(lines: list[dict]) -> None:
    lines[_index(lines, "run_stop")]["time_ms"] -= 60_000


def _segment_renumbered(lines: list[dict]) -> None:
    lines[_index(lines, "run_start", 1)]["metadata"]["segment"] = 3


def _second_segment_undescribed(lines: list[dict]) -> None:
    del lines[_index(lines, "number_of_nodes", 1)]


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (_drop_last_run_stop, "failed test: not s['in_run']"),
        (_accuracy_above_one, "0 <= v['value'] <= 1"),
        (_stop_without_start, "s['open_epoch'].get(v['metadata']['task'], (None, 0))[0] == v['metadata']['epoch_num']"),
        (_negative_ops, "v['metadata']['ops'] >= 0"),
        (_fractional_ops, "type(v['metadata']['ops']) is int"),
        (_no_training_samples, "v['metadata']['train_samples'] >= 1"),
        (_samples_not_whole_batches, "train_samples'] % s['batch']"),
        (_accuracy_not_a_count, "is_integer(v['value'] * v['metadata']['eval_samples'])"),
        (_other_benchmark_in_second_segment, "s['benchmarks'] == ['aiperf_mpi']"),
        (_no_status, "v['metadata']['status'] in ['success', 'aborted']"),
        (_epoch_skipped, "s['last_epoch'].get(v['metadata']['task'], 0) + 1"),
        (_time_goes_back, "ll.timestamp >= s['last_ms']"),
        (_segment_renumbered, "v['metadata']['segment'] == s['segment'] + 1"),
        (_second_segment_undescribed, "s['header'] == dict.fromkeys"),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else "rule",
)
def test_the_checker_rejects_an_edited_log_for_the_rule_it_breaks(tmp_path, edit, rule: str) -> None:
    mllog = _write_two_segments(tmp_path)
    lines = _lines(mllog)
    edit(lines)
    _rewrite(mllog, lines)
    done = run_checker(mllog)
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout
    assert rule in done.stdout, done.stdout
