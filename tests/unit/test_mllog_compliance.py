"""mlcommons' compliance checker, with this benchmark's ruleset, passes a log as MLLogWriter writes it and rejects
edited ones, each for the rule it breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlperf_logging import compliance_checker

from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter, task_details
from aiperf_mpi.results.compliance import RULESET_VERSION, ruleset_path
from aiperf_mpi.results.epochs import LEARNING_RATE_WARMUP_EPOCHS
from tests.support.compliance import run_checker

T0 = 1_796_000_000.0
CONFIG = {"seed": 7, "base_lr": 0.1, "search_warmup_epochs": 2, "time_limit": 20.0, "grace": 30.0, "batch_size": 64,
          "precision": "fp32", "rehearse": False}  # fmt: skip
HOSTS = [{"host": "node1", "cpu": "Xeon", "cpu_vendor": "GenuineIntel", "cpu_flags": ["avx2", "fma"], "cores": 2,
          "accelerators": [], "ranks": [0, 1]},
         {"host": "node2", "cpu": "Xeon", "cpu_vendor": "GenuineIntel", "cpu_flags": ["avx2", "fma"], "cores": 2,
          "accelerators": [], "ranks": [2, 3]}]  # fmt: skip
SYSTEM = {"nodes": 2, "accelerators_per_node": 0, "ranks": 4, "hosts": HOSTS}
LAYOUT = {"world_size": 4, "master_rank": 0, "groups": [{"index": 0, "ranks": [1]}, {"index": 1, "ranks": [2, 3]}]}
"""group 0: one rank on node1 (its 2 cores' bound: 2 × 6.2 GHz × 32 = 397 G ops/s); group 1: two ranks on node2"""
SYNTHETIC = {"dataset": "synthetic", "train": 640, "validation": 100, "classes": 10, "image_shape": [32, 32, 3]}
"""a data set of no fixed size: one pass is 640 samples at a global batch of 64 on one rank and of 128 on two"""
DIGITS = {"dataset": "digits", "train": 1437, "validation": 360, "classes": 10, "image_shape": [32, 32, 3]}
"""the built-in digits (the rules table's counts): one pass is 1,408 samples at either global batch"""
DETAILS = {0: task_details(0, (64, 3)), 1: task_details(1, (64, 5)), 2: task_details(0, (64, 3)),
           3: task_details(0, (64, 7))}  # fmt: skip


def _epoch(number: int, start: float, end: float, correct: int = 37, data: dict = SYNTHETIC) -> dict:
    whole_pass = (data["train"] // 64) * 64  # 1 rank of batch 64, or 2 ranks of 64: the same here
    return {"epoch": number, "start": start, "end": end, "ops": 123 * number,
            "val_accuracy": correct / data["validation"], "train_samples": whole_pass,
            "validation_samples": data["validation"]}  # fmt: skip


def _write_two_segments(run_dir: Path, data: dict = SYNTHETIC) -> Path:
    """A staged, resumed run: two groups' epochs interleaved, one arriving late, one cut by the time limit."""
    writer = MLLogWriter(run_dir)
    writer.staging({"host": "node1", "bytes": 10, "files": 1, "seconds": 2.0, "start": T0 - 5.0})
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.description(CONFIG, SYSTEM, LAYOUT, data, T0)
    writer.epoch_start(0, 1, T0 + 1.0, 64, DETAILS[0])
    writer.epoch_start(1, 1, T0 + 1.5, 128, DETAILS[1])
    writer.epoch_stop(0, _epoch(1, T0 + 1.0, T0 + 10.0, data=data))
    writer.epoch_start(0, 2, T0 + 10.001, 64)
    writer.epoch_start(2, 1, T0 + 9.5, 64, DETAILS[2])  # reached the master after a later line: held at its time
    writer.epoch_stop(1, _epoch(1, T0 + 1.5, T0 + 12.0, correct=data["validation"], data=data))
    writer.epoch_stop(0, _epoch(2, T0 + 10.001, T0 + 15.0, correct=0, data=data))
    writer.run_stop("time limit", T0 + 20.0)  # task 2's epoch 1 was cut
    writer.run_start(CONFIG, SYSTEM, 2, T0 + 100.0)
    writer.description(CONFIG, SYSTEM, LAYOUT, data, T0 + 100.0)
    writer.epoch_start(3, 1, T0 + 101.0, 64, DETAILS[3])
    writer.epoch_stop(3, _epoch(1, T0 + 101.0, T0 + 110.0, data=data))
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


def test_the_logged_warmup_is_the_trainers_and_ruleset_1_2_0_holds_it_there(tmp_path) -> None:
    """The search's warm-up cap (2 here) is not what the trainer applies: a log of it fails 1.2.0, which reads the
    trainer's constant; 1.1.0, the ruleset of the logs that wrote the cap, accepts any integer ≥ 0."""
    mllog = _write_two_segments(tmp_path)
    lines = _lines(mllog)
    assert {line["value"] for line in lines if line["key"] == "opt_learning_rate_warmup_epochs"} == {
        LEARNING_RATE_WARMUP_EPOCHS}  # fmt: skip
    lines[_index(lines, "opt_learning_rate_warmup_epochs", 1)]["value"] = CONFIG["search_warmup_epochs"]
    _rewrite(mllog, lines)
    done = run_checker(mllog)
    assert done.returncode == 1 and "v['value'] == epochs.LEARNING_RATE_WARMUP_EPOCHS" in done.stdout, done.stdout
    assert run_checker(mllog, config=ruleset_path("1.1.0")).returncode == 0


# ---------------------------------------------------------------- forgeries that keep the log consistent (issue 37)
# Each rewrites every line it touches so that ruleset 1.0.0 still passes the file (checked below): only the bounds
# from outside the log, which 1.1.0 reads, catch it.


def _relabelled_as_imagenet(lines: list[dict]) -> None:
    """Digits called ILSVRC-2012: the name, its classes and the rules table's counts, every segment."""
    for line in lines:
        if line["key"] == "aiperf_dataset":
            line["value"], line["metadata"]["classes"] = "imagenet", 1000
        elif line["key"] == "train_samples":
            line["value"] = 1_281_167
        elif line["key"] == "eval_samples":
            line["value"] = 50_000


def _named_imagenet(lines: list[dict]) -> None:
    """Digits named ImageNet with their own counts (an undocumented subset, as it were) and their 10 classes."""
    for line in lines:
        if line["key"] == "aiperf_dataset":
            line["value"] = "imagenet"


def _relabelled_as_digits(lines: list[dict]) -> None:
    """A synthetic run named the built-in digits, whose counts the rules table fixes."""
    for line in lines:
        if line["key"] == "aiperf_dataset":
            line["value"] = "digits"


def _inflated_eval_split(lines: list[dict]) -> None:
    """The validation split ×10, every epoch's count and accuracy recomputed: no rate limits evaluation in 1.0.0."""
    for line in lines:
        if line["key"] == "eval_samples":
            line["value"] *= 10
        elif line["key"] == "eval_accuracy":
            correct = round(line["value"] * line["metadata"]["eval_samples"])
            line["metadata"]["eval_samples"] *= 10
            line["value"] = correct / line["metadata"]["eval_samples"]


def _rate_above_the_hardware(lines: list[dict]) -> None:
    """One epoch's operations raised to 10¹⁵ in its 9 s: ≈ 280 × what its rank's share of node1's CPUs can do."""
    lines[_index(lines, "epoch_stop")]["metadata"]["ops"] = 10**15


def _unknown_hardware(lines: list[dict]) -> None:
    """A processor the hardware table does not know: no bound, so no rate is checked, and the run is not compliant."""
    for line in lines:
        if line["key"] == "aiperf_system":
            line["metadata"]["hosts"][0]["cpu_vendor"] = "Imaginary"


def _batch_outside_the_space(lines: list[dict]) -> None:
    """Task 0 at rank batch 1 (its epochs' samples still one pass: 640 of batch 1)."""
    line = lines[_index(lines, "global_batch_size")]
    line["value"], line["metadata"]["batch_size"] = 1, 1


def _kernel_outside_the_space(lines: list[dict]) -> None:
    lines[_index(lines, "global_batch_size")]["metadata"]["kernel_size"] = 9


def _space_widened(lines: list[dict]) -> None:
    """The logged space given a kernel size the graph has not (to let a task's pass)."""
    lines[_index(lines, "aiperf_search_space")]["metadata"]["kernel_sizes"] = [3, 5, 7, 9]


def _part_of_a_pass(lines: list[dict]) -> None:
    """Every epoch of task 3 trained on a tenth of the train split: still whole global batches."""
    for line in lines:
        if line["key"] == "epoch_stop" and line["metadata"]["task"] == 3:
            line["metadata"]["train_samples"] = 64


def _run_past_its_limit(lines: list[dict]) -> None:
    """Segment 2 stopped 200 s after its start, past its 20 s limit, 30 s grace and the 120 s slack."""
    lines[_index(lines, "run_stop", 1)]["time_ms"] += 180_000


def _limit_shrunk(lines: list[dict]) -> None:
    """Segment 1's time limit cut to 1 s and its grace to 0 (a smaller window scores higher) for a 20 s segment:
    within the slack, so not caught alone; with the run stopped 150 s later it is."""
    line = lines[_index(lines, "aiperf_time_limit")]
    line["value"], line["metadata"]["grace"] = 1.0, 0.0
    lines[_index(lines, "run_stop")]["time_ms"] += 105_000
    for later in lines[_index(lines, "run_stop") + 1:]:
        later["time_ms"] += 105_000


@pytest.mark.parametrize(
    ("edit", "data", "rule"),
    [
        (_relabelled_as_imagenet, DIGITS, "whole_pass_ok(v)"),
        (_named_imagenet, DIGITS, "split_ok(v['value'], 'classes', v['metadata']['classes'])"),
        (_relabelled_as_digits, SYNTHETIC, "split_ok(s['data']['dataset'], 'train', v['value'])"),
        (_inflated_eval_split, DIGITS, "split_ok(s['data']['dataset'], 'validation', v['value'])"),
        (_rate_above_the_hardware, SYNTHETIC, "rate_ok(v, ll)"),
        (_unknown_hardware, SYNTHETIC, "v['metadata']['rehearse'] or s['unbounded'] == []"),
        (_batch_outside_the_space, SYNTHETIC, "v['metadata']['batch_size'] in s['space']['batch_sizes']"),
        (_kernel_outside_the_space, SYNTHETIC, "v['metadata']['kernel_size'] in s['space']['kernel_sizes']"),
        (_space_widened, SYNTHETIC, "set(v['metadata']['kernel_sizes']) <= set(model.KERNEL_SIZES)"),
        (_part_of_a_pass, SYNTHETIC, "whole_pass_ok(v)"),
        (_run_past_its_limit, SYNTHETIC, "within_limit(true_ms(v, ll))"),
        (_limit_shrunk, SYNTHETIC, "within_limit(true_ms(v, ll))"),
    ],
    ids=lambda value: value.__name__.strip("_") if callable(value) else value["dataset"] if isinstance(value, dict)
    else "rule",
)
def test_a_consistent_forgery_passes_ruleset_1_0_0_and_fails_the_bounds_of_1_1_0(tmp_path, edit, data, rule) -> None:
    mllog = _write_two_segments(tmp_path, data)
    lines = _lines(mllog)
    edit(lines)
    _rewrite(mllog, lines)
    today = run_checker(mllog, config=ruleset_path("1.0.0"))
    assert today.returncode == 0 and "SUCCESS" in today.stdout, today.stdout  # the forgery's class is new
    done = run_checker(mllog)
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout
    assert f"failed test: {rule}" in done.stdout, done.stdout


def test_the_digits_counts_are_the_rules_tables_and_a_digits_log_passes(tmp_path) -> None:
    """The built-in digits split as the data source makes it is the table's row, which an untouched log passes."""
    from aiperf_mpi.data.sources import open_source
    from aiperf_mpi.job.session import data_check
    from aiperf_mpi.results.rules import BUILT_IN_SPLITS

    counted = data_check(open_source("digits"))
    assert {key: counted[key] for key in ("train", "validation", "classes")} == dict(BUILT_IN_SPLITS["digits"])
    done = run_checker(_write_two_segments(tmp_path, {**counted}))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout


def test_a_checker_without_the_package_fails_in_one_named_line(tmp_path) -> None:
    """The ruleset's bounds are the package's tables: where it cannot import them it fails, and says why."""
    import os
    import subprocess
    import sys

    mllog = _write_two_segments(tmp_path)
    site = Path(compliance_checker.__file__).parents[2]  # its site-packages, read without its .pth files (-S): the
    # editable install's finder, which would import the package, is one of them
    script = (f"import sys; sys.path.insert(0, {str(site)!r}); "
              "sys.argv = ['checker', '--config', sys.argv[1], '--log_output', sys.argv[2], sys.argv[3]]; "
              "import runpy; runpy.run_module('mlperf_logging.compliance_checker', run_name='__main__')")  # fmt: skip
    done = subprocess.run([sys.executable, "-S", "-c", script, str(ruleset_path()), str(tmp_path / "out.log"),
                           str(mllog)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    assert done.returncode == 1 and "s['import_error'] is None" in done.stdout, done.stdout
    assert "No module named 'aiperf_mpi'" in done.stdout, done.stdout


def test_the_verifiers_consistent_run_passes_on_its_b200s(run) -> None:
    """The verifier tests' consistent run (two groups of two B200 ranks, ImageNet at fp16) as the master logs it:
    one pass per epoch over the ILSVRC-2012 counts, each rate under the table's bound."""
    done = run_checker(run / MLLOG_FILE)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout


def test_a_segment_killed_without_its_run_stop_is_closed_by_the_next_segment(tmp_path) -> None:
    """Killed between an epoch's stop and its accuracy line (flushed once a second): no run_stop, no accuracy.
    The next segment's first line closes it, as the resumed run's events do; ruleset 1.0.0 refused such a log."""
    mllog = _write_two_segments(tmp_path)
    lines = _lines(mllog)
    stop = _index(lines, "run_stop")
    del lines[stop]
    del lines[max(i for i, line in enumerate(lines[:stop]) if line["key"] == "eval_accuracy")]
    _rewrite(mllog, lines)
    done = run_checker(mllog)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout
    assert run_checker(mllog, config=ruleset_path("1.0.0")).returncode == 1
    del lines[_index(lines, "run_stop")]  # the last segment too: the run never ended
    _rewrite(mllog, lines)
    done = run_checker(mllog)
    assert done.returncode == 1 and "failed test: not s['in_run']" in done.stdout, done.stdout
