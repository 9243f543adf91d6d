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

Each row is one :class:`analysis.verify.registry.Rule` of the ``evidence`` family: :class:`TimesRule` (no state
of its own but its epoch count), :class:`PhysicsRule` (the peaks it measured), :class:`CountsRule` (the open
segment's data check, each open task's first samples) and :class:`ConfigurationRule` (the data set's shape, the
first data check, the graphs found clean).  The run facts they read (the open segment, its groups, its open tasks,
and what held before the event) are the shared view's (:class:`analysis.verify.view.SegmentTimes`); each is fed
the events its entry names, once each, in log order, and judges those of an open segment only
(:class:`SegmentRule`): the walk stays linear in the log and streamed.  Each problem is one line naming the event
(its number in the log), the task and the rule.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiperf_mpi.graph.model import GraphError, infer_shapes, input_node, output_node
from aiperf_mpi.results import runlog
from aiperf_mpi.results.datasets import image_shape
from aiperf_mpi.results.epochs import rank_batches
from aiperf_mpi.results.rules import IMAGENET_SPLITS, VALID_SEARCH, VALID_TUNER, imagenet_split
from analysis.checks import Check, Run
from analysis.verify.view import (
    COUNT_CACHE,
    Before,
    GroupTimes,
    RunView,
    SegmentTimes,
    TaskTimes,
    event_label,
)

if TYPE_CHECKING:
    import networkx as nx


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


