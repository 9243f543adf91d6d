"""The family ``score``: the score recomputed by :mod:`aiperf_mpi.results.score` against ``score.json`` and
each ``score`` event (:class:`ScoreRule`), the scored window (:class:`WindowRule`) and the validity rules
(:class:`ValidityRules`): three rules of the registry (:data:`analysis.verify.registry.FAMILIES`), which hold the
same recomputed score and ``score.json``, each computed or read once, by the shared view
(:meth:`analysis.verify.view.RunView.score`, :meth:`~analysis.verify.view.RunView.recorded_score`).

The segments, their windows and the score's columns are the run's model's (``run.model``), so the score is
the one the run's own scorer makes of the same log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import Segment, Timeline, epoch_values, time_limit
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.rules import shown_value
from aiperf_mpi.results.score import MAX_GRID_SAMPLES, Score, run_step, score_inputs, stopped_by_signal
from analysis.checks import Check, Run, differences, same, short

SCORE_FILE = "score.json"
SCORE_FIELDS = ("score", "regulated_score", "active_time", "total_ops", "best_accuracy", "models_trained",
                "models_failed", "epochs", "segments", "valid", "rules", "truncated_log")  # fmt: skip
STABILITY_FIELDS = ("ops_cv_last_half", "ops_change_last_quarter", "energy")
"""how settled the score is (:mod:`aiperf_mpi.results.stability`), and what its window cost (``energy``, issue 53):
compared wherever the record has them (a run older than these figures has not)"""
STRATEGIES = {"bayesian": {"seed", "explore", "gp-ucb"}, "random": {"seed", "random"}}
"""the search strategies a proposal may name under each ``--search``"""
STOP_REASONS = ("time limit", "max models", "done", "all groups lost", runlog.SIGNAL_REASON + "SIGTERM",
                runlog.SIGNAL_REASON + "SIGUSR1", runlog.HANG_REASON, runlog.CLOSED_REASON)
"""the reasons the master writes in a ``run_stop`` (job/master.py, signals.py), and the job script's close of a
segment whose launch ended first (job/close.py)"""
WINDOW_RULE = "rule: the scored window is the time limit"


class ScoreRule:
    """The score recomputed from the log, against ``score.json`` and each ``score`` event; the scored window; one
    row per validity rule, with what the log's evidence says against its claims (precision, search): all of
    it from the run's model (:mod:`aiperf_mpi.results.score` of its :class:`~aiperf_mpi.results.logmodel.Timeline`).
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("score")
        self.open_end = math.nan
        """the open segment's end in the model as of the event before (what a score event there is compared at)"""
        self.score: Score | None = None
        """the recomputed score, once the walk has ended (None: the log cannot be scored)"""

    @property
    def model(self) -> Timeline:
        return self.run.model if self.run.model is not None else Timeline()

    def each(self, event: dict, _: int) -> bool:
        """Every event of a segment is in the score; a score event is compared with the events before it, an epoch
        must be one the score can add up (else the log cannot be scored: :class:`runlog.UnreadableLog`)."""
        name, segments = event[runlog.EVENT], self.model.segment_records
        if name == runlog.RUN_START:  # a limit past the floats' range: a number too large to read, as the scorer says
            time_limit(event.get("config", {}))
        if not segments:
            return False
        if name == runlog.EPOCH:
            epoch_values(event["end"], event["ops"], event.get("val_accuracy"))
        elif name == runlog.SCORE:
            self._score_event(event, segments[-1])
        self.open_end = segments[-1].end
        return True

    def _score_event(self, event: dict, segment: Segment) -> None:
        """The score as of the event before: in a segment still open, the model moved its end to this event."""
        moved, segment.end = segment.end, (segment.end if segment.stop is not None else self.open_end)
        try:
            score = score_inputs(self.model, run_step(self.model.config))
        except ValueError as exc:
            self.check.problems.append(f"segment {segment.number}'s score event: {exc}")
            return
        finally:
            segment.end = max(segment.end, moved)
        fields = tuple(f for f in SCORE_FIELDS if f != "truncated_log")  # added to the event later than the score
        fields += tuple(f for f in STABILITY_FIELDS if f in event)
        for line in differences(event, score.to_dict(), fields):
            self.check.problems.append(f"segment {segment.number}'s score event: {line}")

    def finish(self) -> list[Check]:
        """The score against score.json and the log's score events; what the log says against a validity claim
        that no rule of the score has any more."""
        check = self.check
        score, unscored = self.run.view.score(self.model, self.run.truncated)
        if unscored:
            check.problems.append(f"the log cannot be scored: {unscored}")
        self.score = score
        recorded, unread = self.run.view.recorded_score(self.run.run_dir / SCORE_FILE)
        if unread:
            check.problems.append(unread)
        if score is not None and recorded is not None:
            recomputed = score.to_dict()
            fields = tuple(f for f in SCORE_FIELDS if f != "rules")  # the rules have a row each
            fields += tuple(f for f in STABILITY_FIELDS if f in recorded)
            check.problems += [f"{SCORE_FILE}: {line}" for line in differences(recorded, recomputed, fields)]
            grid = recorded.get("grid")
            if not isinstance(grid, list) or len(grid) != len(recomputed["grid"]):
                check.problems.append(f"{SCORE_FILE}: its grid has {len(grid) if isinstance(grid, list) else 'no'} "
                                      f"samples, recomputed {len(recomputed['grid'])}")  # fmt: skip
            else:  # one line for the grid: a changed epoch moves every sample after it
                pairs = enumerate(zip(recomputed["grid"], grid, strict=True))
                wrong = [(index, differences(theirs, mine, tuple(mine)) if isinstance(theirs, dict)
                          else ["not an object"]) for index, (mine, theirs) in pairs]  # fmt: skip
                wrong = [(index, lines) for index, lines in wrong if lines]
                if wrong:
                    index, lines = wrong[0]
                    check.problems.append(f"{SCORE_FILE}: {len(wrong)} of {len(grid)} grid samples differ, the "
                                          f"first at t = {recomputed['grid'][index]['active_time']:.1f} s: "
                                          f"{'; '.join(lines)}")  # fmt: skip
        if score is not None:
            regulated = "–" if score.regulated_score is None else f"{score.regulated_score / 1e9:.4f} GOPS"
            check.summary = (f"recomputed: {score.score / 1e9:.4f} GOPS, regulated {regulated}, {score.total_ops:,} "
                             f"operations in {score.active_time:.1f} s; compared with {SCORE_FILE} and the log's "
                             "score event(s)")  # fmt: skip
        rules = score.rules if score is not None else {}
        check.problems += [line for name, line in _evidence(self.model, self.run.view).items() if name not in rules]
        return [check]


