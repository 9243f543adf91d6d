"""What physics and bookkeeping allow a run to claim: the verifier's time, physics, counts and configuration rules.

The recount and the score checks of :mod:`analysis.verify` prove that the
score follows from the log; they cannot tell a log a run wrote from one a
careful forger wrote, with every derived number recomputed by the package's
own code.  The rules here hold a log to what a real run cannot avoid —
times in order and inside their segments, one model at a time per group;
training rates under :data:`PEAK_MULTIPLE` × the measured peak; samples
that are steps × global batch and one pass over the counted splits; graphs
and data of the configured data set — each row's rule in full beside its
name in :data:`analysis.verify.registry.FAMILIES`.

Each row is a few plain functions of the run's finished units (:mod:`analysis.verify.units`), the row's text the
first one's docstring: every event of an open segment comes as a :class:`analysis.verify.units.Timed` snapshot of
what held when it came (the shared view's segment times, :class:`analysis.verify.view.SegmentTimes`: the segment's
previous time, the group as it was, the task's times; what the unit stream keeps of the log's order: the segment's
measured peaks and the closed ones' sums, the task's first samples, the data's shape and first data check, the graph
the view parsed for it read once) — a task's on its :class:`~analysis.verify.units.TaskUnit`, an event of a task not
open on its :class:`~analysis.verify.units.StrayEvent`, any other on a
:class:`~analysis.verify.units.SegmentEvent` of its own — and each row judges it alone (:func:`times`,
:func:`physics`, :func:`counts`, :func:`configuration` and their companions); a segment once closed gives the
physics row its groups without a peak (:func:`physics_closed`), the run the rows' summaries from their counts.  Each
problem is one line naming the event (its number in the log), the task and the rule, placed in the log's order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.epochs import rank_batches
from aiperf_mpi.results.rules import IMAGENET_SPLITS, VALID_SEARCH, VALID_TUNER, imagenet_split
from analysis.verify.units import (
    END,
    Finding,
    Findings,
    RunUnit,
    SegmentEvent,
    SegmentUnit,
    StrayEvent,
    TaskUnit,
    Timed,
    count,
    data_problem,
    is_int,
    missing,
    most,
    note,
    peak_sum,
    problem,
    summary,
)
from analysis.verify.view import event_label

PEAK_MULTIPLE = 2.0
"""an epoch's training rate may reach this multiple of its group's measured matmul peak, no more.  Bench
``layers`` (BENCHMARKS.md) measured ResNet-50's large convolutions at 1.11–1.42 × the probe on CPU
(Winograd and oneDNN's blocking do fewer multiplications than the analytic count); a whole training step,
with its batch normalisation, ReLUs and small convolutions, ran at 0.3–0.55 × the probe.  2.0 leaves room
for a probe that ran slow (a busy node) and for a device whose convolutions beat its GEMM by more, while an
edit that speeds a run up by more than 2 × the physics of its own machine is caught."""
CLOCK_SKEW_SECONDS = 1.0
"""allowed between a time a group's leader measured (an epoch's start and end, a monitor sample) and one the
master wrote (an event's ``time``): they may be two hosts' clocks.  NTP keeps a cluster's clocks within
milliseconds; a second is generous, and moves no score by more than a second of a segment."""
PHASE_TOLERANCE_SECONDS = 0.05
PHASE_TOLERANCE_RELATIVE = 0.005
"""an epoch's phases (timed by ``time.perf_counter``) may exceed its wall time (``time.time``, end − start) by
this much: two clocks, read at slightly different instants, that may drift apart by NTP's slew (≤ 0.05 %)"""
PHASES = ("data_wait", "compute", "evaluation", "compile")
"""the parts of an epoch's wall time the trainer times apart (``compile`` is optional)"""
COUNT_TOLERANCE = 1e-9
"""how far accuracy × validation samples may lie from a whole number in a log without ``correct`` counts: the
float division's rounding is below 1e-11 for 50,000 samples"""
SEED_SEARCH = "seed"
"""the search a proposal of the seed model (no parent) names"""


NUMBER_ERRORS = (ArithmeticError, ValueError)
"""what the times row names as a number it cannot compute with (the registry's, which imports this module)"""


def _events(unit: TaskUnit | StrayEvent) -> Iterable[Timed]:
    """A task's events of an open segment, or a stray event's, as the evidence rows judge them."""
    if isinstance(unit, TaskUnit):
        return unit.timed
    return () if unit.timed is None else (unit.timed,)


# ------------------------------------------------------------------------------------------------------ times


def times(task: TaskUnit) -> Findings:
    """within a segment event times never go backwards (monitor samples apart: they carry their leader's sampling
    time); an epoch ends after it starts, starts after its segment's `run_start` and its task's `model_proposed`, is
    logged (`time`) after its `end`, and its phases `data_wait + compute + evaluation + compile` fit in `end −
    start`; a group trains one model at a time: no `model_proposed` on a group whose previous task has not ended, no
    epoch starting before the group's previous epoch ended or its previous model's `model_done`/`model_failed`; a
    `model_done`/`model_failed`/`staging` is logged after what it reports ended; nothing claims a time after its
    segment's `run_stop`; a resumed segment starts after the last time the previous one claims (event times, epoch
    ends, monitor samples) and nothing in it claims a time before its `run_start`"""
    for timed in task.timed:
        yield from _times(timed)


def times_stray(stray: StrayEvent) -> Findings:
    """(times) an event of a task not open, as any other"""
    for timed in _events(stray):
        yield from _times(timed)


def times_segment(event: SegmentEvent) -> Findings:
    """(times) an event of no task, as any other"""
    yield from _times(event)


def times_counted(run: RunUnit, counted: Counter) -> Findings:
    """(times) the epochs judged"""
    yield summary(f"{counted['epochs']} epochs: inside their segments and after their proposals, logged after "
                  "they ended, phases within their wall time, one model at a time per group")  # fmt: skip


def _times(timed: Timed) -> list[Finding]:
    """The event's lines; a number the rule cannot compute with is named, not fatal (the log row refuses those it
    knows of), and ends its judging."""
    found: list[Finding] = []
    try:
        found.extend(_timed(timed))
    except NUMBER_ERRORS as exc:
        found.append(problem(timed.number, f"{event_label(timed.event, timed.number)}: numbers: {str(exc)[:80]}"))
    return found


def _timed(timed: Timed) -> Findings:
    event, at, name = timed.event, timed.number, timed.event[runlog.EVENT]
    time = event[runlog.TIME]
    if name == runlog.RUN_START:  # a segment after the first starts after everything the previous one claims
        previous = timed.closed
        if previous is not None and time < previous.latest_claim:
            yield problem(at, f"event {at} (run_start of segment {previous.record.number + 1}): resume: starts at "
                              f"{time:.3f}, before the last time segment {previous.record.number} claims "
                              f"({previous.latest_claim:.3f}, {previous.latest_claim_what})")  # fmt: skip
        return
    label, before = event_label(event, at), timed.before
    assert before is not None
    group = before.group
    if name != runlog.MONITOR:  # any event but a monitor sample: not before the segment's previous one
        if time < before.last_time:
            yield problem(at, f"{label}: order: time {time:.3f} is before the previous event's "
                              f"{before.last_time:.3f} (times never go backwards within a segment)")  # fmt: skip
        lost = group.lost if group is not None else ""
        if lost and name in (runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.MODEL_DONE, runlog.MODEL_FAILED):
            yield problem(at, f"{label}: lost group: group {event.get('group')} works after it was lost ({lost})")
    if name == runlog.MONITOR:
        if time < timed.start - CLOCK_SKEW_SECONDS:
            yield problem(at, f"{label}: inside segment: sampled at {time:.3f}, before its segment "
                              f"{timed.segment} started at {timed.start:.3f}")  # fmt: skip
    elif name == runlog.STAGING:
        start, seconds = event.get("start"), event["seconds"]
        if isinstance(start, int | float) and start + seconds > time + CLOCK_SKEW_SECONDS:
            yield problem(at, f"{label}: logged after: staging ended at {start + seconds:.3f}, logged at "
                              f"{time:.3f}")  # fmt: skip
    elif name == runlog.MODEL_PROPOSED:  # a proposal to a group still training its open task
        if before.training:
            yield problem(at, f"{label}: one model at a time: group {event['group']} is still training task "
                              f"{group.open_task if group is not None else None}")  # fmt: skip
    elif name == runlog.EPOCH:
        yield count("epochs")
        yield from _epoch_times(timed, label)
        if not event["end"] <= time + CLOCK_SKEW_SECONDS:
            yield problem(at, f"{label}: logged after: logged at {time:.3f}, before the epoch ended "
                              f"({event['end']:.3f})")  # fmt: skip
    elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED):
        task = timed.task
        if task is not None and task.last_end is not None and task.last_end > time + CLOCK_SKEW_SECONDS:
            yield problem(at, f"{label}: logged after: logged at {time:.3f}, before its last epoch ended "
                              f"({task.last_end:.3f})")  # fmt: skip
    elif name == runlog.GROUP_LOST:  # a group lost once, with the task it was training
        index, task = event["group"], event["task"]
        assert group is not None
        if group.lost:
            yield problem(at, f"{label}: lost group: group {index} was lost already ({group.lost})")
        if task is not None and task != group.open_task:
            yield problem(at, f"{label}: lost group: its task {task} is not the task group {index} was training "
                              f"({group.open_task})")  # fmt: skip
        yield note(at, f"segment {timed.segment}: group {index} lost at {time:.3f} ({event['reason']}); its task "
                       f"{task} discarded")  # fmt: skip
    elif name == runlog.RUN_STOP:
        assert timed.claim is not None
        claim, what = timed.claim
        if claim > time + CLOCK_SKEW_SECONDS:
            yield problem(at, f"{label}: inside segment: the segment ends at {time:.3f}, {what} claims "
                              f"{claim:.3f}")  # fmt: skip


