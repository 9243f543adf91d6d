"""The verifier and the bundle on hand-made runs: a consistent run passes, each tamper is named, bad input is exit 2.

The real run's version of these checks (a run made by ``mpirun … python -m
aiperf_mpi``) is in tests/mpi/test_verify.py.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from aiperf_mpi.results import provenance, runlog
from aiperf_mpi.results.graphs import append_graph, read_graph, segment_graph_file
from aiperf_mpi.results.stored_weights import file_sha256
from analysis import bundle, checks, verify
from tests.support.tarballs import members, write_members
from tests.support.verify_runs import (
    consistent_run,
    find,
    forge,
    full_pass,
    read_log,
    rewrite_log,
    to_file_per_model,
    write_best,
    write_weights,
)


def problems(result: checks.Verification, check: str) -> list[str]:
    return next(c for c in result.checks if c.name == check).problems


def test_a_consistent_run_is_verified_and_valid_with_its_best_model(run, capsys) -> None:
    assert verify.main([str(run)]) == 0
    assert "verdict: VERIFIED, an unofficial run (rules not met: best model (best/ not present))" in \
        capsys.readouterr().out  # every rule of the score met, but the accuracy that ranks has no model behind it
    write_best(run)
    assert verify.main([str(run)]) == 0
    out = capsys.readouterr().out
    # issue 45: valid by every rule of its log, but "valid" only once re-evaluated and audited
    assert "verdict: VERIFIED, consistent with a valid run, NOT YET VALID: missing the best model re-evaluated" in out
    assert "a valid run" not in out.replace("consistent with a valid run", "")
    assert "4 of 4 epochs recounted exactly" in out and "2 graph files: 2 sha256 as logged" in out
    for name in ("log", "segments", "epochs in segments", "graph files", "ops recount", "model records", "score",
                 "rule dataset", "rule error", "rule precision", "rule algorithms", "provenance"):  # fmt: skip
        assert any(line.startswith(name + " ") and " ok " in line for line in out.splitlines()), name
    assert "this verifier runs the same aiperf_mpi source as the run" in out


def test_an_unofficial_run_is_verified_as_unofficial(tmp_path, capsys) -> None:
    run = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")
    assert verify.main([str(run)]) == 0
    assert "verdict: VERIFIED, an unofficial run (rules not met: dataset)" in capsys.readouterr().out


def _epoch(events: list[dict], task: int, number: int) -> dict:
    return find(events, runlog.EPOCH, task=task, epoch=number)


def _ops(events):
    _epoch(events, 1, 2)["ops"] += 1


def _steps(events):  # steps and ops_update changed together, so the total still adds up
    epoch = _epoch(events, 0, 1)
    epoch["steps"] += 1


def _accuracy(events):  # not the best: the score does not move, the model record does not agree
    _epoch(events, 0, 1)["val_accuracy"] = 0.55


def _both_accuracies(events):  # the epoch and its model record agree, the score files do not
    _epoch(events, 1, 2)["val_accuracy"] = 0.9
    done = find(events, runlog.MODEL_DONE, task=1)["model"]
    done["epochs"][1]["val_accuracy"] = done["accuracy"] = 0.9


def _no_run_stop(events):
    return [e for e in events if e["event"] != runlog.RUN_STOP]


def _epoch_after_done(events):
    late = dict(_epoch(events, 0, 2), epoch=3, time=1095.0)
    events.insert(events.index(find(events, runlog.RUN_STOP)), late)


def _epoch_before_proposal(events):
    epoch = _epoch(events, 1, 1)
    events.remove(epoch)
    events.insert(events.index(find(events, runlog.MODEL_PROPOSED, task=1)), epoch)


def _other_group(events):
    _epoch(events, 1, 1)["group"] = 0


def _second_segment_number(events):
    events[0]["segment"] = 2


def _provenance_python(events):
    events[0]["provenance"]["python"] = "3.12.0"


def _hash(events):
    find(events, runlog.MODEL_PROPOSED, task=0)["graph_sha256"] = "0" * 64


def _peak_precision(events):
    find(events, runlog.PEAK)["precision"] = "int8"


def _random_search(events):
    find(events, runlog.MODEL_PROPOSED, task=1)["search"]["strategy"] = "random"


TAMPERS = [
    (_ops, "ops recount", "task 1 epoch 2: ops: recorded"),
    (_steps, "ops recount", f"task 0 epoch 1: steps: recorded {full_pass('imagenet', 32)[0] + 1}, "
                            f"recomputed {full_pass('imagenet', 32)[0]}"),
    (_accuracy, "model records", "task 0 (model 0): epoch 1: the epoch event and the model record differ in "
                                 "val_accuracy"),
    (_both_accuracies, "score", "score.json: best_accuracy: recorded 0.75, recomputed 0.9"),
    (_no_run_stop, "segments", "segment 1: a score event without a run_stop before it"),
    (_epoch_after_done, "epochs in segments", "task 0 epoch 3: comes after its model_done/model_failed"),
    (_epoch_before_proposal, "epochs in segments", "task 1 epoch 1: has no model_proposed before it"),
    (_other_group, "epochs in segments", "task 1 epoch 1: group 0, its task was given to group 1"),
    (_second_segment_number, "segments", "run_start of segment 2 is the log's run_start number 1"),
    (_provenance_python, "provenance", 'segment 1: provenance python "3.12.0", its system event "3.11.7"'),
    (_hash, "graph files", "task 0: graphs/segment-1.jsonl at byte 0 (+2059) has sha256"),
    (_peak_precision, "rule precision", "precision: the configuration says fp16, the peak probe ran at fp16, int8"),
    (_random_search, "rule algorithms", "algorithms: the configuration says bayesian, proposals name random (1)"),
]  # fmt: skip


@pytest.mark.parametrize(("tamper", "check", "line"), TAMPERS, ids=[t[0].__name__.strip("_") for t in TAMPERS])
def test_each_tamper_of_the_log_is_named(run, tamper, check, line, capsys) -> None:
    rewrite_log(run, tamper)
    result = verify.verify(run)
    assert not result.ok
    assert any(line in p for p in problems(result, check)), problems(result, check)
    assert verify.main([str(run)]) == 1
    assert "verdict: NOT VERIFIED" in capsys.readouterr().out


def test_a_changed_graph_file_is_caught_by_its_logged_hash(run) -> None:
    path = run / "graphs" / "segment-1.jsonl"
    text = path.read_text()
    at = text.index("\n") + 1  # task 1's line: the same length, one kernel changed
    path.write_text(text[:at] + text[at:].replace('"kernel":5', '"kernel":7', 1))
    found = problems(verify.verify(run), "graph files")
    place = f"graphs/segment-1.jsonl at byte {at} (+{len(text) - at - 1})"
    assert any(f"task 1: {place} has sha256" in p and "the file was changed" in p for p in found), found
    assert any(f"task 1: {place} is not the graph its model_done records" in p for p in found), found
    assert "task 1: the graph file's tunable kernels are [5, 7], its hparams' kernel_size 5" in found, found


def test_a_run_with_one_graph_file_per_model_still_verifies_and_a_changed_one_is_caught(run) -> None:
    """Runs written before the appended graphs file (graphs/task-N.json, no offsets) verify as they did."""
    to_file_per_model(run)
    assert sorted(p.name for p in (run / "graphs").iterdir()) == ["task-0.json", "task-1.json"]
    assert verify.verify(run).ok
    path = run / "graphs" / "task-1.json"
    path.write_text(path.read_text().replace('"kernel":5', '"kernel":7', 1))
    found = problems(verify.verify(run), "graph files")
    assert any("task 1: graphs/task-1.json has sha256" in p and "the file was changed" in p for p in found), found
    (run / "graphs" / "task-0.json").unlink()
    assert "task 0: graphs/task-0.json is missing" in problems(verify.verify(run), "graph files")


def _task_1_placed_at_task_0s(events) -> None:
    first = find(events, runlog.MODEL_PROPOSED, task=0)
    find(events, runlog.MODEL_PROPOSED, task=1).update(graph_offset=first["graph_offset"],
                                                       graph_bytes=first["graph_bytes"])  # fmt: skip


def test_an_offset_at_another_models_graph_is_caught(run) -> None:
    """Task 1's event pointed at task 0's line: the bytes are not task 1's, and the line is another model's."""
    rewrite_log(run, _task_1_placed_at_task_0s)
    found = problems(verify.verify(run), "graph files")
    assert any(p.startswith("task 1: graphs/segment-1.jsonl at byte 0 (+2059) has sha256") for p in found), found
    assert "task 1: graphs/segment-1.jsonl at byte 0 (+2059) is task 0's graph" in found, found


def test_an_offset_at_another_models_graph_with_its_sha256_too_is_caught(run) -> None:
    """The forger copies task 0's sha256 as well: the hash agrees, the line still belongs to task 0."""

    def forged(events) -> None:
        _task_1_placed_at_task_0s(events)
        find(events, runlog.MODEL_PROPOSED, task=1)["graph_sha256"] = find(events, runlog.MODEL_PROPOSED,
                                                                           task=0)["graph_sha256"]  # fmt: skip

    rewrite_log(run, forged)
    result = verify.verify(run)
    assert not result.ok
    assert "task 1: graphs/segment-1.jsonl at byte 0 (+2059) is task 0's graph" in problems(result, "graph files")


