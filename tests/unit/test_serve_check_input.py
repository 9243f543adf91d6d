"""``python -m aiperf_mpi.serve check`` on bad input (issue 52 item 6): one line and a non-zero exit, in seconds.

The round against it: an event without ``event`` and a manifest whose size is ``"many"`` were tracebacks; a
member graph that is ``/dev/zero`` and a predictions file that is a 1 TiB sparse ``.csv`` were MemoryError
tracebacks after minutes.  The bundle here is made by hand (a tiny ResNet's graph, a stand-in ``model.keras``
the check never loads), as a forger would make one: no TensorFlow.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.serve.__main__ import main
from aiperf_mpi.serve.bundle import FORMAT, MANIFEST, file_table

pytestmark = pytest.mark.timeout(60)


def hand_bundle(root: Path, graph: str = "member-0/graph.json") -> Path:
    """A bundle of one member: its graph, a stand-in model file, and a manifest listing both."""
    (root / "member-0").mkdir(parents=True)
    text = to_json(tiny_resnet())
    (root / "member-0" / "graph.json").write_text(text)
    (root / "member-0" / "model.keras").write_bytes(b"not a model")
    forward = count_ops(tiny_resnet()).forward_eval
    manifest = {"format": FORMAT, "servable": {"name": "hand", "type": "single"},
                "signature": {"inputs": [{"shape": [-1, 32, 32, 3]}], "outputs": [{"classes": 10}]},
                "members": [{"name": "member-0", "graph": graph, "forward_ops_per_sample": forward}],
                "files": file_table(root)}  # fmt: skip
    (root / MANIFEST).write_text(json.dumps(manifest))
    return root


def hand_log(folder: Path, bundle: Path, rows: int = 4) -> Path:
    """A serving log of the four events the check needs first, its predictions a CSV of ``rows`` rows."""
    import hashlib

    folder.mkdir(parents=True)
    sha = hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest()
    forward = json.loads((bundle / MANIFEST).read_text())["members"][0]["forward_ops_per_sample"]
    events = [{"event": "serve_start", "time": 1.0, "manifest_sha256": sha, "forward_ops_per_sample": forward,
               "samples": rows, "ranks": 1},
              {"event": "shard", "time": 2.0, "rank": 0, "start": 0, "end": rows},
              {"event": "offline", "time": 2.0, "batch": 4, "samples": rows, "seconds": 1.0},
              {"event": "predictions", "time": 2.0, "file": "predictions.csv", "rows": rows, "values_sha256": "0"},
              {"event": "serve_stop", "time": 3.0, "time_to_solution": 2.0}]  # fmt: skip
    (folder / "serve_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    header = "row,class," + ",".join(f"p{i}" for i in range(10))
    (folder / "predictions.csv").write_text(header + "\n" + "".join(f"{r},0,{','.join(['0.1'] * 10)}\n"
                                                                     for r in range(rows)))  # fmt: skip
    return folder


def one_line(capsys, argv: list[str]) -> tuple[int, str]:
    started = time.monotonic()
    status = main(argv)
    out, err = capsys.readouterr()
    assert time.monotonic() - started < 20, argv
    assert "Traceback" not in out + err
    return status, out + err


def test_an_event_without_its_name_is_one_line(tmp_path, capsys) -> None:
    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    with open(log / "serve_events.jsonl", "a") as handle:
        handle.write('{"time": 4.0}\n')
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 2 and said.count("\n") == 1 and "line 6 is not an event" in said, said


def test_a_manifest_size_that_is_no_number_is_one_line(tmp_path, capsys) -> None:
    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"]["member-0/model.keras"]["bytes"] = "many"
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 2 and said.count("\n") == 1 and "'many'" in said, said


def test_a_member_graph_outside_the_listed_files_is_never_read(tmp_path, capsys) -> None:
    """/dev/zero as a member's graph: read to the end, it was a MemoryError after minutes."""
    bundle = hand_bundle(tmp_path / "bundle", graph="/dev/zero")
    log = hand_log(tmp_path / "log", bundle)
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 1 and "graph /dev/zero is not one of the bundle's listed files" in said, said


def test_a_predictions_file_far_larger_than_its_rows_is_never_read(tmp_path, capsys) -> None:
    """A sparse 1 TiB .csv as the predictions: refused from its size, before a byte is read."""
    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    with open(log / "predictions.csv", "r+b") as handle:
        handle.truncate(1 << 40)  # sparse: no disk
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 1 and "larger than 4 rows of 10 classes can be" in said, said


def test_a_malformed_record_deep_in_the_log_is_a_failure_in_one_line(tmp_path, capsys) -> None:
    """A field of the wrong type where the recount reads it: that part fails in words, exit 1, never a traceback."""
    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    lines = (log / "serve_events.jsonl").read_text().splitlines()
    start = json.loads(lines[0])
    start["samples"] = {"not": "a number"}
    lines[0] = json.dumps(start)
    (log / "serve_events.jsonl").write_text("\n".join(lines) + "\n")
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 1 and "cannot be checked: a record of the wrong shape (TypeError" in said, said


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04" + b"junk" * 10, b"\x00" * 64],
                         ids=["empty", "a zip's start and junk", "zeros"])  # fmt: skip
def test_a_forged_npz_predictions_file_fails_the_check_in_words(tmp_path, capsys, content: bytes) -> None:
    """np.load's own errors (EOFError, BadZipFile…) were tracebacks (issue 52's review of this check)."""
    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    text = (log / "serve_events.jsonl").read_text().replace("predictions.csv", "predictions.npz")
    (log / "serve_events.jsonl").write_text(text)
    (log / "predictions.npz").write_bytes(content)
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 1 and "the predictions cannot be checked" in said, said


def test_a_fifo_mllog_fails_the_check_instead_of_holding_it(tmp_path, capsys) -> None:
    import os

    bundle = hand_bundle(tmp_path / "bundle")
    log = hand_log(tmp_path / "log", bundle)
    os.mkfifo(log / "mllog.log")
    status, said = one_line(capsys, ["check", str(log), str(bundle)])
    assert status == 1 and "mllog.log is not a regular file" in said, said


def test_the_mllog_accuracy_lines_members_are_held_to_the_events(tmp_path) -> None:
    """A forger's review: the line's members were never compared, so they could hold any figure."""
    from aiperf_mpi.results.mllog_format import PREFIX
    from aiperf_mpi.serve.check import check_records

    events = {"serve_start": [{"forward_ops_per_sample": 10}],
              "offline": [{"samples_per_second": 2.0, "ops_per_second": 20.0}],
              "accuracy": [{"correct": 3, "samples": 4, "member_correct": [2, 4]}]}  # fmt: skip

    def lines(members: object) -> list[str]:
        keys = {"result_samples_per_second": 2.0, "aiperf_inference_ops_per_second": 20.0,
                "aiperf_forward_ops_per_sample": 10}  # fmt: skip
        records = [{"key": k, "value": v, "metadata": {}} for k, v in keys.items()]
        records.append({"key": "aiperf_ensemble_accuracy", "value": 0.75, "metadata": {"members": members}})
        (tmp_path / "mllog.log").write_text("".join(PREFIX + json.dumps(r) + "\n" for r in records))
        return [p for p in check_records(events, tmp_path) if "mllog" in p]

    assert lines([0.5, 1.0]) == []
    assert "members: [1.0, 1.0], the event log gives [0.5, 1.0]" in lines([1.0, 1.0])[0]
    assert lines("most") and lines([0.5])