def _epoch_times(timed: Timed, label: str) -> Findings:
    """An epoch inside its segment, after its proposal and the group's previous work (as it was before the
    event), its phases within its wall time."""
    event, at, task = timed.event, timed.number, timed.task
    group = timed.before.group if timed.before is not None else None
    assert group is not None
    start, end = event["start"], event["end"]
    if not start <= end:
        yield problem(at, f"{label}: wall time: ends at {end:.3f}, before its start {start:.3f}")
    if start < timed.start - CLOCK_SKEW_SECONDS:
        yield problem(at, f"{label}: inside segment: starts at {start:.3f}, before segment {timed.segment} started "
                          f"at {timed.start:.3f}")  # fmt: skip
    if task is not None and start < task.proposed - CLOCK_SKEW_SECONDS:
        yield problem(at, f"{label}: after proposal: starts at {start:.3f}, before its task was proposed at "
                          f"{task.proposed:.3f}")  # fmt: skip
    if group.last_epoch_end is not None and start < group.last_epoch_end:
        yield problem(at, f"{label}: one model at a time: starts at {start:.3f}, before the group's previous epoch "
                          f"({group.last_epoch}) ended at {group.last_epoch_end:.3f}")  # fmt: skip
    if group.model_end is not None and start < group.model_end - CLOCK_SKEW_SECONDS:
        yield problem(at, f"{label}: one model at a time: starts at {start:.3f}, before the group's previous model "
                          f"(task {group.model_ended}) ended at {group.model_end:.3f}")  # fmt: skip
    phases = {name: event.get(name, 0.0) for name in PHASES}
    negative = [name for name, value in phases.items() if not isinstance(value, int | float) or value < 0]
    if negative:
        yield problem(at, f"{label}: phases: {', '.join(negative)} not a non-negative number")
        return
    wall = end - start
    total = sum(phases.values())
    if total > wall * (1 + PHASE_TOLERANCE_RELATIVE) + PHASE_TOLERANCE_SECONDS:
        parts = " + ".join(f"{name} {value:.3f}" for name, value in phases.items())
        yield problem(at, f"{label}: phases: {parts} = {total:.3f} s, more than its wall time end − start = "
                          f"{wall:.3f} s")  # fmt: skip