class WindowRule:
    """The row ``scored window``: each segment the run ended itself counts its whole time limit."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def finish(self) -> list[Check]:
        return [_window(*_scored(self.run))]


class ValidityRules:
    """The rows ``rule *name*``, one a validity rule of the score: recomputed, equal to ``score.json``'s, and what
    the log says against the rule's claim (precision, search)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def finish(self) -> list[Check]:
        model, score, recorded = _scored(self.run)
        evidence = _evidence(model, self.run.view)
        rows = []
        for name, rule in (score.rules if score is not None else {}).items():
            row = Check(f"rule {name}")
            met = "met" if rule["ok"] else "not met"
            row.summary = f"{shown_value(rule['value'])} (needs {rule['need']}): {met}"
            rules = (recorded or {}).get("rules")
            theirs = rules.get(name) if isinstance(rules, dict) else None
            if recorded is not None and not same(theirs, rule):
                row.problems.append(f"{SCORE_FILE} says {short(theirs)}, recomputed {short(rule)}")
            if name in evidence:
                row.problems.append(evidence[name])
            rows.append(row)
        return rows


def _scored(run: Run) -> tuple[Timeline, Score | None, dict | None]:
    """The run's model, the score recomputed from it and ``score.json``: the shared view's, computed once."""
    model = run.model if run.model is not None else Timeline()
    score, _ = run.view.score(model, run.truncated)  # the score row names why there is none
    recorded, _ = run.view.recorded_score(run.run_dir / SCORE_FILE)
    return model, score, recorded


