"""The family ``score``: the score recomputed by :mod:`aiperf_mpi.results.score` against ``score.json`` and
each ``score`` event (:func:`score`, :func:`score_events`), the scored window (:func:`scored_window`) and the
validity rules (:func:`validity_rules`, a row each): plain functions of the run's units
(:mod:`analysis.verify.units`), which hold the same recomputed score and ``score.json``, each computed or read once
by the unit stream (the run unit's ``score`` and ``recorded``; a score event's, as of it).

The segments, their windows and the score's columns are the run's model's (``run.model``), so the score is
the one the run's own scorer makes of the same log.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import Timeline
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.rules import shown_value
from aiperf_mpi.results.score import MAX_GRID_SAMPLES, Score, run_step, stopped_by_signal
from analysis.checks import Check, differences, same, short
from analysis.verify.units import END, Findings, RunUnit, SegmentUnit, note, problem, summary

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


def score_events(segment: SegmentUnit) -> Findings:
    """(score) each ``score`` event of the log against the score recomputed as of it"""
    for logged in segment.scores:
        where = f"segment {segment.record.number}'s score event"
        if logged.recomputed is None:
            yield problem(logged.number, f"{where}: {logged.unscored}")
            continue
        fields = tuple(f for f in SCORE_FIELDS if f != "truncated_log")  # added to the event later than the score
        fields += tuple(f for f in STABILITY_FIELDS if f in logged.event)
        for line in differences(logged.event, logged.recomputed.to_dict(), fields):
            yield problem(logged.number, f"{where}: {line}")


def score(run: RunUnit) -> Findings:
    """the score recomputed from the log (`aiperf_mpi/results/score.py`, the run's `score_step`) equals
    `score.json` — score, regulated score, active time, operations, best accuracy, counts, validity, every grid
    sample and, where the record has one, its `energy` (joules, watts and operations per joule from the nodes'
    readings, `aiperf_mpi/results/energy.py`) — and every `score` event of the log, as of that event"""
    recomputed_score, recorded = run.score, run.recorded
    if run.unscored:
        yield problem(END, f"the log cannot be scored: {run.unscored}")
    if run.unread:
        yield problem(END, run.unread)
    if recomputed_score is not None and recorded is not None:
        recomputed = recomputed_score.to_dict()
        fields = tuple(f for f in SCORE_FIELDS if f != "rules")  # the rules have a row each
        fields += tuple(f for f in STABILITY_FIELDS if f in recorded)
        for line in differences(recorded, recomputed, fields):
            yield problem(END, f"{SCORE_FILE}: {line}")
        grid = recorded.get("grid")
        if not isinstance(grid, list) or len(grid) != len(recomputed["grid"]):
            yield problem(END, f"{SCORE_FILE}: its grid has {len(grid) if isinstance(grid, list) else 'no'} samples, "
                               f"recomputed {len(recomputed['grid'])}")  # fmt: skip
        else:  # one line for the grid: a changed epoch moves every sample after it
            pairs = enumerate(zip(recomputed["grid"], grid, strict=True))
            wrong = [(index, differences(theirs, mine, tuple(mine)) if isinstance(theirs, dict)
                      else ["not an object"]) for index, (mine, theirs) in pairs]  # fmt: skip
            wrong = [(index, lines) for index, lines in wrong if lines]
            if wrong:
                index, lines = wrong[0]
                yield problem(END, f"{SCORE_FILE}: {len(wrong)} of {len(grid)} grid samples differ, the first at "
                                   f"t = {recomputed['grid'][index]['active_time']:.1f} s: "
                                   f"{'; '.join(lines)}")  # fmt: skip
    if recomputed_score is not None:
        regulated = "–" if recomputed_score.regulated_score is None else \
            f"{recomputed_score.regulated_score / 1e9:.4f} GOPS"  # fmt: skip
        yield summary(f"recomputed: {recomputed_score.score / 1e9:.4f} GOPS, regulated {regulated}, "
                      f"{recomputed_score.total_ops:,} operations in {recomputed_score.active_time:.1f} s; compared "
                      f"with {SCORE_FILE} and the log's score event(s)")  # fmt: skip
    rules = recomputed_score.rules if recomputed_score is not None else {}
    for name, line in _evidence(run.model, run.strategies).items():
        if name not in rules:
            yield problem(END, line)


def scored_window(run: RunUnit) -> Findings:
    """each segment the run ended itself (its time limit, every group stopped because no new model fit, `max
    models`) counts its whole `time_limit`, one a signal or a kill ended its span as it ran; a `run_stop`'s
    `reason` is one the master writes and agrees with the log (no signal when every group had stopped early, no
    `max models` without `max_models`); every `run_start`'s configuration has a positive `time_limit`;
    `score.json` is scored over no less than the run's window"""
    check = _window(run.model, run.score, run.recorded)
    yield from (problem(END, line) for line in check.problems)
    yield from (note(END, line) for line in check.notes)
    yield summary(check.summary)


def validity_rules(run: RunUnit) -> Findings:
    """each validity rule recomputed and equal to `score.json`'s; the log's evidence agrees with the configuration:
    the peak probe ran at the configured precision, and no proposal names a search strategy other than the configured
    search's. The rule `dataset` (rules 1.1) needs ImageNet with the counts of a documented split (`IMAGENET_SPLITS`
    in `aiperf_mpi/results/rules.py`: ILSVRC-2012's 1,281,167 train / 50,000 validation images of 1,000 classes,
    the only one so far): any other ImageNet-format set — the small ones the tests write — verifies as an
    *unofficial* run whose rule row names its counts, and the `configuration` row notes it; a log older than the
    data check is judged by the data set's name"""
    evidence = _evidence(run.model, run.strategies)
    for name, rule in (run.score.rules if run.score is not None else {}).items():
        row = f"rule {name}"
        met = "met" if rule["ok"] else "not met"
        yield summary(f"{shown_value(rule['value'])} (needs {rule['need']}): {met}", row)
        rules = (run.recorded or {}).get("rules")
        theirs = rules.get(name) if isinstance(rules, dict) else None
        if run.recorded is not None and not same(theirs, rule):
            yield problem(END, f"{SCORE_FILE} says {short(theirs)}, recomputed {short(rule)}", row)
        if name in evidence:
            yield problem(END, evidence[name], row)


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


def _evidence(model: Timeline, strategies: Mapping[str, int]) -> dict[str, str]:
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
    foreign = {s: n for s, n in strategies.items() if allowed is not None and s not in allowed}
    if foreign:
        evidence.append(f"algorithms: the configuration says {search}, proposals name "
                        + ", ".join(f"{s} ({n})" for s, n in sorted(foreign.items())))  # fmt: skip
    return {line.split(":", 1)[0]: line for line in evidence}


def _limit(limit: float | None) -> str:
    return "unrecorded" if limit is None else f"{limit:g} s"