class SegmentRule:
    """What the evidence rules share: each judges the events of an open segment only (a ``run_start`` may open one;
    the shared view says whether it did), its problem lines naming the event by its label."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.label = ""
        """the event being judged, as its problem lines name it"""

    @property
    def view(self) -> RunView:
        return self.run.view

    def each(self, event: dict, number: int) -> bool:
        if event[runlog.EVENT] == runlog.RUN_START:
            return True
        if self.view.timed is None:
            return False
        self.label = event_label(event, number)
        return True


class TimesRule(SegmentRule):
    """The times row: times in order and inside their segments, after their proposals, logged after they ended, one
    model at a time per group, no work of a lost group.  It reads the open segment, group and task the family gives
    it (before the family records the event in them) and keeps no state of its own."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.check = Check("times")
        self.epochs = 0

    def each(self, event: dict, number: int) -> bool:
        """Every event, before its own rule: times never go backwards within a segment (monitor samples apart:
        they carry the leader's sampling time), and a lost group does no more work."""
        if not super().each(event, number):
            return False
        if event[runlog.EVENT] not in (runlog.RUN_START, runlog.MONITOR):
            self.ordered(event, self.label, self.view)
        return True

    def unreadable(self, exc: ArithmeticError | ValueError, event: dict, number: int) -> None:
        """A number the rule cannot compute with: named, not fatal (the log row refuses those it knows of)."""
        self.check.problems.append(f"{event_label(event, number)}: numbers: {str(exc)[:80]}")

    def run_start(self, event: dict, number: int) -> None:
        if self.view.opened and self.view.closed is not None:
            self.resumed(event[runlog.TIME], number, self.view.closed)

    def monitor(self, event: dict, _: int) -> None:
        self.sampled(event[runlog.TIME], self.label, self.view.timed)

    def staging(self, event: dict, _: int) -> None:
        self.staged(event, self.label)

    def model_proposed(self, event: dict, _: int) -> None:
        self.proposed(self.label, event["group"], self.view.before)

    def epoch(self, event: dict, _: int) -> None:
        self.epochs += 1
        self.epoch_times(event, self.label, self.view.timed, self.view.timed_task, self.view.before.group)
        self.epoch_logged(event, self.label)

    def model_done(self, event: dict, _: int) -> None:
        self.ended_after(event[runlog.TIME], self.label, self.view.timed_task)

    model_failed = model_done

    def group_lost(self, event: dict, _: int) -> None:
        self.lost(event, self.label, self.view.timed, self.view.before.group)

    def run_stop(self, event: dict, _: int) -> None:
        self.stopped(event, self.label, self.view.timed)

    def ordered(self, event: dict, label: str, view: RunView) -> None:
        """Any event but a monitor sample: its time not before the segment's previous one, and no work of a group
        lost."""
        name, time, previous = event[runlog.EVENT], event[runlog.TIME], view.before.last_time
        if time < previous:
            self.check.problems.append(f"{label}: order: time {time:.3f} is before the previous event's "
                                       f"{previous:.3f} (times never go backwards within a segment)")
        index, groups = event.get("group"), view.timed.groups
        lost = groups[index].lost if index in groups else ""
        if lost and name in (runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self.check.problems.append(f"{label}: lost group: group {index} works after it was lost ({lost})")

    def sampled(self, time: float, label: str, segment: SegmentTimes) -> None:
        if time < segment.record.start - CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: inside segment: sampled at {time:.3f}, before its segment "
                                       f"{segment.record.number} started at {segment.record.start:.3f}")

    def resumed(self, time: float, number: int, previous: SegmentTimes) -> None:
        """A segment after the first starts after everything the previous one claims."""
        if time < previous.latest_claim:
            self.check.problems.append(f"event {number} (run_start of segment {previous.record.number + 1}): "
                                       f"resume: starts at {time:.3f}, before the last time segment "
                                       f"{previous.record.number} claims ({previous.latest_claim:.3f}, "
                                       f"{previous.latest_claim_what})")  # fmt: skip

    def staged(self, event: dict, label: str) -> None:
        start, seconds = event.get("start"), event["seconds"]
        if isinstance(start, int | float) and start + seconds > event[runlog.TIME] + CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: logged after: staging ended at {start + seconds:.3f}, logged "
                                       f"at {event[runlog.TIME]:.3f}")  # fmt: skip

    def proposed(self, label: str, index: int, before: Before) -> None:
        """A proposal to a group still training its open task (one the view still held open)."""
        if before.training:
            self.check.problems.append(f"{label}: one model at a time: group {index} is still training task "
                                       f"{before.group.open_task}")  # fmt: skip

    def epoch_times(self, event: dict, label: str, segment: SegmentTimes, task: TaskTimes | None,
                    group: GroupTimes) -> None:  # fmt: skip
        """An epoch inside its segment, after its proposal and the group's previous work (``group``: as it was before
        the event), its phases within its wall time."""
        start, end = event["start"], event["end"]
        if not start <= end:
            self.check.problems.append(f"{label}: wall time: ends at {end:.3f}, before its start {start:.3f}")
        if start < segment.record.start - CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: inside segment: starts at {start:.3f}, before segment "
                                       f"{segment.record.number} started at {segment.record.start:.3f}")
        if task is not None and start < task.proposed - CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: after proposal: starts at {start:.3f}, before its task was "
                                       f"proposed at {task.proposed:.3f}")  # fmt: skip
        if group.last_epoch_end is not None and start < group.last_epoch_end:
            self.check.problems.append(f"{label}: one model at a time: starts at {start:.3f}, before the "
                                       f"group's previous epoch ({group.last_epoch}) ended at "
                                       f"{group.last_epoch_end:.3f}")  # fmt: skip
        if group.model_end is not None and start < group.model_end - CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: one model at a time: starts at {start:.3f}, before the "
                                       f"group's previous model (task {group.model_ended}) ended at "
                                       f"{group.model_end:.3f}")  # fmt: skip
        phases = {name: event.get(name, 0.0) for name in PHASES}
        negative = [name for name, value in phases.items() if not isinstance(value, int | float) or value < 0]
        if negative:
            self.check.problems.append(f"{label}: phases: {', '.join(negative)} not a non-negative number")
            return
        wall = end - start
        total = sum(phases.values())
        if total > wall * (1 + PHASE_TOLERANCE_RELATIVE) + PHASE_TOLERANCE_SECONDS:
            parts = " + ".join(f"{name} {value:.3f}" for name, value in phases.items())
            self.check.problems.append(f"{label}: phases: {parts} = {total:.3f} s, more than its wall time "
                                       f"end − start = {wall:.3f} s")  # fmt: skip

    def epoch_logged(self, event: dict, label: str) -> None:
        end, time = event["end"], event[runlog.TIME]
        if not end <= time + CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: logged after: logged at {time:.3f}, before the epoch ended "
                                       f"({end:.3f})")  # fmt: skip

    def ended_after(self, time: float, label: str, task: TaskTimes | None) -> None:
        if task is not None and task.last_end is not None and task.last_end > time + CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: logged after: logged at {time:.3f}, before its last epoch "
                                       f"ended ({task.last_end:.3f})")  # fmt: skip

    def lost(self, event: dict, label: str, segment: SegmentTimes, group: GroupTimes) -> None:
        """A group lost once, with the task it was training (``group``: as it was before the event)."""
        index, task = event["group"], event["task"]
        if group.lost:
            self.check.problems.append(f"{label}: lost group: group {index} was lost already ({group.lost})")
        if task is not None and task != group.open_task:
            self.check.problems.append(f"{label}: lost group: its task {task} is not the task group {index} was "
                                       f"training ({group.open_task})")  # fmt: skip
        self.check.notes.append(f"segment {segment.record.number}: group {index} lost at {event[runlog.TIME]:.3f} "
                                f"({event['reason']}); its task {task} discarded")  # fmt: skip

    def stopped(self, event: dict, label: str, segment: SegmentTimes) -> None:
        if segment.latest_claim > event[runlog.TIME] + CLOCK_SKEW_SECONDS:
            self.check.problems.append(f"{label}: inside segment: the segment ends at {event[runlog.TIME]:.3f}, "
                                       f"{segment.latest_claim_what} claims {segment.latest_claim:.3f}")

    def finish(self) -> list[Check]:
        self.check.summary = (f"{self.epochs} epochs: inside their segments and after their proposals, logged after "
                              "they ended, phases within their wall time, one model at a time per group")
        return [self.check]


