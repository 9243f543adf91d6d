"""The verifier on a real run (mpirun -n 3 python -m aiperf_mpi): it passes, and every tamper of a copy is named.

One short run serves every test here; each tamper works on a copy of it.
The verifier and the bundle run as a reviewer would run them, as commands.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from tests.support.mpirun import REPO_ROOT, run_mpi

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.tf]
ARGS = ["--seed-model", "tiny", "--max-epochs", "2", "--max-models", "3", "--time-limit", "120", "--score-step", "10",
        "--progress-interval", "5", "--monitor-interval", "5", "--peak-seconds", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("verify") / "run"
    done = run_mpi(3, ["-m", "aiperf_mpi", *ARGS, "--run-dir", str(run_dir)], timeout=420)
    assert done.returncode == 0, done.output[-4000:]
    return run_dir


def command(module: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)  # fmt: skip


def copy(run_dir: Path, into: Path) -> Path:
    """The run without its weights (the verifier never reads them)."""
    return Path(shutil.copytree(run_dir, into / "run", ignore=shutil.ignore_patterns("weights")))


def edit_log(run_dir: Path, change) -> None:
    path = run_dir / runlog.EVENTS_FILE
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    events = change(events) or events
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))


def test_the_real_run_is_verified_and_records_its_provenance(real_run) -> None:
    done = command("analysis.verify", real_run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: VERIFIED, an unofficial run (rules not met: dataset" in done.stdout, done.stdout
    assert " MISMATCH " not in done.stdout and "not recorded" not in done.stdout
    events = runlog.read_events(real_run).events
    epochs = [e for e in events if e["event"] == runlog.EPOCH]
    assert f"{len(epochs)} of {len(epochs)} epochs recounted exactly" in done.stdout and len(epochs) >= 3
    [start] = [e for e in events if e["event"] == runlog.RUN_START]
    origin = start["provenance"]
    assert len(origin["source_sha256"]) == 64 and origin["tensorflow"] and origin["horovod"] and origin["mpi"]
    if origin["git_commit"] != "unknown":  # the checkout's commit then (HEAD may have moved on since)
        ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", origin["git_commit"], "HEAD"], cwd=REPO_ROOT)
        assert ancestor.returncode == 0, origin["git_commit"]
    assert all(len(e["graph_sha256"]) == 64 for e in events if e["event"] == runlog.MODEL_PROPOSED)


def _ops(events):
    epoch = next(e for e in events if e["event"] == runlog.EPOCH and e["epoch"] == 2)
    epoch["ops"] += 2
    return f"task {epoch['task']} epoch 2: ops: recorded"


def _accuracy(events):
    epoch = next(e for e in events if e["event"] == runlog.EPOCH)
    epoch["val_accuracy"] = 0.999
    return f"task {epoch['task']} (model "


def _run_stop(events):
    events[:] = [e for e in events if e["event"] != runlog.RUN_STOP]
    return "segment 1: a score event without a run_stop before it"


@pytest.mark.parametrize("tamper", [_ops, _accuracy, _run_stop], ids=["ops", "accuracy", "run_stop"])
def test_each_tamper_of_the_log_is_caught(real_run, tmp_path, tamper) -> None:
    run_dir = copy(real_run, tmp_path)
    named = []
    edit_log(run_dir, lambda events: named.append(tamper(events)))
    done = command("analysis.verify", run_dir)
    assert done.returncode == 1, done.stdout
    assert "verdict: NOT VERIFIED" in done.stdout and named[0] in done.stdout, done.stdout
    if tamper is _accuracy:  # the best accuracy is the score's: score.json and the error rule disagree too
        assert "score.json: best_accuracy: recorded" in done.stdout and "MISMATCH      rule error:" in done.stdout


def test_a_changed_graph_file_is_caught(real_run, tmp_path) -> None:
    """Even one space more, the same graph to every reader, is caught by the hash the master logged."""
    run_dir = copy(real_run, tmp_path)
    path = run_dir / "graphs" / "task-1.json"
    path.write_text(path.read_text() + " ")
    done = command("analysis.verify", run_dir)
    assert done.returncode == 1
    assert "graph files: task 1: graphs/task-1.json has sha256" in done.stdout, done.stdout


def test_the_bundle_verifies_and_a_tamper_inside_it_is_caught(real_run, tmp_path) -> None:
    archive = tmp_path / "bundle.tar.gz"
    done = command("analysis.bundle", real_run, "--out", archive)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left out: weights/" in done.stdout or not (real_run / "weights").exists()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert not any("/weights/" in name or name.endswith((".npz", ".keras")) for name in names), names
    checked = command("analysis.verify", archive)
    assert checked.returncode == 0, checked.stdout
    for row in ("bundle manifest", "mllog.log", "best/ (exported model)", "bundle verify.txt/json",
                "bundle system.json"):  # the side files of a real run agree with its events
        assert re.search(rf"^{re.escape(row)} +ok ", checked.stdout, re.M), (row, checked.stdout)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    [top] = list(unpacked.iterdir())
    (top / "score.json").write_text((top / "score.json").read_text().replace('"score": ', '"score": 1', 1))
    with tarfile.open(tmp_path / "tampered.tar.gz", "w:gz") as tar:
        tar.add(top, arcname=top.name)
    caught = command("analysis.verify", tmp_path / "tampered.tar.gz")
    assert caught.returncode == 1
    assert "bundle manifest: score.json: sha256 differs from MANIFEST" in caught.stdout, caught.stdout
