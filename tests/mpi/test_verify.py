"""The verifier on a real run (mpirun -n 3 python -m aiperf_mpi): it passes, and every tamper of a copy is named.

One real run serves every test here, and test_run.py (tests/mpi/conftest.py); each tamper works on a copy.
The verifier and the bundle run as a reviewer would run them, as commands.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from aiperf_mpi.graph.model import from_json, to_json
from aiperf_mpi.graph.morph import candidates, wider
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import append_graph, graph_place, read_graph
from tests.support.data_files import write_cifar
from tests.support.mpirun import REPO_ROOT
from tests.support.verify_runs import find, forge, sync_record

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.tf]


@pytest.fixture(scope="module")
def real_run(digits_run) -> Path:
    """The run test_run.py checks too (tests/mpi/conftest.py), as it ended: read here, changed only in copies."""
    return digits_run.pristine


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
    proposals = [e for e in events if e["event"] == runlog.MODEL_PROPOSED]
    assert all(len(e["graph_sha256"]) == 64 for e in proposals)
    assert all(("seed" if e["parent"] is None else "morphs") in e for e in proposals)
    assert any(e["parent"] is not None for e in proposals), "the run has no child to rebuild"
    assert f"{len(proposals)} of {len(proposals)} graph files rebuilt from the seed model" in done.stdout


def _ops(events):
    epoch = [e for e in events if e["event"] == runlog.EPOCH][-1]
    epoch["ops"] += 2
    return f"task {epoch['task']} epoch {epoch['epoch']}: ops: recorded"


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
    """One byte changed in place in the appended graphs file (every line where the log says) is caught by the hash
    the master logged."""
    run_dir = copy(real_run, tmp_path)
    proposal = next(e for e in runlog.read_events(run_dir).events
                    if e["event"] == runlog.MODEL_PROPOSED and e["task"] == 1)  # fmt: skip
    path = run_dir / proposal["graph_file"]
    data = bytearray(path.read_bytes())
    at = data.index(b'"input"', proposal["graph_offset"]) + 1
    data[at : at + 1] = b"I"  # the same length: the other graphs stay where the log says
    path.write_bytes(bytes(data))
    done = command("analysis.verify", run_dir)
    assert done.returncode == 1
    assert f"graph files: task 1: {graph_place(proposal)} has sha256" in done.stdout, done.stdout


def test_a_childs_graph_forged_with_its_sha256_is_named_by_the_lineage(real_run, tmp_path) -> None:
    """A layer of a child widened in its graph file, the logged sha256 updated: its morphisms do not lead there."""
    run_dir = copy(real_run, tmp_path)
    child = next(e for e in runlog.read_events(run_dir).events
                 if e["event"] == runlog.MODEL_PROPOSED and e["parent"] is not None)  # fmt: skip
    graph = from_json(read_graph(run_dir, child))
    forged = to_json(wider(graph, candidates(graph, "wider")[0][0], 1, random.Random(0)).graph)
    placed = append_graph(run_dir, child["graph_file"], forged)  # a new line, the event pointed at it

    def rehash(events: list[dict]) -> None:
        for event in events:
            if event["event"] == runlog.MODEL_PROPOSED and event["task"] == child["task"]:
                event.update(placed)

    edit_log(run_dir, rehash)
    done = command("analysis.verify", run_dir)
    assert done.returncode == 1
    assert (f"lineage: model_proposed of task {child['task']}: its graph is not its parent model {child['parent']}"
            in done.stdout), done.stdout


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


# --------------------------------------------------------------------------- the second step: re-evaluation


def reevaluation_row(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("re-evaluation "))


def test_the_best_model_re_evaluated_from_its_weights_gives_the_logged_count(real_run) -> None:
    """best/model.keras on the digits validation split, in the trainer's shards and batches: the count as logged."""
    done = command("analysis.verify", real_run, "--reevaluate")
    assert done.returncode == 0, done.stdout + done.stderr
    events = runlog.read_events(real_run).events
    best = json.loads((real_run / "best" / "metadata.json").read_text())
    [epoch] = [e for e in events if e["event"] == runlog.EPOCH and e["task"] == best["task"]
               and e["epoch"] == best["accuracy"]["epoch"]]  # fmt: skip
    logged = epoch.get("correct", round(epoch["val_accuracy"] * epoch["validation_samples"]))
    row = reevaluation_row(done.stdout)
    assert row.split()[1] == "ok", row
    assert f"task {best['task']} epoch {epoch['epoch']}: {logged} of 360 correct, as logged (fp32 on the CPU" in row


