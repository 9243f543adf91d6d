"""Weights retention: the run directory holds the weights that can still be inherited, not every model's."""

import subprocess
import sys
from pathlib import Path

import pytest

from aiperf_mpi.config import RunConfig, load_config
from aiperf_mpi.errors import UsageError
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.batchio import do_work
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.resume import history_from_log
from aiperf_mpi.job.retention import Retention
from aiperf_mpi.results import runlog
from aiperf_mpi.results.stored_weights import file_sha256
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import ModelRecord
from aiperf_mpi.search.view import MasterHistory, ViewIndex
from tests.support.local_run import logged_records, run_local

SEARCH = SearchConfig(parents=2, working_set=8)
GROUPS = 2


def live_files_over_the_log(run_dir: Path) -> tuple[int, set[str], list[str]]:
    """Replay the log: the most weights files alive at once, those alive at the end, and every removed one."""
    alive: set[str] = set()
    removed: list[str] = []
    most = 0
    for event in runlog.read_events(run_dir).events:
        if event["event"] == runlog.MODEL_DONE and event["model"]["weights"]:
            alive.add(event["model"]["weights"])
        elif event["event"] == runlog.WEIGHTS_REMOVED:
            assert len(event["models"]) == len(event["files"])
            alive -= set(event["files"])
            removed += event["files"]
        most = max(most, len(alive))
    return most, alive, removed


def inheritable_at_the_end(run_dir: Path) -> set[str]:
    """What must stay once no task runs and no group holds candidates: the view's best parents and the best."""
    records = logged_records(run_dir)
    index: ViewIndex[None] = ViewIndex(SEARCH.view_bounds())
    for record in records:
        index.add(record.id, record.search_accuracy, None)
    best = max((r for r in records if r.accuracy is not None), key=lambda r: (r.accuracy, -r.id))
    return {records[i].weights for i in [*index.best(SEARCH.parents), best.id]}


def test_the_run_directory_keeps_only_weights_a_child_may_still_inherit(tmp_path) -> None:
    run = run_local(tmp_path, groups=GROUPS, time_limit=120, max_models=24, search_config=SEARCH)
    records = logged_records(tmp_path)
    assert len(records) == 24 and run.master.history.trained == 24
    on_disk = {f"weights/{p.name}" for p in (tmp_path / "weights").iterdir()}
    most, alive, removed = live_files_over_the_log(tmp_path)
    assert on_disk == alive == inheritable_at_the_end(tmp_path)
    assert len(on_disk) <= SEARCH.parents + 1
    # while it ran: at most the parents now, the parents each group was given, the tasks' parents and the best
    assert most <= SEARCH.parents * (GROUPS + 1) + GROUPS + 1 < len(records)
    assert len(removed) == len(set(removed)) == 24 - len(on_disk)
    assert set(run.master.retention.files.values()) == on_disk
    for runner in run.runners.values():  # no task found its parent's file gone, and children did inherit
        assert runner.missing_parents == []
    assert sum(len(r.loaded) for r in run.runners.values()) >= 10


def test_the_random_baseline_inherits_from_any_model_of_the_view_and_finds_its_file(tmp_path) -> None:
    run = run_local(tmp_path, groups=GROUPS, time_limit=120, max_models=16, search_config=SEARCH, search="random")
    assert all(runner.missing_parents == [] for runner in run.runners.values())
    assert sum(len(r.loaded) for r in run.runners.values()) >= 10
    bounds = SEARCH.view_bounds()
    assert len(list((tmp_path / "weights").iterdir())) <= bounds.top + bounds.recent + 1  # the view and the best


def test_keep_weights_all_keeps_every_file(tmp_path) -> None:
    run_local(tmp_path, groups=GROUPS, time_limit=120, max_models=12, search_config=SEARCH, keep_weights="all")
    assert len(list((tmp_path / "weights").iterdir())) == 12
    assert not any(e["event"] == runlog.WEIGHTS_REMOVED for e in runlog.read_events(tmp_path).events)
    # each model_done logs the sha256 of the file its rank wrote: through the leader, the vetting and the master
    done = [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_DONE]
    assert len(done) == 12 and all(e["weights_sha256"] == file_sha256(tmp_path / e["model"]["weights"]) for e in done)


