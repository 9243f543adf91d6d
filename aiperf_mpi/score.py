"""The benchmark's score, computed from the event log alone.

* Active time: the run may have several *segments* (a first run, then
  ``--resume`` after a wall-time kill).  Time is measured on the active axis:
  each segment contributes from its ``run_start`` to its ``run_stop`` (or, for
  a segment that was killed, to its last event).
* OPS(t) = operations of the epochs completed by active time t, divided by t,
  sampled on a fixed grid (``step`` seconds, 0.1 h by default); the final
  sample, at the end of the active time, is **the score**.  Only completed
  epochs count.
* Regulated score(t) = OPS(t) × (−ln E(t)), E(t) the lowest top-1 validation
  error reached by t (floored at 1e-6 so a perfect model stays finite).  Not
  defined for data without accuracy (``synthetic``).
* Validity (as the paper defines a valid run): ImageNet, final error ≤ 30 %,
  arithmetic at FP16 or wider, the fixed search algorithms (Bayesian
  network-morphism search and TPE).  Anything else is an *unofficial* run,
  reported with the rules it broke — never refused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from aiperf_mpi import runlog

DEFAULT_STEP = 360.0
ERROR_FLOOR = 1e-6
MAX_VALID_ERROR = 0.30
VALID_PRECISIONS = ("fp32", "fp16", "bf16")


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
    grid: list[ScoreSample] = field(default_factory=list)
    truncated_log: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _segments(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) wall times of each segment, in order."""
    segments: list[list[float]] = []
    closed = False
    for event in events:
        name = event[runlog.EVENT]
        if name == runlog.RUN_START:
            segments.append([event[runlog.TIME], event[runlog.TIME]])
            closed = False
        elif segments and not closed:
            segments[-1][1] = max(segments[-1][1], event[runlog.TIME])
            closed = name == runlog.RUN_STOP  # a segment ends at its run_stop; a killed one at its last event
    return [(s, e) for s, e in segments]


def _active(time: float, segments: list[tuple[float, float]]) -> float:
    """Wall time → active time."""
    total = 0.0
    for start, end in segments:
        if time <= start:
            break
        total += min(time, end) - start
    return total


def compute_score(events: list[dict], step: float = DEFAULT_STEP, truncated: bool = False) -> Score:
    """The score of a run from its events (see the module's rules)."""
    if step <= 0:
        raise ValueError("the score step must be positive")
    segments = _segments(events)
    if not segments:
        raise ValueError("the log has no run_start: not an aiperf_mpi event log")
    config = next(e for e in events if e[runlog.EVENT] == runlog.RUN_START).get("config", {})
    has_accuracy = config.get("dataset") != "synthetic"
    epochs = sorted(
        (( _active(e["end"], segments), e["ops"], e.get("val_accuracy")) for e in events
         if e[runlog.EVENT] == runlog.EPOCH),
        key=lambda item: item[0],
    )  # fmt: skip
    active_time = sum(end - start for start, end in segments)
    grid_times = [step * k for k in range(1, int(active_time // step) + 1)]
    if not grid_times or grid_times[-1] < active_time:
        grid_times.append(active_time)

    samples: list[ScoreSample] = []
    index, ops, best = 0, 0, None
    for t in grid_times:
        while index < len(epochs) and epochs[index][0] <= t:
            ops += epochs[index][1]
            accuracy = epochs[index][2]
            if accuracy is not None and has_accuracy:
                best = accuracy if best is None else max(best, accuracy)
            index += 1
        rate = ops / t if t > 0 else 0.0
        regulated = None
        if best is not None:
            regulated = rate * -math.log(max(1.0 - best, ERROR_FLOOR))
        samples.append(ScoreSample(t, ops, rate, best, regulated))

    final = samples[-1]
    error = None if final.best_accuracy is None else 1.0 - final.best_accuracy
    precision = config.get("precision", "fp32")
    rules = {
        "dataset": {"ok": config.get("dataset") == "imagenet", "value": config.get("dataset"), "need": "imagenet"},
        "error": {"ok": error is not None and error <= MAX_VALID_ERROR, "value": error, "need": f"≤ {MAX_VALID_ERROR}"},
        "precision": {"ok": precision in VALID_PRECISIONS, "value": precision, "need": "fp16 or wider"},
        "algorithms": {
            "ok": config.get("search", "bayesian") == "bayesian" and config.get("hpo", "tpe") == "tpe",
            "value": f"{config.get('search', 'bayesian')}+{config.get('hpo', 'tpe')}",
            "need": "bayesian+tpe",
        },
    }
    return Score(
        score=final.ops_per_second,
        regulated_score=final.regulated,
        active_time=active_time,
        total_ops=int(final.ops),
        best_accuracy=final.best_accuracy,
        models_trained=sum(1 for e in events if e[runlog.EVENT] == runlog.MODEL_DONE),
        models_failed=sum(1 for e in events if e[runlog.EVENT] == runlog.MODEL_FAILED),
        epochs=len(epochs),
        segments=len(segments),
        valid=all(rule["ok"] for rule in rules.values()),
        rules=rules,
        grid=samples,
        truncated_log=truncated,
    )


def score_run(run_dir, step: float | None = None) -> Score:
    """Read a run directory's event log and score it (the step defaults to the run's own)."""
    contents = runlog.read_events(run_dir)
    if step is None:
        start = next((e for e in contents.events if e[runlog.EVENT] == runlog.RUN_START), {})
        step = float(start.get("config", {}).get("score_step", DEFAULT_STEP))
    return compute_score(contents.events, step, contents.truncated_tail)
