"""Data sets: the embedded default, synthetic tensors, CIFAR-10, ImageNet TFRecords, HDF5.

Every source is checked before training starts (:meth:`DataSource.check`):
bad data is a :class:`DataError` with one clear line, raised identically on
every rank, never a crash in the middle of an epoch.
"""

from aiperf_mpi.data.sources import (
    DATASETS,
    ArraySource,
    DataError,
    DataSource,
    open_source,
)

__all__ = ["DATASETS", "ArraySource", "DataError", "DataSource", "open_source"]
