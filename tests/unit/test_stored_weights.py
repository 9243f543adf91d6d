"""Where a task's weights are once the best model is stored once (aiperf_mpi.results.stored_weights)."""

import json

import pytest

from aiperf_mpi.results.stored_weights import BEST_MODEL, locate_weights, read_best_metadata, weights_location

NPZ = "weights/task-3.npz"
HOLDS_IT = {"task": 3, "weights_file": NPZ, "weights_file_removed": True}


def test_the_npz_wins_whenever_it_exists() -> None:
    assert weights_location(NPZ, None, {NPZ}) == NPZ
    assert weights_location(NPZ, HOLDS_IT, {NPZ, BEST_MODEL}) == NPZ  # a removal that failed: both are there


def test_best_serves_only_the_file_its_metadata_says_it_replaced() -> None:
    assert weights_location(NPZ, HOLDS_IT, {BEST_MODEL}) == BEST_MODEL
    assert weights_location("weights/task-4.npz", HOLDS_IT, {BEST_MODEL}) is None  # another task's weights
    assert weights_location(NPZ, {**HOLDS_IT, "weights_file_removed": False}, {BEST_MODEL}) is None
    assert weights_location(NPZ, {"weights_file": NPZ}, {BEST_MODEL}) is None  # an export from before the field
    assert weights_location(NPZ, {**HOLDS_IT, "weights_file_removed": "yes"}, {BEST_MODEL}) is None  # true only


@pytest.mark.parametrize("metadata", [None, [], "text", {}])
def test_no_readable_metadata_or_no_model_means_nowhere(metadata) -> None:
    assert weights_location(NPZ, metadata, {BEST_MODEL}) is None
    assert weights_location(NPZ, HOLDS_IT, set()) is None  # best/model.keras itself is gone
    assert weights_location("", HOLDS_IT, {BEST_MODEL}) is None  # the task saved no weights


def test_on_disk(tmp_path) -> None:
    assert locate_weights(tmp_path, NPZ) is None and read_best_metadata(tmp_path) is None
    (tmp_path / "weights").mkdir()
    (tmp_path / NPZ).write_bytes(b"npz")
    assert locate_weights(tmp_path, NPZ) == tmp_path / NPZ
    (tmp_path / NPZ).unlink()
    (tmp_path / "best").mkdir()
    (tmp_path / BEST_MODEL).write_bytes(b"keras")
    (tmp_path / "best" / "metadata.json").write_text("{cut")  # a torn file reads as none
    assert read_best_metadata(tmp_path) is None and locate_weights(tmp_path, NPZ) is None
    (tmp_path / "best" / "metadata.json").write_text(json.dumps(HOLDS_IT))
    assert locate_weights(tmp_path, NPZ) == tmp_path / BEST_MODEL
    assert locate_weights(tmp_path, "weights/task-0.npz") is None


def test_a_name_that_leaves_the_run_directory_is_nowhere(tmp_path) -> None:
    """A weights name comes from a leader's message or a log: one that points outside the run is not read."""
    run_dir = tmp_path / "run"
    (run_dir / "weights").mkdir(parents=True)
    outside = tmp_path / "elsewhere.npz"
    outside.write_bytes(b"npz")
    assert locate_weights(run_dir, str(outside)) is None
    assert locate_weights(run_dir, "weights/../../elsewhere.npz") is None
    (run_dir / NPZ).write_bytes(b"npz")
    assert locate_weights(run_dir, NPZ) == run_dir / NPZ
