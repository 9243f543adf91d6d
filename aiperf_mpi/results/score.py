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
  killed (no ``run_stop``, or the ``run_stop`` the job script writes after
  the launch ended: reason ``launch ended``, job/close.py) to its last event
  — so a ``--resume`` with the time left goes on where it was cut.  The run's active time is the sum of
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
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from aiperf_mpi.results.logmodel import Timeline, read_timeline
from aiperf_mpi.results.logmodel import active_times as active_times
from aiperf_mpi.results.logmodel import segment_window as segment_window
from aiperf_mpi.results.logmodel import stopped_by_signal as stopped_by_signal
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
    rehearsal: bool = False
    """a rehearsal's (``--rehearse``): a stand-in's operations and accuracies, never a result; said at the top of
    ``score.json`` as in every other file such a run writes (issue 45)"""
    energy: dict = field(default_factory=dict)
    """what the scored window cost (issue 53): joules at the measured mean power, watts, operations per joule and
    per regulated operation, from the nodes' meters as the log holds them; or ``measured`` false and why
    (:meth:`aiperf_mpi.results.energy.EnergyLedger.figures`)"""

    def to_dict(self) -> dict:
        return asdict(self)


def compute_score(events: Iterable[Mapping], step: float = DEFAULT_STEP, truncated: bool = False) -> Score:
    """The score of a run from its events, in log order (see the module's rules)."""
    inputs = Timeline()
    for event in events:
        inputs.add(event)
    return score_inputs(inputs, step, truncated)


def score_inputs(inputs: Timeline, step: float = DEFAULT_STEP, truncated: bool = False) -> Score:
    """The score from a run's :class:`~aiperf_mpi.results.logmodel.Timeline` (its model): the one place it is made."""
    inputs.flush()
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
        rehearsal=bool(config.get("rehearse")),
        energy=inputs.energy.figures(energy_windows(windows, active_time), float(final.ops),
                                     None if final.regulated is None else final.regulated * active_time),
    )


def energy_windows(windows: list[float], active_time: float) -> list[float]:
    """Each segment's scored seconds for the energy figures: the segments' windows, the last one stretched to the
    score's active time where the run declared more than its segments ran (the score's own window)."""
    windows = [float(w) for w in windows]
    if windows and active_time > sum(windows):
        windows[-1] += active_time - sum(windows)
    return windows


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
    """Read a run directory's event log into its timeline and score it (the step defaults to the run's own)."""
    timeline, stream = read_timeline(run_dir)
    return score_inputs(timeline, run_step(timeline.config) if step is None else step, stream.truncated_tail)
