"""The benchmark's score, computed from the event log alone.

* Active time: the run may have several *segments* (a first run, then
  ``--resume`` after a wall-time kill).  Time is measured on the active axis:
  each segment contributes its *window*.  A segment the run ended itself (a
  ``run_stop`` whose reason is not a signal: the time limit, every group
  stopped because no new model fits before it, the model budget) is scored
  over its whole time limit — the ``time_limit`` of its own ``run_start``,
  which ``--resume`` may set anew — or over its ``run_start`` to
  ``run_stop`` when that is longer: ending early never raises a score.  A
  segment ended by a signal (``run_stop`` reason ``signal …``) takes the
  active axis from its ``run_start`` to its ``run_stop``, and one that was
  killed (no ``run_stop``) to its last event — so a ``--resume`` with the
  time left goes on where it was cut.  The run's active time is the sum of
  the windows, but **never less than the latest end a segment declared**:
  its start on the active axis (the windows before it) plus its time limit.
  So no signal, kill or resume scores a run over less than the time it
  declared (``--time-limit``): a signal sent at a moment the operator chose
  cannot shorten the window; a cut run resumed with the time it had left
  loses nothing.
* OPS(t) = operations of the epochs completed by active time t, divided by t,
  sampled on a fixed grid (``step`` seconds, 0.1 h by default; coarsened to
  a whole multiple of ``step`` when it would hold more than
  :data:`MAX_GRID_SAMPLES` samples, and then ``grid_capped`` says so); the
  final sample, at the end of the active time, is **the score**.  Only
  completed epochs count.
* Regulated score(t) = OPS(t) × (−ln E(t)), E(t) the lowest top-1 validation
  error reached by t (floored at 1e-6 so a perfect model stays finite).  Not
  defined for data without accuracy (``synthetic``).
* Validity (as the paper defines a valid run): ImageNet, final error ≤ 30 %,
  arithmetic at FP16 or wider, the fixed search algorithms (Bayesian
  network-morphism search and TPE).  Anything else is an *unofficial* run,
  reported with the rules it broke — never refused.  The rules are versioned
  data in :mod:`aiperf_mpi.results.rules`; the score names their version.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from aiperf_mpi.results import runlog
from aiperf_mpi.results.rules import RULES_VERSION, evaluate_rules
from aiperf_mpi.results.stability import stability

DEFAULT_STEP = 360.0
ERROR_FLOOR = 1e-6
MAX_GRID_SAMPLES = 100_000
"""most samples the grid holds: a tiny step or a clock jump of years must not make the score run (and the report
draw) without bound; beyond it the step becomes the smallest whole multiple of the asked one that fits"""


@dataclass
class ScoreSample:
    active_time: float
    ops: float
    ops_per_second: float
    best_accuracy: float | None
    regulated: float | None


@dataclass
class Score:
    """Everything the score function derives from a log."""

    score: float
    regulated_score: float | None
    active_time: float
    total_ops: int
    best_accuracy: float | None
    models_trained: int
    models_failed: int
    epochs: int
    segments: int
    valid: bool
    rules: dict[str, dict] = field(default_factory=dict)
    """each validity rule's ``{"ok", "value", "need"}``, by name (:func:`~aiperf_mpi.results.rules.evaluate_rules`)"""
    rules_version: str = RULES_VERSION
    """the version of the rules ``rules`` was judged by"""
    grid: list[ScoreSample] = field(default_factory=list)
    truncated_log: bool = False
    grid_step: float = 0.0
    """the grid's step in seconds: the one asked for, or a multiple of it when the grid was capped"""
    grid_capped: bool = False
    """the asked step would have given more than :data:`MAX_GRID_SAMPLES` samples (the score is the same)"""
    ops_cv_last_half: float | None = None
    """how settled the score is: CV of OPS(t) over the grid's last half (:mod:`aiperf_mpi.results.stability`)"""
    ops_change_last_quarter: float | None = None
    """relative change of OPS(t) over the grid's last quarter (:mod:`aiperf_mpi.results.stability`)"""

    def to_dict(self) -> dict:
        return asdict(self)


