"""Vetting (job/vetting.py): what a relay rank checks and encodes for rank 0 gives the very log rank 0 writes alone."""

import json
import pickle
import re
import struct
from dataclasses import replace

import pytest

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.messages import (
    TAGS,
    TO_MASTER,
    UNREADABLE,
    VETTED,
    EpochDone,
    EpochStarted,
    Failed,
    GroupLost,
    MonitorSample,
    Proposed,
    Ready,
    Result,
    VettedEpoch,
    VettedProposal,
    VettedResult,
    epoch_done,
    proposed,
)
from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter
from aiperf_mpi.job.vetting import Vetter, relay_item
from aiperf_mpi.job.wire import plain_loads, relayed_message, to_wire
from aiperf_mpi.results import runlog
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import MasterHistory


def full_epoch(accuracy: float, start: float = 0.0, end: float = 1.0) -> dict:
    """A first epoch with every field the log's schema asks for."""
    return {"epoch": 1, "val_accuracy": accuracy, "ops": 1000, "start": start, "end": end, "train_loss": 1.0,
            "ops_train": 1000, "ops_update": 0, "ops_validation": 0, "steps": 1, "train_samples": 1,
            "validation_samples": 1, "data_wait": 0.0, "compute": 1.0, "evaluation": 0.0, "learning_rate": 0.1}


def relayed(vetter: Vetter, group: int, message: object, data: bytes | None = None) -> object:
    """What rank 0 gets of ``message`` (or of ``data``, a leader's bytes) through a relay, as the MPI layers do it:
    the leader's pickle read and vetted by the relay (relay_item), its batch pickled, read back on rank 0."""
    if data is None:
        data = pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL)  # as MpiLeaderChannel.send
    item = relay_item(vetter, 7, group, TAGS[type(message)], bytearray(data))  # as Relay.item, after its Recv
    [(_, tag, payload)] = plain_loads(bytearray(pickle.dumps([item], protocol=pickle.HIGHEST_PROTOCOL)))
    return relayed_message(tag, payload)  # as MpiMasterTransport._unpack


def stream(seed: str, child: str, task: int, child_task: int) -> list[tuple[int, object]]:
    """Two groups' messages: a seed (epochs encoded by the leader), a child (fields left to rank 0), a duplicate."""
    first = {**full_epoch(0.5, 1.0, 2.0), "xla": False}
    second = {**full_epoch(0.625, 2.0, 3.5), "epoch": 2}
    epochs = [first, second]
    return [
        (0, proposed(task, None, seed, {"batch_size": 8}, "seed", {"search": "seed"}, None, {"name": "tiny"})),
        (0, EpochStarted(task, 1, 1.0, 8)),
        (0, epoch_done(task, first, EpochStarted(task, 2, 2.0, 8))),
        (0, epoch_done(task, second)),
        (0, Result(task, None, seed, {"batch_size": 8}, [], 0.625, None, {"total": 2000}, {"train": 2.5}, "seed",
                   "epoch limit", "weights/a.npz", {"strategy": "x"}, runlog.value_text(epochs),
                   weights_sha256="ab" * 32)),  # fmt: skip
        (1, Proposed(child_task, 0, child, {"batch_size": 16}, "wider", {"search": "bayesian"}, [{"op": "wider"}])),
        (1, EpochStarted(child_task, 1, 4.0, 16)),
        (1, EpochDone(child_task, {**first, "start": 4.0, "end": 5.0})),
        (1, Result(child_task, 0, child, {"batch_size": 16}, [{**first, "start": 4.0, "end": 5.0}], 0.5, 0.7,
                   {"total": 1000}, {"train": 1.0}, "wider", "epoch limit", "weights/b.npz", {},
                   weights_sha256="not a sha256")),  # a leader's bad digest: logged as none  # fmt: skip
    ]