@pytest.mark.parametrize("parent", [0, None])
def test_a_child_whose_graph_the_master_had_seen_is_a_duplicate(run, parent) -> None:
    """Task 1 proposes task 0's graph again, in a line of its own with its true sha256 (a leader that got past the
    master's duplicate check): as a child it is a duplicate; as a seed it is allowed (a seed is always accepted)."""

    def forged(events) -> None:
        first = find(events, runlog.MODEL_PROPOSED, task=0)
        again = append_graph(run, segment_graph_file(1), read_graph(run, first).decode())
        find(events, runlog.MODEL_PROPOSED, task=1).update(parent=parent, **again)

    rewrite_log(run, forged)
    found = problems(verify.verify(run), "graph files")
    duplicate = "task 1: its graph is task 0's, which the master had seen: it accepts no child twice (a duplicate)"
    assert (duplicate in found) == (parent is not None), found


def test_a_truncated_graphs_file_and_an_offset_inside_a_line_are_caught(run) -> None:
    path = run / "graphs" / "segment-1.jsonl"
    data = path.read_bytes()
    second = find(read_log(run), runlog.MODEL_PROPOSED, task=1)
    path.write_bytes(data[: second["graph_offset"] + 100])  # cut inside task 1's line
    found = problems(verify.verify(run), "graph files")
    assert f"task 1: graphs/segment-1.jsonl ends at byte {second['graph_offset'] + 100}, before the graph at byte " \
           f"{second['graph_offset']} (+{second['graph_bytes']} and its newline): the file was cut" in found, found
    assert not any(p.startswith("task 0:") for p in found), found
    path.write_bytes(data)
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=1).update(graph_offset=1, graph_bytes=5))
    found = problems(verify.verify(run), "graph files")
    assert "task 1: graphs/segment-1.jsonl: byte 1 (+5) is not a whole line of the file" in found, found
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=1).update(graph_offset=-1))
    assert any("graph_offset -1 and graph_bytes 5 are not two non-negative integers" in p
               for p in problems(verify.verify(run), "graph files"))  # fmt: skip