class ScoreInputs:
    """What the score needs from a log, gathered one event at a time.

    A long run on a large machine logs hundreds of thousands of epochs;
    keeping their dicts to score them would take gigabytes.  This keeps three
    numbers per epoch (end, operations, accuracy) in flat arrays, the
    segments and the counts — enough for :func:`score_inputs`, so the score
    can be computed while the log is streamed (:func:`score_run`, the report).
    """

    def __init__(self) -> None:
        self.config: dict | None = None
        """the configuration of the first ``run_start``"""
        self.data: dict | None = None
        """what the first ``run_start``'s data check counted (its ``data``; None in older logs)"""
        self._segments: list[list[float]] = []
        self._limits: list[float | None] = []
        """each segment's time limit (its run_start's ``time_limit``; None: not recorded)"""
        self._self_ended: list[bool] = []
        """each segment: closed by a run_stop whose reason is not a signal (the run ended it by its own planning)"""
        self._closed = False
        self.epoch_end = array("d")
        """wall time each completed epoch ended"""
        self.epoch_ops = array("q")
        self.epoch_accuracy = array("d")
        """validation top-1 of each epoch, NaN where there is none"""
        self.models_trained = 0
        self.models_failed = 0

    def add(self, event: Mapping) -> None:
        """Account for one event (in log order)."""
        name = event[runlog.EVENT]
        if name == runlog.EPOCH:  # nearly every event of a big log: the short way
            self.add_epoch(event[runlog.TIME], event["end"], event["ops"], event.get("val_accuracy"))
            return
        if name == runlog.RUN_START:
            self._segments.append([event[runlog.TIME], event[runlog.TIME]])
            self._limits.append(_time_limit(event.get("config")))
            self._self_ended.append(False)
            self._closed = False
            if self.config is None:
                self.config = event.get("config", {})
                self.data = event.get("data")
        elif self._segments and not self._closed:
            self._extend(event[runlog.TIME])
            self._closed = name == runlog.RUN_STOP  # a segment ends at its run_stop; a killed one at its last event
            self._self_ended[-1] = self._closed and not stopped_by_signal(event.get("reason"))
        if name == runlog.MODEL_DONE:  # a task stopped before its first epoch is recorded, not trained
            self.models_trained += (event.get("model") or {}).get("status", "trained") == "trained"
        elif name == runlog.MODEL_FAILED:
            self.models_failed += 1

    def _extend(self, time: float) -> None:
        """An event at ``time`` inside the open segment moves its end (a closed one stays at its run_stop)."""
        if self._segments and not self._closed:
            segment = self._segments[-1]
            if time > segment[1]:
                segment[1] = time

    def add_epoch(self, time: float, end: float, ops: int, accuracy: float | None) -> None:
        """One ``epoch`` event, from its fields."""
        try:  # checked whole before anything is kept: the three arrays stay in step
            row = (float(end), int(ops), math.nan if accuracy is None else float(accuracy))
            array("q", [row[1]])
        except (TypeError, OverflowError) as exc:  # a null, a string, a number beyond 64 bits
            raise runlog.UnreadableLog(f"an epoch's end, ops or accuracy is not a number of its kind ({exc})") from None
        self._extend(time)
        self.epoch_end.append(row[0])
        self.epoch_ops.append(row[1])  # operations are whole numbers
        self.epoch_accuracy.append(row[2])

    def add_epochs(self, times: Sequence[float], ends: Sequence[float], ops: Sequence[int],
                   accuracies: Sequence[float]) -> None:  # fmt: skip
        """Consecutive ``epoch`` events at once, as columns (NaN: no accuracy).

        For readers that parse epochs in blocks (the report reads half a
        million).  The block must not straddle a ``run_start`` or
        ``run_stop``: the events in between count as they do one by one only
        inside one segment.  ``ops`` must hold the logged integers (a float
        column would round sums above 2**53).
        """
        if not len(ends):
            return
        times = np.asarray(times, dtype=float)
        if np.any(times == times):  # not all NaN
            self._extend(float(np.nanmax(times)))
        try:
            exact = array("q", [int(value) for value in ops])  # built whole first: a bad value changes nothing
        except (TypeError, OverflowError) as exc:  # a null, a string, a number beyond 64 bits: not an op count
            raise runlog.UnreadableLog(f"an epoch's ops is not a 64-bit integer ({exc})") from None
        self.epoch_end.frombytes(np.asarray(ends, dtype=float).tobytes())
        self.epoch_ops.extend(exact)
        self.epoch_accuracy.frombytes(np.asarray(accuracies, dtype=float).tobytes())

    @property
    def segments(self) -> list[tuple[float, float]]:
        """(start, end) wall times of each segment, in order."""
        return [(s, e) for s, e in self._segments]

    @property
    def windows(self) -> list[float]:
        """Each segment's scored window in seconds (see the module's rules): its time limit when the run ended it."""
        return [segment_window(start, end, limit, ended)
                for (start, end), limit, ended in zip(self._segments, self._limits, self._self_ended, strict=True)]

    def declared_end(self, windows: Sequence[float]) -> float:
        """The latest end on the active axis a segment declared: the windows before it plus its time limit."""
        end = before = 0.0
        for window, limit in zip(windows, self._limits, strict=True):
            if limit is not None:
                end = max(end, before + limit)
            before += window
        return end

    @property
    def limits(self) -> list[float | None]:
        """Each segment's time limit as its run_start recorded it (None: not recorded)."""
        return list(self._limits)