# ------------------------------------------------------------------------------------------------------ physics


def physics(task: TaskUnit) -> Findings:
    """no epoch's training rate, `ops_train ÷ (compute + compile)`, exceeds `PEAK_MULTIPLE` = 2.0 × its group's
    measured peak (the segment's `peak` event for that group); no `score` exceeds the sum of the groups' peaks (of
    the segments so far, the largest); a group without a `peak` event (`--no-peak-probe`) is *not recorded*"""
    for timed in task.timed:
        yield from _physics(timed)


def physics_stray(stray: StrayEvent) -> Findings:
    """(physics) an epoch of a task not open, as any other"""
    for timed in _events(stray):
        yield from _physics(timed)


def physics_segment(event: SegmentEvent) -> Findings:
    """(physics) a peak, a score"""
    yield from _physics(event)


def physics_closed(segment: SegmentUnit) -> Findings:
    """(physics) at the end of a segment, a group with no peak is not recorded.

    A group lost before it logged anything (its leader hung before its first Ready, which carries the peak: the
    first-model deadline, issue 43) trained nothing whose rate a peak would bound: not a gap."""
    if segment.times is None:
        return
    for index, group in sorted(segment.times.groups.items()):
        if index not in segment.peak_rates and not (group.lost and group.last_epoch_end is None):
            yield missing(segment.closed_by, f"segment {segment.times.record.number} group {index}: no peak event "
                                             "(the probe was off): its epochs' rates and the score cannot be held "
                                             "to its machine")  # fmt: skip