def test_a_missing_graph_file_and_one_outside_the_run(run) -> None:
    (run / "graphs" / "segment-1.jsonl").unlink()
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=1).update(graph_file="../x.jsonl"))
    result = verify.verify(run)
    assert "task 0: graphs/segment-1.jsonl is missing" in problems(result, "graph files")
    assert "task 1: graph_file '../x.jsonl' lies outside the run directory" in problems(result, "graph files")
    assert any(p.startswith("task 0 epoch 1: not recounted") for p in problems(result, "ops recount"))


def test_a_changed_score_file_and_rule(run) -> None:
    written = json.loads((run / "score.json").read_text())
    written["score"] *= 1.0001
    written["rules"]["dataset"]["ok"] = False
    (run / "score.json").write_text(json.dumps(written))
    result = verify.verify(run)
    assert any(p.startswith("score.json: score: recorded") for p in problems(result, "score"))
    assert any(p.startswith("score.json says") for p in problems(result, "rule dataset"))
    (run / "score.json").unlink()
    assert any("score.json is missing" in p for p in problems(verify.verify(run), "score"))


def test_a_log_without_provenance_is_not_recorded_and_fails(tmp_path, capsys) -> None:
    run = consistent_run(tmp_path / "run", with_provenance=False)
    result = verify.verify(run)
    row = next(c for c in result.checks if c.name == "provenance")
    assert row.verdict == checks.NOT_RECORDED and not row.problems
    assert verify.main([str(run)]) == 1
    out = capsys.readouterr().out
    assert "not recorded  provenance: segment 1's run_start has no provenance" in out
    assert "verdict: NOT VERIFIED (0 check(s) with mismatches, 1 not recorded)" in out