class CountsRule(SegmentRule):
    """The counts row: samples, steps, accuracy and the splits of each epoch, the layout's Horovod sizes and the
    peaks' ranks.  It reads the run's model (the configuration), the open segment's group and task the family
    gives it, and its own state only."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.check = Check("counts")
        self.epochs = 0
        self.data: Mapping | None = None
        """the open segment's data check (its run_start's ``data``) when well formed; None when not recorded"""
        self.uncounted = 0
        """epochs without a ``correct`` count"""
        self.samples: dict[object, tuple[int, int]] = {}
        """each open task (as the family keeps them) → the (train, validation) samples of its first epoch"""

    def run_start(self, event: dict, number: int) -> None:
        """A segment opened (a previous one's open tasks were discarded with it); its data check's counts: none is
        not recorded; the epochs are held to them when well formed (the configuration row names them if not)."""
        view = self.view
        if not view.opened:
            return
        if view.closed is not None:
            self.samples.clear()
        data, self.data = event.get("data"), None
        if data is None:
            self.no_data(f"event {number} (run_start of segment {view.timed.record.number})")
        elif not _data_problem(data):
            self.data = data

    def layout(self, event: dict, _: int) -> None:
        self.layout_groups(event, self.label)

    def peak(self, event: dict, _: int) -> None:
        group = self.view.timed.groups.get(event["group"])
        if group is not None:
            self.peak_ranks(event, self.label, group.size)

    def model_proposed(self, event: dict, _: int) -> None:
        self.ended(event["task"])  # a proposal again: its samples are its new first epoch's

    def epoch(self, event: dict, _: int) -> None:
        self.epochs += 1
        self.epoch_counts(event, self.label, self.view.timed_task, self.view.timed.groups[event["group"]])

    def model_done(self, event: dict, _: int) -> None:
        self.ended(event["task"])

    model_failed = group_lost = model_done

    def ended(self, task: object) -> None:
        """A task's model ended (or it was proposed again): its first epoch's samples are forgotten."""
        self.samples.pop(task, None)

    def no_data(self, label: str) -> None:
        self.check.missing.append(f"{label}: no data check counts (a log older than the field): its epochs' "
                                  "samples cannot be held to the splits")  # fmt: skip

    def layout_groups(self, event: dict, label: str) -> None:
        """Each layout group has an index and a non-empty list of ranks (the others named; the view keeps the sizes
        of those that have both, :func:`analysis.verify.view.layout_sizes`), its ``horovod_size`` their number."""
        for group in event["groups"]:
            if not isinstance(group, dict) or not isinstance(group.get("index"), int):
                self.check.problems.append(f"{label}: layout: a group without an index: {str(group)[:80]}")
                continue
            ranks = group.get("ranks")
            if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) for r in ranks):
                self.check.problems.append(f"{label}: horovod size: group {group['index']} has no list of ranks")
                continue
            size = group.get("horovod_size", len(ranks))
            if size != len(ranks):
                self.check.problems.append(f"{label}: horovod size: group {group['index']} says horovod_size "
                                           f"{size}, its list of ranks has {len(ranks)}")  # fmt: skip

    def peak_ranks(self, event: dict, label: str, size: int | None) -> None:
        if size is not None and event["ranks"] != size:
            self.check.problems.append(f"{label}: peak ranks: measured by {event['ranks']} ranks, group "
                                       f"{event['group']} has {size}")  # fmt: skip

    def epoch_counts(self, event: dict, label: str, task: TaskTimes | None, group: GroupTimes) -> None:
        limit = run_config(self.run).get("max_epochs")
        if isinstance(limit, int) and event["epoch"] > limit:
            self.check.problems.append(f"{label}: max epochs: epoch {event['epoch']} of a run whose max_epochs "
                                       f"is {limit}")  # fmt: skip
        self._accuracy(event, label)
        self._splits(event, label, task, group)
        if task is None:
            return
        samples, first = (event["train_samples"], event["validation_samples"]), self.samples.get(event["task"])
        if first is None:
            self.samples[event["task"]] = samples
        elif samples != first:
            self.check.problems.append(f"{label}: same samples: {samples[0]} train and {samples[1]} validation "
                                       f"samples, its model's first epoch had {first[0]} and {first[1]}")
        if is_int(task.batch) and group.size is not None:
            global_batch = task.batch * group.size
            if event["train_samples"] != event["steps"] * global_batch:
                self.check.problems.append(f"{label}: samples: {event['train_samples']} train samples, not steps "
                                           f"{event['steps']} × global batch {global_batch} (batch size "
                                           f"{task.batch} × {group.size} ranks)")  # fmt: skip

    def _accuracy(self, event: dict, label: str) -> None:
        """An accuracy is a count of correct predictions over the validation samples, the trainer's division."""
        accuracy, validated, correct = event["val_accuracy"], event["validation_samples"], event.get("correct")
        if correct is None:
            self.uncounted += 1
            count = accuracy * validated
            if not (0 <= accuracy <= 1 and math.isfinite(count) and abs(count - round(count)) <= COUNT_TOLERANCE):
                self.check.problems.append(f"{label}: accuracy: val_accuracy {accuracy!r} × {validated} validation "
                                           f"samples is not a count of correct predictions in [0, {validated}]")
            return
        if not 0 <= correct <= validated:
            self.check.problems.append(f"{label}: accuracy: correct {correct} is not in [0, validation_samples "
                                       f"{validated}]")  # fmt: skip
        elif accuracy != correct / max(validated, 1):
            self.check.problems.append(f"{label}: accuracy: val_accuracy {accuracy!r} is not correct {correct} / "
                                       f"validation_samples {validated} = {correct / max(validated, 1)!r}")

    def _splits(self, event: dict, label: str, task: TaskTimes | None, group: GroupTimes) -> None:
        """The samples the data check counted: an epoch is one pass, ``(train // ranks) // batch`` steps a rank
        (the pipeline drops the remainder), and validates the whole validation split."""
        data = self.data
        if data is None:
            return  # not recorded: said once per segment
        train, validation = data["train"], data["validation"]
        if event["train_samples"] > train:
            self.check.problems.append(f"{label}: split: {event['train_samples']} train samples, the train split "
                                       f"holds {train} (as the data check counted it)")  # fmt: skip
        elif task is not None and is_int(task.batch) and group.size and task.batch == 0:  # its own row (2026.12-7)
            self.check.problems.append(f"{label}: split: batch size 0 a rank: no number of steps is one pass over "
                                       f"the train split ({train} samples)")  # fmt: skip
        elif task is not None and is_int(task.batch) and group.size:
            steps = rank_batches(train, group.size, task.batch)
            if event["steps"] != steps:  # a logged epoch is one whole pass: never fewer steps
                self.check.problems.append(f"{label}: split: {event['steps']} steps of batch size {task.batch} a "
                                           f"rank, where one pass over the train split is ({train} // "
                                           f"{group.size} ranks) // {task.batch} = {steps} steps "
                                           "(as the data check counted it)")  # fmt: skip
        if event["validation_samples"] != validation:  # every rank validates its share: the group, the whole split
            self.check.problems.append(f"{label}: split: {event['validation_samples']} validation samples, the "
                                       f"validation split holds {validation} (as the data check counted it) and "
                                       "each epoch validates all of it")  # fmt: skip

    def finish(self) -> list[Check]:
        epochs = self.epochs
        self.check.summary = ("samples = steps × global batch, the same each epoch, within the counted splits; "
                              "accuracy = correct ÷ validation samples; ≤ max_epochs; Horovod sizes = ranks")
        if "max_epochs" not in run_config(self.run):
            self.check.missing.append("the configuration has no max_epochs")
        if self.uncounted:
            self.check.missing.append(f"{self.uncounted} of {epochs} epochs have no correct count (a log older "
                                      "than the field): their accuracy is held to a whole number of their "
                                      "validation samples only")  # fmt: skip
        return [self.check]


class PhysicsRule(SegmentRule):
    """The physics row: each epoch's training rate and each score against the groups' measured peaks.  It reads
    the open segment the family gives it (its groups, its record) and its own state only: the peaks measured."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.check = Check("physics")
        self.peaks: dict[int, float] = {}
        """the open segment's groups' measured peaks (a group unprobed has none)"""
        self.peak_sums: list[float] = []
        """each closed segment's sum of group peaks (a segment with a group unprobed adds none)"""
        self.rates = self.scores_bounded = 0
        self.max_rate_ratio = 0.0

    def run_start(self, event: dict, _: int) -> None:
        """A segment opens: the previous one closes; no group of the new one has a peak yet."""
        if not self.view.opened:
            return
        if self.view.closed is not None:
            self.close(self.view.closed)
        self.peaks = {}

    def peak(self, event: dict, _: int) -> None:
        if event["group"] not in self.view.timed.groups:
            self.not_in_layout(event, self.label)
        else:
            self.measured(event, self.label)

    def epoch(self, event: dict, _: int) -> None:
        self.epoch_rate(event, self.label)

    def score(self, event: dict, _: int) -> None:
        self.score_bounded(event, self.label, self.view.timed)

    def peak_sum(self, segment: SegmentTimes) -> float | None:
        """The sum of its groups' peaks; None when a group has none, or it has no layout or no group."""
        groups = segment.groups
        if segment.record.layout is None or not groups or any(index not in self.peaks for index in groups):
            return None
        return sum(self.peaks[index] for index in groups)

    def close(self, segment: SegmentTimes) -> None:
        """At the end of a segment: a group with no peak is not recorded; the segment's peak sum is kept.

        A group lost before it logged anything (its leader hung before its first Ready, which carries the peak:
        the first-model deadline, issue 43) trained nothing whose rate a peak would bound: not a gap."""
        for index, group in sorted(segment.groups.items()):
            if index not in self.peaks and not (group.lost and group.last_epoch_end is None):
                self.check.missing.append(f"segment {segment.record.number} group {index}: no peak event (the "
                                          "probe was off): its epochs' rates and the score cannot be held to its "
                                          "machine")  # fmt: skip
        if (peaks := self.peak_sum(segment)) is not None:
            self.peak_sums.append(peaks)

    def not_in_layout(self, event: dict, label: str) -> None:
        self.check.problems.append(f"{label}: peak: group {event['group']} is not in its segment's layout")

    def measured(self, event: dict, label: str) -> None:
        """A peak event of a group of the layout: a measurement, the group's peak."""
        rate = event["ops_per_second"]
        if not rate > 0:
            self.check.problems.append(f"{label}: peak: {rate} ops/s is not a measurement")
            return
        self.peaks[event["group"]] = float(rate)

    def epoch_rate(self, event: dict, label: str) -> None:
        """ops_train ÷ the seconds that trained: compute, and compile (the steps that traced are timed there)."""
        peak = self.peaks.get(event["group"])
        if peak is None:
            return  # not recorded: said once per group at the segment's end
        seconds = event["compute"] + event.get("compile", 0.0)
        ops = event["ops_train"]
        if ops > 0 and not seconds > 0:
            self.check.problems.append(f"{label}: training rate: {ops:,} operations in {seconds} s")
            return
        if ops <= 0:
            return
        self.rates += 1
        ratio = ops / seconds / peak
        self.max_rate_ratio = max(self.max_rate_ratio, ratio)
        if ratio > PEAK_MULTIPLE:
            self.check.problems.append(f"{label}: training rate: {ops / seconds / 1e9:.4g} G ops/s "
                                       f"(ops_train ÷ compute + compile) is {ratio:.2f} × group "
                                       f"{event['group']}'s measured peak {peak / 1e9:.4g} G ops/s "
                                       f"(at most {PEAK_MULTIPLE})")  # fmt: skip

    def score_bounded(self, event: dict, label: str, segment: SegmentTimes) -> None:
        peaks = self.peak_sum(segment)
        sums = [*self.peak_sums, *([] if peaks is None else [peaks])]
        if any(index not in self.peaks for index in segment.groups) or not sums:
            return  # not recorded: said per group when the segment closes
        self.scores_bounded += 1
        if event["score"] > max(sums):
            self.check.problems.append(f"{label}: score: {event['score'] / 1e9:.4g} G ops/s is more than the "
                                       f"sum of the groups' measured peaks ({max(sums) / 1e9:.4g} G ops/s)")

    def finish(self) -> list[Check]:
        if self.view.timed is not None:
            self.close(self.view.timed)
        ratio = f"highest {self.max_rate_ratio:.2f} ×" if self.rates else "none"
        self.check.summary = (f"{self.rates} epoch rates ≤ {PEAK_MULTIPLE} × their group's peak ({ratio}), "
                              f"{self.scores_bounded} score(s) ≤ the sum of the peaks")  # fmt: skip
        return [self.check]


class ConfigurationRule(SegmentRule):
    """The configuration row: graphs and the data check against the configured data set, the precision the
    system event chose, the search and tuner each proposal names.  It reads the run's model (the configuration),
    the shared view (the graph parsed for the event) and its own state only."""

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.check = Check("configuration")
        self.data_shape: tuple[int, int, int, int] | None = None
        """(height, width, channels, classes) every graph must have"""
        self.data_shape_from = ""
        self.first_data: Mapping | None = None
        self.graphs = 0
        self.proposals = self.unnamed = 0
        """proposals, and those that name no search and tuner"""
        self.clean_graphs: OrderedDict[str, None] = OrderedDict()
        """the sha256 of graph files whose graph passed :meth:`graph`, last used last (at most
        :data:`~analysis.verify.view.COUNT_CACHE`): the same bytes pass the same way, counted and not redone"""

    @property
    def config(self) -> Mapping:
        return run_config(self.run)

    def precision(self, event: dict, label: str) -> None:
        chosen = event.get("precision")
        chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
        configured = self.config.get("precision")
        if chosen is not None and chosen != configured:
            self.check.problems.append(f"{label}: precision: the system event chose {chosen!r}, the "
                                       f"configuration says {configured!r}")  # fmt: skip

    def each(self, event: dict, number: int) -> bool:
        """Every event: the graph the view parsed for it (a task's first epoch, else its model_done), whether or
        not a segment is open; then the event's own rule, in an open segment."""
        self.graph_parsed()
        return super().each(event, number)

    def run_start(self, event: dict, number: int) -> None:
        """The run's first segment: the data set's shape; each segment: its data check, when it has one."""
        view = self.view
        if not view.opened:
            return
        if view.closed is None:
            self.opened()
        data, label = event.get("data"), f"event {number} (run_start of segment {view.timed.record.number})"
        if data is not None and self.data_counted(data, label):
            self.data_configured(data, label)

    def system(self, event: dict, _: int) -> None:
        self.precision(event, self.label)

    def model_proposed(self, event: dict, _: int) -> None:
        self.algorithms(event, self.label)

    def opened(self) -> None:
        """The run's first segment: the configured data set's shape, when it has one."""
        dataset = self.config.get("dataset")
        known = image_shape(dataset, self.config.get("image_size"))
        if known is None:
            return  # hdf5 files say their own shape: its graphs are held to agree with each other
        self.data_shape = known
        self.data_shape_from = f"dataset {dataset}"

    def data_counted(self, data: object, label: str) -> bool:
        """A run_start's data check well formed (False: named) and the same in every segment."""
        wrong = _data_problem(data)
        if wrong:
            self.check.problems.append(f"{label}: data check: {wrong}")
            return False
        if self.first_data is None:
            self.first_data = data
        elif data != self.first_data:
            self.check.problems.append(f"{label}: data check: {split_counts(data)}, the first segment counted "
                                       f"{split_counts(self.first_data)} (a resume runs on the same data)")
        return True

    def data_configured(self, data: Mapping, label: str) -> None:
        """A well-formed data check of the configured data set, its images and classes."""
        configured = self.config.get("dataset")
        if data["dataset"] != configured:
            self.check.problems.append(f"{label}: data check: it read {data['dataset']!r}, the "
                                       f"configuration says {configured!r}")  # fmt: skip
        self._same_shape((*data["image_shape"], data["classes"]), "the data check",
                         f"{label}: data shape: the data check found")  # fmt: skip
        if configured == "imagenet" and imagenet_split(data) is None and data is self.first_data:
            self.check.notes.append(f"imagenet of {split_counts(data)}: not the {' or '.join(IMAGENET_SPLITS)} "
                                    "split, an unofficial run (rule dataset)")  # fmt: skip

    def graph_parsed(self) -> None:
        """The graph the walk's view parsed for the event (a task's first epoch, else its model_done), held to the
        data's shape."""
        parsed = self.run.view.parsed
        if parsed is None:
            return
        if parsed.sha256 in self.clean_graphs:
            self.clean_graphs.move_to_end(parsed.sha256)
            self.graphs += 1
            return
        before = len(self.check.problems)
        self.graph(parsed.task, parsed.graph, parsed.place)
        if len(self.check.problems) == before:
            self.clean_graphs[parsed.sha256] = None
            if len(self.clean_graphs) > COUNT_CACHE:
                self.clean_graphs.popitem(last=False)

    def graph(self, task: int, graph: nx.DiGraph, graph_file: str) -> None:
        """A task's graph, as the walk's view parsed it: its input and output against the configured data."""
        try:
            data = graph.nodes[input_node(graph)]
            shape = (data.get("h"), data.get("w"), data.get("c"))
            classes = infer_shapes(graph)[output_node(graph)][-1]
        except (GraphError, KeyError, IndexError, TypeError) as exc:
            self.check.problems.append(f"task {task}: {graph_file}: input/output: {exc}")
            return
        self.graphs += 1
        self._same_shape((*shape, classes), f"task {task}'s graph", f"task {task}: data shape: {graph_file} takes")

    def _same_shape(self, found: tuple, source: str, what: str) -> None:
        """Every graph's and data check's shape the same: the data set's, else (hdf5: the file says its own) the
        first one found, the data check's or a graph's."""
        if self.data_shape is None:
            self.data_shape, self.data_shape_from = found, source
        elif found != self.data_shape:
            self.check.problems.append(f"{what} {images(found)}, {self.data_shape_from} has "
                                       f"{images(self.data_shape)}")  # fmt: skip

    def algorithms(self, event: dict, label: str) -> None:
        """The search and the tuner the proposal names: the configured ones (the seed's search: ``seed``)."""
        self.proposals += 1
        info = event["search"]
        if "search" not in info and "tuner" not in info:
            self.unnamed += 1  # not recorded: said once at the end
            return
        search, tuner = self.config.get("search", VALID_SEARCH), self.config.get("hpo", VALID_TUNER)
        expected = (SEED_SEARCH if event["parent"] is None else search, tuner)
        named = (info.get("search"), info.get("tuner"))
        if named != expected:
            self.check.problems.append(f"{label}: algorithms: produced by search {named[0]!r} and tuner "
                                       f"{named[1]!r}, the configuration (rule algorithms: "
                                       f"{search}+{tuner}) needs {expected[0]!r} and {expected[1]!r}")

    def finish(self) -> list[Check]:
        shape = "unknown" if self.data_shape is None else images(self.data_shape)
        self.check.summary = (f"{self.graphs} graphs against {self.data_shape_from or 'the data'} "
                              f"({shape}); {self.proposals - self.unnamed} proposals' search and tuner "
                              "as configured")  # fmt: skip
        if self.unnamed:
            self.check.missing.append(f"{self.unnamed} of {self.proposals} model_proposed events name no "
                                      "search and tuner (a log older than the field)")  # fmt: skip
        return [self.check]


def run_config(run: Run) -> Mapping:
    """The run's configuration: its model's, the first segment's (none before it: ``{}``)."""
    model = run.model
    return (model.config if model is not None else None) or {}


def is_int(value: object) -> bool:
    """A JSON integer (``true`` is none): what the verify rules hold a count or a size to."""
    return isinstance(value, int) and not isinstance(value, bool)


def _data_problem(data: object) -> str:
    """What is wrong with a ``run_start``'s ``data`` (empty when nothing): its shape, not its agreement."""
    if not isinstance(data, Mapping):
        return f"not an object: {str(data)[:80]}"
    wrong = [key for key in ("train", "validation", "classes") if not (is_int(data.get(key)) and data[key] >= 0)]
    shape = data.get("image_shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(is_int(d) and d > 0 for d in shape)):
        wrong.append("image_shape")
    if not isinstance(data.get("dataset"), str):
        wrong.append("dataset")
    return f"{', '.join(wrong)} not as the data check writes them" if wrong else ""


def split_counts(data: Mapping) -> str:
    """'1281167 train, 50000 validation, 1000 classes': a data check's counts (the data family's, unchecked)"""
    return f"{data.get('train')} train, {data.get('validation')} validation, {data.get('classes')} classes"


def images(shape: tuple) -> str:
    """'224×224×3 images to 1000 classes'"""
    return f"{shape[0]}×{shape[1]}×{shape[2]} images to {shape[3]} classes"
