"""The side files against the event log: mllog.log, best/ and a bundle's verify.* and system.json.

Each test forges one side of a consistent run with the other left honest — the event log forged and rescored
by :func:`tests.support.verify_runs.forge` with the honest ``mllog.log`` kept, or a side file edited under an
honest log — and asserts that verify names the file, the task and the rule, and exits 1.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from aiperf_mpi.results import mllog_format, runlog
from analysis import bundle, checks, verify
from analysis.verify import best, mllog
from analysis.verify import bundle as bundle_rows
from analysis.verify import side as side_rows
from tests.support.tarballs import members, write_members
from tests.support.verify_runs import (
    consistent_run,
    find,
    forge,
    read_log,
    recount,
    rewrite_log,
    sync_record,
    write_best,
    write_mllog,
)


def row(result: checks.Verification, name: str) -> checks.Check:
    return next(c for c in result.checks if c.name == name)


def assert_named(run_dir: Path, name: str, *fragments: str) -> list[str]:
    """``name``'s row has a problem line holding every fragment; verify exits 1."""
    lines = row(verify.verify(run_dir), name).problems
    assert any(all(f in line for f in fragments) for line in lines), lines
    assert verify.main([str(run_dir)]) == 1
    return lines


def mllog_lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "mllog.log").read_text().splitlines()
    return [json.loads(line[len(mllog_format.PREFIX):]) for line in text]


def write_mllog_lines(run_dir: Path, records: list[dict]) -> None:
    (run_dir / "mllog.log").write_text("".join(mllog_format.PREFIX + json.dumps(r) + "\n" for r in records))


def line_of(records: list[dict], key: str, task: int, epoch: int) -> dict:
    return next(r for r in records if r["key"] == key and r["metadata"].get("task") == task
                and r["metadata"].get("epoch_num") == epoch)  # fmt: skip


# --------------------------------------------------------------------------- mllog.log


def test_the_consistent_run_has_each_side_file_row_ok(pristine, capsys) -> None:
    result = verify.verify(pristine)
    assert result.ok
    assert row(result, "mllog.log").verdict == checks.OK
    assert "4 of 4 epochs equal their events" in row(result, "mllog.log").summary
    assert any("not present" in note for note in row(result, "best/ (exported model)").notes)


def test_a_forged_log_against_its_honest_mllog(run) -> None:
    """train_samples ×10 with ops and steps recounted and the score redone: mllog still says what ran."""

    honest = find(read_log(run), runlog.EPOCH, task=0, epoch=1)["train_samples"]

    def inflate(events):
        for number in (1, 2):
            recount(events, find(events, runlog.EPOCH, task=0, epoch=number), honest * 10)

    forge(run, inflate, mllog=False)
    assert_named(run, "mllog.log", "task 0 epoch 1", "ops ", f"train_samples {honest}, the epoch event {honest * 10}",
                 mllog.MLLOG_RULE)  # fmt: skip


def test_a_forged_accuracy_against_its_honest_mllog(run) -> None:
    def better(events):
        find(events, runlog.EPOCH, task=1, epoch=2)["val_accuracy"] = 0.99
        sync_record(events, 1)

    forge(run, better, mllog=False)
    assert_named(run, "mllog.log", "task 1 epoch 2", "eval_accuracy 0.7, the epoch event 0.99", mllog.MLLOG_RULE)


def test_squeezed_epoch_times_against_the_honest_mllog(run) -> None:
    def squeeze(events):
        epoch = find(events, runlog.EPOCH, task=0, epoch=2)
        epoch["start"] += 5.0

    forge(run, squeeze, mllog=False)
    assert_named(run, "mllog.log", "task 0 epoch 2", "epoch_start time 1060000, the epoch event 1065000",
                 mllog.MLLOG_RULE)  # fmt: skip


def test_an_edited_mllog_under_an_honest_log(run) -> None:
    records = mllog_lines(run)
    line_of(records, "epoch_stop", 1, 1)["metadata"]["ops"] += 1
    write_mllog_lines(run, records)
    assert_named(run, "mllog.log", "task 1 epoch 1: ops", mllog.MLLOG_RULE)


