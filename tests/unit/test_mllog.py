"""MLLOG lines: mlperf-logging's own parser reads them, in time order, with the event log's values."""

from __future__ import annotations

import json
import math

from mlperf_logging.compliance_checker.mlp_parser import parse_file
from mlperf_logging.mllog import constants

from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter, number_text
from aiperf_mpi.results import mllog_format
from aiperf_mpi.results.epochs import LEARNING_RATE_WARMUP_EPOCHS

T0 = 1_796_000_000.0
CONFIG = {"seed": 7, "base_lr": 0.1, "search_warmup_epochs": 2}
SYSTEM = {"nodes": 2, "accelerators_per_node": 4}


def _epoch(number: int, start: float, end: float) -> dict:
    return {"epoch": number, "start": start, "end": end, "ops": 123 * number, "val_accuracy": 0.5 + number / 100,
            "train_samples": 640, "validation_samples": 100}  # fmt: skip


def _lines(run_dir) -> list:
    lines, errors = parse_file(str(run_dir / MLLOG_FILE), ruleset="6.1.0")
    assert errors == []
    return lines


def test_epochs_of_two_groups_are_logged_in_time_order_with_their_true_times(tmp_path) -> None:
    """Two groups' epochs overlap; every line keeps the order it was written in and its true time."""
    writer = MLLogWriter(tmp_path)
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.epoch_start(0, 1, T0 + 1.0, 256)
    writer.epoch_start(1, 1, T0 + 1.5, 128)
    writer.epoch_stop(0, _epoch(1, T0 + 1.0, T0 + 10.0))
    writer.epoch_start(0, 2, T0 + 10.001, 256)
    writer.epoch_stop(1, _epoch(1, T0 + 1.5, T0 + 12.0))
    writer.run_stop("time limit", T0 + 20.0)
    writer.close()
    lines = _lines(tmp_path)
    times = [line.timestamp for line in lines]
    assert times == sorted(times)
    keys = [line.key for line in lines]
    assert keys[:8] == [constants.SUBMISSION_BENCHMARK, "number_of_nodes", "accelerators_per_node", constants.SEED,
                        constants.OPT_NAME, constants.OPT_BASE_LR, constants.OPT_LR_WARMUP_EPOCHS,
                        constants.RUN_START]  # fmt: skip
    by_key = [(line.key, line.value["metadata"].get("task"), line.value["metadata"].get("epoch_num")) for line in lines]
    assert by_key.index(("global_batch_size", 0, None)) < by_key.index(("epoch_start", 0, 1))
    [batch0, batch1] = [line.value["value"] for line in lines if line.key == constants.GLOBAL_BATCH_SIZE]
    assert (batch0, batch1) == (256, 128)  # each task's global batch, not a per-rank default
    [stop0] = [line for line in lines if line.key == "epoch_stop" and line.value["metadata"]["task"] == 0]
    assert stop0.timestamp == (T0 + 10.0) * 1000 and stop0.value["metadata"]["ops"] == 123
    assert [line.timestamp for line in lines if line.key in ("run_start", "run_stop")] == [T0 * 1000, (T0 + 20) * 1000]
    # the warm-up the trainer applies to every model's learning rate, not the search's cap of its first rounds (2)
    [warmup] = [line.value["value"] for line in lines if line.key == constants.OPT_LR_WARMUP_EPOCHS]
    assert warmup == LEARNING_RATE_WARMUP_EPOCHS == 1


def test_a_late_event_keeps_the_file_in_order_and_carries_its_true_time(tmp_path) -> None:
    """An epoch that began before the last line written (it reached the master late) is not put back in time."""
    writer = MLLogWriter(tmp_path)
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.epoch_stop(0, _epoch(1, T0 + 1.0, T0 + 10.0))
    writer.epoch_start(1, 1, T0 + 9.5, 64)  # from another node, received after the stop above
    writer.run_stop("done", T0 + 11.0)
    writer.close()
    lines = _lines(tmp_path)
    [late] = [line for line in lines if line.key == "epoch_start"]
    assert late.timestamp == (T0 + 10.0) * 1000
    assert late.value["metadata"]["event_time_ms"] == int((T0 + 9.5) * 1000)
    assert all("event_time_ms" not in line.value["metadata"] for line in lines if line is not late
               and line.key != constants.GLOBAL_BATCH_SIZE)  # fmt: skip
    assert [json.loads(raw.split(":::MLLOG ", 1)[1])["key"] for raw in (tmp_path / MLLOG_FILE).read_text().splitlines()
            ][-1] == "run_stop"  # fmt: skip


