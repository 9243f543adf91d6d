"""The servable bundle's manifest and its check on load (pure: no TensorFlow; tests/integration/test_serve.py
loads and serves real bundles)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.__main__ import main
from aiperf_mpi.serve.bundle import (
    FORMAT,
    MANIFEST,
    check_input_shape,
    digest,
    forward_ops,
    open_bundle,
    write_manifest,
)


def small_bundle(root: Path) -> dict:
    """A bundle directory in the real layout with small files: what the check reads is the same."""
    member = root / "members" / "task-3"
    (member / "savedmodel" / "variables").mkdir(parents=True)
    (member / "model.keras").write_bytes(bytes(range(256)) * 40)
    (member / "graph.json").write_text('{"format": "aiperf_mpi.graph/1"}\n')
    (member / "savedmodel" / "saved_model.pb").write_bytes(b"\x08\x01" * 100)
    (member / "savedmodel" / "variables" / "variables.index").write_bytes(b"index")
    (root / "model_card.md").write_text("# card\n")
    manifest = {"format": FORMAT, "servable": {"name": "x", "type": "model"},
                "signature": {"inputs": [{"shape": [-1, 32, 32, 3]}]},
                "members": [{"name": "task-3", "forward_ops_per_sample": 1000},
                            {"name": "task-4", "forward_ops_per_sample": 234}]}  # fmt: skip
    return write_manifest(root, manifest)


def test_the_manifest_lists_every_file_with_its_sha256_and_size(tmp_path) -> None:
    manifest = small_bundle(tmp_path)
    member = "members/task-3/"
    assert sorted(manifest["files"]) == [f"{member}graph.json", f"{member}model.keras",
                                         f"{member}savedmodel/saved_model.pb",
                                         f"{member}savedmodel/variables/variables.index", "model_card.md"]  # fmt: skip
    model = manifest["files"]["members/task-3/model.keras"]
    assert model["bytes"] == 10240 and len(model["sha256"]) == 64
    assert json.loads((tmp_path / MANIFEST).read_text()) == manifest
    assert open_bundle(tmp_path) == manifest
    assert forward_ops(manifest) == 1234


def test_digest_reads_at_most_one_byte_past_the_limit(tmp_path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * 5000)
    assert digest(path)[1] == 5000
    assert digest(path, limit=100)[1] == 101


@pytest.mark.parametrize("spoil, message", [
    (lambda root: (root / "members/task-3/graph.json").unlink(), "members/task-3/graph.json is missing"),
    (lambda root: (root / "model_card.md").write_text("# card!\n"), "model_card.md has 8 bytes, the manifest says 7"),
    (lambda root: (root / "model_card.md").write_text("# Card\n"), "model_card.md has sha256 "),
    (lambda root: (root / "members/extra.bin").write_bytes(b"x"), "members/extra.bin is not in the manifest"),
    (lambda root: (root / MANIFEST).write_text(
        (root / MANIFEST).read_text().replace(FORMAT, "aiperf_mpi.serve/2")), "is format 'aiperf_mpi.serve/2'"),
    (lambda root: (root / MANIFEST).unlink(), "has no manifest.json"),
    (lambda root: (root / MANIFEST).write_text("{"), "is not JSON"),
])  # fmt: skip
def test_a_spoilt_bundle_is_refused(tmp_path, spoil, message) -> None:
    small_bundle(tmp_path)
    spoil(tmp_path)
    with pytest.raises(ServeError, match=message.replace("(", r"\(").replace(".", r"\.")):
        open_bundle(tmp_path)


def test_a_larger_file_is_refused_from_its_size_before_it_is_read(tmp_path) -> None:
    small_bundle(tmp_path)
    with open(tmp_path / "members/task-3/model.keras", "r+b") as handle:
        handle.truncate(1 << 40)  # a sparse terabyte: reading it would take hours
    started = time.monotonic()
    with pytest.raises(ServeError, match=f"has {1 << 40} bytes, the manifest says 10240"):
        open_bundle(tmp_path)
    assert time.monotonic() - started < 5


def test_the_wrong_input_shape_is_one_line() -> None:
    manifest = {"signature": {"inputs": [{"shape": [-1, 32, 32, 3]}]}}
    check_input_shape(manifest, (7, 32, 32, 3), "x")
    with pytest.raises(ServeError, match=r"^data\.h5 has images of 8×8×1; the bundle takes 32×32×3 "):
        check_input_shape(manifest, (7, 8, 8, 1), "data.h5")


def test_publish_refuses_bad_input_in_one_line(tmp_path, capsys) -> None:
    assert main(["publish", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiperf_mpi.serve: error: "), lines
    assert main(["publish", str(tmp_path), str(tmp_path), "--top", "0"]) == 2
    assert capsys.readouterr().err == "aiperf_mpi.serve: error: --top must be at least 1, got 0\n"
    os.makedirs(tmp_path / "run")
    (tmp_path / "run" / "events.jsonl").write_text("")
    assert main(["publish", str(tmp_path / "run"), str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"aiperf_mpi.serve: error: {tmp_path} exists: give a new directory (a bundle " \
                                      "is never written over another)\n"
