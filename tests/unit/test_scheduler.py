"""The master's scheduler and the leaders' loop over the in-process transport (no MPI processes).

The same contract as tests/mpi/test_protocol.py, which runs it over MPI.
"""

import hashlib
import json
import pickle
import re
import zlib
from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest

from aiperf_mpi.config import RunConfig, load_config
from aiperf_mpi.errors import UsageError
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.batchio import do_work
from aiperf_mpi.job.leader import PROPOSALS, epoch_would_overrun, leader_loop
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.messages import (
    Accepted,
    Duplicate,
    EpochDone,
    Failed,
    Proposed,
    Ready,
    Result,
    Stop,
    Work,
    epoch_done,
    proposed,
)
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import GraphFileError, read_graph, read_logged_graph
from aiperf_mpi.results.score import score_run
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import ModelRecord
from aiperf_mpi.search.view import MasterHistory, SearchView, ViewUpdate, wire_record
from tests.support.fake_runner import FakeRunner
from tests.support.local_run import logged_records, run_local, view_of


def test_every_work_gets_one_result_and_views_agree(tmp_path) -> None:
    run = run_local(tmp_path, groups=3, time_limit=3.0, slow=(1,))
    master = run.master
    assert run.outcome == "done" and master.done
    events = runlog.read_events(tmp_path).events
    works = {e["task"] for e in events if e["event"] == runlog.MODEL_PROPOSED}
    finished = [e["task"] for e in events if e["event"] in (runlog.MODEL_DONE, runlog.MODEL_FAILED)]
    assert sorted(finished) == sorted(works) and len(finished) == len(set(finished))
    assert len(finished) >= 6
    assert {e["group"] for e in events if e["event"] == runlog.MODEL_DONE} == {0, 1, 2}  # the slow group too
    records = logged_records(tmp_path)
    bounds = SearchConfig().view_bounds()
    for view in run.views.values():  # each leader holds exactly the view as it was at its last Work
        # results after it are missing (a Stop carries none): a group stopped early misses more
        assert 0 < len(view) <= len(master.history)
        assert view.ids() == view_of(records[: len(view)], bounds)
        for model_id in view.ids():
            logged = records[model_id]
            assert (view[model_id].graph, view[model_id].accuracy, view[model_id].weights) == (
                logged.graph, logged.accuracy, logged.weights)  # fmt: skip
    trained = [r for r in records if r.status == "trained"]  # a task stopped before its first epoch is not
    assert score_run(tmp_path).models_trained == len(trained) == master.history.trained >= 6


def test_failed_trials_are_recorded_and_the_run_goes_on(tmp_path) -> None:
    run_local(tmp_path, groups=2, time_limit=2.0, fail=(1, 3))
    events = runlog.read_events(tmp_path).events
    failed = [e for e in events if e["event"] == runlog.MODEL_FAILED]
    assert {e["task"] for e in failed} == {1, 3}
    assert all("injected failure" in e["reason"] and "rank" in e and "host" in e for e in failed)
    assert sum(1 for e in events if e["event"] == runlog.MODEL_DONE) >= 3


def test_the_tasks_in_flight_are_named_by_task_not_by_group(tmp_path) -> None:
    """``run_stop``'s ``discarded_tasks`` are task numbers: they were the groups' numbers until 2026-12-03, so a run
    stopped by a signal mid-epoch failed verify's mllog row (a task's epoch_start "neither discarded" at the stop)."""
    config = RunConfig(time_limit=1000, seed_model="tiny", run_dir=str(tmp_path))
    master = Master(config, runlog.EventLog(tmp_path), MasterHistory(SearchConfig().view_bounds()), 3, tmp_path)
    handed = {}
    for group in (2, 0):  # group 2 asks first: task 0 goes to group 2, task 1 to group 0
        [(_, work)] = master.handle(group, Ready(group, 1, "host"))
        handed[group] = work.task_id
    assert handed == {2: 0, 0: 1}
    assert master.tasks_in_flight == [0, 1]
    master.handle(2, Failed(0, 2, "host", "injected", ""))
    assert master.tasks_in_flight == [1, 2]  # group 2 went on to task 2: the groups would be [0, 2]


def test_max_models_ends_the_run(tmp_path) -> None:
    master = run_local(tmp_path, groups=2, time_limit=60, max_models=5).master
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
    run = run_local(tmp_path, groups=1, time_limit=2.0)
    assert run.outcome == "done"
    failed = [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_FAILED]
    assert len(failed) == 1 and "the search found no child" in failed[0]["reason"]
    assert run.master.history.trained >= 3


def test_a_message_rank_0_cannot_take_loses_its_group_not_the_run(tmp_path, monkeypatch) -> None:
    """A leader's damaged or forged Result (here: a parent that is no earlier model) is refused before anything is
    logged, and its group is lost as a dead node's is; the other group trains on and the run scores."""
    import threading

    from aiperf_mpi.job import leader as leader_module

    made = {"count": 0}
    lock = threading.Lock()

    def damaged(*fields):
        with lock:
            made["count"] += 1
            second = made["count"] == 2
        result = Result(*fields)
        return replace(result, parent=10**6) if second else result

    monkeypatch.setattr(leader_module, "Result", damaged)
    run = run_local(tmp_path, groups=2, time_limit=3.0)
    assert run.outcome == "done" and run.master.lost_groups == 1
    events = runlog.read_events(tmp_path).events
    [lost] = [e for e in events if e["event"] == runlog.GROUP_LOST]
    assert "could not take its Result" in lost["reason"] and "earlier model" in lost["reason"]
    done = [e for e in events if e["event"] == runlog.MODEL_DONE]
    assert lost["task"] not in {e["task"] for e in done}  # refused whole: no model_done for it
    assert sum(e["group"] != lost["group"] for e in done) >= 2  # the other group went on
    assert json.loads((tmp_path / "score.json").read_text())["score"] > 0