def test_a_relays_vetted_messages_make_the_same_log_replies_and_history_as_rank_0_alone(tmp_path) -> None:
    """Through a relay (vetted, on the wire, applied) the event log and MLLOG are the bytes rank 0 writes when
    it takes the leaders' messages itself (but the write times), and every reply is the same."""
    seed, child = to_json(tiny_resnet()), to_json(tiny_resnet(width=12))
    logs, replies, mllogs = [], [], []
    for through_relay in (False, True):
        run_dir = tmp_path / str(through_relay)
        log = runlog.EventLog(run_dir)
        mllog = MLLogWriter(run_dir)
        master = Master(RunConfig(time_limit=100, seed_model="tiny", run_dir=str(run_dir)), log,
                        MasterHistory(SearchConfig().view_bounds()), 2, run_dir, mllog=mllog)  # fmt: skip
        vetter = Vetter()
        answers = [master.handle(0, Ready(0, 1, "a")), master.handle(1, Ready(1, 1, "b"))]
        first, second = answers[0][0][1].task_id, answers[1][0][1].task_id
        messages = stream(seed, child, first, second)
        messages.insert(5, (1, proposed(second, 0, seed, {}, "the seed again", {})))  # a duplicate of the seed
        for group, message in messages:
            if through_relay:
                message = relayed(vetter, group, message)
                assert type(message) in (*VETTED, EpochStarted)
            answers.append(master.handle(group, message))
        answers.append(master.handle(1, Failed(second + 2, 1, "b", "out of memory", "Traceback")))
        log.close()
        mllog.close()
        logs.append([re.sub(r'"time":[0-9.e+]+,', "", line) for line in
                     (run_dir / runlog.EVENTS_FILE).read_text().splitlines()])  # fmt: skip
        mllogs.append((run_dir / MLLOG_FILE).read_text())
        replies.append([[(group, type(reply).__name__, getattr(reply, "task_id", None)) for group, reply in answer]
                        for answer in answers])  # fmt: skip
        assert master.history.trained == 2 and master.duplicates == 1
    assert logs[0] == logs[1] and mllogs[0] == mllogs[1] and replies[0] == replies[1]
    done = [json.loads(line) for line in logs[1] if '"event":"model_done"' in line]
    assert [event.get("weights_sha256") for event in done] == ["ab" * 32, None]
    encode = runlog.EventLog(tmp_path / "encoder").encode
    lines = (tmp_path / "True" / runlog.EVENTS_FILE).read_text().splitlines()
    assert all(encode(json.loads(line)) == line for line in lines)  # each composed line is the encoder's text
    events = [json.loads(line) for line in logs[1]]
    assert [e["event"] for e in events].count(runlog.EPOCH) == 3
    done = [e for e in events if e["event"] == runlog.MODEL_DONE]
    assert [e["model"]["id"] for e in done] == [0, 1] and done[1]["model"]["parent"] == 0
    assert list(done[1]) == ["event", "model", "task", "group"] and list(done[0]["model"])[:2] == ["id", "parent"]
    assert list(done[0]) == ["event", "model", "task", "group", "weights_sha256"]  # the rank's digest, last
    assert all(runlog.check_event({**e, "time": 0.0}) == [] for e in events)


@pytest.mark.parametrize("forge", [
    lambda m: replace(m, members=m.members.replace('"ops":', '"ops":-', 1)) if isinstance(m, EpochDone) else None,
    lambda m: replace(m, members=m.members[:-1] + ',"task":9}') if isinstance(m, EpochDone) else None,
    lambda m: replace(m, members=m.members[:-1] + ',"graph_sha256":"00"}') if isinstance(m, Proposed) else None,
    lambda m: replace(m, graph=7) if isinstance(m, Proposed) else None,
    lambda m: replace(m, epochs_text="[1]") if isinstance(m, Result) else None,
    lambda m: replace(m, parent=True) if isinstance(m, Result) else None,
    lambda m: replace(m, time="now") if isinstance(m, EpochStarted) else None,
], ids=["negative ops", "a writer's field", "a proposal's writer field", "a graph not text", "epochs not objects",
        "a parent not a number", "a start not a time"])  # fmt: skip