def stopped_by_signal(reason: object) -> bool:
    """Whether a ``run_stop`` reason says a signal ended the segment (its window is then not extended)."""
    return isinstance(reason, str) and reason.startswith(runlog.SIGNAL_REASON)


def segment_window(start: float, end: float, limit: float | None, self_ended: bool) -> float:
    """A segment's scored window: its time limit when the run ended it itself (never less than it ran)."""
    ran = end - start
    if self_ended and limit is not None:
        return max(ran, limit)
    return ran


def _time_limit(config: object) -> float | None:
    limit = config.get("time_limit") if isinstance(config, Mapping) else None
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit) or limit <= 0:
        return None
    return float(limit)


def active_times(times: np.ndarray, segments: list[tuple[float, float]],
                 windows: Sequence[float] | None = None) -> np.ndarray:  # fmt: skip
    """Wall times → active times (the windows of the segments before each time; a gap between segments is skipped).

    A time inside a segment counts from its start; a later segment's time
    counts each earlier segment's whole window (its wall span, or its time
    limit when the run ended it early: ``windows``, default the wall spans).
    Vectorised for the report's hundreds of thousands of epochs; a time
    before a segment's start stops the count there, as for a single time.
    """
    times = np.asarray(times, dtype=float)
    total = np.zeros_like(times)
    counting = np.ones(times.shape, dtype=bool)
    if windows is None:
        windows = [end - start for start, end in segments]
    for (start, end), window in zip(segments, windows, strict=True):
        counting &= times > start
        total += np.where(counting, np.where(times > end, window, times - start), 0.0)
    return total


def compute_score(events: Iterable[Mapping], step: float = DEFAULT_STEP, truncated: bool = False) -> Score:
    """The score of a run from its events (see the module's rules)."""
    inputs = ScoreInputs()
    for event in events:
        inputs.add(event)
    return score_inputs(inputs, step, truncated)


