"""What the report derives from a run beyond the score: where each group's time went, efficiency, a summary.

Everything is on the score's *active* time axis (seconds since the run
started, the gaps between resumed segments cut out), so the timeline, the
utilisation and the score over time line up.  The score itself comes from
:mod:`aiperf_mpi.results.score` and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.score import Score, run_step, score_inputs

IDLE_GAP_MIN_SECONDS = 1.0
"""shorter holes between a group's intervals are bookkeeping noise (message round trips), not idle gaps"""


def run_score(run: RunModel, step: float | None = None) -> Score:
    """The score of the run, by the score module, on the run's own grid unless ``step`` is given."""
    if step is None:
        step = run_step(run.config)  # ValueError for a step that is not a number
    return score_inputs(run, step, run.truncated_tail)  # the model is the score's Timeline


def union(starts: np.ndarray, ends: np.ndarray, gap: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint intervals covering the given ones; holes of at most ``gap`` are closed too.

    With ``gap`` the width of a pixel this is also how a timeline of
    hundreds of thousands of epochs is drawn with one rectangle per visible
    bar instead of one per epoch.
    """
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum(ends[order], starts[order])
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1] + gap
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(starts)) - 1
    return starts[first], reach[last]


def gaps(starts: np.ndarray, ends: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The holes of [lo, hi] that disjoint sorted intervals leave."""
    edges_start = np.concatenate(([lo], np.clip(ends, lo, hi)))
    edges_end = np.concatenate((np.clip(starts, lo, hi), [hi]))
    keep = edges_end > edges_start
    return edges_start[keep], edges_end[keep]


@dataclass
class GroupTime:
    """One group's time on the active axis."""

    group: int
    epoch_start: np.ndarray
    epoch_end: np.ndarray
    epoch_task: np.ndarray
    search: tuple[np.ndarray, np.ndarray]
    """(start, end) of each search that proposed a model for this group"""
    setup: tuple[np.ndarray, np.ndarray]
    """from a model's proposal to its first epoch (build, weight transfer, compile) or its failure"""
    given_up: tuple[np.ndarray, np.ndarray]
    """from a model's proposal to its end, for a model that ended with no epoch: given up at the time limit"""
    failures: np.ndarray
    """active times of this group's failed tasks"""
    compile: tuple[np.ndarray, np.ndarray]
    """(start, end) of each epoch's compilation, drawn at the epoch's start (where a new model traces)"""
    idle_start: np.ndarray
    idle_end: np.ndarray
    """holes longer than :data:`IDLE_GAP_MIN_SECONDS` in epochs ∪ searches ∪ set-ups ∪ models given up"""
    models: int = 0
    epochs: int = 0

    @property
    def idle(self) -> float:
        return float(np.sum(self.idle_end - self.idle_start))

    @property
    def longest_gap(self) -> float:
        return float(np.max(self.idle_end - self.idle_start)) if len(self.idle_start) else 0.0


def group_times(run: RunModel, active_time: float) -> list[GroupTime]:
    """Each group's epochs, searches, set-ups, failures and idle gaps."""
    group_col = run.column("group").astype(int)
    task_col = run.column("task").astype(int)
    start = run.active(run.column("start"))
    end = run.active(run.column("end"))
    compiling = np.nan_to_num(run.column("compile"))
    traced = compiling > 0

    first_start: dict[int, float] = {}
    if len(task_col):
        order = np.lexsort((start, task_col))
        tasks, index = np.unique(task_col[order], return_index=True)
        first_start = dict(zip(tasks.tolist(), start[order][index].tolist(), strict=True))
    proposals = list(run.proposals.values())
    proposed = run.active(np.array([p.time for p in proposals], dtype=float))
    searched = run.active(np.array([p.time - (p.search_seconds or 0.0) for p in proposals], dtype=float))
    failure_times = run.active(np.array([f.time for f in run.failures], dtype=float))
    setup_end = np.array(
        [first_start.get(p.task, np.nan) for p in proposals], dtype=float
    )  # active already (from the epochs)
    setup_end = np.where(np.isnan(setup_end), _active_or_nan(run, proposals, "failure"), setup_end)
    # a model that ended with no epoch (given up at the time limit, a few steps into its first): a span of its own
    no_epoch = np.isnan(setup_end)
    given_up_end = np.where(no_epoch, _active_or_nan(run, proposals, "done"), np.nan)
    proposal_group = np.array([p.group for p in proposals], dtype=int)
    failure_group = np.array([f.group for f in run.failures], dtype=int)
    model_groups = np.array([m.group for m in run.models], dtype=int)

    # one stable sort per kind, then a slice per group: linear in the log (a mask per group made it
    # O(groups × models): tests/unit/test_analysis.py times the growth)
    epochs_of, proposals_of, failures_of = (by_group(column, run.groups)
                                            for column in (group_col, proposal_group, failure_group))  # fmt: skip
    models_of = np.bincount(model_groups[(model_groups >= 0) & (model_groups < run.groups)], minlength=run.groups)
    result = []
    for group in range(run.groups):
        mine = epochs_of(group)
        p_mine = proposals_of(group)
        s_start, s_end = searched[p_mine], proposed[p_mine]
        u_start, u_end = proposed[p_mine], setup_end[p_mine]
        has_setup = ~np.isnan(u_end) & (u_end > u_start)
        u_start, u_end = u_start[has_setup], u_end[has_setup]
        g_start, g_end = proposed[p_mine], given_up_end[p_mine]
        was_given_up = ~np.isnan(g_end) & (g_end > g_start)
        g_start, g_end = g_start[was_given_up], g_end[was_given_up]
        covered = union(
            np.concatenate((start[mine], s_start, u_start, g_start)),
            np.concatenate((end[mine], s_end, u_end, g_end)),
            gap=IDLE_GAP_MIN_SECONDS,
        )
        idle_start, idle_end = gaps(*covered, 0.0, active_time)
        long_enough = idle_end - idle_start > IDLE_GAP_MIN_SECONDS
        result.append(
            GroupTime(
                group=group,
                epoch_start=start[mine],
                epoch_end=end[mine],
                epoch_task=task_col[mine],
                search=(s_start, s_end),
                setup=(u_start, u_end),
                given_up=(g_start, g_end),
                failures=failure_times[failures_of(group)],
                compile=(start[mine][traced[mine]], start[mine][traced[mine]] + compiling[mine][traced[mine]]),
                idle_start=idle_start[long_enough],
                idle_end=idle_end[long_enough],
                models=int(models_of[group]),
                epochs=len(mine),
            )
        )
    return result


def by_group(groups: np.ndarray, count: int):
    """``of(g)``: the indices of ``groups`` equal to ``g``, in their order, for ``g`` in ``range(count)``.

    One stable sort (O(n log n)) and then a slice per group, where a mask per group costs O(n) each.
    """
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(count + 1), side="left")
    return lambda group: order[bounds[group] : bounds[group + 1]]


