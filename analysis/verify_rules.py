"""What physics and bookkeeping allow a run to claim: the verifier's time, physics, counts and configuration rules.

The recount and the score checks of :mod:`analysis.verify` prove that the
score follows from the log; they cannot tell a log a run wrote from one a
careful forger wrote, with every derived number recomputed by the package's
own code.  The rules here hold a log to what a real run cannot avoid:

* **time**: event times never go backwards within a segment; an epoch
  starts after its segment's start and its task's proposal, ends after it
  starts, is logged after it ends, and its recorded phases (data wait,
  compute, evaluation, compilation) fit in its wall time; a group trains one
  model at a time, so its epochs never overlap, a model is not proposed on a
  group whose previous one has not ended, and no epoch starts before the
  group's previous model ended; a ``model_done``/``model_failed`` is logged
  after its last epoch ended; a resumed segment starts after everything the
  previous one claimed, and nothing of it claims a time before its start;
* **physics**: no epoch trains faster than :data:`PEAK_MULTIPLE` × its
  group's measured peak (the ``peak`` event), and no score exceeds the sum of
  its segment's peaks;
* **counts**: an epoch's samples are its steps × its global batch (the
  batch size × its group's Horovod size), the same in every epoch of a model;
  no model has more than ``max_epochs`` epochs; a group's Horovod size is the
  length of its list of ranks, and its peak was measured by that many ranks;
* **configuration against evidence**: every graph's input is the
  configured data set's image shape and its output has its classes; the
  precision the ``system`` event chose is the configured one.

:class:`EvidenceRules` is fed every event once, in log order, by the
verifier's walk (:class:`analysis.verify._Walker`), and keeps per-group and
per-open-task state only: the walk stays linear in the log and streamed.
Each problem is one line naming the event (its number in the log), the task
and the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiperf_mpi.data.sources import DIGITS_SIZE, IMAGENET_CLASSES
from aiperf_mpi.graph.model import GraphError, infer_shapes, input_node, output_node
from aiperf_mpi.results import runlog

if TYPE_CHECKING:
    import networkx as nx

    from analysis.verify import Check

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
DEFAULT_IMAGE_SIZES = {"imagenet": 224, "synthetic": 32}
"""the image size of the data sets whose ``image_size`` 0 means their default (aiperf_mpi.data.sources)"""
DATA_SHAPES = {"digits": (DIGITS_SIZE, 3, 10), "cifar10": (32, 3, 10), "imagenet": (None, 3, IMAGENET_CLASSES),
               "synthetic": (None, 3, 10)}  # fmt: skip
"""(image size, channels, classes) of each data set (None: the configured ``image_size``); hdf5 files say
their own, so its graphs are held to agree with each other"""


@dataclass
class _OpenTask:
    """A proposed task until its model_done/model_failed: what its epochs are held to."""

    group: int
    proposed: float
    batch: object
    epochs: int = 0
    last_end: float | None = None
    samples: tuple[int, int] | None = None
    """(train, validation) samples of its first epoch"""


@dataclass
class _Group:
    """A group within one segment: the one model it trains at a time, and when its last work ended."""

    size: int | None = None
    """its Horovod size (from the layout)"""
    peak: float | None = None
    open_task: int | None = None
    last_epoch_end: float | None = None
    last_epoch: str = ""
    model_end: float | None = None
    """the log time of its previous model's model_done/model_failed"""
    model_ended: int | None = None
    lost: str = ""
    """its group_lost event's label: nothing of the group may be logged after it"""


@dataclass
class _SegmentTimes:
    number: int
    start: float
    last_time: float | None = None
    """the last event time of the segment (monitor samples apart: they carry the leader's sampling time)"""
    latest_claim: float = 0.0
    """the latest time anything of the segment claims (event times, epoch ends, monitor samples)"""
    latest_claim_what: str = ""
    groups: dict[int, _Group] = field(default_factory=dict)
    has_layout: bool = False