def test_a_log_without_graph_hashes_is_not_recorded(run) -> None:
    def strip(events):
        for event in events:
            event.pop("graph_sha256", None)

    rewrite_log(run, strip)
    row = next(c for c in verify.verify(run).checks if c.name == "graph files")
    assert row.verdict == checks.NOT_RECORDED
    assert row.missing == ["2 of 2 model_proposed events have no graph_sha256 (a log older than the field)"]


def test_a_resumed_segment_with_other_code_or_configuration(run) -> None:
    def resume(events):
        second = dict(events[0], time=2000.0, segment=2, resumed=True)
        second["config"] = dict(second["config"], precision="fp32", time_limit=50.0)
        second["provenance"] = dict(second["provenance"], source_sha256="1" * 64)
        events += [second, dict(events[1], time=2000.1), dict(events[2], time=2000.2),
                   {"event": runlog.RUN_STOP, "time": 2010.0, "reason": "time limit", "discarded_tasks": [],
                    "segment": 2}]  # fmt: skip

    rewrite_log(run, resume)
    result = verify.verify(run)
    assert "segment 2 runs another configuration: precision changed" in problems(result, "segments")
    assert "segment 2 has no score event after its run_stop" in problems(result, "segments")
    assert "segment 2 ran other source code than segment 1 (source_sha256 differs)" in problems(result, "provenance")


def test_a_cut_tail_and_a_bad_line_inside(run) -> None:
    with open(run / runlog.EVENTS_FILE, "a") as handle:
        handle.write('{"event":"epoch","ti')
    assert any("the log ends in a cut line" in p for p in problems(verify.verify(run), "log"))
    lines = (run / runlog.EVENTS_FILE).read_text().splitlines(keepends=True)
    lines[5] = "not json\n"
    (run / runlog.EVENTS_FILE).write_text("".join(lines[:-1]))
    assert any(":6: not a JSON line" in p for p in problems(verify.verify(run), "log"))


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "text").write_text("hello")
    (tmp_path / "nostart").mkdir()
    (tmp_path / "nostart" / runlog.EVENTS_FILE).write_text('{"event":"system","time":1}\n')
    for path, message in ((tmp_path / "nothing", "no such run directory or bundle"),
                          (tmp_path / "empty", "not a run directory (no events.jsonl)"),
                          (tmp_path / "text", "neither a run directory nor a bundle archive"),
                          (tmp_path / "nostart", "no run_start: not an aiperf_mpi event log")):  # fmt: skip
        assert verify.main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("analysis.verify: error: ") and message in err, err


