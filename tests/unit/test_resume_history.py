"""``--resume`` reads the log streamed: each ended task enters the history in a burst of graphs, and the model
forgets it (``keep_ended=False``); the burst's size changes nothing the master starts from."""

from __future__ import annotations

import json

import pytest

from aiperf_mpi.errors import UsageError
from aiperf_mpi.job import resume
from aiperf_mpi.job.resume import history_from_log
from aiperf_mpi.results import runlog
from aiperf_mpi.search.bayesian import SearchConfig
from tests.support.local_run import logged_records, run_local

SEARCH = SearchConfig(parents=2, working_set=4)


def test_the_history_is_the_same_whatever_the_burst_of_graphs_read_at_once(tmp_path, monkeypatch) -> None:
    run_local(tmp_path, groups=2, time_limit=60, max_models=9, search_config=SEARCH, fail={3}, keep_weights="all")
    whole = history_from_log(tmp_path, SEARCH.view_bounds())
    monkeypatch.setattr(resume, "GRAPHS_AT_ONCE", 1)  # each ended task's graph read at its event
    one_by_one = history_from_log(tmp_path, SEARCH.view_bounds())
    for resumed in (whole, one_by_one):
        history = resumed.history
        assert len(history) == len(logged_records(tmp_path)) >= 9 and history.failed >= 1
        assert [history.record(i) for i in history.view.ids()] == [
            record for record in logged_records(tmp_path) if record.id in history.view.ids()]  # fmt: skip
    assert (whole.next_task, whole.weights, whole.history.hashes, whole.history.best_observed) == (
        one_by_one.next_task, one_by_one.weights, one_by_one.history.hashes, one_by_one.history.best_observed)


def test_a_log_that_ends_a_model_twice_is_refused_in_one_line(tmp_path) -> None:
    run_local(tmp_path, groups=2, time_limit=60, max_models=4, search_config=SEARCH)
    log = tmp_path / runlog.EVENTS_FILE
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    done = next(i for i, e in enumerate(events) if e["event"] == runlog.MODEL_DONE and e["model"]["id"] == 0)
    proposed = next(i for i, e in enumerate(events)
                    if e["event"] == runlog.MODEL_PROPOSED and e["task"] == events[done]["task"])  # fmt: skip
    log.write_text("".join([*lines, lines[proposed], lines[done]]), encoding="utf-8")  # its task once more
    with pytest.raises(UsageError, match="ends model 0 twice"):
        history_from_log(tmp_path, SEARCH.view_bounds())
