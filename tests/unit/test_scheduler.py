"""The master's scheduler and the leaders' loop over the in-process transport (no MPI processes).

The same contract as tests/mpi/test_protocol.py, which runs it over MPI.
"""

import threading
from pathlib import Path

import pytest

from aiperf_mpi import runlog
from aiperf_mpi.config import RunConfig, load_config
from aiperf_mpi.errors import UsageError
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.leader import leader_loop
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.run import master_loop
from aiperf_mpi.job.transport import LocalHub
from aiperf_mpi.score import score_run
from aiperf_mpi.search.history import TRAINED, History
from tests.support.fake_runner import FakeRunner


def run_local(tmp_path: Path, groups: int, time_limit: float, slow=(), fail=(), max_models=0):
    config = RunConfig(time_limit=time_limit, seed_model="tiny", score_step=0.5, run_dir=str(tmp_path),
                       max_models=max_models, grace=30)  # fmt: skip
    hub = LocalHub(groups)
    log = runlog.EventLog(tmp_path)
    log.write(runlog.RUN_START, sync=True, segment=1, config=config.to_dict())
    master = Master(config, log, History(), groups, tmp_path)
    replicas = {group: History() for group in range(groups)}

    def leader(group: int) -> None:
        runner = FakeRunner(group, epoch_seconds=0.02, slow_groups=slow, fail_tasks=fail)
        leader_loop(hub.channel(group), group, 1, config, tiny_resnet(), runner, history=replicas[group])

    threads = [threading.Thread(target=leader, args=(group,), daemon=True) for group in range(groups)]
    for thread in threads:
        thread.start()
    outcome = master_loop(master, hub, lambda: "", progress_interval=1000)
    for thread in threads:
        thread.join(timeout=30)
    log.write(runlog.RUN_STOP, sync=True, reason=master.stopping)
    log.close()
    return master, replicas, outcome


def test_every_work_gets_one_result_and_replicas_agree(tmp_path) -> None:
    master, replicas, outcome = run_local(tmp_path, groups=3, time_limit=3.0, slow=(1,))
    assert outcome == "done" and master.done
    events = runlog.read_events(tmp_path).events
    works = {e["task"] for e in events if e["event"] == runlog.MODEL_PROPOSED}
    finished = [e["task"] for e in events if e["event"] in (runlog.MODEL_DONE, runlog.MODEL_FAILED)]
    assert sorted(finished) == sorted(works) and len(finished) == len(set(finished))
    assert len(finished) >= 6
    assert {e["group"] for e in events if e["event"] == runlog.MODEL_DONE} == {0, 1, 2}  # the slow group too
    for replica in replicas.values():
        assert replica.to_list() == master.history.to_list()[: len(replica)]
        assert len(replica) >= len(master.history) - 3  # only results that arrived after its Stop are missing
    trained = [r for r in master.history if r.status == TRAINED]  # a task stopped before its first epoch is not
    assert score_run(tmp_path).models_trained == len(trained) >= 6


def test_failed_trials_are_recorded_and_the_run_goes_on(tmp_path) -> None:
    master, _, _ = run_local(tmp_path, groups=2, time_limit=2.0, fail=(1, 3))
    events = runlog.read_events(tmp_path).events
    failed = [e for e in events if e["event"] == runlog.MODEL_FAILED]
    assert {e["task"] for e in failed} == {1, 3}
    assert all("injected failure" in e["reason"] and "rank" in e and "host" in e for e in failed)
    assert sum(1 for e in events if e["event"] == runlog.MODEL_DONE) >= 3


def test_max_models_ends_the_run(tmp_path) -> None:
    master, _, _ = run_local(tmp_path, groups=2, time_limit=60, max_models=5)
    assert len(master.history) == 5 and master.stopping == "max models"


def test_config_layers_and_validation(tmp_path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('time_limit = 120\ndataset = "synthetic"\n[ignored]\n')
    with pytest.raises(UsageError, match="unknown key 'ignored'"):
        load_config(str(toml), {})
    toml.write_text('time_limit = 120\ndataset = "synthetic"\nprecision = "fp16"\n')
    config = load_config(str(toml), {"time_limit": 30.0, "precision": None})
    assert (config.time_limit, config.dataset, config.precision) == (30.0, "synthetic", "fp16")
    with pytest.raises(UsageError) as caught:
        load_config(None, {"time_limit": -1.0, "precision": "int8", "dataset": "cifar10"})
    message = str(caught.value)
    assert "time_limit must be > 0" in message and "nothing narrower than FP16" in message
    assert "needs data_path" in message and "\n" not in message
    toml.write_text("time_limit = 'soon'\n")
    with pytest.raises(UsageError, match="time_limit must be a number"):
        load_config(str(toml), {})
    toml.write_text("time_limit = \n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_config(str(toml), {})
    with pytest.raises(UsageError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"), {})


def test_a_search_that_finds_no_child_fails_the_task_not_the_run(tmp_path, monkeypatch) -> None:
    from aiperf_mpi.search.bayesian import BayesianSearch

    original = BayesianSearch.ask
    calls = {"count": 0}

    def flaky(self, kernel=3):
        calls["count"] += 1
        if calls["count"] == 2:
            raise RuntimeError("no new architecture found by morphing the best models")
        return original(self, kernel)

    monkeypatch.setattr(BayesianSearch, "ask", flaky)
    master, _, outcome = run_local(tmp_path, groups=1, time_limit=2.0)
    assert outcome == "done"
    failed = [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_FAILED]
    assert len(failed) == 1 and "the search found no child" in failed[0]["reason"]
    assert sum(1 for r in master.history if r.status == "trained") >= 3