# --------------------------------------------------------------------------- duplicates


def epoch_of(accuracy: float) -> dict:
    return {"epoch": 1, "val_accuracy": accuracy, "ops": 1000, "start": 0.0, "end": 1.0}


def result(task: int, parent, graph: str, accuracy: float) -> Result:
    return Result(task, parent, graph, {}, [epoch_of(accuracy)], accuracy, None, {"total": 1000}, {}, "", "epoch limit")


def test_the_master_refuses_a_graph_it_has_seen_and_keeps_no_trace_of_the_refusal(tmp_path) -> None:
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 2, tmp_path)
    [(_, first)] = master.handle(0, Ready(0, 1, "host"))
    [(_, second)] = master.handle(1, Ready(1, 1, "host"))
    assert first.seed_model and second.seed_model
    seed, child = to_json(tiny_resnet()), to_json(tiny_resnet(width=12))
    # both groups train the seed: the seed (no parent) is always accepted
    assert master.handle(0, Proposed(first.task_id, None, seed, {}, "seed")) == [(0, Accepted(first.task_id))]
    assert master.handle(1, Proposed(second.task_id, None, seed, {}, "seed")) == [(1, Accepted(second.task_id))]
    [(_, third)] = master.handle(0, result(first.task_id, None, seed, 0.5))
    assert not third.seed_model and len(third.view.records) == 1 and third.view.dictionary
    assert master.handle(0, Proposed(third.task_id, 0, child, {}, "child")) == [(0, Accepted(third.task_id))]
    [(_, fourth)] = master.handle(1, result(second.task_id, None, seed, 0.4))
    # group 1 proposes the child group 0 is training, then a morph of the seed that is the seed: both refused
    assert master.handle(1, Proposed(fourth.task_id, 0, child, {}, "child")) == [(1, Duplicate(fourth.task_id))]
    assert master.handle(1, Proposed(fourth.task_id, 1, seed, {}, "seed")) == [(1, Duplicate(fourth.task_id))]
    assert master.duplicates == 2
    do_work([master.take_batch()], log.fsync)  # what the loop's I/O thread does before the replies leave
    log.close()
    proposed = [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_PROPOSED]
    assert [e["task"] for e in proposed] == [first.task_id, second.task_id, third.task_id]
    # one appended file, each accepted graph a line where its event says, in the order accepted
    assert sorted(p.name for p in (tmp_path / "graphs").iterdir()) == ["segment-1.jsonl"]
    assert [read_graph(tmp_path, e).decode() for e in proposed] == [seed, seed, child]
    assert (tmp_path / "graphs" / "segment-1.jsonl").read_text() == f"{seed}\n{seed}\n{child}\n"


class ScriptedMaster:
    """Plays the master for one leader: a Work, then answers each Proposed from ``answers``; Stop after the task."""

    def __init__(self, work: Work, answers: list[str]) -> None:
        self.inbox: deque = deque([work])
        self.answers = answers
        self.sent: list = []

    def send(self, message) -> None:
        self.sent.append(message)
        if isinstance(message, Proposed):
            answer = self.answers.pop(0)
            if answer == "stop, then accepted":
                self.inbox.extend([Stop("time limit"), Accepted(message.task_id)])
            else:
                self.inbox.append((Accepted if answer == "accepted" else Duplicate)(message.task_id))
        elif isinstance(message, Result | Failed):
            self.inbox.append(Stop("done"))

    def recv(self):
        return self.inbox.popleft()

    def hold(self, messages) -> None:
        self.inbox.extendleft(reversed(messages))

    def stop_pending(self) -> bool:
        return any(isinstance(m, Stop) for m in self.inbox)


def scripted_leader(tmp_path: Path, answers: list[str]) -> list:
    history = MasterHistory(SearchConfig().view_bounds())
    seed = tiny_resnet()
    history.append(ModelRecord(0, None, to_json(seed), accuracy=0.5))
    channel = ScriptedMaster(Work(1, history.update(0, with_dictionary=True), round=5), answers)
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path))
    leader_loop(channel, 0, 1, config, seed, FakeRunner(0, epoch_seconds=0.001))
    return channel.sent


def test_a_leader_asks_its_search_again_after_a_duplicate(tmp_path) -> None:
    sent = scripted_leader(tmp_path, ["duplicate", "accepted"])
    proposed = [m for m in sent if isinstance(m, Proposed)]
    [done] = [m for m in sent if isinstance(m, Result)]
    assert len(proposed) == 2 and proposed[0].graph != proposed[1].graph
    assert json.loads(proposed[1].members)["search"]["duplicates"] == 1  # the leader's fields, as logged
    assert done.graph == proposed[1].graph and done.trained


