"""verify's data rule: a named data set's splits come from the versioned table, not from the log (family ``data``).

The ``counts`` row holds each epoch to the splits the run's data check
*logged*; a log can log any counts.  This family holds every run of a data
set the table names (:data:`aiperf_mpi.results.datasets.DOCUMENTED_SPLITS`:
the embedded digits, synthetic, CIFAR-10, ImageNet's ILSVRC-2012) to the
table instead: the data check's counts, classes and image shape, the seed
model's input and classes (``model_proposed``'s ``seed`` record), and every
epoch's passes — ``(train // ranks) // batch`` steps a rank and the whole
validation split, so a model's training samples are at most its epochs × the
table's train split.  A user's own data (an HDF5 file, an ImageNet-format
set whose counts are no documented split) keeps the counts its log gives, and
the row says they are taken from the log.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.datasets import (
    DATASETS_TABLE_VERSION,
    DOCUMENTED_SPLITS,
    DataSplit,
    documented_split,
    larger_than_documented,
)
from aiperf_mpi.results.epochs import rank_batches
from analysis.checks import Check, Run
from analysis.verify.evidence import images, is_int, split_counts


class DataRules:
    """The ``data splits`` row, fed ``run_start``, ``layout``, ``model_proposed`` and ``epoch``."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("data splits")
        self.started = False
        """whether a run_start has come (the rules hold nothing before it)"""
        self.split: DataSplit | None = None
        """the open segment's split by the table (None: a user's own set)"""
        self.image_size: int | None = None
        """the side the table allows the open segment's images (a resizable set: the configured one)"""
        self.dataset: object = None
        self.epochs = self.held = 0
        self.from_log = ""
        """why the counts are the log's (a user's own set), said once"""

    def run_start(self, event: dict, number: int) -> None:
        config = event["config"]
        if not self.started:
            self.dataset = config.get("dataset")
        data = event.get("data")
        label = f"event {number} (run_start of segment {event.get(runlog.SEGMENT, number)})"
        split = documented_split(self.dataset, data)
        configured = config.get("image_size")
        size = None
        if split is not None:
            size = split.side(configured if is_int(configured) and configured > 0 else None)
        self.started, self.split, self.image_size = True, split, size
        if split is None:
            self._users_own(data, label)
        elif data is None:
            self.check.notes.append(f"{label}: no data check (a log older than the field): held to the table's "
                                    f"{split.name}")  # fmt: skip
        elif isinstance(data, Mapping):
            self._data_check(data, split, size, label)

    def _users_own(self, data: object, label: str) -> None:
        """A set the table does not name, or CIFAR-10 or ImageNet of undocumented counts: the log's counts are
        taken — but no more of a set read in part than the set has."""
        dataset = self.dataset
        named = isinstance(dataset, str) and dataset in DOCUMENTED_SPLITS
        if named and data is None:
            self.check.missing.append(f"{label}: no data check (a log older than the field): which {dataset} split "
                                      "it read is not recorded")  # fmt: skip
            return
        larger = larger_than_documented(dataset, data) if isinstance(data, Mapping) else None
        if larger is not None:
            self.check.problems.append(f"{label}: data check: {split_counts(data)} of {dataset}, more than "
                                       f"{larger.name} has by the table ({split_counts(larger.counts())}): a part "
                                       "of it is no larger")  # fmt: skip
        elif not self.from_log:
            what = (f"a {dataset}-format set whose counts are no documented split" if named
                    else f"a user's own data set ({str(dataset)[:40]})")  # fmt: skip
            counts = f" ({split_counts(data)})" if isinstance(data, Mapping) else ""
            self.from_log = f"{what}{counts}: its split sizes are taken from the log"
            self.check.notes.append(self.from_log)

    def _data_check(self, data: Mapping, split: DataSplit, size: int | None, label: str) -> None:
        """The data check's counts, classes and image shape against the table's split."""
        logged = {key: data.get(key) for key in ("train", "validation", "classes")}
        wrong = [f"{key} {logged[key]} (the table: {value:,})" for key, value in split.counts().items()
                 if logged[key] != value]  # fmt: skip
        shape = data.get("image_shape")
        expected = [size, size, split.channels]
        if shape != expected:
            wrong.append(f"image shape {shape} (the table: {expected})")
        if wrong:
            self.check.problems.append(f"{label}: data check: {self.dataset} is {split.name}, but the log counted "
                                       f"{'; '.join(wrong)}")  # fmt: skip

    def model_proposed(self, event: dict, number: int) -> None:
        split, seed = self.split, event.get("seed")
        if split is None or event["parent"] is not None or not isinstance(seed, Mapping):
            return
        found = (seed.get("image_size"), seed.get("channels"), seed.get("classes"))
        expected = (self.image_size, split.channels, split.classes)
        if found != expected:
            self.check.problems.append(f"event {number} (model_proposed of task {event['task']}): seed: a seed of "
                                       f"{images((found[0], *found))}, {self.dataset} ({split.name}) has "
                                       f"{images((expected[0], *expected))} by the table")  # fmt: skip

    def epoch(self, event: dict, number: int) -> None:
        self.epochs += 1
        split, segment = self.split, self.run.view.segment if self.run.view is not None else None
        if split is None or segment is None:
            return
        self.held += 1
        label = f"event {number} (epoch {event['epoch']} of task {event['task']})"
        if event["validation_samples"] != split.validation:
            self.check.problems.append(f"{label}: validation: {event['validation_samples']:,} samples, "
                                       f"{split.name}'s validation split is {split.validation:,} by the table "
                                       "(an epoch validates all of it)")  # fmt: skip
        ranks, batch = segment.group_ranks.get(event["group"]), segment.task_batches.get(event["task"])
        if event["train_samples"] > split.train:
            self.check.problems.append(f"{label}: one pass: {event['train_samples']:,} train samples, "
                                       f"{split.name}'s train split is {split.train:,} by the table")
        elif ranks and is_int(batch) and batch > 0 and event["steps"] != (
                steps := rank_batches(split.train, ranks, batch)):
            self.check.problems.append(f"{label}: one pass: {event['steps']} steps of batch {batch} a rank, one "
                                       f"pass over {split.name}'s train split is ({split.train:,} // {ranks} "
                                       f"ranks) // {batch} = {steps} by the table")

    def finish(self) -> list[Check]:
        if self.from_log:
            self.check.summary = f"{self.from_log} ({self.epochs} epochs)"
        else:
            self.check.summary = (f"{self.dataset}: the data check, the seed and {self.held} epochs held to the "
                                  f"documented splits (table {DATASETS_TABLE_VERSION}): each epoch one pass over "
                                  "the table's train split and all of its validation split")  # fmt: skip
        return [self.check]