def _active_or_nan(run: RunModel, proposals: list, end: str) -> np.ndarray:
    """When each proposal's task logged its ``end`` (``done`` or ``failure``) on the active axis; NaN where none.

    (The active axis maps a missing time to 0, which would hide the span.)
    """
    wall = np.array([getattr(getattr(run.tasks[p.task], end), "time", np.nan) for p in proposals], dtype=float)
    known = ~np.isnan(wall)
    return np.where(known, run.active(np.where(known, wall, 0.0)), np.nan)


@dataclass
class TimeSplit:
    """Where the groups' time went, in group-seconds (groups × active time in all)."""

    group_seconds: float
    compute: float
    evaluation: float
    data_wait: float
    compile: float
    other_in_epochs: float
    search: float
    setup: float
    idle: float
    given_up: float = 0.0

    def rows(self) -> list[tuple[str, float, str]]:
        """(category, group-seconds, what it is) for a table."""
        return [
            ("training compute", self.compute, "training steps (the epochs' `compute`)"),
            ("evaluation", self.evaluation, "validation after each epoch"),
            ("data wait", self.data_wait, "steps waiting for the input pipeline"),
            ("compilation", self.compile, "steps and validation batches that traced or compiled a new function "
             "(logs before this field: inside training compute)"),
            ("other, within epochs", self.other_in_epochs, "epoch wall time not in the four above"),
            ("search", self.search, "leaders generating the next model (network morphism + tuner), on CPUs"),
            ("set-up", self.setup, "from a model's proposal to its first epoch: build, weight transfer, compile"),
            ("given up at the time limit", self.given_up, "models that ended with no epoch: a first epoch judged "
             "after a few steps to end after the time limit, or a Stop before it began"),
            ("idle", self.idle, f"no epoch, search, set-up or model given up (holes > {IDLE_GAP_MIN_SECONDS:g} s)"),
        ]

    def share(self, seconds: float) -> float:
        return seconds / self.group_seconds if self.group_seconds > 0 else 0.0


def time_split(run: RunModel, groups: list[GroupTime], active_time: float) -> TimeSplit:
    """Sum the epochs' own accounting, the searches, the set-ups and the idle gaps."""
    duration = np.clip(run.column("end") - run.column("start"), 0, None)
    compute = float(np.nansum(run.column("compute")))
    evaluation = float(np.nansum(run.column("evaluation")))
    data_wait = float(np.nansum(run.column("data_wait")))
    compiling = float(np.nansum(run.column("compile")))
    other = max(0.0, float(np.nansum(duration)) - compute - evaluation - data_wait - compiling)
    search = float(sum(float(np.sum(g.search[1] - g.search[0])) for g in groups))
    setup = float(sum(float(np.sum(g.setup[1] - g.setup[0])) for g in groups))
    given_up = float(sum(float(np.sum(g.given_up[1] - g.given_up[0])) for g in groups))
    idle = float(sum(g.idle for g in groups))
    return TimeSplit(len(groups) * active_time, compute, evaluation, data_wait, compiling, other, search, setup, idle,
                     given_up)  # fmt: skip