def physics_counted(run: RunUnit, counted: Counter) -> Findings:
    """(physics) the rates and scores bounded"""
    rates = counted["rates"]
    ratio = f"highest {counted['ratio']:.2f} ×" if rates else "none"
    yield summary(f"{rates} epoch rates ≤ {PEAK_MULTIPLE} × their group's peak ({ratio}), {counted['scores']} "
                  "score(s) ≤ the sum of the peaks")  # fmt: skip


def _physics(timed: Timed) -> Findings:
    event, at, name = timed.event, timed.number, timed.event[runlog.EVENT]
    if name == runlog.PEAK:
        label = event_label(event, at)
        if not timed.in_layout:
            yield problem(at, f"{label}: peak: group {event['group']} is not in its segment's layout")
        elif not event["ops_per_second"] > 0:
            yield problem(at, f"{label}: peak: {event['ops_per_second']} ops/s is not a measurement")
    elif name == runlog.EPOCH:
        yield from _epoch_rate(timed)
    elif name == runlog.SCORE:
        assert timed.peaks is not None
        peaks = peak_sum(timed.groups, timed.layout, timed.peaks)
        sums = [*timed.peak_sums, *([] if peaks is None else [peaks])]
        if any(index not in timed.peaks for index in timed.groups) or not sums:
            return  # not recorded: said per group when the segment closes
        yield count("scores")
        if event["score"] > max(sums):
            yield problem(at, f"{event_label(event, at)}: score: {event['score'] / 1e9:.4g} G ops/s is more than the "
                              f"sum of the groups' measured peaks ({max(sums) / 1e9:.4g} G ops/s)")  # fmt: skip


def _epoch_rate(timed: Timed) -> Findings:
    """ops_train ÷ the seconds that trained: compute, and compile (the steps that traced are timed there)."""
    event, peak = timed.event, timed.peak
    if peak is None:
        return  # not recorded: said once per group at the segment's end
    label = event_label(event, timed.number)
    seconds = event["compute"] + event.get("compile", 0.0)
    ops = event["ops_train"]
    if ops > 0 and not seconds > 0:
        yield problem(timed.number, f"{label}: training rate: {ops:,} operations in {seconds} s")
        return
    if ops <= 0:
        return
    ratio = ops / seconds / peak
    yield count("rates")
    yield most("ratio", ratio)
    if ratio > PEAK_MULTIPLE:
        yield problem(timed.number, f"{label}: training rate: {ops / seconds / 1e9:.4g} G ops/s (ops_train ÷ "
                                    f"compute + compile) is {ratio:.2f} × group {event['group']}'s measured peak "
                                    f"{peak / 1e9:.4g} G ops/s (at most {PEAK_MULTIPLE})")  # fmt: skip


# ------------------------------------------------------------------------------------------------------ counts


def counts(task: TaskUnit) -> Findings:
    """an epoch's `train_samples` = `steps` × global batch (`batch_size` × its group's ranks), and `train_samples`
    and `validation_samples` are the same in every epoch of a model; each epoch is one whole pass over the splits
    the data check counted (`run_start`'s `data`): exactly the pipeline's `(train // ranks) // batch` steps a rank,
    so never more samples than the train split and never fewer than a pass, and `validation_samples` equal to the
    validation split (every rank validates its share); `correct` is an integer in [0, `validation_samples`] and
    `val_accuracy` = `correct / validation_samples` exactly, as the float division gives it (a log without
    `correct`: accuracy × validation samples within 1e-9 of a whole number, in [0, 1]); no epoch number above the
    configuration's `max_epochs`; each layout group's `horovod_size` is the length of its `ranks`, and its `peak`
    was measured by that many ranks; a `run_start` without `data` or epochs without `correct` are *not recorded*"""
    for timed in task.timed:
        yield from _counts(timed)


