"""The appended graphs file: the master's placement, the one reader, and the run's size line."""

from __future__ import annotations

import hashlib
import json

import pytest

from aiperf_mpi.job.master import _graphs_file_end
from aiperf_mpi.job.session import GRAPH_FILES_COUNTED, _say_how_much_disk
from aiperf_mpi.results.graphs import GraphFileError, append_graph, graph_place, read_graph, segment_graph_file


def test_appended_graphs_are_read_back_where_their_fields_say(tmp_path) -> None:
    texts = ['{"a":1}', '{"b":"é"}', "{}"]  # a non-ASCII graph: offsets count bytes, not characters
    placed = [append_graph(tmp_path, segment_graph_file(1), text) for text in texts]
    assert [p["graph_offset"] for p in placed] == [0, 8, 8 + len('{"b":"é"}'.encode()) + 1]
    assert [read_graph(tmp_path, p).decode() for p in placed] == texts
    assert all(p["graph_sha256"] == hashlib.sha256(t.encode()).hexdigest() for p, t in zip(placed, texts, strict=True))
    assert graph_place(placed[1]) == "graphs/segment-1.jsonl at byte 8 (+10)"


def test_a_file_per_model_is_read_whole(tmp_path) -> None:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "task-3.json").write_bytes(b'{"x":2}')  # no newline: the whole file is the graph
    event = {"graph_file": "graphs/task-3.json"}
    assert read_graph(tmp_path, event) == b'{"x":2}' and graph_place(event) == "graphs/task-3.json"


@pytest.mark.parametrize(("fields", "message"), [
    ({"graph_bytes": None}, "graph_offset 0 and graph_bytes None are not two non-negative integers"),
    ({"graph_offset": True, "graph_bytes": 7}, "are not two non-negative integers"),
    ({"graph_offset": 9, "graph_bytes": 7}, "ends at byte 16, before the graph at byte 9 (+7 and its newline)"),
    ({"graph_offset": 2, "graph_bytes": 3}, "byte 2 (+3) is not a whole line of the file"),
    ({"graph_offset": 0, "graph_bytes": 3}, "byte 0 (+3) is not a whole line of the file"),
    ({"graph_file": "/etc/passwd"}, "graph_file '/etc/passwd' lies outside the run directory"),
    ({"graph_file": 7}, "graph_file '7' is not a file name"),
    ({"graph_file": "graphs/segment-2.jsonl"}, "graphs/segment-2.jsonl is missing"),
    ({"graph_file": "graphs/seg\x00ment-1.jsonl"}, "cannot be resolved"),
])  # fmt: skip
def test_a_graph_that_is_not_where_its_event_says_is_one_line(tmp_path, fields, message) -> None:
    append_graph(tmp_path, segment_graph_file(1), '{"a":1}')
    append_graph(tmp_path, segment_graph_file(1), '{"b":2}')
    placed = {"graph_file": segment_graph_file(1), "graph_offset": 0, "graph_bytes": 7} | fields
    event = {name: value for name, value in placed.items() if value is not None}  # None: the field left out
    with pytest.raises(GraphFileError) as caught:
        read_graph(tmp_path, event)
    assert message in str(caught.value)


def test_a_segments_file_left_with_a_cut_line_is_ended_before_the_master_appends(tmp_path) -> None:
    path = tmp_path / "graphs" / "segment-2.jsonl"
    assert _graphs_file_end(path) == 0 and path.read_bytes() == b""  # created: the master's first offset is 0
    path.write_bytes(b'{"a":1}\n{"b"')  # a line cut mid-write
    assert _graphs_file_end(path) == 13 and path.read_bytes() == b'{"a":1}\n{"b"\n'
    assert _graphs_file_end(path) == 13  # a whole last line is left as it is


def test_the_size_line_counts_the_graphs_file_but_not_a_folder_of_one_file_a_model(tmp_path, capsys) -> None:
    append_graph(tmp_path, segment_graph_file(1), json.dumps({"g": "x" * 200_000}))
    _say_how_much_disk(tmp_path)
    line = capsys.readouterr().out
    assert "holds 0.2 MB (graphs/ 0.2 MB)" in line and "besides" not in line
    for task in range(GRAPH_FILES_COUNTED + 1):
        (tmp_path / "graphs" / f"task-{task}.json").write_text("{}")
    _say_how_much_disk(tmp_path)
    assert "besides graphs/ (one file a model" in capsys.readouterr().out