def test_a_leader_fails_the_task_when_every_proposal_is_a_duplicate(tmp_path) -> None:
    sent = scripted_leader(tmp_path, ["duplicate"] * PROPOSALS)
    assert sum(isinstance(m, Proposed) for m in sent) == PROPOSALS
    [failed] = [m for m in sent if isinstance(m, Failed)]
    assert "the search found no child" in failed.reason and "no new architecture" in failed.reason
    assert len({m.graph for m in sent if isinstance(m, Proposed)}) == PROPOSALS  # never the same twice


def test_a_stop_before_the_answer_is_kept_and_the_task_ends_at_once(tmp_path) -> None:
    sent = scripted_leader(tmp_path, ["stop, then accepted"])
    [done] = [m for m in sent if isinstance(m, Result)]
    assert epochs_of(done) == [] and isinstance(sent[-1], Result)  # stopped before its first epoch; then the loop left


def test_warm_up_rounds_train_briefly_and_feed_the_search_a_prediction(tmp_path) -> None:
    """--search-warmup-epochs: a group's first three models train that many epochs; their accuracy is also predicted."""
    run_local(tmp_path, groups=1, time_limit=60, max_models=5, search_warmup_epochs=1)
    done = [e["model"] for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_DONE]
    assert [len(m["epochs"]) for m in done] == [1, 1, 1, 2, 2]  # the fake runner trains 2 epochs at most
    assert all(m["predicted_accuracy"] is not None for m in done[:3])
    assert all(m["predicted_accuracy"] is None for m in done[3:])


# --------------------------------------------------------------------------- the end of the time limit


def full_epoch(accuracy: float, start: float = 0.0, end: float = 1.0) -> dict:
    """A first epoch with every field the log's schema asks for."""
    return {**epoch_of(accuracy), "start": start, "end": end, "train_loss": 1.0, "ops_train": 1000, "ops_update": 0,
            "ops_validation": 0, "steps": 1, "train_samples": 1, "validation_samples": 1, "data_wait": 0.0,
            "compute": 1.0, "evaluation": 0.0, "learning_rate": 0.1}  # fmt: skip


@pytest.mark.parametrize(
    "forged",
    [{"ops": 10**400}, {"ops": -1}, {"ops": 2**63}, {"ops": 2**64}, {"ops": 1.5e15}, {"end": 10**400},
     {"val_accuracy": -(10**400)}],
    ids=["ops-400-digits", "ops-negative", "ops-2**63", "ops-2**64-orjson-float", "ops-float", "end-400-digits",
         "accuracy-huge-int"],
)
@pytest.mark.parametrize("encoded", [True, False], ids=["leader-encoded", "dict"])
def test_an_epoch_whose_numbers_rank_0_cannot_sum_is_refused_before_a_byte_is_written(tmp_path, forged, encoded):
    """A 400-digit ops passed the schema ("a number") and then broke rank 0's progress line outside any handler."""
    from aiperf_mpi.job.master import REFUSED

    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 1, tmp_path)
    [(_, work)] = master.handle(0, Ready(0, 1, "host"))
    epoch = {**full_epoch(0.5), **forged}
    message = EpochDone(work.task_id, {}, None, runlog.value_text(epoch)) if encoded else EpochDone(work.task_id, epoch)
    log.sync()
    before = (tmp_path / runlog.EVENTS_FILE).read_bytes()
    with pytest.raises(REFUSED, match="ops must be an integer|beyond what a float holds"):
        master.handle(0, message)
    log.sync()
    assert (tmp_path / runlog.EVENTS_FILE).read_bytes() == before and master.ops_done == 0
    master.progress_line()  # what broke before


def test_a_ready_whose_host_is_not_a_name_is_refused_so_that_losing_the_group_can_be_logged(tmp_path) -> None:
    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    master = Master(config, runlog.EventLog(tmp_path), MasterHistory(SearchConfig().view_bounds()), 1, tmp_path)
    with pytest.raises(ValueError, match="host a name"):
        master.handle(0, Ready(0, 1, 5))  # type: ignore[arg-type]
    master.lose(0, [], "refused")  # as master_loop's refuse does next: group_lost must still be writable
    assert [e["host"] for e in runlog.read_events(tmp_path).events if e["event"] == runlog.GROUP_LOST] == [""]


def test_a_sent_number_that_overflows_a_float_is_refused() -> None:
    for text in ('{"end": 1e400}', "[-1e400]", '{"a": NaN}'):
        with pytest.raises(ValueError, match="not a number a log line may hold"):
            runlog.parse_sent(text)
    assert runlog.parse_sent('{"ops": 1e308, "n": -12}') == {"ops": 1e308, "n": -12}  # the largest finite


def epochs_of(message: Result) -> list[dict]:
    """A Result's epochs, sent as the log's text (a leader's) or as dicts."""
    return json.loads(message.epochs_text) if message.epochs_text else message.epochs


