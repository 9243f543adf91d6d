"""``analysis.verify --reevaluate``: the comparison of a recount with the log, and bad input refused in one line.

The recount itself needs TensorFlow and real weights (tests/mpi/test_verify.py on digits,
tests/mpi/test_datasets_cli.py on CIFAR-10); here the verifier's side: the row it makes of the child's
answer, and every refusal that comes before TensorFlow loads (each one line, exit 2), through the real
commands on the consistent hand-made run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reevaluation import compare
from tests.support.data_files import write_cifar
from tests.support.verify_runs import consistent_run, rewrite_log

REPO = Path(__file__).resolve().parents[2]
HOW = "fp32 on the CPU, batch 16, 2 shard(s), 4.2 s"


def answer(correct: int, logged: int = 90, seen: int = 100, precision: str = "fp32", run_precision: str = "fp32",
           problem: str = "", trained_on: str = "cpus") -> dict:  # fmt: skip
    """The child's JSON answer (``python -m aiperf_mpi.export.reevaluate``), as parsed."""
    claim = {"task": 3, "model_id": 3, "epoch": 2, "logged_correct": logged, "logged_from": "correct",
             "validation_samples": 100, "val_accuracy": logged / 100, "batch_size": 16, "ranks": 2}  # fmt: skip
    return {"format": "aiperf_mpi.reevaluate/1", "run_dir": "r", "dataset": "digits", "precision": precision,
            "run_precision": run_precision, "trained_on": trained_on, "claim": claim, "correct": correct,
            "seen": seen, "problem": problem, "seconds": 4.2}  # fmt: skip


def test_an_equal_count_is_ok_and_any_difference_at_the_run_precision_is_a_mismatch() -> None:
    row = compare(answer(90))
    assert not row.problems and row.summary == f"task 3 epoch 2: 90 of 100 correct, as logged ({HOW})"
    row = compare(answer(89))
    assert row.problems == [f"logged 90 correct of 100 (correct), re-evaluated 89 ({HOW})"]
    assert row.summary == "task 3 epoch 2: logged 90 correct of 100, re-evaluated 89"
    assert compare(answer(90, run_precision="bf16", precision="bf16")).problems == []
    assert compare(answer(91, run_precision="bf16", precision="bf16")).problems


def test_fp32_on_a_narrow_run_and_a_run_on_accelerators_have_the_stated_allowance() -> None:
    within = compare(answer(91, precision="fp32", run_precision="bf16"))
    assert not within.problems and "logged 90 (within the 1 allowed: a fp32 recount of a bf16 run" in within.summary
    beyond = compare(answer(92, precision="fp32", run_precision="bf16"))
    assert beyond.problems and "1 allowed: a fp32 recount of a bf16 run" in beyond.problems[0]
    assert not compare(answer(89, trained_on="accelerators")).problems  # cuDNN's kernels, TF32
    assert compare(answer(88, trained_on="accelerators")).problems


def test_another_model_or_another_split_size_is_a_mismatch() -> None:
    row = compare(answer(0, problem="best/model.keras is not the logged graph of the best model (x)"))
    assert row.problems == ["best/model.keras is not the logged graph of the best model (x)"]
    row = compare(answer(90, seen=99))
    assert row.problems == [f"logged 90 correct of 100, re-evaluated 90 of 99 ({HOW})"]


def verify(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis.verify", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip


def with_dataset(run_dir: Path, dataset: str) -> Path:
    def change(events):
        events[0]["config"]["dataset"] = dataset

    rewrite_log(run_dir, change)
    return run_dir


@pytest.mark.parametrize("case", ["no model", "synthetic", "no data path", "wrong data", "digits with a path",
                                  "bundle", "option without --reevaluate"])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(tmp_path, case: str) -> None:
    run_dir = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")
    (run_dir / "best").mkdir()
    (run_dir / "best" / "model.keras").write_bytes(b"not read: every refusal below comes first")
    args: list[object] = [run_dir, "--reevaluate"]
    if case == "no model":
        (run_dir / "best" / "model.keras").unlink()
        expected = "best/model.keras is missing: re-evaluation needs the run's published weights"
    elif case == "synthetic":
        with_dataset(run_dir, "synthetic")
        expected = "a run on synthetic data has no accuracy to re-evaluate"
    elif case == "no data path":
        with_dataset(run_dir, "cifar10")
        expected = "cifar10: the run's data is read from disk: give its location with --data-path"
    elif case == "wrong data":
        with_dataset(run_dir, "cifar10")
        write_cifar(tmp_path / "cifar", per_file=20)
        args += ["--data-path", tmp_path / "cifar"]
        expected = "'s validation split holds 20 images; the run validated 360: not the run's data"
    elif case == "digits with a path":
        args += ["--data-path", tmp_path]
        expected = "digits: the data set is embedded or generated: --data-path does not apply"
    elif case == "bundle":
        args = [tmp_path / "missing.tar.gz", "--reevaluate"]
        expected = "no such run directory or bundle"
    else:
        args = [run_dir, "--data-path", tmp_path]
        expected = "--data-path and --precision apply to --reevaluate only"
    done = verify(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert expected in lines[-1] and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 or case == "option without --reevaluate", lines  # argparse adds its usage line