class EvidenceRules:
    """The four rule classes, fed one event at a time; problems go to the four checks given."""

    def __init__(self, times: Check, physics: Check, counts: Check, configuration: Check) -> None:
        self.times, self.physics, self.counts, self.configuration = times, physics, counts, configuration
        self.config: Mapping = {}
        self.segment: _SegmentTimes | None = None
        self.tasks: dict[int, _OpenTask] = {}
        self.peak_sums: list[float] = []
        """each closed segment's sum of group peaks (a segment with a group unprobed adds none)"""
        self.data_shape: tuple[int, int, int, int] | None = None
        """(height, width, channels, classes) every graph must have"""
        self.data_shape_from = ""
        self.epochs = self.rates = self.graphs = self.scores_bounded = 0
        self.max_rate_ratio = 0.0
        self.unprobed = 0

    # -- the stream

    def event(self, event: dict, number: int) -> None:
        """One schema-valid event, in log order (a ``run_start`` opens a segment; others need one open)."""
        try:
            self._event(event, number)
        except (ArithmeticError, ValueError) as exc:  # an integer too large for a float, say
            self.times.problems.append(f"{_label(event, number)}: numbers: {str(exc)[:80]}")

    def _event(self, event: dict, number: int) -> None:
        name = event[runlog.EVENT]
        if name == runlog.RUN_START:
            self._run_start(event, number)
            return
        segment = self.segment
        if segment is None:
            return
        label = _label(event, number)
        time = event[runlog.TIME]
        if name == runlog.MONITOR:  # the leader's sampling time, logged when the master got it
            if time < segment.start - CLOCK_SKEW_SECONDS:
                self.times.problems.append(f"{label}: inside segment: sampled at {time:.3f}, before its segment "
                                           f"{segment.number} started at {segment.start:.3f}")  # fmt: skip
            self._claim(segment, time, label)
            return
        if segment.last_time is not None and time < segment.last_time:
            self.times.problems.append(f"{label}: order: time {time:.3f} is before the previous event's "
                                       f"{segment.last_time:.3f} (times never go backwards within a segment)")
        segment.last_time = time if segment.last_time is None else max(time, segment.last_time)
        self._claim(segment, time, label)
        handler = {runlog.LAYOUT: self._layout, runlog.PEAK: self._peak, runlog.SYSTEM: self._system,
                   runlog.MODEL_PROPOSED: self._proposed, runlog.EPOCH: self._epoch,
                   runlog.MODEL_DONE: self._model_end, runlog.MODEL_FAILED: self._model_end,
                   runlog.STAGING: self._staging, runlog.RUN_STOP: self._run_stop, runlog.GROUP_LOST: self._lost,
                   runlog.SCORE: self._score}.get(name)  # fmt: skip
        index = event.get("group")
        lost = segment.groups[index].lost if name != runlog.MONITOR and index in segment.groups else ""
        if lost and name in (runlog.MODEL_PROPOSED, runlog.EPOCH, runlog.MODEL_DONE, runlog.MODEL_FAILED):
            self.times.problems.append(f"{label}: lost group: group {index} works after it was lost ({lost})")
        if handler is not None:
            handler(event, label, segment)

    def _claim(self, segment: _SegmentTimes, time: float, label: str) -> None:
        if time >= segment.latest_claim:
            segment.latest_claim, segment.latest_claim_what = time, label

    def _run_start(self, event: dict, number: int) -> None:
        previous = self.segment
        time = event[runlog.TIME]
        if previous is None:
            self.config = event["config"]
            self._data_shape()
        else:
            self._close(previous)
            if time < previous.latest_claim:
                self.times.problems.append(f"event {number} (run_start of segment {previous.number + 1}): resume: "
                                           f"starts at {time:.3f}, before the last time segment {previous.number} "
                                           f"claims ({previous.latest_claim:.3f}, {previous.latest_claim_what})")
            self.tasks.clear()  # a task still open was discarded with its segment
        self.segment = _SegmentTimes(previous.number + 1 if previous else 1, time)
        self.segment.last_time = self.segment.latest_claim = time
        self.segment.latest_claim_what = f"event {number} (run_start)"

    def _close(self, segment: _SegmentTimes) -> None:
        """At the end of a segment: a group with no peak is not recorded; the segment's peak sum is kept."""
        unprobed = [index for index, group in sorted(segment.groups.items()) if group.peak is None]
        self.unprobed += len(unprobed)
        for index in unprobed:
            self.physics.missing.append(f"segment {segment.number} group {index}: no peak event (the probe was "
                                        "off): its epochs' rates and the score cannot be held to its machine")
        if segment.has_layout and not unprobed and segment.groups:
            self.peak_sums.append(sum(group.peak for group in segment.groups.values()))

    # -- set-up events

    def _layout(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        segment.has_layout = True
        for group in event["groups"]:
            if not isinstance(group, dict) or not isinstance(group.get("index"), int):
                self.counts.problems.append(f"{label}: layout: a group without an index: {str(group)[:80]}")
                continue
            ranks = group.get("ranks")
            if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) for r in ranks):
                self.counts.problems.append(f"{label}: horovod size: group {group['index']} has no list of ranks")
                continue
            size = group.get("horovod_size", len(ranks))
            if size != len(ranks):
                self.counts.problems.append(f"{label}: horovod size: group {group['index']} says horovod_size "
                                            f"{size}, its list of ranks has {len(ranks)}")  # fmt: skip
            segment.groups.setdefault(group["index"], _Group()).size = len(ranks)

    def _peak(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        group = segment.groups.get(event["group"])
        if group is None:
            self.physics.problems.append(f"{label}: peak: group {event['group']} is not in its segment's layout")
            return
        if group.size is not None and event["ranks"] != group.size:
            self.counts.problems.append(f"{label}: peak ranks: measured by {event['ranks']} ranks, group "
                                        f"{event['group']} has {group.size}")  # fmt: skip
        rate = event["ops_per_second"]
        if not rate > 0:
            self.physics.problems.append(f"{label}: peak: {rate} ops/s is not a measurement")
            return
        group.peak = float(rate)

    def _system(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        chosen = event.get("precision")
        chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
        configured = self.config.get("precision")
        if chosen is not None and chosen != configured:
            self.configuration.problems.append(f"{label}: precision: the system event chose {chosen!r}, the "
                                               f"configuration says {configured!r}")  # fmt: skip

    def _staging(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        start, seconds = event.get("start"), event["seconds"]
        if isinstance(start, int | float) and start + seconds > event[runlog.TIME] + CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: logged after: staging ended at {start + seconds:.3f}, logged "
                                       f"at {event[runlog.TIME]:.3f}")  # fmt: skip

    # -- tasks and epochs

    def _proposed(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        task, index = event["task"], event["group"]
        group = segment.groups.setdefault(index, _Group())
        if group.open_task is not None and group.open_task in self.tasks:
            self.times.problems.append(f"{label}: one model at a time: group {index} is still training task "
                                       f"{group.open_task}")  # fmt: skip
        group.open_task = task
        self.tasks[task] = _OpenTask(index, event[runlog.TIME], event["hparams"].get("batch_size"))

    def _epoch(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        self.epochs += 1
        end, time = event["end"], event[runlog.TIME]
        self._claim(segment, end, label)
        task = self.tasks.get(event["task"])
        group = segment.groups.setdefault(event["group"], _Group())
        self._epoch_times(event, label, segment, task, group)
        group.last_epoch_end, group.last_epoch = max(end, group.last_epoch_end or end), label
        if task is not None:
            task.epochs += 1
            task.last_end = end if task.last_end is None else max(end, task.last_end)
        self._epoch_rate(event, label, group)
        self._epoch_counts(event, label, task, group)
        if not end <= time + CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: logged after: logged at {time:.3f}, before the epoch ended "
                                       f"({end:.3f})")  # fmt: skip

    def _epoch_times(self, event: dict, label: str, segment: _SegmentTimes, task: _OpenTask | None,
                     group: _Group) -> None:  # fmt: skip
        start, end = event["start"], event["end"]
        if not start <= end:
            self.times.problems.append(f"{label}: wall time: ends at {end:.3f}, before its start {start:.3f}")
        if start < segment.start - CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: inside segment: starts at {start:.3f}, before segment "
                                       f"{segment.number} started at {segment.start:.3f}")  # fmt: skip
        if task is not None and start < task.proposed - CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: after proposal: starts at {start:.3f}, before its task was "
                                       f"proposed at {task.proposed:.3f}")  # fmt: skip
        if group.last_epoch_end is not None and start < group.last_epoch_end:
            self.times.problems.append(f"{label}: one model at a time: starts at {start:.3f}, before the "
                                       f"group's previous epoch ({group.last_epoch}) ended at "
                                       f"{group.last_epoch_end:.3f}")  # fmt: skip
        if group.model_end is not None and start < group.model_end - CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: one model at a time: starts at {start:.3f}, before the "
                                       f"group's previous model (task {group.model_ended}) ended at "
                                       f"{group.model_end:.3f}")  # fmt: skip
        phases = {name: event.get(name, 0.0) for name in PHASES}
        negative = [name for name, value in phases.items() if not isinstance(value, int | float) or value < 0]
        if negative:
            self.times.problems.append(f"{label}: phases: {', '.join(negative)} not a non-negative number")
            return
        wall = end - start
        total = sum(phases.values())
        if total > wall * (1 + PHASE_TOLERANCE_RELATIVE) + PHASE_TOLERANCE_SECONDS:
            parts = " + ".join(f"{name} {value:.3f}" for name, value in phases.items())
            self.times.problems.append(f"{label}: phases: {parts} = {total:.3f} s, more than its wall time "
                                       f"end − start = {wall:.3f} s")  # fmt: skip

    def _epoch_rate(self, event: dict, label: str, group: _Group) -> None:
        """ops_train ÷ the seconds that trained: compute, and compile (the steps that traced are timed there)."""
        if group.peak is None:
            return  # not recorded: said once per group at the segment's end
        seconds = event["compute"] + event.get("compile", 0.0)
        ops = event["ops_train"]
        if ops > 0 and not seconds > 0:
            self.physics.problems.append(f"{label}: training rate: {ops:,} operations in {seconds} s")
            return
        if ops <= 0:
            return
        self.rates += 1
        ratio = ops / seconds / group.peak
        self.max_rate_ratio = max(self.max_rate_ratio, ratio)
        if ratio > PEAK_MULTIPLE:
            self.physics.problems.append(f"{label}: training rate: {ops / seconds / 1e9:.4g} G ops/s "
                                         f"(ops_train ÷ compute + compile) is {ratio:.2f} × group "
                                         f"{event['group']}'s measured peak {group.peak / 1e9:.4g} G ops/s "
                                         f"(at most {PEAK_MULTIPLE})")  # fmt: skip

    def _epoch_counts(self, event: dict, label: str, task: _OpenTask | None, group: _Group) -> None:
        limit = self.config.get("max_epochs")
        if isinstance(limit, int) and event["epoch"] > limit:
            self.counts.problems.append(f"{label}: max epochs: epoch {event['epoch']} of a run whose max_epochs "
                                        f"is {limit}")  # fmt: skip
        if task is None:
            return
        samples = (event["train_samples"], event["validation_samples"])
        if task.samples is None:
            task.samples = samples
        elif samples != task.samples:
            self.counts.problems.append(f"{label}: same samples: {samples[0]} train and {samples[1]} validation "
                                        f"samples, its model's first epoch had {task.samples[0]} and "
                                        f"{task.samples[1]}")  # fmt: skip
        if isinstance(task.batch, int) and not isinstance(task.batch, bool) and group.size is not None:
            global_batch = task.batch * group.size
            if event["train_samples"] != event["steps"] * global_batch:
                self.counts.problems.append(f"{label}: samples: {event['train_samples']} train samples, not steps "
                                            f"{event['steps']} × global batch {global_batch} (batch size "
                                            f"{task.batch} × {group.size} ranks)")  # fmt: skip

    def _model_end(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        task_id, time = event["task"], event[runlog.TIME]
        task = self.tasks.pop(task_id, None)
        group = segment.groups.setdefault(event["group"], _Group())
        if task is not None and task.last_end is not None and task.last_end > time + CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: logged after: logged at {time:.3f}, before its last epoch "
                                       f"ended ({task.last_end:.3f})")  # fmt: skip
        if group.open_task == task_id:
            group.open_task = None
        group.model_end, group.model_ended = time, task_id

    def _lost(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        """A lost group's open task ends here, discarded as a task open at a run_stop is; the group is done."""
        index, task = event["group"], event["task"]
        group = segment.groups.setdefault(index, _Group())
        if group.lost:
            self.times.problems.append(f"{label}: lost group: group {index} was lost already ({group.lost})")
        group.lost = label
        if task is not None and task != group.open_task:
            self.times.problems.append(f"{label}: lost group: its task {task} is not the task group {index} was "
                                       f"training ({group.open_task})")  # fmt: skip
        self.tasks.pop(task, None)
        group.open_task = None
        self.times.notes.append(f"segment {segment.number}: group {index} lost at {event[runlog.TIME]:.3f} "
                                f"({event['reason']}); its task {task} discarded")  # fmt: skip

    # -- the end of a segment, the score

    def _run_stop(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        if segment.latest_claim > event[runlog.TIME] + CLOCK_SKEW_SECONDS:
            self.times.problems.append(f"{label}: inside segment: the segment ends at {event[runlog.TIME]:.3f}, "
                                       f"{segment.latest_claim_what} claims {segment.latest_claim:.3f}")

    def _score(self, event: dict, label: str, segment: _SegmentTimes) -> None:
        unprobed = [g for g in segment.groups.values() if g.peak is None]
        sums = list(self.peak_sums)
        if segment.has_layout and segment.groups and not unprobed:
            sums.append(sum(g.peak for g in segment.groups.values()))
        if unprobed or not sums:
            return  # not recorded: said per group when the segment closes
        self.scores_bounded += 1
        if event["score"] > max(sums):
            self.physics.problems.append(f"{label}: score: {event['score'] / 1e9:.4g} G ops/s is more than the "
                                         f"sum of the groups' measured peaks ({max(sums) / 1e9:.4g} G ops/s)")

    # -- configuration against the graphs

    def _data_shape(self) -> None:
        dataset = self.config.get("dataset")
        known = DATA_SHAPES.get(dataset)
        if known is None:
            return
        size, channels, classes = known
        if size is None:
            size = self.config.get("image_size") or DEFAULT_IMAGE_SIZES[dataset]
        self.data_shape = (size, size, channels, classes)
        self.data_shape_from = f"dataset {dataset}"

    def graph(self, task: int, graph: nx.DiGraph, graph_file: str) -> None:
        """A task's graph, as the walk parsed it: its input and output against the configured data."""
        try:
            data = graph.nodes[input_node(graph)]
            shape = (data.get("h"), data.get("w"), data.get("c"))
            classes = infer_shapes(graph)[output_node(graph)][-1]
        except (GraphError, KeyError, IndexError, TypeError) as exc:
            self.configuration.problems.append(f"task {task}: {graph_file}: input/output: {exc}")
            return
        self.graphs += 1
        found = (*shape, classes)
        if self.data_shape is None:  # hdf5: its files say their own shape, the same for every graph
            self.data_shape, self.data_shape_from = found, f"task {task}'s graph"
        elif found != self.data_shape:
            self.configuration.problems.append(f"task {task}: data shape: {graph_file} takes {_shape(found)}, "
                                               f"{self.data_shape_from} has {_shape(self.data_shape)}")

    def finish(self) -> None:
        if self.segment is not None:
            self._close(self.segment)
        self.times.summary = (f"{self.epochs} epochs: inside their segments and after their proposals, logged "
                              "after they ended, phases within their wall time, one model at a time per group")
        ratio = f"highest {self.max_rate_ratio:.2f} ×" if self.rates else "none"
        self.physics.summary = (f"{self.rates} epoch rates ≤ {PEAK_MULTIPLE} × their group's peak ({ratio}), "
                                f"{self.scores_bounded} score(s) ≤ the sum of the peaks")  # fmt: skip
        self.counts.summary = ("samples = steps × global batch, the same each epoch; ≤ max_epochs; Horovod "
                               "sizes = ranks")  # fmt: skip
        shape = "unknown" if self.data_shape is None else _shape(self.data_shape)
        self.configuration.summary = f"{self.graphs} graphs against {self.data_shape_from or 'the data'} ({shape})"
        if "max_epochs" not in self.config:
            self.counts.missing.append("the configuration has no max_epochs")


def _label(event: Mapping, number: int) -> str:
    """'event 12 (epoch 2 of task 0, group 1)': the event, its task and group, as a problem line names it."""
    name = event[runlog.EVENT]
    if name == runlog.EPOCH:
        return f"event {number} (epoch {event['epoch']} of task {event['task']}, group {event['group']})"
    if "task" in event:
        return f"event {number} ({name} of task {event['task']}, group {event.get('group')})"
    if name in (runlog.PEAK, runlog.MONITOR):
        return f"event {number} ({name} of group {event['group']})"
    return f"event {number} ({name})"


def _shape(shape: tuple) -> str:
    """'224×224×3 images to 1000 classes'"""
    return f"{shape[0]}×{shape[1]}×{shape[2]} images to {shape[3]} classes"