def test_a_leaders_encoded_epochs_make_the_lines_the_master_would_have_encoded(tmp_path) -> None:
    """epoch and model_done lines from a leader's texts (messages.epoch_done, Result.epochs_text) are the very
    lines the master writes when it encodes the dicts itself: the same text, the same order, only the times."""
    lines = []
    for encoded in (False, True):
        run_dir = tmp_path / str(encoded)
        config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(run_dir))
        log = runlog.EventLog(run_dir)
        master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 1, run_dir)
        [(_, work)] = master.handle(0, Ready(0, 1, "host"))
        seed = to_json(tiny_resnet())
        lineage = {"seed": {"name": "tiny", "image_size": 32}}
        master.handle(0, (proposed if encoded else Proposed)(work.task_id, None, seed, {"batch_size": 8}, "seed",
                                                             {"search": "seed"}, **lineage))  # fmt: skip
        epochs = [full_epoch(0.5, 1.0, 2.0), {**full_epoch(0.25, 2.0, 3.5), "epoch": 2, "xla": False}]
        for epoch in epochs:
            master.handle(0, epoch_done(work.task_id, epoch) if encoded else EpochDone(work.task_id, epoch))
        text = runlog.value_text(epochs)
        master.handle(0, Result(work.task_id, None, seed, {"batch_size": 8}, [] if encoded else epochs, 0.5, None,
                                {"total": 2000}, {"train": 1.5}, "seed", "epoch limit", "", {"strategy": "x"},
                                text if encoded else ""))  # fmt: skip
        log.close()
        lines.append([re.sub(r'"time":[0-9.e+]+,', "", line) for line in
                      (run_dir / runlog.EVENTS_FILE).read_text().splitlines()])  # fmt: skip
    # model_proposed: the same fields, the leader's after the master's; the others: the same text
    assert json.loads(lines[0][0]) == json.loads(lines[1][0]) and lines[0][1:] == lines[1][1:] and len(lines[0]) == 4
    events = [json.loads(line) for line in lines[1]]
    assert [e["event"] for e in events] == [runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.EPOCH, runlog.MODEL_DONE]
    assert events[3]["model"]["epochs"] == epochs and events[3]["model"]["status"] == "trained"
    assert list(events[3]) == ["event", "model", "task", "group"]  # the order the master's own encoding has
    assert all(runlog.check_event({**e, "time": 0.0}) == [] for e in events)


def test_the_leaders_sha256_is_logged_and_a_wrong_one_is_caught_by_the_readers(tmp_path) -> None:
    """The leader hashes its graph (messages.proposed); the master logs that digest, keys duplicates by it,
    and a digest that is not the bytes' is caught wherever the graph is read back as the run's."""
    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 2, tmp_path)
    [(_, first)] = master.handle(0, Ready(0, 1, "host"))
    [(_, second)] = master.handle(1, Ready(1, 1, "host"))
    seed, child = to_json(tiny_resnet()), to_json(tiny_resnet(width=12))
    honest = proposed(first.task_id, None, seed, {}, "seed", {})
    assert honest.graph_sha256 == hashlib.sha256(seed.encode()).hexdigest()
    assert master.handle(0, honest) == [(0, Accepted(first.task_id))]
    forged = replace(proposed(second.task_id, 0, child, {}, "child", {}), graph_sha256="0" * 64)
    assert master.handle(1, forged) == [(1, Accepted(second.task_id))]
    do_work([master.take_batch()], log.fsync)
    log.close()
    placed = [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.MODEL_PROPOSED]
    assert [e["graph_sha256"] for e in placed] == [honest.graph_sha256, "0" * 64]
    assert read_logged_graph(tmp_path, placed[0]) == seed
    with pytest.raises(GraphFileError, match="is not the graph its model_proposed hashed"):
        read_logged_graph(tmp_path, placed[1])


def test_an_encoded_epoch_that_would_break_its_line_is_refused(tmp_path) -> None:
    """The master joins a leader's text only when it is one object on one line that repeats none of its fields;
    a leader refuses an epoch its schema does not allow, or a NaN (a line no JSON reader takes)."""
    log = runlog.EventLog(tmp_path)
    whole = epoch_done(1, full_epoch(0.5)).members
    forged = ["", "{", "[1]", whole + "\n" + whole, whole[:-1] + ',"task":7}', whole[:-1] + ',"\\u0067roup":3}',
              whole[:-1] + ',"time" :1}', whole[:-1] + ",}", whole + whole, whole.replace('"ops":', '"ops":NaN,"x":'),
              whole.replace('"ops":', '"ops":Infinity,"x":'), whole.replace('"ops":1000', '"ops":"many"'),
              whole.replace('"ops":1000,', "")]  # fmt: skip
    for members in forged:  # broken, or a field twice (spelt otherwise), or against the schema: nothing written
        with pytest.raises(ValueError):
            log.write_encoded(runlog.EPOCH, members, task=1, group=0)
    assert log.write_encoded(runlog.EPOCH, whole, task=1, group=0)["ops"] == 1000  # the text itself passes
    with pytest.raises(ValueError, match="schema"):
        epoch_done(1, {**full_epoch(0.5), "ops": "many"})
    with pytest.raises(ValueError):
        epoch_done(1, {**full_epoch(0.5), "train_loss": float("nan")})
    with pytest.raises(ValueError, match="writer's"):
        epoch_done(1, {**full_epoch(0.5), "group": 3})
    log.close()
    assert len((tmp_path / runlog.EVENTS_FILE).read_text().splitlines()) == 1