def test_an_edited_accuracy_is_caught_by_the_re_evaluation(real_run, tmp_path) -> None:
    """The best epoch's accuracy raised by 5 images, its model record and every score recomputed to match."""
    run_dir = copy(real_run, tmp_path)  # best/ travels with it; weights/ are not needed
    best = json.loads((run_dir / "best" / "metadata.json").read_text())
    logged = best["accuracy"]["validation_correct"]

    def raise_accuracy(events):
        epoch = find(events, runlog.EPOCH, task=best["task"], epoch=best["accuracy"]["epoch"])
        epoch["val_accuracy"] = (logged + 5) / epoch["validation_samples"]
        if "correct" in epoch:  # the count itself, where the run logs it
            epoch["correct"] = logged + 5
        sync_record(events, best["task"])

    forge(run_dir, raise_accuracy, step=10.0)
    done = command("analysis.verify", run_dir, "--reevaluate")
    assert done.returncode == 1, done.stdout + done.stderr
    row = reevaluation_row(done.stdout)
    assert "MISMATCH" in row and f"logged {logged + 5} correct of 360, re-evaluated {logged}" in row, row
    assert f"MISMATCH      re-evaluation: logged {logged + 5} correct of 360" in done.stdout


def test_the_untouched_run_recounts_exactly_at_no_tolerance(real_run) -> None:
    """A CPU run recounted at its precision: the reviewer may ask for the exact count, and gets it."""
    done = command("analysis.verify", real_run, "--reevaluate", "--reevaluate-tolerance", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert reevaluation_row(done.stdout).split()[1] == "ok"
    assert "weights files" in done.stdout and not re.search(r"^weights files +(MISMATCH|not recorded)", done.stdout,
                                                              re.M), done.stdout  # fmt: skip


def failed_claim(run_dir: Path, *args: object) -> str:
    """``verify --reevaluate``'s failing re-evaluation line: exit 1, never a pass nor a refusal."""
    done = command("analysis.verify", run_dir, "--reevaluate", *args)
    assert done.returncode == 1 and not done.stderr.strip(), done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("MISMATCH      re-evaluation: ")]
    return line


def test_a_raised_epoch_whose_weights_were_not_saved_fails_the_claim(real_run, tmp_path) -> None:
    """A careful forger raises an epoch the trainer did not keep the weights of (its record, scores and MLLOG made
    to agree): it becomes the claimed best, and no weights back it."""
    run_dir = copy(real_run, tmp_path)
    events = runlog.read_events(run_dir).events
    best = max(e["val_accuracy"] for e in events if e["event"] == runlog.EPOCH)
    done = [e for e in events if e["event"] == runlog.MODEL_DONE and len(e["model"]["epochs"]) == 2]
    assert done, "no model trained two epochs"
    task = done[0]["task"]
    other = 3 - done[0]["model"]["timings"]["weights_epoch"]  # the epoch whose weights were not kept

    def raise_it(events: list[dict]) -> None:
        epoch = find(events, runlog.EPOCH, task=task, epoch=other)
        epoch["correct"] = min(epoch["validation_samples"], round(best * epoch["validation_samples"]) + 5)
        epoch["val_accuracy"] = epoch["correct"] / epoch["validation_samples"]
        sync_record(events, task)

    forge(run_dir, raise_it, step=10.0)
    line = failed_claim(run_dir)
    assert f"the run's best epoch is task {task} epoch {other}" in line, line
    assert line.endswith("(rule: the claimed best epoch is the saved one)"), line


def test_deleted_weights_fail_the_claim(real_run, tmp_path) -> None:
    run_dir = copy(real_run, tmp_path)  # weights/ left out; the best model's only copy is best/model.keras
    (run_dir / "best" / "model.keras").unlink()
    line = failed_claim(run_dir)
    assert "is missing (nor does best/model.keras hold it)" in line, line
    assert line.endswith("(rule: the saved weights are present and logged)"), line


def test_tampered_weights_fail_the_claim_and_the_weights_row(real_run, tmp_path) -> None:
    """One byte of the best model changed fails the claim; one of a kept .npz fails plain verify's weights row."""
    run_dir = Path(shutil.copytree(real_run, tmp_path / "run"))  # with weights/
    model = run_dir / "best" / "model.keras"
    model.write_bytes(model.read_bytes()[:-1] + bytes([model.read_bytes()[-1] ^ 1]))
    line = failed_claim(run_dir)
    assert "best/model.keras has sha256" in line and "not the file the export wrote" in line, line
    kept = sorted((run_dir / "weights").glob("*.npz"))
    assert kept, "the run kept no weights file"
    data = bytearray(kept[0].read_bytes())
    data[-30] ^= 1  # inside the last array
    kept[0].write_bytes(bytes(data))
    done = command("analysis.verify", run_dir)
    assert done.returncode == 1
    named = rf"MISMATCH +weights files: weights/{kept[0].name} \(task \d+\): sha256 "
    assert re.search(named, done.stdout), done.stdout


@pytest.mark.parametrize("data", ["missing", "wrong"])
def test_missing_or_wrong_data_fails_the_claim(real_run, tmp_path, data: str) -> None:
    """The run relabelled as CIFAR-10: the reviewer without the data, or with another split, cannot recount it."""
    run_dir = copy(real_run, tmp_path)
    edit_log(run_dir, lambda events: events[0]["config"].update(dataset="cifar10"))
    args: list[object] = []
    if data == "wrong":
        write_cifar(tmp_path / "cifar", per_file=20)
        args = ["--data-path", tmp_path / "cifar"]
    line = failed_claim(run_dir, *args)
    said = "give its location with --data-path" if data == "missing" else "validation split holds 20 images"
    assert said in line and line.endswith("(rule: the reviewer holds the run's data)"), line