@dataclass
class Peak:
    """The run's measured peak (sum over groups of their matrix-multiply throughput)."""

    ops_per_second: float | None
    groups_measured: int
    groups: int
    precision: str
    devices: list[str] = field(default_factory=list)
    why_not: str = ""


def measured_peak(run: RunModel) -> Peak:
    """Sum the last ``peak`` event of each group; say why there is none."""
    config = run.config
    devices = sorted({str(p.get("device", "?")) for p in run.peaks.values()})
    precision = ", ".join(sorted({str(p.get("precision", "?")) for p in run.peaks.values()}))
    if run.peaks:
        total = float(sum(float(p.get("ops_per_second", 0.0)) for p in run.peaks.values()))
        return Peak(total, len(run.peaks), run.groups, precision, devices)
    if config.get("peak_probe") is False:
        why = "the peak probe was off (`--no-peak-probe`)"
    elif "peak_probe" not in config:
        why = "the log has no peak events and its configuration no `peak_probe`: a version without the probe wrote it"
    else:
        why = "the probe was on but no group reported a peak (the run ended before the groups were ready?)"
    return Peak(None, 0, run.groups, "", [], why)


def no_monitor_reason(run: RunModel, active_time: float) -> str:
    """Why a log has no monitor samples, as far as the log can tell."""
    config = run.config
    interval = config.get("monitor_interval")
    if interval is None:
        return ("its configuration has no `monitor_interval`: it was written by an aiperf_mpi without the "
                "utilisation monitor")  # fmt: skip
    if float(interval) <= 0:
        return "the monitor was off (`monitor_interval` = 0)"
    if active_time < float(interval):
        return f"the run ({active_time:.0f} s active) was shorter than one monitor interval ({float(interval):g} s)"
    return (f"the monitor was on (every {float(interval):g} s) but no sample reached the log: it stopped on "
            "every node (the run's output has a `utilisation monitor … stopped` line)")  # fmt: skip


@dataclass
class RunSummary:
    """The figures that compare runs (scaling, side by side) and head the report."""

    name: str
    ranks: int | None
    nodes: int | None
    groups: int
    dataset: str
    precision: str
    segments: int
    active_time: float
    score: float
    regulated_score: float | None
    valid: bool
    broken_rules: list[str]
    peak: float | None
    efficiency: float | None
    models_trained: int
    models_failed: int
    epochs: int
    total_ops: int
    best_accuracy: float | None
    models_per_minute: float
    ops_per_group: float
    staging_seconds: float | None
    split: TimeSplit
    truncated_log: bool

    @property
    def best_error(self) -> float | None:
        return None if self.best_accuracy is None else 1.0 - self.best_accuracy


def summarise(run: RunModel, score: Score, groups: list[GroupTime] | None = None) -> RunSummary:
    """The comparable figures of one run (computes the group times unless given)."""
    groups = group_times(run, score.active_time) if groups is None else groups
    peak = measured_peak(run)
    nodes = None
    if run.system and run.system.get("nodes"):
        nodes = int(run.system["nodes"])
    elif run.layout and run.layout.get("node_count"):
        nodes = int(run.layout["node_count"])
    staging = [float(s.get("seconds", 0.0)) for s in run.staging]
    return RunSummary(
        name=run.run_dir.name,
        ranks=run.ranks,
        nodes=nodes,
        groups=run.groups,
        dataset=str(run.config.get("dataset", "?")),
        precision=str(run.precision),
        segments=score.segments,
        active_time=score.active_time,
        score=score.score,
        regulated_score=score.regulated_score,
        valid=score.valid,
        broken_rules=[name for name, rule in score.rules.items() if not rule["ok"]],
        peak=peak.ops_per_second,
        efficiency=None if not peak.ops_per_second else score.score / peak.ops_per_second,
        models_trained=score.models_trained,
        models_failed=score.models_failed,
        epochs=score.epochs,
        total_ops=score.total_ops,
        best_accuracy=score.best_accuracy,
        models_per_minute=score.models_trained / (score.active_time / 60.0) if score.active_time > 0 else 0.0,
        ops_per_group=score.score / run.groups if run.groups else 0.0,
        staging_seconds=max(staging) if staging else None,
        split=time_split(run, groups, score.active_time),
        truncated_log=score.truncated_log,
    )


def load_summary(run_dir) -> RunSummary:
    """Read one run's log and summarise it (what scaling and comparison need; no plots)."""
    run = read_model(run_dir)
    return summarise(run, run_score(run))