def counts_stray(stray: StrayEvent) -> Findings:
    """(counts) an epoch of a task not open, as any other"""
    for timed in _events(stray):
        yield from _counts(timed)


def counts_segment(event: SegmentEvent) -> Findings:
    """(counts) a segment's data check, a layout, a peak"""
    yield from _counts(event)


def counts_counted(run: RunUnit, counted: Counter) -> Findings:
    """(counts) the configuration's max_epochs, the epochs without a correct count"""
    yield summary("samples = steps × global batch, the same each epoch, within the counted splits; accuracy = "
                  "correct ÷ validation samples; ≤ max_epochs; Horovod sizes = ranks")  # fmt: skip
    if "max_epochs" not in (run.model.config or {}):
        yield missing(END, "the configuration has no max_epochs")
    if counted["uncounted"]:
        yield missing(END, f"{counted['uncounted']} of {counted['epochs']} epochs have no correct count (a log older "
                           "than the field): their accuracy is held to a whole number of their validation samples "
                           "only")  # fmt: skip


def _counts(timed: Timed) -> Findings:
    event, at, name = timed.event, timed.number, timed.event[runlog.EVENT]
    if name == runlog.RUN_START:  # a segment's data check's counts: none is not recorded
        if event.get("data") is None:
            yield missing(at, f"event {at} (run_start of segment {timed.segment}): no data check counts (a log older "
                              "than the field): its epochs' samples cannot be held to the splits")  # fmt: skip
    elif name == runlog.LAYOUT:
        yield from _layout_groups(event, at, event_label(event, at))
    elif name == runlog.PEAK:
        size = timed.group_size
        if timed.in_layout and size is not None and event["ranks"] != size:
            yield problem(at, f"{event_label(event, at)}: peak ranks: measured by {event['ranks']} ranks, group "
                              f"{event['group']} has {size}")  # fmt: skip
    elif name == runlog.EPOCH:
        yield count("epochs")
        yield from _epoch_counts(timed, event_label(event, at))


def _layout_groups(event: dict, at: int, label: str) -> Findings:
    """Each layout group has an index and a non-empty list of ranks (the others named; the view keeps the sizes of
    those that have both, :func:`analysis.verify.view.layout_sizes`), its ``horovod_size`` their number."""
    for group in event["groups"]:
        if not isinstance(group, dict) or not isinstance(group.get("index"), int):
            yield problem(at, f"{label}: layout: a group without an index: {str(group)[:80]}")
            continue
        ranks = group.get("ranks")
        if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) for r in ranks):
            yield problem(at, f"{label}: horovod size: group {group['index']} has no list of ranks")
            continue
        size = group.get("horovod_size", len(ranks))
        if size != len(ranks):
            yield problem(at, f"{label}: horovod size: group {group['index']} says horovod_size {size}, its list of "
                              f"ranks has {len(ranks)}")  # fmt: skip


def _epoch_counts(timed: Timed, label: str) -> Findings:
    event, at, task = timed.event, timed.number, timed.task
    size = timed.before.group.size if timed.before is not None and timed.before.group is not None else None
    limit = timed.config.get("max_epochs")
    if isinstance(limit, int) and event["epoch"] > limit:
        yield problem(at, f"{label}: max epochs: epoch {event['epoch']} of a run whose max_epochs is {limit}")
    yield from _accuracy(event, at, label)
    yield from _splits(timed, label, size)
    if task is None:
        return
    samples, first = (event["train_samples"], event["validation_samples"]), timed.samples
    if first is not None and samples != first:
        yield problem(at, f"{label}: same samples: {samples[0]} train and {samples[1]} validation samples, its "
                          f"model's first epoch had {first[0]} and {first[1]}")  # fmt: skip
    if is_int(task.batch) and size is not None:
        global_batch = task.batch * size
        if event["train_samples"] != event["steps"] * global_batch:
            yield problem(at, f"{label}: samples: {event['train_samples']} train samples, not steps {event['steps']}"
                              f" × global batch {global_batch} (batch size {task.batch} × {size} ranks)")  # fmt: skip