def test_staging_uses_mlperf_key_names_with_its_own_times(tmp_path) -> None:
    writer = MLLogWriter(tmp_path)
    writer.staging({"host": "node1", "bytes": 10, "files": 1, "seconds": 2.0, "start": T0 - 5.0})
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.close()
    lines = _lines(tmp_path)
    assert [(line.key, line.timestamp) for line in lines[:2]] == [
        (constants.STAGING_START, (T0 - 5.0) * 1000), (constants.STAGING_STOP, (T0 - 3.0) * 1000)]


def test_each_line_is_json_dumps_of_its_fields_in_mlperf_loggings_order(tmp_path) -> None:
    """The writer composes lines from cached pieces; each must be exactly what json.dumps gives of the line's dict."""
    writer = MLLogWriter(tmp_path)
    writer.run_start(CONFIG, SYSTEM, 1, T0)
    writer.staging({"host": "nöde-1", "bytes": 10, "files": 2, "seconds": 1.5, "start": T0 - 5})  # late, non-ASCII
    writer.epoch_start(3, 1, T0 + 1.0, 256)
    writer.epoch_stop(3, _epoch(1, T0 + 1.0, T0 + 10.0))
    writer.epoch_start(4, 1, T0 + 2.0, 64)  # earlier than the last line: held, its true time in the metadata
    writer.epoch_stop(4, {**_epoch(1, T0 + 2.0, T0 + 9.0), "val_accuracy": float("nan")})  # late, and NaN
    writer.epoch_stop(4, {**_epoch(2, T0 + 9.0, T0 + 11.0), "val_accuracy": 1, "ops": 3 * 10**20})  # an int, a big one
    writer.run_stop("time limit", T0 + 20.0)
    writer.close()
    text = (tmp_path / MLLOG_FILE).read_text()
    assert text.endswith("\n")
    lines = text.splitlines()
    for line in lines:
        assert line.startswith(":::MLLOG ")
        fields = json.loads(line[len(":::MLLOG "):])
        assert list(fields) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
        assert line == ":::MLLOG " + json.dumps(fields), line
    late = [json.loads(line[9:]) for line in lines if '"event_time_ms"' in line]
    assert {(f["key"], f["metadata"]["event_time_ms"]) for f in late} >= {("epoch_start", int((T0 + 2.0) * 1000)),
                                                                          ("eval_accuracy", int((T0 + 9.0) * 1000))}
    accuracies = [line for line in lines if '"key": "eval_accuracy"' in line]
    assert [('"value": NaN' in line, '"value": 1,' in line) for line in accuracies].count((True, False)) == 1
    assert [('"value": NaN' in line, '"value": 1,' in line) for line in accuracies].count((False, True)) == 1


def test_a_numbers_text_is_json_dumps_of_it() -> None:
    """epoch_stop_texts, composed where an epoch is vetted, writes each number as json.dumps (mlperf-logging's)."""
    for value in (0, -3, 2**63, 0.1, 1e-7, 1.7e9 + 0.123, 1e300, math.nan, math.inf, True, None):
        assert number_text(value) == json.dumps(value), value


def test_a_whole_line_is_the_composed_line_and_reads_back(tmp_path) -> None:
    """Issue 51: serving writes its few lines with mllog_format.whole_line and reads them with read_lines, the one
    home of the format: the same text the master composes from pieces, and mlperf-logging's parser takes it."""
    value, metadata = 1234.5, {"scenario": "Offline", "batch": 8}
    whole = mllog_format.whole_line(1_796_000_000_123, constants.POINT_IN_TIME, "result_samples_per_second", value,
                                    metadata)  # fmt: skip
    middle = mllog_format.line_middle(json.dumps(constants.POINT_IN_TIME), json.dumps("result_samples_per_second"))
    members = json.dumps(metadata)[1:-1]
    assert whole == mllog_format.line(1_796_000_000_123, middle, json.dumps(value), members)
    path = tmp_path / MLLOG_FILE
    path.write_text("a line of other text\n" + whole)
    [record] = mllog_format.read_lines(path)
    assert (record["key"], record["value"], record["metadata"]) == ("result_samples_per_second", value, metadata)
    path.write_text(whole)
    assert [line.key for line in _lines(tmp_path)] == ["result_samples_per_second"]