def test_the_description_lines_are_compared_with_the_log(pristine) -> None:
    """Issue 52: the description lines of the honest run are made again from its run_start, system and layout;
    those its hand-written configuration cannot make (it has no seed, learning rate or grace: a run's always has)
    are named in a note."""
    checked = row(verify.verify(pristine), "mllog.log")
    described = {record["key"] for record in mllog_lines(pristine)} & (mllog.PRELUDE_KEYS | mllog.DESCRIPTION_KEYS)
    assert {"number_of_nodes", "accelerators_per_node", "aiperf_system", "train_samples"} <= described
    unmade = ["seed", "opt_base_learning_rate", "aiperf_time_limit"]
    assert f"{len(described) - len(unmade)} of {len(described)} description lines equal the log's" in \
        checked.summary, checked.summary  # fmt: skip
    assert checked.verdict == checks.OK and all(key in " ".join(checked.notes) for key in unmade), checked.notes


@pytest.mark.parametrize(("key", "edit", "fragment"), [
    ("number_of_nodes", lambda record: record.update(value=64), "number_of_nodes of segment 1: value 64, the log's 1"),
    ("accelerators_per_node", lambda record: record.update(value=8), "accelerators_per_node of segment 1: value 8"),
    ("aiperf_system", lambda record: record["metadata"]["hosts"][0].update(accelerators=["NVIDIA B200"] * 8),
     "aiperf_system of segment 1: metadata"),
    ("train_samples", lambda record: record.update(value=12_811_670), "train_samples of segment 1: value 12811670"),
], ids=["64 nodes", "8 accelerators a node", "B200 hosts", "ten times the train split"])  # fmt: skip
def test_an_mllog_claiming_other_hardware_or_data_than_the_log_fails(run, key, edit, fragment) -> None:
    """Issue 52: ``mllog.log`` claiming 64 nodes of 8 B200 over a one-host run verified (and mlcommons' checker
    said SUCCESS): an mlcommons reader believes these lines, so they are the log's or the row fails."""
    records = mllog_lines(run)
    edit(next(record for record in records if record["key"] == key))
    write_mllog_lines(run, records)
    assert_named(run, "mllog.log", fragment, mllog.MLLOG_RULE)


def test_a_second_description_line_or_a_key_never_written_fails(run) -> None:
    records = mllog_lines(run)
    nodes = next(record for record in records if record["key"] == "number_of_nodes")
    at = records.index(nodes)
    records[at + 1 : at + 1] = [{**nodes, "value": 64},
                                {**nodes, "key": "submission_platform", "value": "64 x 8 B200"}]  # fmt: skip
    write_mllog_lines(run, records)
    lines = assert_named(run, "mllog.log", "a second number_of_nodes line in segment 1")
    assert any("key \"submission_platform\", which aiperf_mpi never writes" in line for line in lines), lines


def test_an_invented_epoch_in_the_log_has_no_mllog_lines(run) -> None:
    """A third epoch of task 1 (max_epochs raised to match), rescored; its mllog lines are absent."""

    def third(events):
        events[0]["config"]["max_epochs"] = 3
        epoch = dict(find(events, runlog.EPOCH, task=1, epoch=2), epoch=3, start=1090.5, end=1095.0, time=1095.5)
        epoch.update(compute=4.0, evaluation=0.3)
        at = events.index(find(events, runlog.MODEL_DONE, task=1))
        events.insert(at, epoch)
        done = find(events, runlog.MODEL_DONE, task=1)
        done["time"] = 1096.0
        sync_record(events, 1)

    forge(run, third, mllog=False)
    assert_named(run, "mllog.log", "task 1 epoch 3", "no lines", "every epoch event has its mllog lines")


def test_an_mllog_epoch_without_its_event(run) -> None:
    records = mllog_lines(run)
    extra = [dict(r, metadata=dict(r["metadata"], epoch_num=3)) for r in records
             if r["key"] in ("epoch_stop", "eval_accuracy") and r["metadata"].get("task") == 0
             and r["metadata"].get("epoch_num") == 2]  # fmt: skip
    at = records.index(line_of(records, "eval_accuracy", 0, 2)) + 1
    records[at:at] = extra
    write_mllog_lines(run, records)
    assert_named(run, "mllog.log", "task 0 epoch 3", "without an epoch event", mllog.MLLOG_RULE)