def score_inputs(inputs: ScoreInputs, step: float = DEFAULT_STEP, truncated: bool = False) -> Score:
    """The score from what :class:`ScoreInputs` gathered — the one place the score is computed."""
    if step <= 0:
        raise ValueError("the score step must be positive")
    segments = inputs.segments
    if not segments:
        raise ValueError("the log has no run_start: not an aiperf_mpi event log")
    config = inputs.config or {}
    has_accuracy = config.get("dataset") != "synthetic"
    windows = inputs.windows
    ends = active_times(np.frombuffer(inputs.epoch_end, dtype=float), segments, windows)
    order = np.argsort(ends, kind="stable")
    ends = ends[order]
    ops_sorted = np.frombuffer(inputs.epoch_ops, dtype=np.int64)[order].tolist()  # Python ints: sums stay exact
    accuracy = np.frombuffer(inputs.epoch_accuracy, dtype=float)[order]
    if not has_accuracy:
        accuracy = np.full_like(accuracy, np.nan)
    best_so_far = np.fmax.accumulate(accuracy) if len(accuracy) else accuracy  # NaN until the first accuracy

    active_time = max(sum(windows), inputs.declared_end(windows))  # no run is scored over less than it declared
    if not math.isfinite(active_time):
        raise ValueError(f"the segments' active time is not a finite number ({active_time})")
    step, capped = grid_step(active_time, step)
    grid_times = [step * k for k in range(1, int(active_time // step) + 1)]
    if not grid_times or grid_times[-1] < active_time:
        grid_times.append(active_time)

    samples: list[ScoreSample] = []
    index, ops, best = 0, 0, None
    for t, upto in zip(grid_times, np.searchsorted(ends, grid_times, side="right").tolist(), strict=True):
        ops += sum(ops_sorted[index:upto])
        index = upto
        if upto and not math.isnan(best_so_far[upto - 1]):
            best = float(best_so_far[upto - 1])
        rate = ops / t if t > 0 else 0.0
        regulated = None
        if best is not None:
            regulated = rate * -math.log(max(1.0 - best, ERROR_FLOOR)) + 0.0  # + 0.0: E = 1 gives 0, not -0
        samples.append(ScoreSample(t, ops, rate, best, regulated))

    final = samples[-1]
    error = None if final.best_accuracy is None else 1.0 - final.best_accuracy
    rules = evaluate_rules(config, error, inputs.data)
    settled = stability([s.active_time for s in samples], [s.ops_per_second for s in samples])
    return Score(
        score=final.ops_per_second,
        regulated_score=final.regulated,
        active_time=active_time,
        total_ops=int(final.ops),
        best_accuracy=final.best_accuracy,
        models_trained=inputs.models_trained,
        models_failed=inputs.models_failed,
        epochs=len(ops_sorted),
        segments=len(segments),
        valid=all(rule["ok"] for rule in rules.values()),
        rules=rules,
        grid=samples,
        truncated_log=truncated,
        grid_step=step,
        grid_capped=capped,
        ops_cv_last_half=settled.cv_last_half,
        ops_change_last_quarter=settled.change_last_quarter,
    )


def grid_step(active_time: float, step: float) -> tuple[float, bool]:
    """(the step the grid uses, whether it was capped): at most :data:`MAX_GRID_SAMPLES` samples over ``active_time``.

    A capped step is the smallest whole multiple of ``step`` that fits, so
    every sample still lies on the asked grid.
    """
    if not math.isfinite(step):
        raise ValueError(f"the score step must be a finite number of seconds (got {step})")
    samples = active_time / step
    if samples <= MAX_GRID_SAMPLES:
        return step, False
    multiple = samples / MAX_GRID_SAMPLES
    if not math.isfinite(multiple):  # a step so small the ratio overflows: the cap's own step
        return active_time / MAX_GRID_SAMPLES, True
    return step * math.ceil(multiple), True


def run_step(config: Mapping | None) -> float:
    """The grid step a run asked for (``score_step`` of its configuration), else the default.

    ValueError for a step that is not a number (a bad log is one line for the readers, not a traceback).
    """
    step = (config or {}).get("score_step", DEFAULT_STEP)
    if isinstance(step, bool) or not isinstance(step, int | float):
        raise ValueError(f"the configuration's score_step {str(step)[:40]!r} is not a number")
    return float(step)


def score_run(run_dir, step: float | None = None) -> Score:
    """Stream a run directory's event log and score it (the step defaults to the run's own)."""
    stream = runlog.EventStream(run_dir)
    inputs = ScoreInputs()
    for event in stream:
        inputs.add(event)
    return score_inputs(inputs, run_step(inputs.config) if step is None else step, stream.truncated_tail)
