"""The run's model (aiperf_mpi/results/logmodel.py): what one pass over the log gives every reader."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aiperf_mpi.graph.model import as_trained, from_json, to_json, with_kernel_size
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import GraphFileError, append_graph, segment_graph_file
from aiperf_mpi.results.logmodel import RunModel, epoch_values, read_model
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.score import compute_score, score_inputs
from tests.support.event_logs import epoch, model_done, proposed, start, write_log


def stop(t: float, reason: str = "time limit") -> dict:
    return {"event": runlog.RUN_STOP, "time": t, "reason": reason, "discarded_tasks": [], "segment": 1}


def test_one_pass_gives_segments_tasks_epochs_and_failures(tmp_path) -> None:
    events = [
        start(0.0, time_limit=100.0), proposed(0, 0, 1.0, 0.5), proposed(1, 1, 1.0, 0.5),
        epoch(0, 0, 1, 2.0, 10.0, 100, 0.5), epoch(1, 1, 1, 2.0, 11.0, 100, 0.6), epoch(0, 0, 2, 10.0, 20.0, 100, 0.7),
        epoch(0, 0, 3, 20.0, 30.0, 100, 0.7), model_done(0, 0, 31.0, 0.7, []),
        {"event": runlog.MODEL_FAILED, "time": 32.0, "task": 1, "group": 1, "model": 1, "rank": 2, "host": "h",
         "reason": "NaN loss\nsecond line", "traceback": "", "graph_hash": "ab"},
        {"event": runlog.GROUP_LOST, "time": 33.0, "group": 1, "ranks": [2], "host": "h", "task": 7, "reason": "x"},
        stop(40.0, "signal SIGTERM"),
    ]  # fmt: skip
    write_log(tmp_path, events)
    model = read_model(tmp_path)
    (segment,) = model.segment_records
    assert (segment.start, segment.end, segment.limit, segment.self_ended) == (0.0, 40.0, 100.0, False)
    assert model.windows == [40.0] and model.segments == [(0.0, 40.0)]
    done, failed = model.tasks[0], model.tasks[1]
    assert (done.status, done.epochs, done.done.id, failed.status, failed.epochs) == ("trained", 3, 0, "failed", 1)
    assert model.epoch(done.last_row)["epoch"] == 3 and model.epoch(done.best_row)["epoch"] == 2  # the earliest best
    assert model.epoch(done.last_row) == events[6]  # the logged epoch itself, read again from its line
    assert failed.failure.reason == "NaN loss" and failed.failure.graph_hash == "ab"
    assert model.next_task == 8 and model.best_trained() is done and model.best_epoch_accuracy == 0.7
    assert model.task_of_model == {0: 0} and len(model.epochs) == 4
    assert score_inputs(model, 10.0).to_dict() == compute_score(events, step=10.0).to_dict()  # the same score


def test_what_a_log_older_than_a_field_means_is_said_once(tmp_path) -> None:
    done, first = model_done(0, 0, 5.0, 0.5, []), start(0.0)
    del done["model"]["status"]
    first["config"].pop("precision", None)
    write_log(tmp_path, [first, done])
    model = read_model(tmp_path)
    assert model.tasks[0].status == "trained" and model.models_trained == 1
    assert model.precision == logged_precision({}) == "fp32"
    assert model.tasks[0].place == {"graph_file": "graphs/task-0.json"}  # no place logged: one file per model
    graph = tiny_resnet()
    assert to_json(as_trained(graph, None)) == to_json(graph)
    assert to_json(as_trained(graph, 5)) == to_json(with_kernel_size(graph, 5)) != to_json(graph)


def test_a_graph_is_read_when_asked_for_from_where_the_log_placed_it(tmp_path) -> None:
    graph = to_json(tiny_resnet())
    placed = append_graph(tmp_path, segment_graph_file(1), graph)
    inline = model_done(1, 0, 6.0, 0.4, [])  # an older run's record: the graph in it
    newer = model_done(0, 0, 5.0, 0.5, [])
    del newer["model"]["graph"]
    write_log(tmp_path, [start(0.0), {**proposed(0, 0, 1.0, 0.1), **placed}, proposed(1, 0, 2.0, 0.1), newer, inline])
    model = read_model(tmp_path)
    assert model.graph_text(model.tasks[0]) == graph == model.graph_text(model.tasks[1])
    assert model.tasks[1].done.inline_graph == "text" and model.tasks[1].done.line_offset > 0
    assert from_json(model.best.graph) is not None and model.best.task == 0 and model.best.place == placed
    path = tmp_path / segment_graph_file(1)
    path.write_bytes(path.read_bytes().replace(b'"kernel"', b'"KERNEL"', 1))
    with pytest.raises(GraphFileError, match="is not the graph its model_proposed hashed"):
        read_model(tmp_path).graph_text(model.tasks[0])


def test_a_model_that_forgets_ended_tasks_hands_each_one_over_and_keeps_the_counts(tmp_path) -> None:
    events = [start(0.0), proposed(0, 0, 1.0, 0.5), proposed(1, 1, 1.0, 0.5), proposed(2, 0, 1.0, 0.5),
              epoch(0, 0, 1, 2.0, 10.0, 100, 0.5), model_done(0, 0, 11.0, 0.5, []),
              {"event": runlog.MODEL_FAILED, "time": 12.0, "task": 1, "group": 1, "model": 1, "rank": 2, "host": "h",
               "reason": "NaN loss", "traceback": "", "graph_hash": "ab"},
              epoch(5, 0, 1, 12.0, 13.0, 100, 0.6), stop(14.0)]  # fmt: skip
    write_log(tmp_path, events)
    ended: list[tuple[int, str, bool]] = []

    def take(event: dict, model: RunModel) -> None:
        for end in (*model.models, *model.failures):  # the task this event ended, still in the model
            ended.append((end.task, type(end).__name__, model.tasks[end.task].proposal is not None))

    light = read_model(tmp_path, on_event=take, keep_ended=False)
    whole = read_model(tmp_path)
    assert ended == [(0, "Done", True), (1, "Failure", True)]
    assert list(light.tasks) == list(light.proposals) == [2]  # only the task still open
    assert not light.models and not light.failures and not light.task_of_model and len(light.epochs) == 0
    assert light.next_task == whole.next_task == 6  # an epoch's task counts though its row is not kept
    assert light.events == whole.events and light.segments == whole.segments
    assert score_inputs(light, 10.0).to_dict() == score_inputs(whole, 10.0).to_dict()


def test_events_fed_one_at_a_time_make_the_same_model_as_the_file(tmp_path) -> None:
    events = [start(0.0), proposed(0, 0, 1.0, 0.5), epoch(0, 0, 1, 2.0, 10.0, 100, 0.5),
              model_done(0, 0, 11.0, 0.5, []), stop(12.0)]  # fmt: skip
    write_log(tmp_path, events)
    fed = RunModel()
    for event in json.loads(json.dumps(events)):
        fed.add(event)
    fed.finish()
    read = read_model(tmp_path)
    assert fed.segments == read.segments and fed.windows == read.windows and fed.next_task == read.next_task
    assert fed.epoch(0)["val_accuracy"] == read.epoch(0)["val_accuracy"] == 0.5
    assert np.array_equal(fed.epochs[:, :-1], read.epochs[:, :-1], equal_nan=True)  # but where each line lies


def test_a_reader_sees_each_event_in_step_with_the_model(tmp_path) -> None:
    events = [start(0.0), proposed(0, 0, 1.0, 0.5), epoch(0, 0, 1, 2.0, 10.0, 100, 0.5),
              model_done(0, 0, 11.0, 0.5, []), stop(12.0)]  # fmt: skip
    write_log(tmp_path, events)
    seen: list[tuple[str, int]] = []
    read_model(tmp_path, on_event=lambda event, model: seen.append((event["event"], len(model.segment_records))))
    assert seen == [(e["event"], 1) for e in events if e["event"] != runlog.EPOCH]
    seen.clear()
    model = read_model(tmp_path, on_event=lambda event, model: seen.append((event["event"], len(model.tasks))),
                       epochs_too=True)  # fmt: skip
    assert [name for name, _ in seen] == [e["event"] for e in events] and model.tasks[0].epochs == 1
    assert model.epoch(0) == events[2]


def test_a_judge_admits_each_event_first_and_the_model_reads_past_what_it_cannot_take(tmp_path) -> None:
    odd = model_done(0, 0, 11.0, 0.5, [])
    odd["model"]["id"] = "not a number"  # the schema types the record, not its fields: the model cannot take it
    huge = epoch(0, 0, 2, 11.0, 12.0, 2**64, 0.5)  # json.loads keeps the integer that was written
    events = [start(0.0), proposed(0, 0, 1.0, 0.5), ["not", "an", "event"], epoch(0, 0, 1, 2.0, 10.0, 100, 0.5), odd,
              huge, stop(12.0)]  # fmt: skip
    write_log(tmp_path, events)
    asked: list[object] = []
    seen: list[tuple[str, object]] = []

    def admit(event: object) -> bool:
        asked.append(event)
        return isinstance(event, dict)

    model = read_model(tmp_path, on_event=lambda event, _: seen.append((event["event"], event.get("ops"))),
                       keep_ended=False, admit=admit)  # fmt: skip
    assert asked == events
    assert seen == [(e["event"], e.get("ops")) for e in events if isinstance(e, dict)]
    assert type(seen[-2][1]) is int and seen[-2][1] == 2**64
    assert len(model.segment_records) == 1 and model.segment_records[0].stop is not None
    with pytest.raises(ValueError):  # unjudged, the same record ends the read
        read_model(tmp_path, on_event=lambda event, _: None, epochs_too=True)


def test_each_segment_knows_its_groups_horovod_sizes_from_its_layouts(tmp_path) -> None:
    """What an epoch's global batch is read with (verify's ops recount): ``horovod_size``, else the length of
    ``ranks``; a group without an index or a whole number of ranks is left out; a later layout adds to it."""
    layout = {"event": runlog.LAYOUT, "time": 0.5, "world_size": 5, "groups": [
        {"index": 0, "ranks": [1, 2], "horovod_size": 2}, {"index": 1, "ranks": [3, 4, 5]},
        {"index": 2, "ranks": [6], "horovod_size": True}, {"ranks": [7]}, "not a group"]}  # fmt: skip
    again = {**layout, "time": 0.6, "groups": [{"index": 3, "ranks": [8, 9], "horovod_size": 2}]}
    write_log(tmp_path, [start(0.0), layout, again, stop(1.0)])
    assert read_model(tmp_path).segment_records[0].group_sizes == {0: 2, 1: 3, 3: 2}


def test_a_display_column_past_the_floats_range_is_nan_and_the_epoch_still_counts(tmp_path) -> None:
    """Only the score's three columns must be numbers of their kind (:func:`epoch_values`); a wait of 10**400
    seconds is no float, and its epoch's operations still go into the score."""
    wild = epoch(0, 0, 1, 2.0, 10.0, 100, 0.5, data_wait=10**400)
    write_log(tmp_path, [start(0.0), proposed(0, 0, 1.0, 0.5), wild, stop(20.0)])
    model = read_model(tmp_path, epochs_too=True)
    assert list(model.epoch_ops) == [100] and np.isnan(model.column("data_wait")[0])
    assert epoch_values(10.0, 100, None)[1] == 100
    with pytest.raises(runlog.UnreadableLog):
        epoch_values(10.0, 2**64, 0.5)
