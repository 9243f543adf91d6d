"""aiperf_mpi.export without TensorFlow: which model, its lineage, and the one-line refusals (before any build).

The export itself (a Keras model loaded where aiperf_mpi is not) is checked on
real runs in tests/mpi/test_run.py (tests/support/published_model.py).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiperf_mpi.export import ExportError, choose, lineage, read_run, weights_path
from aiperf_mpi.results import runlog
from analysis.after_run import export_best
from tests.support.event_logs import epoch, model_done, proposed, start, write_log


def done(task: int, model_id: int, parent: int | None, accuracy: float, t: float) -> dict:
    event = model_done(task, 0, t, accuracy, [])
    event["model"].update(id=model_id, parent=parent)
    return event


def child(task: int, parent: int | None, description: str, t: float) -> dict:
    return {**proposed(task, 0, t, 0.1), "parent": parent, "description": description}


def a_run(run_dir: Path, **config: object) -> Path:
    """Tasks finish out of order, so model ids differ from task numbers; two models tie for the best.

    task 0 (model 0, seed, 0.5) → task 2 (model 1, 0.8) → task 1 (model 2, 0.8, weights removed) ;
    task 3 failed; task 4 never finished.
    """
    events = [
        start(0.0, **config),
        child(0, None, "seed", 1.0), epoch(0, 0, 1, 1.0, 2.0, 10, 0.5), done(0, 0, None, 0.5, 2.1),
        child(1, 0, "wider: a", 3.0), child(2, 0, "deeper: b", 3.0),
        epoch(2, 0, 1, 3.0, 4.0, 10, 0.8), epoch(2, 0, 2, 4.0, 5.0, 10, 0.7), done(2, 1, 0, 0.8, 5.1),
        epoch(1, 0, 1, 3.0, 6.0, 10, 0.8), done(1, 2, 1, 0.8, 6.1),
        {"event": runlog.WEIGHTS_REMOVED, "time": 6.2, "models": [2], "files": ["weights/task-1.npz"]},
        child(3, 1, "add-skip: c", 7.0),
        {"event": runlog.MODEL_FAILED, "time": 8.0, "task": 3, "group": 0, "model": 3, "rank": 1, "host": "h",
         "reason": "NaN", "traceback": ""},
        child(4, 1, "wider: d", 9.0), epoch(4, 0, 1, 9.0, 9.5, 10, 0.95),
    ]  # fmt: skip
    write_log(run_dir, events)
    (run_dir / "weights").mkdir()
    for task in (0, 2):
        (run_dir / "weights" / f"task-{task}.npz").write_bytes(b"")
    return run_dir


def test_the_best_is_the_earliest_of_the_most_accurate_finished_models(tmp_path) -> None:
    facts = read_run(a_run(tmp_path))
    chosen = choose(facts, None)
    assert (chosen.task, chosen.model_id, chosen.accuracy) == (2, 1, 0.8)  # model 1 before model 2 (task 1)
    assert chosen.last_epoch["epoch"] == 2 and chosen.last_epoch["val_accuracy"] == 0.7
    assert chosen.saved_epoch is chosen.last_epoch  # an older log (no weights_epoch): the last epoch's weights
    chosen.weights_epoch = 1
    assert chosen.saved_epoch["epoch"] == 1 and chosen.saved_epoch["val_accuracy"] == 0.8  # the best epoch's
    assert facts.run_best_accuracy == 0.95  # task 4's epoch counts for the score, though it never finished
    steps = lineage(facts, chosen)
    assert [(s["task"], s["model_id"], s["description"]) for s in steps] == [(0, 0, "seed"), (2, 1, "deeper: b")]


def test_lineage_follows_model_ids_not_task_numbers(tmp_path) -> None:
    facts = read_run(a_run(tmp_path))
    steps = lineage(facts, facts.tasks[1])  # task 1's parent is model 0; task 4's would be model 1 = task 2
    assert [s["task"] for s in steps] == [0, 1]
    assert [s["task"] for s in lineage(facts, facts.tasks[4])] == [0, 2, 4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "1"], "task 1's weights (weights/task-1.npz) were removed during the run: a run keeps only the "
                          "weights a child may inherit and the best model's (--keep-weights all keeps every one)"),
        (["--task", "3"], "task 3 failed: it has no trained weights"),
        (["--task", "4"], "task 4 never finished training (the run ended first): it has no trained weights"),
        (["--task", "9"], "task 9 is not in {run} (its log has tasks 0..4)"),
    ],
)  # fmt: skip
def test_a_task_that_cannot_be_exported_is_one_line_and_exit_2(tmp_path, args, message) -> None:
    command = "aiperf_mpi.export"
    run_dir = a_run(tmp_path / "run")
    cli = subprocess.run([sys.executable, "-m", command, str(run_dir), *args], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.splitlines() == [f"{command}: error: {message.format(run=run_dir)}"]
    assert not (run_dir / "export").exists()


def test_nothing_to_choose_by(tmp_path) -> None:
    with pytest.raises(ExportError, match="synthetic data has no accuracy to choose the best model by"):
        choose(read_run(a_run(tmp_path / "synthetic", dataset="synthetic")), None)
    write_log(tmp_path / "empty", [start(0.0), child(0, None, "seed", 1.0)])
    with pytest.raises(ExportError, match="no model finished training in .*: nothing to export"):
        choose(read_run(tmp_path / "empty"), None)
    cli = subprocess.run([sys.executable, "-m", "aiperf_mpi.export", str(tmp_path / "none")], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert cli.returncode == 2 and cli.stderr.startswith("aiperf_mpi.export: error: no event log at ")


def test_a_failed_or_slow_export_at_the_end_of_a_run_is_one_warning_line(tmp_path, capsys) -> None:
    """The run's end (analysis.after_run.export_best) never raises: the score is written and stands."""
    run_dir = a_run(tmp_path / "run")
    (run_dir / "weights" / "task-2.npz").unlink()  # the best model's weights gone (by hand: retention keeps them)
    export_best(run_dir, "digits")
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"aiperf_mpi: warning: no model export: task 2's weights file "
        f"{run_dir}/weights/task-2.npz is missing (python -m aiperf_mpi.export --single-copy {run_dir} retries it)"
    ]  # fmt: skip
    started = time.monotonic()
    export_best(run_dir, "digits", timeout=0.05)  # the child cannot even start its imports in time
    assert time.monotonic() - started < 10
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"aiperf_mpi: warning: no model export: it took longer than 0.05 s and was stopped "
                                f"(python -m aiperf_mpi.export --single-copy {run_dir} retries it)"]  # fmt: skip
    export_best(run_dir, "synthetic")
    assert capsys.readouterr().out.startswith("aiperf_mpi: no model export: synthetic data has no accuracy")
    assert not (run_dir / "best").exists() and not (run_dir / "best.partial").exists()