def test_resume_rebuilds_the_master_from_the_log_and_sweeps_what_a_new_segment_cannot_inherit(tmp_path) -> None:
    run = run_local(tmp_path, groups=GROUPS, time_limit=120, max_models=14, search_config=SEARCH, keep_weights="all")
    master = run.master
    resumed = history_from_log(tmp_path, SEARCH.view_bounds())
    history = resumed.history
    assert (len(history), history.trained, history.failed, history.hashes, history.best_observed) == (
        len(master.history), master.history.trained, master.history.failed, master.history.hashes,
        master.history.best_observed)  # fmt: skip
    assert history.view.ids() == master.history.view.ids() and resumed.next_task == master.next_task
    assert [history.record(i) for i in history.view.ids()] == [master.history.record(i) for i in history.view.ids()]
    assert len(resumed.weights) == 14  # every file is still there (keep_weights all)
    # the next segment keeps only what can be inherited: its first sweep removes the rest, and says so
    log = runlog.EventLog(tmp_path)
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path))
    again = Master(config, log, history, GROUPS, tmp_path, search_config=SEARCH, weights=resumed.weights)
    work = again.take_batch()
    assert len(work.removals) == 14 - len(inheritable_at_the_end(tmp_path))
    do_work([work], log.fsync)
    log.close()
    on_disk = {f"weights/{p.name}" for p in (tmp_path / "weights").iterdir()}
    assert on_disk == inheritable_at_the_end(tmp_path)
    assert set(history_from_log(tmp_path, SEARCH.view_bounds()).weights.values()) == on_disk


def test_a_file_stays_while_a_group_may_choose_it_or_a_task_loads_it() -> None:
    retention = Retention()
    for model_id in range(4):
        retention.added(model_id, f"weights/task-{model_id}.npz")
    retention.candidates([0, 1], best=1)
    retention.refer(group=0, ids=[0, 1])
    retention.task_started(task=10, parent=0)
    retention.candidates([2, 3], best=3)  # better models arrived
    assert [m for m, _ in retention.sweep()] == []  # 0 and 1: group 0 may still choose them; 0 is being loaded
    retention.refer(group=0, ids=[2, 3])  # group 0's next Work
    assert [m for m, _ in retention.sweep()] == [1]
    retention.task_ended(10)
    assert [m for m, _ in retention.sweep()] == [0]
    assert sorted(retention.files) == [2, 3]


def test_a_bad_keep_weights_is_one_line_and_exit_2(tmp_path) -> None:
    with pytest.raises(UsageError, match="keep_weights must be one of parents, all, got 'some'"):
        load_config(None, {"keep_weights": "some"})
    command = [sys.executable, "-m", "aiperf_mpi", "--keep-weights", "most", "--run-dir", str(tmp_path / "r")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.splitlines() == ["aiperf_mpi: error: keep_weights must be one of parents, all, got 'most'"]
    assert not (tmp_path / "r").exists()


def test_the_best_models_file_stays_when_no_search_would_choose_it_at_the_end_and_after_resume(tmp_path) -> None:
    """The published model (aiperf_mpi.export) is the best by observed accuracy, but the search ranks warm-up models
    by their predicted accuracy: the best can be no candidate parent, and only its own protection keeps its file."""
    graph = to_json(tiny_resnet())
    log = runlog.EventLog(tmp_path)
    keep_all = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path), keep_weights="all")
    master = Master(keep_all, log, MasterHistory(SEARCH.view_bounds()), GROUPS, tmp_path, search_config=SEARCH)
    (tmp_path / "weights").mkdir()
    for model_id in range(6):  # model 0: observed 0.9, predicted 0.1; the others: 0.50, 0.51, ... observed
        weights = f"weights/task-{model_id}.npz"
        (tmp_path / weights).write_bytes(b"")
        first = model_id == 0
        record = ModelRecord(model_id, None, graph, accuracy=0.9 if first else 0.5 + model_id / 100,
                             predicted_accuracy=0.1 if first else None, weights=weights)  # fmt: skip
        master.append(record)
        log.write(runlog.MODEL_DONE, sync=True, model=record.fields(), task=model_id, group=0)
    assert 0 not in master.history.best_ids(SEARCH.parents) and master.history.best_observed == (0.9, 0)
    do_work([master.take_batch()], log.fsync)
    assert len(list((tmp_path / "weights").iterdir())) == 6  # keep_weights all: nothing went

    resumed = history_from_log(tmp_path, SEARCH.view_bounds())  # the next segment keeps only what it may need
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path))
    again = Master(config, log, resumed.history, GROUPS, tmp_path, search_config=SEARCH, weights=resumed.weights)
    do_work([again.take_batch()], log.fsync)
    for group in range(GROUPS):  # the end of the run: every group stopped, no task in flight
        again.retention.release(group)
    do_work([again.take_batch()], log.fsync)
    log.close()
    parents = {f"weights/task-{i}.npz" for i in again.history.best_ids(SEARCH.parents)}
    on_disk = {f"weights/{p.name}" for p in (tmp_path / "weights").iterdir()}
    assert on_disk == parents | {"weights/task-0.npz"} and len(on_disk) == SEARCH.parents + 1