def _accuracy(event: dict, at: int, label: str) -> Findings:
    """An accuracy is a count of correct predictions over the validation samples, the trainer's division."""
    accuracy, validated, correct = event["val_accuracy"], event["validation_samples"], event.get("correct")
    if correct is None:
        yield count("uncounted")
        count_ = accuracy * validated
        if not (0 <= accuracy <= 1 and math.isfinite(count_) and abs(count_ - round(count_)) <= COUNT_TOLERANCE):
            yield problem(at, f"{label}: accuracy: val_accuracy {accuracy!r} × {validated} validation samples is not "
                              f"a count of correct predictions in [0, {validated}]")  # fmt: skip
        return
    if not 0 <= correct <= validated:
        yield problem(at, f"{label}: accuracy: correct {correct} is not in [0, validation_samples {validated}]")
    elif accuracy != correct / max(validated, 1):
        yield problem(at, f"{label}: accuracy: val_accuracy {accuracy!r} is not correct {correct} / "
                          f"validation_samples {validated} = {correct / max(validated, 1)!r}")  # fmt: skip


def _splits(timed: Timed, label: str, size: int | None) -> Findings:
    """The samples the data check counted: an epoch is one pass, ``(train // ranks) // batch`` steps a rank (the
    pipeline drops the remainder), and validates the whole validation split."""
    event, at, task, data = timed.event, timed.number, timed.task, timed.data
    if data is None or data_problem(data):
        return  # not recorded: said once per segment (the configuration row names one not well formed)
    assert isinstance(data, Mapping)
    train, validation = data["train"], data["validation"]
    if event["train_samples"] > train:
        yield problem(at, f"{label}: split: {event['train_samples']} train samples, the train split holds {train} "
                          "(as the data check counted it)")  # fmt: skip
    elif task is not None and is_int(task.batch) and size and task.batch == 0:  # its own row (2026.12-7)
        yield problem(at, f"{label}: split: batch size 0 a rank: no number of steps is one pass over the train split"
                          f" ({train} samples)")  # fmt: skip
    elif task is not None and is_int(task.batch) and size:
        steps = rank_batches(train, size, task.batch)
        if event["steps"] != steps:  # a logged epoch is one whole pass: never fewer steps
            yield problem(at, f"{label}: split: {event['steps']} steps of batch size {task.batch} a rank, where one "
                              f"pass over the train split is ({train} // {size} ranks) // {task.batch} = {steps} "
                              "steps (as the data check counted it)")  # fmt: skip
    if event["validation_samples"] != validation:  # every rank validates its share: the group, the whole split
        yield problem(at, f"{label}: split: {event['validation_samples']} validation samples, the validation split "
                          f"holds {validation} (as the data check counted it) and each epoch validates all of "
                          "it")  # fmt: skip


# ------------------------------------------------------------------------------------------------ configuration


def configuration(task: TaskUnit) -> Findings:
    """every graph's input node is the configured data set's image (digits and CIFAR-10 32×32×3, ImageNet
    `image_size` or 224 ×3, synthetic `image_size` or 32 ×3; hdf5: the data check's, or the first graph's, in every
    graph) and its output has its classes (10; ImageNet 1,000); the data check read the configured data set, and its
    image shape and classes are those; every segment's data check counted the same; the precision the `system` event
    chose (under `--precision auto`) is the configured one; each `model_proposed` names the `search` and `tuner`
    that produced it in its `search` object: the configured `search` (`seed` for a proposal without a parent) and
    `hpo`, which the rule `algorithms` judges (proposals without the names are *not recorded*)"""
    for timed in task.timed:
        yield from _configuration(timed)


def configuration_stray(stray: StrayEvent) -> Findings:
    """(configuration) a proposal of a task not open, as any other"""
    for timed in _events(stray):
        yield from _configuration(timed)


def configuration_segment(event: SegmentEvent) -> Findings:
    """(configuration) a segment's data check, a system event's precision"""
    yield from _configuration(event)


def configuration_counted(run: RunUnit, counted: Counter) -> Findings:
    """(configuration) the graphs judged, the proposals that name no search and tuner"""
    shape, whence = run.data_shape if run.data_shape is not None else (None, "")
    proposals, unnamed = counted["proposals"], counted["unnamed"]
    yield summary(f"{counted['graphs']} graphs against {whence or 'the data'} "
                  f"({'unknown' if shape is None else images(shape)}); {proposals - unnamed} proposals' search and "
                  "tuner as configured")  # fmt: skip
    if unnamed:
        yield missing(END, f"{unnamed} of {proposals} model_proposed events name no search and tuner (a log older "
                           "than the field)")  # fmt: skip