def _window(model: Timeline, score: Score | None, recorded: Mapping | None) -> Check:
    """The scored window: each segment the run ended itself counts its whole time limit (one line per breach).

    A ``run_stop`` reason decides whether a segment's window is its time
    limit (the run ended it: the limit, every group stopped because no new
    model fits, the model budget) or its wall span (a signal); so the reason
    must be one the master writes and agree with what else the log says.
    The run's window is never less than the latest end a segment declared
    (its start on the active axis plus its time limit: results/score.py), so
    a signal shortens no run; ``score.json`` must be over that window.
    """
    check = Check("scored window")
    windows = model.windows
    parts = []
    for segment, window in zip(model.segment_records, windows, strict=True):
        name, limit = f"segment {segment.number}", segment.limit
        if limit is None:
            check.problems.append(f"{name}: its run_start's configuration has no positive time_limit, so its "
                                  f"scored window cannot be known ({WINDOW_RULE})")  # fmt: skip
        stop = segment.stop
        if stop is None:
            parts.append(f"{name} {window:.1f} s (killed: on the axis as it ran)")
            continue
        reason = stop.get("reason")
        groups, early = len(segment.group_sizes), stop.get("groups_stopped_early")
        if reason not in STOP_REASONS:
            check.problems.append(f"{name}: run_stop reason {short(reason)} is none the run writes "
                                  f"({', '.join(STOP_REASONS)}) ({WINDOW_RULE})")  # fmt: skip
        elif stopped_by_signal(reason) and isinstance(early, int) and groups and early >= groups:
            check.problems.append(f"{name}: run_stop says {reason!r}, but all {groups} group(s) had stopped "
                                  f"because no new model fit before the time limit: the run ended itself "
                                  f"({WINDOW_RULE})")  # fmt: skip
        elif reason == "max models" and not segment.config.get("max_models"):
            check.problems.append(f"{name}: run_stop says 'max models', but the configuration sets no "
                                  f"max_models ({WINDOW_RULE})")  # fmt: skip
        cause = {runlog.HANG_REASON: "a hang", runlog.CLOSED_REASON: "closed after its launch ended"}
        how = (f"{cause.get(reason, 'a signal')}: on the axis as it ran"
               if stopped_by_signal(reason) else f"ended itself: {reason}")  # fmt: skip
        parts.append(f"{name} {window:.1f} s (ran {segment.end - segment.start:.1f} s of its {_limit(limit)} "
                     f"limit, {how})")
    if score is not None and score.active_time > sum(windows) and not same(score.active_time, sum(windows)):
        parts.insert(0, f"the run {score.active_time:.1f} s, what its segments declared (they ran "
                        f"{sum(windows):.1f} s: a signal or a kill shortens no run)")  # fmt: skip
    if score is not None and recorded is not None:
        theirs = recorded.get("active_time")
        if isinstance(theirs, int | float) and not isinstance(theirs, bool) and theirs < score.active_time and \
                not same(theirs, score.active_time):  # fmt: skip
            check.problems.append(f"{SCORE_FILE} is scored over {theirs:g} s, the run's window is "
                                  f"{score.active_time:g} s ({WINDOW_RULE})")  # fmt: skip
    if score is not None and score.grid_capped:
        check.notes.append(f"grid capped: the step {run_step(model.config):g} s would give more than "
                           f"{MAX_GRID_SAMPLES:,} samples; sampled every {score.grid_step:g} s (the score is "
                           "the same)")  # fmt: skip
    check.summary = "; ".join(parts[:4]) + (f"; … and {len(parts) - 4} more" if len(parts) > 4 else "")
    return check


def _evidence(model: Timeline, view: object) -> dict[str, str]:
    """What the log says against its own validity claims, by rule: the precision the probe ran at, the searches
    named (the view's count of the tasks' first proposals)."""
    evidence = []
    config = model.config or {}
    precision = logged_precision(config)
    precision = precision if isinstance(precision, str) else short(precision)
    probed = {peak["precision"] for segment in model.segment_records for peak in segment.peaks}
    if probed - {precision}:
        evidence.append(f"precision: the configuration says {precision}, the peak probe ran at "
                        f"{', '.join(sorted(probed))}")  # fmt: skip
    search = config.get("search", "bayesian")
    allowed = STRATEGIES.get(search) if isinstance(search, str) else None
    strategies = getattr(view, "strategies", {})
    foreign = {s: n for s, n in strategies.items() if allowed is not None and s not in allowed}
    if foreign:
        evidence.append(f"algorithms: the configuration says {search}, proposals name "
                        + ", ".join(f"{s} ({n})" for s, n in sorted(foreign.items())))  # fmt: skip
    return {line.split(":", 1)[0]: line for line in evidence}


def _limit(limit: float | None) -> str:
    return "unrecorded" if limit is None else f"{limit:g} s"