def test_a_missing_mllog_fails(run) -> None:
    (run / "mllog.log").unlink()
    assert_named(run, "mllog.log", "mllog.log is missing", mllog.MLLOG_RULE)


def test_a_run_stop_at_another_time(run) -> None:
    forge(run, lambda events: find(events, runlog.RUN_STOP).update(time=1099.0), mllog=False)
    assert_named(run, "mllog.log", "run_stop at 1100000 ms, segment 1's run_stop at 1099000 ms")


def _begun_epoch(run_dir: Path, task: int, epoch: int, when: float) -> None:
    records = mllog_lines(run_dir)
    stop = next(r for r in records if r["key"] == "run_stop")
    start = {"namespace": "", "time_ms": int(when * 1000), "event_type": "INTERVAL_START", "key": "epoch_start",
             "value": None, "metadata": {"task": task, "epoch_num": epoch}}  # fmt: skip
    records.insert(records.index(stop), start)
    write_mllog_lines(run_dir, records)


def test_an_epoch_begun_and_cut_is_allowed_only_for_a_discarded_task(run) -> None:
    """Task 1 was in its second epoch at run_stop: an epoch_start alone, fine while run_stop discards the task."""

    def cut(events):
        events.remove(find(events, runlog.EPOCH, task=1, epoch=2))
        events.remove(find(events, runlog.MODEL_DONE, task=1))
        find(events, runlog.RUN_STOP).update(discarded_tasks=[1])

    forge(run, cut)
    _begun_epoch(run, 1, 2, 1080.5)
    assert row(verify.verify(run), "mllog.log").verdict == checks.OK
    forge(run, lambda events: find(events, runlog.RUN_STOP).update(discarded_tasks=[]), mllog=False)
    assert_named(run, "mllog.log", "task 1 epoch 2", "an epoch_start without an epoch event", "neither discarded")


def _killed(events: list[dict], keep_until: float) -> list[dict]:
    """The run killed at ``keep_until``: no run_stop, no score, nothing logged later."""
    return [e for e in events if e["event"] not in (runlog.RUN_STOP, runlog.SCORE) and e["time"] <= keep_until]


def test_a_killed_run_may_lack_its_last_second_of_mllog(tmp_path) -> None:
    run = consistent_run(tmp_path / "run")
    events = _killed(read_log(run), 1091.5)
    write_mllog(run, [e for e in events if not (e["event"] == runlog.EPOCH and e["time"] > 1090)])
    forge(run, lambda evs: _killed(evs, 1091.5), mllog=False)
    result = verify.verify(run)
    mllog = row(result, "mllog.log")
    assert mllog.verdict == checks.OK, mllog.problems
    assert any("its last 1 epoch(s)" in note and "flushed once a second" in note for note in mllog.notes)


def test_a_killed_run_lacking_more_than_its_last_second_fails(tmp_path) -> None:
    run = consistent_run(tmp_path / "run")
    events = _killed(read_log(run), 1091.5)
    missing = [e for e in events if e["event"] == runlog.EPOCH and e["time"] > 1050]  # 40 s of epochs
    write_mllog(run, [e for e in events if not any(e is m for m in missing)])
    forge(run, lambda evs: _killed(evs, 1091.5), mllog=False)
    assert_named(run, "mllog.log", "task 0 epoch 2", "no lines")


# --------------------------------------------------------------------------- best/


@pytest.fixture
def exported(run) -> Path:
    write_best(run)
    return run


def test_an_honest_best_export_is_ok(exported) -> None:
    result = verify.verify(exported)
    assert result.ok, [c.problems for c in result.checks if c.problems]
    assert row(result, "best/ (exported model)").summary.startswith("task 0: ")


