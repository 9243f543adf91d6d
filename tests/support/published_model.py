"""Checks of the best model a real run published (``RUN_DIR/best/``, ``python -m aiperf_mpi.export``).

The run's end calls the command (``analysis/after_run.py``), and so do these checks.

Called on the run directories that tests/mpi/test_run.py makes with the real
CLI, so the check adds no run of its own.  The model is loaded the way a user
elsewhere would load it: in a fresh interpreter that cannot import aiperf_mpi
(``-I -S``: no PYTHONPATH, no working directory, no ``.pth`` files, so not
the editable install's finder either; only the venv's site-packages for numpy
and Keras), given the validation images as a plain ``.npz`` and the
preprocessing that ``metadata.json`` states.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np

from aiperf_mpi.data.sources import digits_arrays
from aiperf_mpi.results import runlog

FILES = ("model.keras", "graph.json", "ops.json", "metadata.json", "model_card.md")

EVALUATE = """
import json, sys
sys.path.append(sys.argv[1])  # the venv's site-packages, nothing else of the project
try:
    import aiperf_mpi  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("aiperf_mpi is importable here; the check would prove nothing")
import numpy as np, keras
model = keras.models.load_model(sys.argv[2] + "/model.keras")
meta = json.load(open(sys.argv[2] + "/metadata.json"))
data = np.load(sys.argv[3])
pre = meta["input"]
x = data["images"].astype("float32") / pre["divide_by"] - pre["subtract"]
assert list(x.shape[1:]) == pre["shape"], (x.shape, pre["shape"])
predicted = np.argmax(model.predict(x, batch_size=meta["hparams"]["batch_size"], verbose=0), axis=-1)
print(json.dumps({"correct": int((predicted == data["labels"]).sum()), "seen": int(len(predicted))}))
"""


def logged_tasks(run_dir: Path) -> tuple[dict[int, dict], dict[int, dict], set[str]]:
    """From the log alone: each task's ``model_done`` model, the epoch its weights come from, the removed files.

    The trainer keeps the best epoch's weights (the earliest of the highest accuracy) and logs which
    (``weights_epoch`` in the model's timings): that epoch's accuracy is the model's logged accuracy.
    """
    done, epochs, removed = {}, {}, set()
    for event in runlog.read_events(run_dir).events:
        if event["event"] == runlog.MODEL_DONE:
            done[event["task"]] = event["model"]
        elif event["event"] == runlog.EPOCH:
            epochs[(event["task"], event["epoch"])] = event
        elif event["event"] == runlog.WEIGHTS_REMOVED:
            removed.update(event["files"])
    saved = {}
    for task, model in done.items():
        if model["weights"]:
            saved[task] = epochs[(task, model["timings"]["weights_epoch"])]
            assert saved[task]["val_accuracy"] == model["accuracy"], (task, model["timings"])  # the best epoch's
    return done, saved, removed


def best_task(done: dict[int, dict]) -> int:
    """The best model as retention keeps it: highest observed accuracy, the earliest model among equals."""
    trained = [(m["accuracy"], -m["id"], task) for task, m in done.items()
               if m["status"] == "trained" and m["accuracy"] is not None and math.isfinite(m["accuracy"])]  # fmt: skip
    return max(trained)[2]


def export_cli(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiperf_mpi.export", str(run_dir), *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})  # fmt: skip


def evaluate_elsewhere(model_dir: Path, work: Path) -> dict:
    """Accuracy of ``model_dir``'s model on the digits validation split, in a process without aiperf_mpi."""
    images, labels = digits_arrays()["validation"]  # the split the run validated on (every rank's shard of it)
    data = work / "validation.npz"
    np.savez(data, images=images, labels=labels)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", EVALUATE, sysconfig.get_paths()["purelib"],
                           str(model_dir), str(data)], capture_output=True, text=True, timeout=300, cwd=work,
                          env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_the_published_model(run_dir: Path, output: str, work: Path) -> None:
    """The run's end wrote RUN_DIR/best/: the best model, loadable without aiperf_mpi, as accurate as logged."""
    work.mkdir(parents=True, exist_ok=True)
    done, last, removed = logged_tasks(run_dir)
    best = best_task(done)
    best_dir = run_dir / "best"
    assert f"aiperf_mpi: best model: task {best} " in output, output[-3000:]
    assert sorted(p.name for p in best_dir.iterdir()) == sorted(FILES)
    # retention never removed the best model's weights, which the export read; then it removed them itself
    # (--single-copy): best/model.keras is their only copy, and the metadata says so
    assert done[best]["weights"] not in removed
    check_stored_once(run_dir, best, done, output)
    meta = json.loads((best_dir / "metadata.json").read_text())
    assert (meta["task"], meta["model_id"], meta["hparams"]) == (best, done[best]["id"], done[best]["hparams"])
    assert meta["input"]["shape"] == [32, 32, 3] and meta["dataset"]["name"] == "digits"
    assert meta["ops_per_sample"]["forward"] == done[best]["ops"]["forward_per_sample"]  # the counter, as logged
    assert meta["params"]["total"] == done[best]["ops"]["params"]
    assert meta["lineage"][-1]["task"] == best and meta["lineage"][0]["description"] == "seed"
    card = (best_dir / "model_card.md").read_text()
    assert "x / 127.5 - 1" in card and "## Lineage" in card and f"{done[best]['ops']['params']:,}" in card

    # the weights are those of the task's best epoch; the run validated them over the whole split (each rank its
    # shard, the counts summed), so the same 360 images with the same preprocessing give the same count.  At most
    # one image may differ: another batch size can change the last bits of a float32 sum and flip a near tie.
    epoch = last[best]
    logged = round(epoch["val_accuracy"] * epoch["validation_samples"])
    measured = evaluate_elsewhere(best_dir, work)
    assert measured["seen"] == epoch["validation_samples"] == 360
    assert abs(measured["correct"] - logged) <= 1, (measured, logged, epoch["val_accuracy"])
    assert meta["accuracy"]["validation_correct"] == logged

    check_other_tasks(run_dir, best, done, last, removed, work)