def test_the_source_hash_is_the_sha256sum_listing(tmp_path) -> None:
    package = tmp_path / "aiperf_mpi"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    (package / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    (package / "README").write_text("not source")
    listing = "".join(f"{hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()}  {name}\n"
                      for name in ("aiperf_mpi/__init__.py", "aiperf_mpi/sub/b.py"))  # fmt: skip
    assert provenance.source_sha256(package) == (hashlib.sha256(listing.encode()).hexdigest(), 2)
    assert provenance.git_state(package) == (provenance.UNKNOWN, None)  # not a git checkout: never an error


def test_comparisons() -> None:
    assert checks.same(1, 1) and not checks.same(1, 2) and not checks.same(True, 1)
    assert checks.same(0.1 + 0.2, 0.3) and not checks.same(1.0, 1.0 + 1e-9)
    assert checks.same({"a": [1, None]}, {"a": [1, None]}) and not checks.same({"a": 1}, {"a": 1, "b": 2})
    assert checks.differences({"x": 1}, {"x": 2, "y": 3}, ("x", "y")) == [
        "x: recorded 1, recomputed 2", "y: not in the record (recomputed 3)"]  # fmt: skip


# --------------------------------------------------------------------------- the bundle


def test_a_bundle_holds_the_run_without_weights_and_verifies(run, tmp_path, capsys) -> None:
    write_weights(run, 0)  # a real .npz of its graph's shapes, its sha256 logged (the weights files row)
    write_best(run)  # metadata.json, ops.json, graph.json and a model file of the graph's arrays
    (run / "best" / "model_card.md").write_text("# best\n")
    (run / "report").mkdir()
    (run / "report" / "report.md").write_text("# report\n")
    out = tmp_path / "out" / "sub.tar.gz"
    assert bundle.main([str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "verdict: VERIFIED" in printed
    assert "left out: weights/ (1 file, " in printed and "left out: best/model.keras (a model file" in printed
    files = members(out)
    assert sorted(files) == sorted(f"run/{name}" for name in (
        "events.jsonl", "mllog.log", "score.json", "graphs/segment-1.jsonl", "report/report.md",
        "best/graph.json", "best/metadata.json", "best/ops.json", "best/model_card.md", "system.json", "verify.txt",
        "verify.json", "MANIFEST"))  # fmt: skip
    manifest = verify.read_manifest(files["run/MANIFEST"].decode())
    assert set(manifest) == {name[len("run/"):] for name in files} - {"MANIFEST"}
    assert all(hashlib.sha256(files["run/" + n]).hexdigest() == digest for n, digest in manifest.items())
    assert "verdict: VERIFIED, consistent with a valid run, NOT YET VALID" in files["run/verify.txt"].decode()
    recorded = json.loads(files["run/verify.json"])
    assert recorded["valid"] is False and recorded["valid_by_log"] is True
    assert recorded["checked"]["reevaluated"] is False and len(recorded["checked"]["missing"]) == 2
    system = json.loads(files["run/system.json"])
    assert system["segments"][0]["provenance"]["source_sha256"] and system["segments"][0]["layout"]["groups"]
    assert verify.main([str(out)]) == 0
    rows = {line.split("  ")[0]: line.split() for line in capsys.readouterr().out.splitlines() if "  " in line}
    assert rows["bundle manifest"][2:] == ["ok", "12", "of", "12", "files", "as", "MANIFEST", "lists", "them"]
    assert rows["bundle verify.txt/json"][2] == "ok" and rows["bundle system.json"][2] == "ok"
    assert rows["mllog.log"][1] == "ok" and "4 of 4 epochs equal their events" in " ".join(rows["mllog.log"])


def _repack(archive: Path, out: Path, change) -> None:
    files = members(archive)
    change(files)
    write_members(out, files)


def test_a_tampered_bundle_is_caught_by_its_manifest(pristine, tmp_path) -> None:
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(pristine), "--out", str(archive)]) == 0
    changed = tmp_path / "changed.tar.gz"
    name = "run/graphs/segment-1.jsonl"
    _repack(archive, changed, lambda f: f.update({name: f[name] + b" "}))
    assert "graphs/segment-1.jsonl: sha256 differs from MANIFEST (changed after the bundle was made)" in problems(
        verify.verify(changed), "bundle manifest")
    added = tmp_path / "added.tar.gz"
    _repack(archive, added, lambda f: f.update({"run/extra.txt": b"x"}))
    assert "extra.txt: in the bundle, not in MANIFEST (added after the bundle was made)" in problems(
        verify.verify(added), "bundle manifest")
    removed = tmp_path / "removed.tar.gz"
    _repack(archive, removed, lambda f: f.pop("run/verify.json"))
    assert "verify.json: in MANIFEST, not in the bundle" in problems(verify.verify(removed), "bundle manifest")
    assert verify.main([str(removed)]) == 1


def test_a_bundle_of_a_run_without_its_report_gets_one_and_bad_input(pristine, tmp_path, capsys) -> None:
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(pristine), "--out", str(archive)]) == 0
    assert "run/report/report.md" in members(archive) and not (pristine / "report").exists()
    assert bundle.main([str(tmp_path / "none")]) == 2
    assert bundle.main([str(pristine), "--out", str(pristine / "in.tar.gz")]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and "cannot be written inside the run directory" in err


def test_a_bundle_with_a_link_is_refused(pristine, tmp_path, capsys) -> None:
    archive = tmp_path / "link.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("run/events.jsonl")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    assert verify.main([str(archive)]) == 2
    assert "is not a plain file" in capsys.readouterr().err


def test_unit_logs_read_back(pristine) -> None:
    assert [e["event"] for e in read_log(pristine)][-2:] == [runlog.RUN_STOP, runlog.SCORE]


def test_a_run_whose_records_carry_no_graph_verifies_and_reports_its_best_graph(tmp_path, capsys) -> None:
    """The layout the master writes: each graph once, in the graphs file; ``model_done`` without it."""
    from aiperf_mpi.results.logmodel import read_model as load_run

    run = consistent_run(tmp_path / "run")

    def drop_graphs(events: list[dict]) -> None:
        for task in (0, 1):
            del find(events, runlog.MODEL_DONE, task=task)["model"]["graph"]

    rewrite_log(run, drop_graphs)
    assert all("graph" not in e["model"] for e in read_log(run) if e["event"] == runlog.MODEL_DONE)
    assert verify.main([str(run)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "2 graph files: 2 sha256 as logged" in out and "model_done's graph" not in out
    best = load_run(run).best
    assert best.task == 0 and best.place and best.place["graph_file"] == "graphs/segment-1.jsonl", best
    assert '"kernel":3' in best.graph and not best.graph_error
    # a changed line is still caught by its hash, and the report does not count it; nor a cut file
    path = run / "graphs" / "segment-1.jsonl"
    original = path.read_bytes()
    path.write_bytes(original.replace(b'"kernel":3', b'"kernel":9', 1))
    assert verify.main([str(run)]) == 1
    assert "is not the graph its model_proposed hashed" in load_run(run).best.graph_error
    path.write_bytes(original[:10])
    assert verify.main([str(run)]) == 1
    assert "the file was cut" in load_run(run).best.graph_error


def test_a_model_done_graph_that_is_not_text_fails(tmp_path) -> None:
    """An older run's record carries its graph as JSON text; anything else in that field is a forged record."""
    run = consistent_run(tmp_path / "run")
    rewrite_log(run, lambda events: find(events, runlog.MODEL_DONE, task=1)["model"].update(graph=None))
    found = problems(verify.verify(run), "model records")
    assert any("its graph is NoneType, not the graph's JSON text" in p for p in found), found


# --------------------------------------------------------------------------- kept weights files


def test_each_kept_weights_file_is_the_logged_file_of_its_graphs_shapes(run) -> None:
    write_weights(run, 0)
    write_weights(run, 1)
    result = verify.verify(run)
    [row] = [c for c in result.checks if c.name == "weights files"]
    assert row.verdict == "ok" and row.summary.startswith("2 of 2 kept weights file(s)"), row
    assert result.ok


@pytest.mark.parametrize("case", ["tampered", "other shapes", "not an npz", "unlogged", "best"])
def test_a_weights_file_that_is_not_the_logged_one_fails_its_row(run, case: str) -> None:
    path = write_weights(run, 0)
    if case == "tampered":  # one byte of an array changed after its sha256 was logged
        path.write_bytes(path.read_bytes()[:-1] + b"\x01")
        expected = "weights/task-0.npz (task 0): sha256 "
    elif case == "other shapes":  # another model's weights, their sha256 logged consistently
        write_weights(run, 0, shapes={"stem_conv": [(5, 5, 3, 16)]})
        expected = "weights/task-0.npz (task 0): no weights for the graph's layer(s)"
    elif case == "not an npz":
        path.write_bytes(b"fake weights")
        rewrite_log(run, lambda events: find(events, "model_done", task=0).update(weights_sha256=file_sha256(path)))
        expected = "weights/task-0.npz (task 0): not an .npz of weights"
    elif case == "unlogged":  # a log from before the sha256 was logged
        rewrite_log(run, lambda events: find(events, "model_done", task=0).pop("weights_sha256") and None)
        expected = ""
    else:  # best/model.keras is not the file best/metadata.json says the export wrote
        best = write_best(run)
        (best / "model.keras").write_bytes(b"a model")
        meta = json.loads((best / "metadata.json").read_text())
        meta.update(weights_file="weights/task-0.npz", weights_sha256=file_sha256(path), model_sha256="0" * 64)
        (best / "metadata.json").write_text(json.dumps(meta))
        expected = "best/model.keras: its sha256 is not best/metadata.json's model_sha256"
    [row] = [c for c in verify.verify(run).checks if c.name == "weights files"]
    if case == "unlogged":
        assert row.verdict == "not recorded" and "records no weights_sha256" in row.missing[0], row
        return
    assert row.verdict == "MISMATCH" and expected in row.problems[0], row.problems
    assert row.problems[0].endswith("(rule: a kept weights file is the logged one, of its graph's shapes)")


def test_a_task_whose_search_found_no_child_fails_without_a_proposal_and_verifies(run, capsys) -> None:
    """The leader's search can find no child the master has not seen (aiperf_mpi.job.leader.propose): the task is
    logged ``model_failed`` and never ``model_proposed``.  The 128-rank rehearsal's log had one, which verify named
    "without a model_proposed"; it is the package's own log, and a failure adds no operation to the score."""

    def no_child(events: list[dict]) -> None:
        done = events.index(find(events, runlog.MODEL_DONE, task=1))  # group 0 idle since its model ended
        events.insert(done + 1, {"event": runlog.MODEL_FAILED, "time": 1091.5, "task": 2, "group": 0, "model": 2,
                                 "rank": 1, "host": "h0", "traceback": "",
                                 "reason": "the search found no child: RuntimeError: no new architecture found",
                                 "graph_hash": None})  # fmt: skip

    forge(run, no_child)
    assert verify.main([str(run)]) == 0, capsys.readouterr().out


def test_a_task_s_life_out_of_order_is_named_where_it_breaks(run) -> None:
    """The open tasks are the shared view's (issue 44): a proposal of an ended task, an end after the end, an end
    and an epoch of a task never proposed are each the ``epochs in segments`` row's, as the record family named
    them when it kept its own tasks."""

    def out_of_order(events: list[dict]) -> None:
        done = find(events, runlog.MODEL_DONE, task=1)
        at = events.index(done)
        proposal = json.loads(json.dumps(find(events, runlog.MODEL_PROPOSED, task=1)))
        epoch = json.loads(json.dumps(find(events, runlog.EPOCH, task=1)))
        stranger = {**json.loads(json.dumps(done)), "task": 9}
        stranger_epoch = {**json.loads(json.dumps(epoch)), "task": 9}
        events[at + 1:at + 1] = [json.loads(json.dumps(done)), epoch, proposal, stranger_epoch, stranger]

    rewrite_log(run, out_of_order)
    lines = problems(verify.verify(run), "epochs in segments")
    assert lines == ["task 1: model_done after its end", "task 1 epoch 1: comes after its model_done/model_failed",
                     "task 1 proposed twice", "task 9 epoch 1: has no model_proposed before it",
                     "task 9: model_done without a model_proposed"], lines


def test_a_task_proposed_twice_names_its_strategy_once(run) -> None:
    """The rule ``algorithms`` counts the strategy of each task's first proposal: a second ``model_proposed`` of a
    task is the ``epochs in segments`` row's problem, not a second strategy (the shared view, issue 44, counts as
    the record family did)."""

    def twice(events: list[dict]) -> None:
        first = find(events, runlog.MODEL_PROPOSED, task=1)
        again = json.loads(json.dumps(first))
        again["search"]["strategy"] = "random"
        events.insert(events.index(first) + 1, again)

    rewrite_log(run, twice)
    result = verify.verify(run)
    assert "task 1 proposed twice" in problems(result, "epochs in segments")
    assert not any("proposals name" in line for line in problems(result, "rule algorithms")), result.text()