def test_a_message_that_fails_its_check_goes_on_as_it_came_and_rank_0_refuses_it(tmp_path, forge) -> None:
    """A relay vets nothing it cannot: the forged message reaches rank 0 unvetted, and rank 0's own vetting
    refuses it before anything is logged — the group is then lost in rank 0's words (master.refuse)."""
    seed, child = to_json(tiny_resnet()), to_json(tiny_resnet(width=12))
    log = runlog.EventLog(tmp_path)
    master = Master(RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path)), log,
                    MasterHistory(SearchConfig().view_bounds()), 2, tmp_path)  # fmt: skip
    task = master.handle(0, Ready(0, 1, "a"))[0][1].task_id
    vetter = Vetter()
    for group, message in stream(seed, child, task, task + 1)[:5]:
        forged = forge(message)
        if forged is None:
            master.handle(group, relayed(vetter, group, message))
            continue
        passed = relayed(vetter, group, forged)
        assert type(passed) is type(forged)  # not vetted
        log._handle.flush()
        before = (log.path.stat().st_size, len(master.history), master.history.hashes, master.epochs_done)
        with pytest.raises((ValueError, TypeError, AttributeError)):
            master.handle(group, passed)
        log._handle.flush()
        assert (log.path.stat().st_size, len(master.history), master.history.hashes, master.epochs_done) == before
        return
    raise AssertionError("the forgery applied to no message")


def test_leaders_cannot_send_what_only_a_relay_hands_rank_0() -> None:
    """The vetted forms are trusted by rank 0, so no leader's tag names one (mpi/transport.FROM_LEADERS)."""
    assert set(VETTED) == {VettedEpoch, VettedProposal, VettedResult} and not set(VETTED) & set(TO_MASTER)


def test_a_vetted_epochs_line_is_the_text_the_logs_own_writer_makes(tmp_path) -> None:
    """EventLog.write_tail prefixes the event and time to the tail vetting composed: byte for byte, but the time,
    what write_encoded (which checks, then encodes) writes from the same epoch."""
    log = runlog.EventLog(tmp_path)
    epoch = runlog.event_members(runlog.EPOCH, full_epoch(0.5), {"task": 0, "group": 0})
    for message in (epoch_done(3, full_epoch(0.5)), EpochDone(3, full_epoch(0.5))):
        log.write_tail(runlog.EPOCH, Vetter().epoch(message, 65535).tail)
        log.write_encoded(runlog.EPOCH, epoch, flush=False, time=0.5, task=3, group=65535)
    log.close()
    written = (tmp_path / runlog.EVENTS_FILE).read_text().splitlines()
    lines = [re.sub(r'"time":[0-9.e+-]+,', "", line) for line in written]
    assert len(lines) == 4 and len(set(lines)) == 1, lines


def test_a_leaders_deeply_nested_message_costs_its_group_not_the_relay(tmp_path) -> None:
    """A pickle 100,000 lists deep reads as plain values, and neither vets nor encodes: the relay hands on the
    leader's own bytes (never re-pickling what a leader built, which raised RecursionError and ended the job),
    and rank 0 refuses the message as when the leader sends it to rank 0 itself (a forger's review)."""
    depth = 100_000
    deep = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST × n, APPEND × n - 1: one list n deep
    data = (b"\x80\x04(" + b"G" + struct.pack(">d", 1.7e9) + b"K\x01" + b"\x8c\x01h" + b"K\x00" + b"\x8c\x03cpu"
            + deep + b"]t.")  # a MonitorSample's seven fields, its devices the deep list, no energy  # fmt: skip
    sample = plain_loads(data)
    message = relayed(Vetter(), 1, MonitorSample(*sample), data)
    assert type(message) is MonitorSample
    master = Master(RunConfig(time_limit=100, seed_model="tiny", run_dir=str(tmp_path)), runlog.EventLog(tmp_path),
                    MasterHistory(SearchConfig().view_bounds()), 2, tmp_path)  # fmt: skip
    with pytest.raises(RecursionError):  # one of master.REFUSED: the group is lost, the run goes on
        master.handle(1, message)


def test_what_the_relay_cannot_read_or_vet_reaches_rank_0_as_a_lost_group() -> None:
    """An unreadable message, and anything the relay's own reading raises, is UNREADABLE with why."""
    item = relay_item(Vetter(), 5, 2, TAGS[EpochDone], bytearray(pickle.dumps(("not", "an", "epoch"))))
    assert item[:2] == (2, UNREADABLE) and "rank 5 sent an unreadable EpochDone" in item[2]
    assert type(relayed_message(*item[1:])) is GroupLost

    class Broken(Vetter):
        def vet(self, group: int, message: object) -> None:
            raise MemoryError("out of memory")

    data = pickle.dumps(to_wire(EpochStarted(1, 1, 1.7e9, 8)))
    group, tag, reason = relay_item(Broken(), 5, 2, TAGS[EpochStarted], bytearray(data))
    assert tag == UNREADABLE and "MemoryError: out of memory" in reason
