"""What a serving run reads (no TensorFlow): every input by contiguous slice, the same bytes however it is cut."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.inputs import open_input
from aiperf_mpi.serve.scenarios import shards
from tests.support.data_files import small_h5

SHAPE = (32, 32, 3)


def sliced(data, ranks: int, batch: int) -> np.ndarray:
    return np.concatenate([data.read(start, end)[0] for start, end in shards(data.count, ranks, batch)])


def test_synthetic_images_are_the_same_bytes_however_they_are_sliced() -> None:
    data = open_input("synthetic:700", SHAPE)
    assert (data.count, data.shape, data.labelled) == (700, SHAPE, False)
    whole = data.read(0, 700)[0]
    assert whole.shape == (700, *SHAPE) and whole.dtype == np.uint8
    for ranks, batch in ((4, 32), (3, 7), (7, 100)):
        assert np.array_equal(sliced(data, ranks, batch), whole)
    assert data.read(300, 300)[0].shape == (0, *SHAPE)


def test_a_directory_of_images_in_name_order(tmp_path) -> None:
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (5, *SHAPE), dtype=np.uint8)
    for number, image in enumerate(pixels):
        Image.fromarray(image).save(tmp_path / f"img-{number:02d}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    data = open_input(str(tmp_path), SHAPE)
    assert (data.count, data.shape, data.labelled) == (5, SHAPE, False)
    assert np.array_equal(sliced(data, 2, 2), pixels)  # PNG is lossless
    Image.fromarray(pixels[0][:16]).save(tmp_path / "img-99.png")
    with pytest.raises(ServeError, match="img-99.png is 32×16, img-00.png 32×32: the images differ in size"):
        open_input(str(tmp_path), SHAPE).read(0, 6)


@pytest.mark.parametrize("spec, message", [
    ("digits:test", "the digits have the splits train, validation and all"),
    ("synthetic:0", "give a positive number of images"),
    ("/nonexistent/x.bin", "no such file or directory"),
    ("run", "the bundle's run trained on None"),
])  # fmt: skip
def test_a_bad_input_is_one_line(spec, message) -> None:
    with pytest.raises(ServeError, match=message):
        open_input(spec, SHAPE)


def test_run_names_the_split_the_run_trained_on(tmp_path) -> None:
    assert open_input("run", SHAPE, {"source": {"dataset": "digits"}}).description == "digits:validation"
    path = small_h5(tmp_path / "d.h5", count=10)
    assert open_input("run", SHAPE, {"source": {"dataset": "hdf5", "data_path": path}}).count == 10