def test_a_leaders_forged_texts_change_nothing_on_the_master(tmp_path) -> None:
    """A proposal or a result whose encoded part would break or bend its line is refused before the master
    logs, keeps or counts anything of it (a forger's review: a Result's epochs once went in unchecked)."""
    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 1, tmp_path)
    [(_, work)] = master.handle(0, Ready(0, 1, "host"))
    seed = to_json(tiny_resnet())
    honest = proposed(work.task_id, None, seed, {}, "seed", {})
    for members in (honest.members[:-1] + ',"graph_sha256" :"00"}', honest.members[:-1] + ',"task":9}',
                    honest.members.replace('"parent":null', '"parent":"0"')):  # fmt: skip
        with pytest.raises(ValueError):
            master.handle(0, replace(honest, members=members))
        assert master.history.hashes == 0 and master._graphs == [] and master.next_task == 1
    assert master.handle(0, honest) == [(0, Accepted(work.task_id))]
    master.handle(0, epoch_done(work.task_id, full_epoch(0.5)))
    text = runlog.value_text([full_epoch(0.5)])
    good = Result(work.task_id, None, seed, {}, [], 0.5, None, {"total": 1000}, {}, "seed", "epoch limit", "", {},
                  text)  # fmt: skip
    for epochs_text in (text + ',"id":7', text + '\n{"event":"epoch"}', "{}", "[1]", text[:-1]):
        with pytest.raises(ValueError):
            master.handle(0, replace(good, epochs_text=epochs_text))
        assert len(master.history) == 0 and master.tasks == {work.task_id: 0}
    for forged in (replace(good, parent=0), replace(good, parent=True), replace(good, accuracy="0.9")):
        with pytest.raises(ValueError, match="earlier model"):  # refused before model_done is written
            master.handle(0, forged)
        assert len(master.history) == 0 and master.tasks == {work.task_id: 0}
    body = SearchView(SearchConfig().view_bounds()).own_record(
        ModelRecord(id=-1, parent=None, graph=seed, accuracy=0.5))  # as the leader compresses it (leader.report)
    assert all(not master.history.codec.accepts(bad) for bad in (b"not zlib", b"\x78\xbb" + body[2:]))
    [(_, next_work)] = master.handle(0, replace(good, view_record=body))
    assert len(master.history) == 1 and master.history.trained == 1
    assert next_work.view.records == [wire_record(0, body)]  # sent as the leader made it, rank 0 compressed nothing
    leader = SearchView(SearchConfig().view_bounds())
    leader.apply(next_work.view)
    assert leader[0].graph == seed and leader[0].accuracy == 0.5 and leader.contains_graph(seed)
    log.close()
    events = runlog.read_events(tmp_path)
    assert not events.truncated_tail
    assert [e["event"] for e in events.events] == [runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.MODEL_DONE]
    assert events.events[2]["model"]["id"] == 0 and events.events[2]["model"]["epochs"] == [full_epoch(0.5)]


def test_a_view_record_no_leader_could_decode_is_made_again_by_rank_0(tmp_path) -> None:
    """The leader's record only saves rank 0 its compression: one whose header is wrong is dropped, not relayed,
    and the group's model is in the next Work as rank 0 compressed it; one that passes the header but does not
    decode is left out by each leader that receives it, which says so (SearchView.apply)."""
    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 1, tmp_path)
    [(_, work)] = master.handle(0, Ready(0, 1, "host"))
    seed = to_json(tiny_resnet())
    master.handle(0, proposed(work.task_id, None, seed, {}, "seed", {}))
    master.handle(0, epoch_done(work.task_id, full_epoch(0.5)))
    [(_, next_work)] = master.handle(0, Result(work.task_id, None, seed, {}, [], 0.5, None, {"total": 1000}, {},
                                               "seed", "epoch limit", "", {}, runlog.value_text([full_epoch(0.5)]),
                                               b"\x78\xbbnot the run's dictionary"))  # fmt: skip
    leader = SearchView(SearchConfig().view_bounds())
    leader.apply(next_work.view)
    assert leader[0].graph == seed and leader.unreadable == 0
    undecodable = [next_work.view.records[0][:8] + zlib.compress(pickle.dumps(("three", "fields", "only")))]
    leader = SearchView(SearchConfig().view_bounds())
    assert leader.apply(ViewUpdate(undecodable + next_work.view.records[1:], 1)) == 0
    assert leader.unreadable == 1 and "seven" in leader.last_unreadable and leader.ids() == []
    log.close()


def test_no_model_is_handed_out_whose_first_epoch_cannot_end_by_the_time_limit(tmp_path) -> None:
    """A group that needed 30 s from Work to its first epoch gets no Work with 20 s left: Stop, and the run ends."""
    now = [0.0]
    config = RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path))
    log = runlog.EventLog(tmp_path)
    master = Master(config, log, MasterHistory(SearchConfig().view_bounds()), 1, tmp_path, clock=lambda: now[0])
    [(_, work)] = master.handle(0, Ready(0, 1, "host"))
    assert work.seconds_left == 100
    seed = to_json(tiny_resnet())
    master.handle(0, Proposed(work.task_id, None, seed, {}, "seed"))
    now[0] = 30.0
    master.handle(0, EpochDone(work.task_id, full_epoch(0.5, 25.0, 30.0)))
    assert master.state[0].first_epoch_cost == 30.0
    now[0] = 60.0  # 40 s left ≥ 30 s: another model
    [(_, second)] = master.handle(0, result(work.task_id, None, seed, 0.5))
    assert isinstance(second, Work) and second.seconds_left == 40.0
    master.handle(0, Proposed(second.task_id, 0, to_json(tiny_resnet(width=12)), {}, "child"))
    now[0] = 75.0  # its first epoch cost 15 s
    master.handle(0, EpochDone(second.task_id, full_epoch(0.6)))
    now[0] = 80.0  # 20 s left ≥ 15 s: one more
    [(_, third)] = master.handle(0, result(second.task_id, 0, to_json(tiny_resnet(width=12)), 0.6))
    assert isinstance(third, Work)
    master.handle(0, Proposed(third.task_id, 0, to_json(tiny_resnet(width=14)), {}, "child"))
    now[0] = 98.0  # 18 s from Work to its first epoch; 2 s left
    master.handle(0, EpochDone(third.task_id, full_epoch(0.7)))
    [(_, stop)] = master.handle(0, result(third.task_id, 0, to_json(tiny_resnet(width=14)), 0.7))
    assert isinstance(stop, Stop) and "no new model" in stop.reason
    assert master.tick() == [] and master.stopping == "time limit" and master.done  # before the limit itself
    assert master.early_stops == 1 and "1 group(s) done" not in master.progress_line()  # the run is stopping
    log.close()


