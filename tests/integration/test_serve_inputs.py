"""HDF5 and the digits as a serving run reads them, by slice with their labels (no TensorFlow, but h5py and
scikit-learn's digits several times: tens of seconds on the loaded CI machine, so ``long``; the fast input tests
are tests/unit/test_serve_inputs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.inputs import open_input
from tests.support.data_files import small_h5, write_h5

SHAPE = (32, 32, 3)


@pytest.mark.long
def test_hdf5_and_digits_are_read_by_slice_with_their_labels(tmp_path) -> None:
    path = small_h5(tmp_path / "d.h5", count=100)
    data = open_input(path, SHAPE)
    assert (data.count, data.labelled, data.description) == (100, True, f"{path}:validation")
    images, labels = data.read(10, 20)
    digits = open_input("digits", SHAPE)
    assert np.array_equal(images, digits.read(10, 20)[0]) and np.array_equal(labels, digits.read(10, 20)[1])
    assert open_input(f"{path}:train", SHAPE).count == 100
    assert open_input("digits:all", SHAPE).count == 1797 and open_input("digits:train", SHAPE).count == 1437
    with pytest.raises(ServeError, match="the file has the splits train, validation"):
        open_input(f"{path}:test", SHAPE)
    small = write_h5(tmp_path / "small.h5")
    assert open_input(str(small), SHAPE).shape == (8, 8, 3)  # the runner then refuses the shape, in one line