def test_a_raised_accuracy_in_the_log_against_the_honest_best(exported) -> None:
    def better(events):
        find(events, runlog.EPOCH, task=0, epoch=2)["val_accuracy"] = 0.95
        sync_record(events, 0)

    forge(exported, better)  # mllog.log rewritten to match: only best/ still tells the truth
    lines = assert_named(exported, "best/ (exported model)", "best/metadata.json: task 0: accuracy.best_epoch 0.75, "
                                                            "its model_done 0.95", best.BEST_RULE)  # fmt: skip
    assert row(verify.verify(exported), "mllog.log").verdict == checks.OK, lines


@pytest.mark.parametrize(("edit", "fragments"), [
    (lambda meta: meta.update(task=1, model_id=1), ("task 1, the log's best model is task 0",)),
    (lambda meta: meta["hparams"].update(kernel_size=7), ("task 0: hparams",)),
    (lambda meta: meta["ops_per_sample"].update(forward=1), ("ops_per_sample.forward 1, recounted",)),
    (lambda meta: meta["lineage"][0].update(description="wider"), ("lineage step 1 (task 0): description",)),
    (lambda meta: meta["lineage"][0].update(parent_model_id=7), ("lineage starts at a model with a parent",)),
    (lambda meta: meta["accuracy"].update(weights=0.9), ("accuracy.weights 0.9, its saved epoch 0.75",)),
], ids=["task", "hparams", "ops", "lineage", "parent", "weights"])  # fmt: skip
def test_an_edited_metadata_json(exported, edit, fragments) -> None:
    path = exported / "best" / "metadata.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    assert_named(exported, "best/ (exported model)", "best/metadata.json", *fragments, best.BEST_RULE)


@pytest.mark.parametrize(("after_the_stop", "moved"), [(True, False), (False, True)], ids=["after", "before"])
def test_the_best_model_is_the_log_s_as_of_its_last_run_stop(exported, after_the_stop, moved) -> None:
    """A better model logged after the last ``run_stop`` (out of place: the segments row names it) does not move
    the best: best/ describes the run's best model as of its last stop, as the export made it then."""
    def a_better_model(events: list[dict]) -> None:
        done = json.loads(json.dumps(find(events, runlog.MODEL_DONE, task=1)))
        done["model"]["accuracy"] = 0.99
        events.insert(events.index(find(events, runlog.RUN_STOP)) + after_the_stop, done)

    rewrite_log(exported, a_better_model)
    lines = row(verify.verify(exported), "best/ (exported model)").problems
    assert any("the log's best model is task 1 (accuracy 0.99)" in line for line in lines) == moved, lines


def test_an_edited_ops_json_or_graph_json(exported) -> None:
    path = exported / "best" / "ops.json"
    ops = json.loads(path.read_text())
    ops["forward_eval"] += 1
    path.write_text(json.dumps(ops))
    assert_named(exported, "best/ (exported model)", "best/ops.json: task 0: not the recount of its graph file")
    path.unlink()
    assert_named(exported, "best/ (exported model)", "best/ops.json is missing")


# --------------------------------------------------------------------------- a bundle's own files


def _repack(archive: Path, out: Path, change) -> Path:
    """Change the bundle's files, then rewrite its MANIFEST to match, as a careful forger would."""
    files = members(archive)
    change(files)
    files.pop("run/MANIFEST")
    manifest = "".join(f"{hashlib.sha256(data).hexdigest()}  {name[len('run/'):]}\n"
                       for name, data in sorted(files.items()))  # fmt: skip
    files["run/MANIFEST"] = manifest.encode()
    return write_members(out, files)