def test_a_leader_starts_no_epoch_that_would_end_after_the_time_limit(tmp_path) -> None:
    """Epochs of 0.4 s, 1.5 s left: three epochs fit, a fourth would end after the limit and is not begun."""
    history = MasterHistory(SearchConfig().view_bounds())
    work = Work(0, history.update(0, with_dictionary=True), round=5, seed_model=True, seconds_left=1.5)
    channel = ScriptedMaster(work, ["accepted"])
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path))
    leader_loop(channel, 0, 1, config, tiny_resnet(), FakeRunner(0, epoch_seconds=0.4, epochs=10))
    [done] = [m for m in channel.sent if isinstance(m, Result)]
    assert len(epochs_of(done)) == 3 and done.stop_reason == "time limit"
    assert epochs_of(done)[-1]["end"] - epochs_of(done)[0]["start"] < 1.5
    channel = ScriptedMaster(Work(0, history.update(0, with_dictionary=True), round=5, seed_model=True), ["accepted"])
    leader_loop(channel, 0, 1, config, tiny_resnet(), FakeRunner(0, epoch_seconds=0.01, epochs=10))
    [done] = [m for m in channel.sent if isinstance(m, Result)]
    assert len(epochs_of(done)) == 10  # no limit given: every epoch


def test_a_model_stops_at_its_budget_of_seconds(tmp_path) -> None:
    """--model-seconds 1.0, epochs of 0.4 s: two fit (the second ends by 0.8 s), a third would end at 1.2 s."""
    history = MasterHistory(SearchConfig().view_bounds())
    work = Work(0, history.update(0, with_dictionary=True), round=5, seed_model=True, seconds_left=60)
    channel = ScriptedMaster(work, ["accepted"])
    config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path), model_seconds=1.0)
    leader_loop(channel, 0, 1, config, tiny_resnet(), FakeRunner(0, epoch_seconds=0.4, epochs=10))
    [done] = [m for m in channel.sent if isinstance(m, Result)]
    assert 1 <= len(epochs_of(done)) <= 2 and done.stop_reason == "model budget"  # one when a loaded machine slows it
    assert epochs_of(done)[-1]["end"] - epochs_of(done)[0]["start"] < 1.0
    work = Work(0, history.update(0, with_dictionary=True), round=5, seed_model=True, seconds_left=60)
    channel = ScriptedMaster(work, ["accepted"])
    slow = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path), model_seconds=0.1)
    leader_loop(channel, 0, 1, slow, tiny_resnet(), FakeRunner(0, epoch_seconds=0.4, epochs=10))
    [done] = [m for m in channel.sent if isinstance(m, Result)]
    assert len(epochs_of(done)) == 1 and done.stop_reason == "model budget"  # a budget shorter than an epoch: one


def test_epoch_would_overrun() -> None:
    assert not epoch_would_overrun(None, [5.0], 100.0)  # no limit
    assert not epoch_would_overrun(110.0, [], 100.0)  # no epoch of this task yet: the master judged the first
    assert not epoch_would_overrun(110.0, [10.0], 100.0)
    assert epoch_would_overrun(110.0, [10.5], 100.0)


def test_a_short_run_ends_by_its_time_limit_not_after_it(tmp_path) -> None:
    """Through the real loop: epochs of 0.25 s and 1.25 s (a slow group), 4 s: without the rule the last epochs
    would end up to 1.25 s after the limit; with it, no later than the estimates' error (the search's time,
    sleep's jitter), far below that."""
    run_local(tmp_path, groups=2, time_limit=4.0, slow=(1,), search_warmup_epochs=0, epoch_seconds=0.25)
    events = runlog.read_events(tmp_path).events
    start = next(e for e in events if e["event"] == runlog.RUN_START)[runlog.TIME]
    ends = [e["end"] - start for e in events if e["event"] == runlog.EPOCH]
    assert ends and max(ends) <= 4.0 + 0.4, max(ends)


# --------------------------------------------------------------------------- messages per model (issue 26)