def _configuration(timed: Timed) -> Findings:
    event, at, name = timed.event, timed.number, timed.event[runlog.EVENT]
    graph = timed.graph
    if graph is not None:  # the graph the view parsed for the event, held to the data's shape
        if graph.found is None:
            yield problem(at, f"task {graph.task}: {graph.place}: input/output: {graph.error}")
        else:
            yield count("graphs")
            yield from _same_shape(at, graph.found, timed.shape, f"task {graph.task}: data shape: {graph.place} "
                                                                 "takes")  # fmt: skip
    if name == runlog.RUN_START:
        yield from _data_check(timed)
    elif name == runlog.SYSTEM:
        chosen = event.get("precision")
        chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
        configured = timed.config.get("precision")
        if chosen is not None and chosen != configured:
            yield problem(at, f"{event_label(event, at)}: precision: the system event chose {chosen!r}, the "
                              f"configuration says {configured!r}")  # fmt: skip
    elif name == runlog.MODEL_PROPOSED:
        yield from _algorithms(timed)


def _data_check(timed: Timed) -> Iterator[Finding]:
    """A segment's data check: well formed, the same in every segment, of the configured data set, its images and
    classes."""
    event, at = timed.event, timed.number
    data, label = event.get("data"), f"event {at} (run_start of segment {timed.segment})"
    if data is None:
        return
    wrong = data_problem(data)
    if wrong:
        yield problem(at, f"{label}: data check: {wrong}")
        return
    first = timed.first_data if timed.first_data is not None else data
    if data != first:
        yield problem(at, f"{label}: data check: {split_counts(data)}, the first segment counted "
                          f"{split_counts(first)} (a resume runs on the same data)")  # fmt: skip
    configured = timed.config.get("dataset")
    if data["dataset"] != configured:
        yield problem(at, f"{label}: data check: it read {data['dataset']!r}, the configuration says "
                          f"{configured!r}")  # fmt: skip
    yield from _same_shape(at, (*data["image_shape"], data["classes"]), timed.shape,
                           f"{label}: data shape: the data check found")  # fmt: skip
    if configured == "imagenet" and imagenet_split(data) is None and data is first:
        yield note(at, f"imagenet of {split_counts(data)}: not the {' or '.join(IMAGENET_SPLITS)} split, an "
                       "unofficial run (rule dataset)")  # fmt: skip


def _same_shape(at: int, found: tuple, shape: tuple[tuple, str] | None, what: str) -> Findings:
    """Every graph's and data check's shape the same: the data set's, else (hdf5: the file says its own) the first
    one found, the data check's or a graph's (None: this one is the first)."""
    if shape is not None and found != shape[0]:
        yield problem(at, f"{what} {images(found)}, {shape[1]} has {images(shape[0])}")


def _algorithms(timed: Timed) -> Findings:
    """The search and the tuner the proposal names: the configured ones (the seed's search: ``seed``)."""
    event, config = timed.event, timed.config
    yield count("proposals")
    info = event["search"]
    if "search" not in info and "tuner" not in info:
        yield count("unnamed")  # not recorded: said once at the end
        return
    search, tuner = config.get("search", VALID_SEARCH), config.get("hpo", VALID_TUNER)
    expected = (SEED_SEARCH if event["parent"] is None else search, tuner)
    named = (info.get("search"), info.get("tuner"))
    if named != expected:
        yield problem(timed.number, f"{event_label(event, timed.number)}: algorithms: produced by search "
                                    f"{named[0]!r} and tuner {named[1]!r}, the configuration (rule algorithms: "
                                    f"{search}+{tuner}) needs {expected[0]!r} and {expected[1]!r}")  # fmt: skip


def split_counts(data: Mapping) -> str:
    """'1281167 train, 50000 validation, 1000 classes': a data check's counts (the data family's, unchecked)"""
    return f"{data.get('train')} train, {data.get('validation')} validation, {data.get('classes')} classes"


def images(shape: tuple) -> str:
    """'224×224×3 images to 1000 classes'"""
    return f"{shape[0]}×{shape[1]}×{shape[2]} images to {shape[3]} classes"