def check_other_tasks(run_dir: Path, best: int, done: dict, last: dict, removed: set[str], work: Path) -> None:
    """``--task N`` exports another kept model; a removed or unknown one is one line and exit 2."""
    kept = [t for t, m in done.items() if t != best and m["weights"] and (run_dir / m["weights"]).is_file()]
    assert kept, "no other model's weights were kept (the view's best parents are)"
    other = kept[0]
    exported = export_cli(run_dir, "--task", str(other))
    assert exported.returncode == 0, exported.stderr[-3000:]
    meta = json.loads((run_dir / "export" / f"task-{other}" / "metadata.json").read_text())
    assert meta["task"] == other and meta["accuracy"]["weights"] == last[other]["val_accuracy"]
    assert meta["ops_per_sample"]["forward"] == done[other]["ops"]["forward_per_sample"]

    if not removed:  # a short run kept every file: remove one as the master does, the log first (on a copy)
        import shutil

        copy = work / "copy"
        shutil.copytree(run_dir, copy)
        victim = next(t for t in kept if t != other) if len(kept) > 1 else other
        log = runlog.EventLog(copy)
        log.write(runlog.WEIGHTS_REMOVED, sync=True, models=[done[victim]["id"]], files=[done[victim]["weights"]])
        log.close()
        (copy / done[victim]["weights"]).unlink()
        run_dir, removed = copy, {done[victim]["weights"]}
    gone = next(t for t, m in sorted(done.items()) if m["weights"] in removed)
    failed = export_cli(run_dir, "--task", str(gone))
    assert failed.returncode == 2 and failed.stdout == "", failed
    assert failed.stderr.splitlines() == [
        f"aiperf_mpi.export: error: task {gone}'s weights ({done[gone]['weights']}) were removed during the run: a run "
        "keeps only the weights a child may inherit and the best model's (--keep-weights all keeps every one)"
    ]  # fmt: skip
    unknown = export_cli(run_dir, "--task", "100000")
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1, unknown
    assert unknown.stderr.startswith("aiperf_mpi.export: error: task 100000 is not in ")


def check_stored_once(run_dir: Path, best: int, done: dict, output: str) -> None:
    """The run's end stored the best model once: its ``.npz`` removed, ``best/`` saying it holds the only copy."""
    weights = done[best]["weights"]
    meta = json.loads((run_dir / "best" / "metadata.json").read_text())
    assert meta["weights_file"] == weights and meta["weights_file_removed"] is True
    assert not (run_dir / weights).exists() and (run_dir / "best" / "model.keras").stat().st_size > 0
    said = (f"; {weights} removed (model.keras is its only copy)", f"; model.keras is the only copy of {weights}")
    assert any(line in output for line in said), output[-3000:]  # the second: an earlier segment removed it


def check_the_best_after_resume(run_dir: Path, output: str) -> None:
    """A resumed run's end exports again: the best over every segment, whose weights retention kept.

    The first segment's end had removed its best model's ``.npz`` (stored once, in ``best/``); no task of the
    resumed segment may have lost its parent's weights for that (a rank reads them from ``best/model.keras``).
    """
    done, _, removed = logged_tasks(run_dir)
    best = best_task(done)
    assert f"aiperf_mpi: best model: task {best} " in output, output[-3000:]
    meta = json.loads((run_dir / "best" / "metadata.json").read_text())
    assert meta["task"] == best and done[best]["weights"] not in removed
    check_stored_once(run_dir, best, done, output)
    assert not (run_dir / "best.partial").exists()
    notes = [m["timings"].get("note", "") for m in done.values()]
    assert not [note for note in notes if "trained from scratch" in note], notes