def test_a_later_epochs_start_rides_on_the_report_of_the_epoch_before(tmp_path) -> None:
    """Per model: Proposed, the first epoch's EpochStarted, one EpochDone per epoch — each but the last carrying
    the next epoch's start, at the time that epoch's own report gives — and the Result: 3 + E messages."""
    for config_epochs, runner_epochs in [(10, 3), (3, 3)]:  # the leader learns of the end late, or knows it
        history = MasterHistory(SearchConfig().view_bounds())
        channel = ScriptedMaster(Work(0, history.update(0, with_dictionary=True), round=5, seed_model=True),
                                 ["accepted"])  # fmt: skip
        config = RunConfig(time_limit=60, seed_model="tiny", run_dir=str(tmp_path), max_epochs=config_epochs)
        leader_loop(channel, 0, 1, config, tiny_resnet(), FakeRunner(0, epoch_seconds=0.001, epochs=runner_epochs))
        kinds = [type(m).__name__ for m in channel.sent[1:]]  # after Ready
        assert kinds == ["Proposed", "EpochStarted", "EpochDone", "EpochDone", "EpochDone", "Result"]
        started, *done, result_message = channel.sent[2:]
        epochs = epochs_of(result_message)
        assert (started.epoch, started.time) == (1, epochs[0]["start"])
        assert [json.loads(d.members) for d in done] == epochs  # each as the log's line
        assert [(d.next_start.epoch, d.next_start.time) for d in done[:-1]] == [(2, epochs[1]["start"]),
                                                                                (3, epochs[2]["start"])]
        assert done[-1].next_start is None


def test_the_master_logs_every_epoch_start_at_its_time_from_the_messages_that_carry_it(tmp_path) -> None:
    run = run_local(tmp_path, groups=1, time_limit=60, max_models=3, search_warmup_epochs=0)
    events = runlog.read_events(tmp_path).events
    epochs = [e for e in events if e["event"] == runlog.EPOCH]
    models = [e for e in events if e["event"] == runlog.MODEL_DONE]
    assert len(models) == 3 and len(epochs) == 6  # the fake runner's 2 epochs each
    # Ready, then per model Proposed (one more per duplicate), EpochStarted, 2 EpochDone, Result
    assert run.master.handled == 1 + 3 * (3 + 2) + run.master.duplicates
    starts = {}
    for line in (tmp_path / "mllog.log").read_text().splitlines():
        entry = json.loads(line.removeprefix(":::MLLOG "))
        if entry["key"] == "epoch_start":
            meta = entry["metadata"]
            starts[(meta["task"], meta["epoch_num"])] = meta.get("event_time_ms", entry["time_ms"])
    assert starts == {(e["task"], e["epoch"]): int(e["start"] * 1000) for e in epochs}


def test_a_resumed_run_stopped_at_once_ends_every_leader_cleanly(tmp_path, monkeypatch) -> None:
    """A resumed segment whose stop begins at its first look (its time limit already spent, a signal): every
    group gets a Stop at once, and every leader ends.

    The master's loop once took the batch's file work before it asked for those Stops, whose view records
    the I/O thread compressed, so they went into the next batch: when the I/O thread released the first
    batch alone, they left empty and each leader died unpickling them (``EOFError: Ran out of input``, seen
    over MPI).  A Stop now carries no view records; here the I/O thread finishes each batch before the loop
    goes on, the timing that showed it."""
    import time

    from aiperf_mpi.job import master as master_module
    from aiperf_mpi.job.batchio import BatchIO
    from aiperf_mpi.job.local import run_in_process
    from aiperf_mpi.search.view import SearchView

    class OneBatchAtATime(BatchIO):
        def submit(self, work, replies) -> None:
            super().submit(work, replies)
            while self.pending and self._thread.is_alive():
                time.sleep(0.001)

    monkeypatch.setattr(master_module, "BatchIO", OneBatchAtATime)

    first = run_local(tmp_path, groups=2, time_limit=2.0)
    assert first.outcome == "done"
    assert len(logged_records(tmp_path)) >= 2
    search = SearchConfig()
    views = {group: SearchView(search.view_bounds()) for group in range(2)}
    runners = {group: FakeRunner(group, epoch_seconds=0.02, run_dir=tmp_path) for group in range(2)}
    ended = run_in_process(RunConfig(time_limit=1e-3, seed_model="tiny", score_step=1.0), runners, tiny_resnet(),
                           version="test", views=views, search_config=search, resume=str(tmp_path))  # fmt: skip
    assert ended.outcome == "done"
    # a Stop carries no records: each view is as its group's last Work left it (none, when the stop's first look
    # came before its Ready; else the resumed history and what was logged before that Work)
    records = logged_records(tmp_path)
    for view in views.values():
        assert len(view) <= len(records) and view.ids() == view_of(records[: len(view)], search.view_bounds())
        assert all(view[model_id].graph for model_id in view.ids())


def test_the_stops_at_the_end_are_small_and_go_a_slice_a_pass(tmp_path, monkeypatch) -> None:
    """Every group's Stop goes out at the end (``Master.tick``): each once carried the view members its group
    lacked (55 kB a group at 4,096 groups: 225 MB held by rank 0 at once).  Now a few dozen bytes, and
    ``STOP_SLICE`` groups a call of ``tick``."""
    from aiperf_mpi.job import master as master_module
    from aiperf_mpi.job.wire import to_wire

    monkeypatch.setattr(master_module, "STOP_SLICE", 5)

    groups = 16
    master = Master(RunConfig(time_limit=1e9), runlog.EventLog(tmp_path), MasterHistory(SearchConfig().view_bounds()),
                    groups, tmp_path)  # fmt: skip
    for group in range(groups):
        master.handle(group, Ready(group, 1, "node"))
    graph = to_json(tiny_resnet())
    for model_id in range(200):  # finished after every group's Work: each group lacks them all
        master.append(ModelRecord(model_id, None, graph.replace('"graph":{', f'"graph":{{"n":{model_id},', 1),
                                  accuracy=0.5 + model_id / 1000))  # fmt: skip
    stops = master.tick("signal")
    assert [group for group, _ in stops] == [0, 1, 2, 3, 4] and master.sending_stops
    [(_, stopped)] = master.handle(7, Failed(master.state[7].task, 1, "node", "a failure", ""))  # its Stop, now
    assert isinstance(stopped, Stop)
    while master.sending_stops:
        stops += master.tick()
    assert master.tick() == [] and [group for group, _ in stops] == [g for g in range(groups) if g != 7]
    assert master.stopped_groups == groups and all(isinstance(stop, Stop) for _, stop in stops)
    sizes = [len(pickle.dumps(to_wire(stop), protocol=pickle.HIGHEST_PROTOCOL)) for _, stop in stops]
    assert max(sizes) < 200, sizes


