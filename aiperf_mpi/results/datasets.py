"""The documented data sets, as versioned data: each one's split sizes, classes and images, which no run writes.

A run logs what its data check counted (``run_start``'s ``data``), and a
log can say anything: a validation split inflated a hundredfold makes
evaluation a hundred times the work, and digits relabelled as ImageNet claim
ImageNet's passes.  The verifier therefore holds every run of a data set this
table names to the table's counts (``analysis/verify/data.py``), and only a
user's own data — an HDF5 file, an ImageNet-format set whose counts are no
documented split — keeps the counts its log gives.  The data room cuts the
built-in sets by the same numbers (``aiperf_mpi/data/sources.py`` reads them
here: one home), and the validity rule ``dataset`` names ImageNet's documented
splits from here (:data:`aiperf_mpi.results.rules.IMAGENET_SPLITS`).

A change of a count, or a new documented split, is a new
:data:`DATASETS_TABLE_VERSION` (in the manner of mlcommons' versioned rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

DATASETS_TABLE_VERSION = "2026.12-1"
"""the version of :data:`DOCUMENTED_SPLITS` (a new one for any change of a count)"""


@dataclass(frozen=True)
class DataSplit:
    """One documented training/validation split of a data set: its counts, classes and images."""

    name: str
    train: int
    validation: int
    classes: int
    channels: int
    image_size: int
    """the images' side; for a set the run resizes (``resizable``), the size when ``image_size`` is 0"""
    resizable: bool = False
    """whether the run's ``image_size`` chooses the side (the ImageNet pipeline resizes; synthetic draws any)"""
    partial: bool = False
    """whether a run may read part of it (some of its files): fewer images are a user's subset, whose counts the
    log gives; more are not this data set"""

    def counts(self) -> dict[str, int]:
        """``{"train", "validation", "classes"}``: what the data check's counts must equal."""
        return {"train": self.train, "validation": self.validation, "classes": self.classes}

    def side(self, image_size: object = None) -> object:
        """The images' side in a run configured with ``image_size`` (0 or None: the set's own): a resizable set's
        is the configured one, any other set's its own (the configuration refuses an ``image_size`` for it)."""
        return (image_size or self.image_size) if self.resizable else self.image_size


DIGITS = DataSplit("scikit-learn's 1,797 digits, embedded (8×8 scaled to 32×32×3)", 1_437, 360, 10, 3, 32)
"""the embedded default: the 1,797 digits cut 1,437 / 360 by a fixed permutation"""
SYNTHETIC = DataSplit("synthetic (random images, no accuracy)", 2_048, 512, 10, 3, 32, resizable=True)
CIFAR10 = DataSplit("CIFAR-10 (binary version: data_batch_1–5, test_batch)", 50_000, 10_000, 10, 3, 32,
                    partial=True)
"""read from the files a run is given: a subset of the batches (the small sets the tests write) is a user's own"""
ILSVRC_2012 = DataSplit("ILSVRC-2012", 1_281_167, 50_000, 1_000, 3, 224, resizable=True)
"""ImageNet's standard split, as the standard converter (build_imagenet_data.py) writes it"""

DOCUMENTED_SPLITS: Mapping[str, tuple[DataSplit, ...]] = MappingProxyType({
    "digits": (DIGITS,),
    "synthetic": (SYNTHETIC,),
    "cifar10": (CIFAR10,),
    "imagenet": (ILSVRC_2012,),
})  # fmt: skip
"""each data set name the configuration takes → its documented splits.  ``digits`` and ``synthetic`` are built
in: every run of them counts their one split.  ``cifar10`` is read from the files a run is given: its split, or a
subset of it (a user's own, no larger).  ``imagenet`` has the splits a valid run may use, and an ImageNet-format
set of other counts (a subset, the small sets the tests write) is a user's own set."""
BUILT_IN = ("digits", "synthetic")
"""data sets the package makes itself (embedded, generated): every run of one counts its one split"""
USER_SETS = ("hdf5",)
"""data sets whose counts only their files know: a run of one keeps the counts its log gives"""


RESIZABLE = tuple(sorted(name for name, splits in DOCUMENTED_SPLITS.items() if splits[0].resizable))
"""data sets whose image side a run's ``image_size`` chooses (the others have their own, fixed)"""


def image_shape(dataset: object, image_size: object = None) -> tuple[object, object, int, int] | None:
    """``(height, width, channels, classes)`` of a named data set's images in a run configured with ``image_size``
    (:meth:`DataSplit.side`), which every graph of the run takes in and gives out; None for a user's own set
    (hdf5), whose files say their own.  Every split of a set has the same images, so its first says."""
    splits = DOCUMENTED_SPLITS.get(dataset) if isinstance(dataset, str) else None
    if not splits:
        return None
    side = splits[0].side(image_size)
    return side, side, splits[0].channels, splits[0].classes


def larger_than_documented(dataset: object, data: Mapping) -> DataSplit | None:
    """The split of a set read in part (:attr:`DataSplit.partial`) that ``data`` counts more of, or None."""
    for split in DOCUMENTED_SPLITS.get(dataset, ()) if isinstance(dataset, str) else ():
        if split.partial and any(_above(data.get(key), value) for key, value in split.counts().items()):
            return split
    return None


def _above(count: object, most: int) -> bool:
    return not isinstance(count, int) or isinstance(count, bool) or count > most


def documented_split(dataset: object, data: Mapping | None) -> DataSplit | None:
    """The documented split a run of ``dataset`` must have counted, or None (a user's own set).

    ``data`` is the data check's counts (``run_start``'s ``data``, None in an older log): a built-in set is held
    to its one split whatever it logged; a set read from the run's files (CIFAR-10, ImageNet) to the split whose
    counts it logged, if any.
    """
    splits = DOCUMENTED_SPLITS.get(dataset) if isinstance(dataset, str) else None
    if not splits:
        return None
    if dataset in BUILT_IN:
        return splits[0]
    counts = {key: data.get(key) for key in ("train", "validation", "classes")} if isinstance(data, Mapping) else {}
    return next((split for split in splits if counts == split.counts()), None)