def test_a_bundle_of_a_forged_run_relabelled_verified(run, tmp_path) -> None:
    """A run that does not verify, bundled; verify.txt/json rewritten to say VERIFIED, the MANIFEST redone."""
    forge(run, lambda events: find(events, runlog.EPOCH, task=0, epoch=1).update(ops=1), mllog=True)
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(run), "--out", str(archive)]) == 1
    good = verify.verify_dir(consistent_run(tmp_path / "honest"))

    def relabel(files):
        files["run/verify.json"] = json.dumps(good.to_dict()).encode()
        files["run/verify.txt"] = good.text().encode()

    forged = _repack(archive, tmp_path / "forged.tar.gz", relabel)
    result = verify.verify(forged)
    assert row(result, "bundle manifest").verdict == checks.OK
    lines = row(result, "bundle verify.txt/json").problems
    assert any("verify.json: verified true, recomputed false" in line for line in lines), lines
    assert any("verify.json: row 'ops recount' says \"ok\", recomputed MISMATCH" in line for line in lines), lines
    assert any(line.startswith("verify.txt: \"verdict: VERIFIED") for line in lines), lines
    assert all(bundle_rows.BUNDLE_RULE in line for line in lines)


def test_a_bundle_with_an_edited_system_json(pristine, tmp_path) -> None:
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(pristine), "--out", str(archive)]) == 0
    assert verify.main([str(archive)]) == 0

    def faster(files):
        system = json.loads(files["run/system.json"])
        for peak in system["segments"][0]["peak"]:
            peak["ops_per_second"] *= 10
        files["run/system.json"] = json.dumps(system).encode()

    forged = _repack(archive, tmp_path / "forged.tar.gz", faster)
    lines = row(verify.verify(forged), "bundle system.json").problems
    assert lines == [f"system.json: segment 1: peak differ from the log's events ({bundle_rows.SYSTEM_RULE})"]
    assert verify.main([str(forged)]) == 1


def test_a_bundle_keeps_its_best_files_checked(run, tmp_path) -> None:
    write_best(run)
    shutil.copy(run / "best" / "metadata.json", run / "best" / "metadata.bak.json")
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(run), "--out", str(archive)]) == 0
    result = verify.verify(archive)
    assert result.ok and row(result, "best/ (exported model)").summary.startswith("task 0")


def test_the_reader_reads_what_the_writer_writes(tmp_path) -> None:
    """One format (results/mllog_format.py): a line written late reads back at its true time, a stray one is named."""
    from aiperf_mpi.job.mllog import MLLogWriter

    writer = MLLogWriter(tmp_path)
    writer.run_stop("time limit", 5.0)
    writer.epoch_start(3, 2, 4.5, 64)  # arrives after a later line: held at its time_ms, true time in metadata
    writer.close()
    records = [mllog_format.read_line(text) for text in (tmp_path / mllog_format.MLLOG_FILE).read_text().splitlines()]
    assert [(r["key"], r["time_ms"], mllog_format.true_time_ms(r)) for r in records] == [
        ("run_stop", 5000, 5000), ("epoch_start", 5000, 4500)]  # fmt: skip
    for stray, why in (("hello", "not a ':::MLLOG' line"), (mllog_format.PREFIX + "[1]", "not an MLLOG JSON object")):
        with pytest.raises(mllog_format.NotAnMLLogLine, match=why):
            mllog_format.read_line(stray)


# --------------------------------------------------------------------------- files no row reads


def test_a_report_claiming_ten_times_the_score_is_named_not_read(run, tmp_path) -> None:
    """Issue 52: a report showing ×10 the score verified, silently, inside a verified bundle too.  The verdict
    still stands on the log (the report is not evidence either way), and now says that it did not read the report:
    in the run directory and in the bundle that carries it."""
    (run / "report").mkdir()
    (run / "report" / "report.md").write_text("# Score: 10 × what the log says\n")
    (run / "notes.txt").write_text("64 nodes of 8 B200\n")
    result = verify.verify(run)
    side = row(result, side_rows.ROW)
    assert result.ok and side.verdict == checks.OK
    named = " ".join(side.notes)
    assert "report/report.md: not read by verify" in named and "python -m analysis.report" in named, side.notes
    assert "notes.txt: not read by verify (no row reads it)" in named, side.notes
    assert "2 not read, each named" in side.summary, side.summary
    assert not any(note.startswith((runlog.EVENTS_FILE, "mllog.log", "score.json", "graphs/")) for note in side.notes)
    archive = tmp_path / "b.tar.gz"
    assert bundle.main([str(run), "--out", str(archive)]) == 0
    in_bundle = row(verify.verify(archive), side_rows.ROW)
    assert any("report/report.md" in note and "not read by verify" in note for note in in_bundle.notes), in_bundle.notes