def test_resuming_a_run_that_has_all_its_models_is_refused_in_one_line(tmp_path) -> None:
    from aiperf_mpi.job.local import run_in_process

    first = run_local(tmp_path, groups=2, time_limit=30.0, max_models=3)
    assert first.outcome == "done" and len(logged_records(tmp_path)) == 3
    runners = {group: FakeRunner(group, epoch_seconds=0.02, run_dir=tmp_path) for group in range(2)}
    with pytest.raises(UsageError, match=r"the run already has its 3 models \(--max-models 3, which a resumed run "
                                         r"keeps\): nothing is left to run"):  # fmt: skip
        run_in_process(RunConfig(time_limit=60.0, seed_model="tiny", score_step=1.0), runners, tiny_resnet(),
                       version="test", resume=str(tmp_path))  # fmt: skip


def test_a_refused_resume_leaves_a_cut_log_as_it_found_it(tmp_path) -> None:
    """The history is read (and a resume refused) before a cut last line is set aside: nothing moves."""
    from aiperf_mpi.job.local import run_in_process

    run_local(tmp_path, groups=2, time_limit=1.0)
    log = tmp_path / runlog.EVENTS_FILE
    log.write_bytes(log.read_bytes() + b'{"event":"epoch","ti')  # killed mid-write
    graphs = tmp_path / "graphs" / "segment-1.jsonl"
    graphs.write_bytes(graphs.read_bytes().replace(b'"kernel', b'"KERNEL', 1))  # same length, other bytes
    before = log.read_bytes()
    runners = {group: FakeRunner(group, epoch_seconds=0.02, run_dir=tmp_path) for group in range(2)}
    with pytest.raises(UsageError, match="is not the graph its model_proposed hashed"):
        run_in_process(RunConfig(time_limit=60.0, seed_model="tiny", score_step=1.0), runners, tiny_resnet(),
                       version="test", resume=str(tmp_path))  # fmt: skip
    assert log.read_bytes() == before and not list(tmp_path.glob(runlog.EVENTS_FILE + ".cut-*"))


def test_a_batchs_graphs_reach_the_disk_before_the_log_that_places_them(tmp_path, monkeypatch) -> None:
    """A model_done carries no graph: its graph line must be on stable storage before any event pointing at it."""
    import os

    from aiperf_mpi.job.batchio import BatchWork

    calls: list[str] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    work = BatchWork(graphs=[b'{"a":1}\n', b'{"b":2}\n'], sync=True, graph_path=str(tmp_path / "segment-1.jsonl"))
    do_work([work], lambda: calls.append("the log's fsync"))
    assert calls == [str(tmp_path / "segment-1.jsonl"), "the log's fsync"]
    assert (tmp_path / "segment-1.jsonl").read_bytes() == b'{"a":1}\n{"b":2}\n'


def test_the_model_done_record_leaves_its_graph_to_the_graphs_file(tmp_path) -> None:
    run_local(tmp_path, groups=2, time_limit=30.0, max_models=3)
    events = runlog.read_events(tmp_path).events
    proposed = {e["task"]: e for e in events if e["event"] == runlog.MODEL_PROPOSED}
    done = [e for e in events if e["event"] == runlog.MODEL_DONE]
    assert done and all("graph" not in e["model"] for e in done)
    records = logged_records(tmp_path)  # the graphs read back where their proposals placed them
    for event in done:
        assert records[event["model"]["id"]].graph.encode() == read_graph(tmp_path, proposed[event["task"]])


def test_resume_refuses_in_one_line_a_model_done_whose_graph_is_not_its_proposals(tmp_path) -> None:
    from aiperf_mpi.job.resume import history_from_log

    run_local(tmp_path, groups=2, time_limit=30.0, max_models=3)
    path = tmp_path / runlog.EVENTS_FILE
    lines = path.read_text().splitlines()
    done = next(i for i, line in enumerate(lines) if '"event":"model_done"' in line)
    event = json.loads(lines[done])
    with pytest.raises(UsageError, match="has a graph that is not a string"):
        path.write_text("\n".join([*lines[:done], json.dumps({**event, "model": {**event["model"], "graph": None}}),
                                   *lines[done + 1:]]) + "\n")  # fmt: skip
        history_from_log(tmp_path)
    graphs = tmp_path / "graphs" / "segment-1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    graphs.write_bytes(graphs.read_bytes().replace(b'"kernel', b'"KERNEL', 1))  # same length, other bytes
    with pytest.raises(UsageError, match="is not the graph its model_proposed hashed"):
        history_from_log(tmp_path)
