"""``python -m aiperf_mpi.graph``: the table, the JSON form, graph files, bad input."""

import json

import pytest

from aiperf_mpi.graph.__main__ import main
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet


def test_resnet50_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "resnet50", "--image-size", "224", "--classes", "1000"]) == 0
    out = capsys.readouterr().out
    assert "stem_conv" in out and "s5b3_conv3" in out and "fc" in out
    assert "25,610,152 (25,557,032 trainable)" in out
    assert "3,857,973,248 per sample" in out


def test_json_output_and_graph_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(to_json(tiny_resnet()))
    assert main(["--graph", str(path), "--batch", "8", "--train-samples", "80", "--val-samples", "20", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "tiny_resnet"
    assert data["epoch"]["steps"] == 10
    assert (
        data["epoch"]["total"]
        == 80 * (data["forward_train"] + data["backward"]) + 10 * data["update"] + 20 * data["forward_eval"]
    )
    assert len(data["layers"]) == tiny_resnet().number_of_nodes()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{oops", "not a graph JSON"),
        ('{"format": "aiperf_mpi.graph/1", "nodes": [], "edges": []}', "empty"),
    ],
)
def test_bad_graph_file_is_one_line(tmp_path, capsys, content, message) -> None:
    path = tmp_path / "g.json"
    if content is not None:
        path.write_text(content)
    assert main(["--graph", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_kernel_size_option_changes_the_count(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--model", "tiny", "--image-size", "32", "--classes", "10", "--json"])
    base = json.loads(capsys.readouterr().out)["macs"]
    main(["--model", "tiny", "--image-size", "32", "--classes", "10", "--kernel-size", "5", "--json"])
    assert json.loads(capsys.readouterr().out)["macs"] > base
    assert main(["--model", "tiny", "--image-size", "32", "--classes", "10", "--kernel-size", "4"]) == 2


def test_both_command_names_run_as_a_user_types_them() -> None:
    import subprocess
    import sys

    for module in ("aiperf_mpi.graph", "aiperf_mpi.ops"):
        done = subprocess.run([sys.executable, "-m", module, "--model", "tiny", "--json"], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["forward_eval"] > 0, module