def test_the_best_model_stored_once_is_found_in_best_by_the_log_s_name(tmp_path) -> None:
    """A single-copy export removed task 2's .npz: its weights are best/model.keras, by the name the log gives."""
    run_dir = a_run(tmp_path / "run")
    (run_dir / "weights" / "task-2.npz").unlink()
    (run_dir / "best").mkdir()
    (run_dir / "best" / "model.keras").write_bytes(b"")
    (run_dir / "best" / "metadata.json").write_text(
        json.dumps({"task": 2, "weights_file": "weights/task-2.npz", "weights_file_removed": True}))
    facts = read_run(run_dir)
    assert choose(facts, None).task == 2 and weights_path(facts, facts.tasks[2]) == run_dir / "best" / "model.keras"
    assert weights_path(facts, facts.tasks[0]) == run_dir / "weights" / "task-0.npz"  # its own .npz, present
    (run_dir / "best" / "metadata.json").write_text(
        json.dumps({"task": 2, "weights_file": "weights/task-2.npz", "weights_file_removed": False}))
    with pytest.raises(ExportError, match="task 2's weights file .*task-2.npz is missing"):
        choose(read_run(run_dir), None)  # best/ does not say it holds the only copy: nothing to fall back to


@pytest.mark.parametrize("args", [["--single-copy", "--task", "2"], ["--single-copy", "--out", "elsewhere"]])
def test_single_copy_is_for_the_best_model_in_best_only(tmp_path, args) -> None:
    run_dir = a_run(tmp_path / "run")
    cli = subprocess.run([sys.executable, "-m", "aiperf_mpi.export", str(run_dir), *args], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.splitlines() == ["aiperf_mpi.export: error: --single-copy applies to the best model exported "
                                       "to RUN_DIR/best only (not with --task or --out)"]  # fmt: skip
    assert (run_dir / "weights" / "task-2.npz").is_file() and not (tmp_path / "elsewhere").exists()
