"""Where a task's weights are once the best model is stored once (aiperf_mpi.results.stored_weights)."""

import json

import numpy as np
import pytest

from aiperf_mpi.results.stored_weights import (
    BEST_MODEL,
    MODEL_SHA256,
    WEIGHTS_SHA256,
    WeightsFileError,
    file_sha256,
    locate_weights,
    npz_shapes,
    read_best_metadata,
    trusted_weights,
    weights_location,
)

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


def test_an_npzs_shapes_are_read_from_its_headers_and_anything_else_is_refused(tmp_path) -> None:
    path = tmp_path / "w.npz"
    np.savez(path, **{"conv::0": np.zeros((3, 3, 3, 8), np.float32), "bn::1": np.ones(8), "bn::0": np.ones(8),
                      "bn::2": np.ones(8), "bn::3": np.ones(8)})  # fmt: skip
    assert npz_shapes(path) == {"conv": [(3, 3, 3, 8)], "bn": [(8,)] * 4}
    np.savez(path, **{"conv::1": np.zeros(3)})  # index 0 missing
    with pytest.raises(WeightsFileError, match=r"layer 'conv' has arrays \[1\], not 0..0"):
        npz_shapes(path)
    np.savez(path, conv=np.zeros(3))
    with pytest.raises(WeightsFileError, match="is not a layer's array"):
        npz_shapes(path)
    path.write_bytes(b"fake weights")
    with pytest.raises(WeightsFileError, match="not an .npz of weights"):
        npz_shapes(path)


def test_weights_are_trusted_only_as_the_file_whose_sha256_the_log_records(tmp_path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / NPZ).write_bytes(b"npz")
    digest = file_sha256(tmp_path / NPZ)
    assert trusted_weights(tmp_path, NPZ, digest) == (tmp_path / NPZ, "")
    assert "has sha256" in trusted_weights(tmp_path, NPZ, "0" * 64)[1]
    assert "the log records no weights_sha256" in trusted_weights(tmp_path, NPZ, "")[1]
    assert "is missing" in trusted_weights(tmp_path, "weights/task-9.npz", digest)[1]
    # a single-copy export: best/model.keras tied through best/metadata.json's two sha256s
    (tmp_path / NPZ).unlink()
    (tmp_path / "best").mkdir()
    (tmp_path / BEST_MODEL).write_bytes(b"keras")
    meta = {**HOLDS_IT, WEIGHTS_SHA256: digest, MODEL_SHA256: file_sha256(tmp_path / BEST_MODEL)}
    (tmp_path / "best" / "metadata.json").write_text(json.dumps(meta))
    assert trusted_weights(tmp_path, NPZ, digest) == (tmp_path / BEST_MODEL, "")
    assert "was built from weights of sha256" in trusted_weights(tmp_path, NPZ, "1" * 64)[1]
    (tmp_path / BEST_MODEL).write_bytes(b"another model")
    assert "not the file the export wrote" in trusted_weights(tmp_path, NPZ, digest)[1]