def test_past_forty_side_files_the_rest_are_counted(run) -> None:
    (run / "extra").mkdir()
    for number in range(side_rows.MAX_NAMED + 5):
        (run / "extra" / f"f{number:03}").write_text("x")
    side = row(verify.verify(run), side_rows.ROW)
    assert len(side.notes) == 1 and side.notes[0].startswith("extra/f000, extra/f001"), side.notes
    assert f"extra/f{side_rows.MAX_NAMED - 1:03} and 5 more: not read by verify" in side.notes[0], side.notes


def test_the_side_files_row_knows_the_runs_lock_by_its_name() -> None:
    from aiperf_mpi.job.runlock import LOCK_FILE

    assert side_rows.LOCK_FILE == LOCK_FILE


def test_description_lines_after_the_last_run_start_or_run_stop_fail(run) -> None:
    """The review's a1/a2: lines moved after the last segment's run_start (a prelude key) or its run_stop were held
    for a next segment that never came, and never compared."""
    records = mllog_lines(run)
    records = [r for r in records if r["key"] != "number_of_nodes"]
    start = next(i for i, r in enumerate(records) if r["key"] == "run_start")
    records.insert(start + 1, {**records[start], "event_type": "POINT_IN_TIME", "key": "number_of_nodes", "value": 64,
                               "metadata": {}})  # fmt: skip
    system = next(r for r in records if r["key"] == "aiperf_system")
    records.append({**system, "metadata": {**system["metadata"], "hosts": []}})
    write_mllog_lines(run, records)
    lines = assert_named(run, "mllog.log", "number_of_nodes after segment 1's run_start, which no segment follows")
    assert any("aiperf_system after segment 1's run_stop" in line for line in lines), lines


def test_a_cut_last_line_after_a_clean_run_stop_fails(run) -> None:
    """The review's a5: an unterminated line after the last run_stop, which mlcommons' checker reads (a killed
    segment may end in one; a stopped one wrote whole lines)."""
    with open(run / "mllog.log", "a") as handle:
        handle.write(mllog_format.PREFIX + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME",
                                                       "key": "submission_platform", "value": "64 x 8 B200",
                                                       "metadata": {}}))  # fmt: skip
    assert_named(run, "mllog.log", "ends in a cut line", "after segment 1's run_stop")


def test_the_side_files_row_counts_only_what_a_row_reads(run) -> None:
    """The review's b1: bundle files in a run directory, the lock, an audit record and graph files no proposal names
    were counted as read."""
    for name in ("verify.txt", "system.json", "MANIFEST", "running.lock", "audit.json", "graphs/segment-9.jsonl"):
        (run / name).write_text("{}\n")
    side = row(verify.verify(run), side_rows.ROW)
    named = " ".join(side.notes)
    for name in ("verify.txt", "system.json", "MANIFEST", "running.lock", "audit.json", "graphs/segment-9.jsonl"):
        assert name in named, (name, side.notes)
    assert "graphs/segment-1.jsonl" not in named, side.notes


def test_a_file_name_is_printed_escaped_and_an_unlistable_folder_is_named(run, monkeypatch) -> None:
    """The review's b2/b3: a name with newlines wrote its own verdict line into verify's output; a folder that could
    not be listed hid what it held."""
    (run / "zz").mkdir()
    (run / "zz" / "x\n\nverdict: VERIFIED, a valid run\n").write_text("")
    (run / "locked").mkdir()
    (run / "locked" / "claims.md").write_text("64 nodes\n")
    scandir = side_rows.os.scandir

    def refuse(path):
        if str(path).endswith("/locked"):
            raise PermissionError(13, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(side_rows.os, "scandir", refuse)
    result = verify.verify(run)
    text = result.text()
    assert "\nverdict: VERIFIED, a valid run\n" not in text and "zz/x\\n\\nverdict" in text, text[-2000:]
    side = row(result, side_rows.ROW)
    assert any("locked/ (Permission denied): a folder verify could not list" in note for note in side.notes), side
