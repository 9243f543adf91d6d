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

The row's rules are plain functions of the run's units
(:mod:`analysis.verify.units`): each ``run_start`` (:func:`data_splits`, of
the run: its ``run_start`` events, one a segment, in order), each proposal's
seed (:func:`seed_split`) and each epoch (:func:`epoch_splits`), each unit
carrying the split of the last ``run_start`` before it and, for an epoch,
its group's ranks and its task's batch size as the segment had logged them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.datasets import DATASETS_TABLE_VERSION, DOCUMENTED_SPLITS, DataSplit, larger_than_documented
from aiperf_mpi.results.epochs import rank_batches
from analysis.verify.evidence import images, is_int, split_counts
from analysis.verify.units import (
    DataEpoch,
    Finding,
    Findings,
    Proposal,
    RunUnit,
    StartLogged,
    count,
    missing,
    note,
    problem,
    summary,
)


def data_splits(run: RunUnit, counted: Counter) -> Findings:
    """a data set the versioned table of `aiperf_mpi/results/datasets.py` names, which the run does not write
    (digits 1,437 / 360 of 10 classes at 32×32×3; synthetic 2,048 / 512 of 10 at `image_size` or 32; CIFAR-10
    50,000 / 10,000 of 10 at 32×32×3; ImageNet's ILSVRC-2012 1,281,167 / 50,000 of 1,000 at `image_size` or 224),
    is held to the table, not to its log: the data check's train, validation and class counts and image shape, the
    seed's (`model_proposed`'s `seed`) input and classes, and every epoch one pass over the table's splits —
    `(train // ranks) // batch` steps a rank, never more samples than the train split, all of the validation
    split — so a model's samples are at most its epochs × the train split. Digits and synthetic are built in:
    every run of them counts their split. CIFAR-10 and ImageNet are read from the files a run is given: a run
    that counted a documented split is held to it; other counts are a user's own set (a CIFAR-10 subset, no larger
    than CIFAR-10; an ImageNet-format set, an *unofficial* run by the rule `dataset`), as `hdf5` always is: its
    logged counts are kept, and the row says they are taken from the log; a CIFAR-10 or ImageNet run without a
    data check is *not recorded*"""
    from_log = ""
    """why the counts are the log's (a user's own set), said once"""
    for start in run.starts:
        event, number, split = start.event, start.number, start.split.split
        data = event.get("data")
        label = f"event {number} (run_start of segment {event.get(runlog.SEGMENT, number)})"
        if split is None:
            said = yield from _users_own(start, data, label, from_log)
            from_log = from_log or said
        elif data is None:
            yield note(number, f"{label}: no data check (a log older than the field): held to the table's "
                               f"{split.name}")  # fmt: skip
        elif isinstance(data, Mapping):
            yield from _data_check(start, data, split, label)
    if from_log:
        yield summary(f"{from_log} ({counted['epochs']} epochs)")
    else:
        dataset = run.starts[0].split.dataset if run.starts else None
        yield summary(f"{dataset}: the data check, the seed and {counted['held']} epochs held to the documented "
                      f"splits (table {DATASETS_TABLE_VERSION}): each epoch one pass over the table's train split "
                      "and all of its validation split")  # fmt: skip


def _users_own(start: StartLogged, data: object, label: str, from_log: str) -> Iterator[Finding]:
    """A set the table does not name, or CIFAR-10 or ImageNet of undocumented counts: the log's counts are taken —
    but no more of a set read in part than the set has.  Returns why the counts are the log's, when it says so
    first ("": it does not)."""
    dataset, number = start.split.dataset, start.number
    named = isinstance(dataset, str) and dataset in DOCUMENTED_SPLITS
    if named and data is None:
        yield missing(number, f"{label}: no data check (a log older than the field): which {dataset} split it read "
                              "is not recorded")  # fmt: skip
        return ""
    larger = larger_than_documented(dataset, data) if isinstance(data, Mapping) else None
    if larger is not None:
        yield problem(number, f"{label}: data check: {split_counts(data)} of {dataset}, more than {larger.name} has "
                              f"by the table ({split_counts(larger.counts())}): a part of it is no larger")  # fmt: skip
        return ""
    if from_log:
        return ""
    what = (f"a {dataset}-format set whose counts are no documented split" if named
            else f"a user's own data set ({str(dataset)[:40]})")  # fmt: skip
    counts = f" ({split_counts(data)})" if isinstance(data, Mapping) else ""
    said = f"{what}{counts}: its split sizes are taken from the log"
    yield note(number, said)
    return said


def _data_check(start: StartLogged, data: Mapping, split: DataSplit, label: str) -> Findings:
    """The data check's counts, classes and image shape against the table's split."""
    logged = {key: data.get(key) for key in ("train", "validation", "classes")}
    wrong = [f"{key} {logged[key]} (the table: {value:,})" for key, value in split.counts().items()
             if logged[key] != value]  # fmt: skip
    shape = data.get("image_shape")
    size = start.split.image_size
    expected = [size, size, split.channels]
    if shape != expected:
        wrong.append(f"image shape {shape} (the table: {expected})")
    if wrong:
        yield problem(start.number, f"{label}: data check: {start.split.dataset} is {split.name}, but the log "
                                    f"counted {'; '.join(wrong)}")  # fmt: skip


def seed_split(proposal: Proposal) -> Findings:
    """(data splits) a seed's input and classes the table's"""
    event, opened = proposal.event, proposal.split
    split, seed = opened.split if opened is not None else None, event.get("seed")
    if opened is None or split is None or event["parent"] is not None or not isinstance(seed, Mapping):
        return
    found = (seed.get("image_size"), seed.get("channels"), seed.get("classes"))
    expected = (opened.image_size, split.channels, split.classes)
    if found != expected:
        yield problem(proposal.number, f"event {proposal.number} (model_proposed of task {event['task']}): seed: a "
                                       f"seed of {images((found[0], *found))}, {opened.dataset} ({split.name}) has "
                                       f"{images((expected[0], *expected))} by the table")  # fmt: skip


def epoch_splits(epoch: DataEpoch) -> Findings:
    """(data splits) an epoch one pass over the table's train split and all of its validation split"""
    yield count("epochs")
    split, event, number = epoch.split, epoch.event, epoch.number
    if split is None:
        return
    yield count("held")
    label = f"event {number} (epoch {event['epoch']} of task {event['task']})"
    if event["validation_samples"] != split.validation:
        yield problem(number, f"{label}: validation: {event['validation_samples']:,} samples, {split.name}'s "
                              f"validation split is {split.validation:,} by the table (an epoch validates all of "
                              "it)")  # fmt: skip
    ranks, batch = epoch.ranks, epoch.batch
    if event["train_samples"] > split.train:
        yield problem(number, f"{label}: one pass: {event['train_samples']:,} train samples, {split.name}'s train "
                              f"split is {split.train:,} by the table")  # fmt: skip
    elif ranks and is_int(batch) and batch > 0 and event["steps"] != (
            steps := rank_batches(split.train, ranks, batch)):  # type: ignore[arg-type,operator]
        yield problem(number, f"{label}: one pass: {event['steps']} steps of batch {batch} a rank, one pass over "
                              f"{split.name}'s train split is ({split.train:,} // {ranks} ranks) // {batch} = "
                              f"{steps} by the table")  # fmt: skip
