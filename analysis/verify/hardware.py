"""verify's bounds from outside the run: the hardware table and the inventory (rule family ``hardware``).

The ``physics`` row holds each epoch to its group's *measured* peak, which
the run writes itself.  This family holds every rate to figures the run
cannot choose: the versioned table of what the hardware named in the
``system`` event can compute (:mod:`aiperf_mpi.results.hardware`), and the
world MPI gave the job, which the ``system`` and ``layout`` events must
describe once and alike (:mod:`aiperf_mpi.results.inventory`).  Two rows, each
filled by plain functions of the run's units (:mod:`analysis.verify.units`),
listed in the registry as (row, function) pairs:

- ``inventory`` (:func:`inventory` of a segment, its summary :func:`inventory_summary` of the run): per segment,
  the master, the relays and the groups partition the world the system event gathered; every rank is on the host
  the system puts it; a host gives one accelerator a training rank; a resumed segment runs on hardware of the kinds
  the first segment had (the hosts' names may change with the allocation, their processors and accelerators may
  not), unless its resume says why (``--resume RUN_DIR --hardware-changed REASON``, its ``run_start``'s
  ``config.hardware_changed``): the reason is then shown, and the segment, as every segment, is bounded by its own
  ``system`` and probe events, never by the first's.  The segment carries its ``run_start``, ``system`` and
  ``layout`` events in order, and the run's first hardware from before it (``first_system``);
- ``hardware bounds`` (:func:`hardware_bounds` of a segment's probes and scores, :func:`epoch_bounds` of a task's
  epochs, :func:`stray_epoch_bounds` and :func:`early_bounds` of the epochs and probes outside a task or before
  the first segment, :func:`bounds_counted` of the run): each group's probe, each epoch's training rate
  (``ops_train ÷ (compute + compile)``) and validation rate (``ops_validation ÷ (evaluation + compile)``), and the
  score, under the table's bound of the hardware the group ran on, at the run's precision.  Hardware the table
  does not know is *not recorded*: such a run is not verified until the table names it.  A rehearsal's rates are
  its stand-in's: noted, not bounded.  The bounds depend on the log's order (a segment's first ``system`` and
  ``layout``, the probes read so far): each event carries them as of itself (:mod:`analysis.verify.bounds`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from aiperf_mpi.results import runlog
from aiperf_mpi.results.hardware import FAST_ALGORITHMS, HARDWARE_TABLE_VERSION, STAND_IN_DEVICE
from aiperf_mpi.results.inventory import inventory_problems
from aiperf_mpi.results.resumable import HARDWARE_CHANGED
from analysis.verify.bounds import BoundsAsOf, bound_of
from analysis.verify.units import (
    END,
    Findings,
    Logged,
    Misplaced,
    RunUnit,
    SegmentUnit,
    StrayEvent,
    TaskUnit,
    count,
    missing,
    most,
    note,
    problem,
    summary,
)

HARDWARE_RULE = "rule: a resume on other hardware says why (--hardware-changed)"
STAND_IN_SLACK = 1e-6
"""the share by which a rehearsal's phase may fall short of its stand-in's time (the float arithmetic of the plan)"""
CLOCK_RESOLUTION = 1e-3
"""seconds a phase may fall short besides: a wait is timed with ``time.monotonic`` and logged rounded"""
PROBED, EPOCHS, STAND_IN_EPOCHS = "probes bounded", "epochs bounded", "rehearsal epochs"
"""the counts the ``hardware bounds`` row's functions yield for its summary"""
HIGHEST, UNBOUNDED = "highest ratio", "unbounded: "
"""the largest of a rate's ratio to its bound (the summary's highest), and the prefix of the counts that say why a
group has no bound (each reason once, the row's *not recorded* lines)"""


def _segment_number(event: dict, number: int) -> int:
    """The segment a ``run_start`` opens, as it logs it (its event number when it logs none)."""
    return event.get(runlog.SEGMENT, number)


def _census(system: Mapping) -> dict[str, tuple[int, int]]:
    """The hosts a system description lists, by kind (processor, vendor, ISA flags, accelerators): how many of each
    kind, and the most logical processors one of them has.  A resume on part of the first allocation (fewer hosts,
    or SMT off) is the same hardware; more hosts or more processors of a kind are not."""
    census: dict[str, tuple[int, int]] = {}
    for h in system.get("hosts") if isinstance(system.get("hosts"), list) else []:
        if not isinstance(h, Mapping):
            continue
        devices = sorted(map(str, h.get("accelerators") or [])) if isinstance(h.get("accelerators"), list) else "?"
        kind = f"{h.get('cpu')} ({h.get('cpu_vendor')}; {' '.join(map(str, h.get('cpu_flags') or []))}) with {devices}"
        cores = h.get("cores") if isinstance(h.get("cores"), int) and not isinstance(h.get("cores"), bool) else 0
        hosts, most = census.get(kind, (0, 0))
        census[kind] = (hosts + 1, max(most, cores))
    return census


def _beyond(census: Mapping[str, tuple[int, int]], first: Mapping[str, tuple[int, int]]) -> list[str]:
    """What a later segment's hosts have that the first segment's did not: new kinds, more hosts or processors."""
    more = []
    for kind, (hosts, cores) in sorted(census.items()):
        was_hosts, was_cores = first.get(kind, (0, 0))
        if hosts > was_hosts or cores > was_cores:
            more.append(f"{hosts} × {kind}, {cores} logical processors" if kind in first else kind)
    return more


# ------------------------------------------------------------------------------------------------------ inventory


def inventory(segment: SegmentUnit) -> Findings:
    """each segment has one `system` and one `layout` event; the master, the relays and the groups of the `layout`
    partition the world of the `system` event (its `ranks`, each rank on exactly one of its `hosts`, each host
    listed once with its ranks): no rank in two groups, groups numbered 0, 1, …, every rank on the host the `system`
    event puts it on; a later segment runs only on kinds of host the first had (processor, vendor, ISA flags,
    accelerators: names and counts may change with the allocation), unless its resume says why (`--hardware-changed
    REASON`, its `run_start`'s `config.hardware_changed`, shown as a note): every segment is bounded by its own
    `system` and probes"""
    first_census = _census(segment.first_system) if segment.first_system is not None else None
    events = sorted((*segment.run_starts, *segment.systems, *segment.layouts), key=lambda logged: logged.number)
    number: object = 0
    reason, system, layout, systems, layouts = "", None, None, 0, 0
    for logged in events:  # each run_start opens the shared view's segment afresh, as it did for the old walk
        event, at, name = logged.event, logged.number, logged.event[runlog.EVENT]
        if name == runlog.RUN_START:
            if logged is not segment.run_starts[0] and (system is None or layout is None):
                yield missing(at, f"segment {number}: no system description or no layout")
            config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
            said = config.get(HARDWARE_CHANGED)
            number, reason = _segment_number(event, at), said.strip() if isinstance(said, str) else ""
            system, layout, systems, layouts = None, None, 0, 0
            continue
        if name == runlog.SYSTEM:
            systems += 1
            system = system if system is not None else event
            if systems > 1:
                yield problem(at, f"event {at} (system): segment {number} has a second system description (one a "
                                  "segment: the bounds read the first)")  # fmt: skip
                continue
            census = _census(event)
            if first_census is None:
                first_census = census
            elif new := _beyond(census, first_census)[:3]:  # part of the first allocation is fine
                if reason:  # said why: bounded by its own system and probes
                    yield note(at, f"segment {number} runs on other hardware than the first segment ({new}), as "
                                   f"its resume says: {reason!r}")  # fmt: skip
                else:
                    yield problem(at, f"segment {number}: hosts of kinds the first segment did not have, or more of "
                                      f"them: {new}, and its resume does not say why ({HARDWARE_RULE})")  # fmt: skip
        else:
            layouts += 1
            layout = layout if layout is not None else event
            if layouts > 1:
                yield problem(at, f"event {at} (layout): segment {number} has a second layout (one a segment)")
                continue
        if system is not None and layout is not None:  # both read: the world they describe
            yield from (problem(at, f"segment {number}: {line}") for line in inventory_problems(layout, system))
    if system is None or layout is None:
        yield missing(END if segment.closed_at is None else segment.closed_at,
                      f"segment {number}: no system description or no layout")  # fmt: skip


def inventory_summary(run: RunUnit) -> Findings:
    """(inventory) what the row held, said once the log is read"""
    yield summary("the master, relays and groups partition the world the system event gathered; every rank on its "
                  "host, one accelerator a training rank; every segment on the same kinds of host, or its resume "
                  "says why")  # fmt: skip


# ------------------------------------------------------------------------------------------------------ bounds


def hardware_bounds(segment: SegmentUnit) -> Findings:
    """each group's probe (`peak`) at most what the hardware the `system` event names can compute at the run's
    precision, by the versioned table of `aiperf_mpi/results/hardware.py`, which the run does not write
    (accelerators: the vendor's dense peak, one a rank at most; CPUs: logical processors × the vendor's highest
    clock × the ISA flags' operations a cycle, shared among the host's training ranks); each epoch's training rate
    `ops_train ÷ (compute + compile)` and validation rate `ops_validation ÷ (evaluation + compile)`, and every
    `score`, at most `FAST_ALGORITHMS` = 1.5 × that (fast convolution algorithms do fewer multiplications than the
    analytic count); hardware the table does not know, or a GPU probe on a host that lists none, is *not recorded*
    (not verified until the table names it); a rehearsal's epochs are its stand-in's: each phase no shorter than its
    operations take at the stated `rehearse_rate` × the group's ranks (the stand-in waits them out)"""
    for peak in segment.peaks:
        yield from _probe(peak, peak.bounds)
    for score in segment.scores:
        yield from _score(score, score.bounds)


def epoch_bounds(task: TaskUnit) -> Findings:
    """(hardware bounds) each epoch of a task, under its group's bound as of the epoch"""
    for epoch in task.epochs:
        yield from _epoch(epoch, epoch.bounds)


def stray_epoch_bounds(stray: StrayEvent) -> Findings:
    """(hardware bounds) an epoch of a task not open, as any other"""
    if stray.event[runlog.EVENT] == runlog.EPOCH:
        yield from _epoch(stray, stray.bounds)


def early_bounds(event: Misplaced) -> Findings:
    """(hardware bounds) a probe, an epoch or a score before the run's first segment (a probe's own figures are
    judged; nothing is bounded before a `run_start`)"""
    if event.after_stop_of is not None:  # after a run_stop: its segment or task carries it
        return
    judge = {runlog.PEAK: _probe, runlog.EPOCH: _epoch, runlog.SCORE: _score}.get(event.event[runlog.EVENT])
    if judge is not None:
        yield from judge(event, event.bounds)


def bounds_counted(run: RunUnit, counted: Counter) -> Findings:
    """(hardware bounds) the groups without a bound, named once each, and what was held"""
    yield from (missing(END, name.removeprefix(UNBOUNDED)) for name in sorted(counted) if name.startswith(UNBOUNDED))
    if run.bounds is not None and run.bounds.rehearsal:
        yield note(END, "a rehearsal (--rehearse): its rates are the stand-in's, held to its stated rate")
        yield summary(f"a rehearsal: {counted[STAND_IN_EPOCHS]} epochs' phases no shorter than its stand-in's stated "
                      "rate makes them")  # fmt: skip
        return
    highest = counted[HIGHEST]
    yield summary(f"{counted[PROBED]} probe(s) and {counted[EPOCHS]} epochs' training and validation rates ≤ the "
                  f"hardware table {HARDWARE_TABLE_VERSION} (highest {highest:.2f} ×), the score ≤ its groups' "
                  "sum")  # fmt: skip


def _bound(seen: BoundsAsOf | None, group: object) -> tuple[float | None, Findings]:
    """The group's bound as of the event, and the count of why it has none (when it has none)."""
    bound, why = bound_of(seen, group) if seen is not None else (None, "")
    return bound, iter([count(UNBOUNDED + why)] if why else [])


def _hold(at: int, rate: float, bound: float, label: str, what: str, why: str, allowed: float = 1.0) -> Findings:
    """A rate under its bound (× ``allowed``): its ratio counted for the summary's highest, a problem above it."""
    bound *= allowed
    ratio = rate / bound
    yield most(HIGHEST, ratio)
    if ratio > 1.0:
        yield problem(at, f"{label}: {what} {rate / 1e9:.4g} G ops/s is {ratio:.2f} × what the hardware can compute "
                          f"({bound / 1e9:.4g} G ops/s: {why})")  # fmt: skip


def _why(seen: BoundsAsOf | None, group: object) -> str:
    """What the group's bound is made of, as a line above it says."""
    return seen.bounds[group].why if seen is not None and seen.opened else ""  # type: ignore[index]


def _probe(logged: Logged, seen: BoundsAsOf | None) -> Findings:
    """A ``peak`` event: a measurement under its group's bound, each rank's under its device's."""
    event, at = logged.event, logged.number
    label, group = f"event {at} (peak)", event.get("group")
    rehearsal = seen is not None and seen.rehearsal
    if event.get("device") == STAND_IN_DEVICE and not rehearsal:
        yield problem(at, f"{label}: group {group} names the {STAND_IN_DEVICE!r} as its device, but the "
                          "configuration is not a rehearsal (a relabelled rehearsal)")  # fmt: skip
        return
    if not rehearsal:
        yield from _measured(event, at, label)
    bound, unbounded = _bound(seen, group)
    yield from unbounded
    if bound is not None and isinstance(event.get("ops_per_second"), int | float):
        yield count(PROBED)
        yield from _hold(at, float(event["ops_per_second"]), bound, label, "the probe's", _why(seen, group))
    groups = seen.groups if seen is not None else None
    single = groups.one_rank.get(group) if groups is not None and isinstance(group, int) else None
    per_rank = event.get("per_rank")
    if bound is not None and single and isinstance(per_rank, list):
        for rank, figure in enumerate(per_rank):  # a rank drives one device: its probe is under its figure
            if isinstance(figure, int | float) and not isinstance(figure, bool):
                yield from _hold(at, float(figure), single, label, f"rank {rank}'s probe", _why(seen, group))


def _measured(event: dict, at: int, label: str) -> Findings:
    """A probe is a measurement (train/peak.py): a matrix multiplied for some seconds by each of its ranks, the
    group's figure their sum.  One that multiplied nothing (a rehearsal's stand-in with its name changed) or whose
    ranks do not add up is not one."""
    for key in ("matrix_size", "seconds"):
        value = event.get(key)
        if key in event and not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
            yield problem(at, f"{label}: {key} {value!r}: a probe that measured nothing")
    per_rank, total = event.get("per_rank"), event.get("ops_per_second")
    if isinstance(per_rank, list) and isinstance(total, int | float):
        numbers = [v for v in per_rank if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(numbers) != len(per_rank) or len(per_rank) != event.get("ranks", len(per_rank)):
            yield problem(at, f"{label}: per_rank holds {len(per_rank)} figures for {event.get('ranks')!r} ranks")
        elif abs(sum(numbers) - total) > 1e-6 * max(abs(total), 1.0):
            yield problem(at, f"{label}: its ranks' figures add up to {sum(numbers) / 1e9:.4g} G ops/s, not the "
                              f"{total / 1e9:.4g} it logs")  # fmt: skip


def _stand_in(logged: Logged, seen: BoundsAsOf | None, label: str) -> Findings:
    """A rehearsal's epoch against its stand-in's stated rate (issue 45: a rehearsal whose clocks were divided by
    1,000 verified, unofficial, at a 1,000 × score): the stand-in waits its phases out
    (:mod:`aiperf_mpi.job.rehearsal`: ``(train + update) ÷ (rate × ranks)``, then ``validation ÷ (rate × ranks)``),
    so a phase logged shorter than that was not the stand-in's."""
    event, at, group = logged.event, logged.number, logged.event.get("group")
    groups = seen.groups if seen is not None and seen.opened else None
    ranks = (groups.ranks.get(group) or None) if groups is not None else None
    rate = seen.stand_in_rate if seen is not None else None
    if rate is None or ranks is None:
        yield count(f"{UNBOUNDED}a rehearsal without its stated rate (rehearse_rate) or its group {group}'s ranks: "
                    "its clocks cannot be held to its stand-in")  # fmt: skip
        return
    yield count(STAND_IN_EPOCHS)
    group_rate = rate * ranks
    phases = (("training", event["ops_train"] + event["ops_update"], event["compute"]),
              ("validation", event["ops_validation"], event["evaluation"]))  # fmt: skip
    for what, ops, seconds in phases:
        needed = ops / group_rate
        if seconds < needed * (1 - STAND_IN_SLACK) - CLOCK_RESOLUTION:
            yield problem(at, f"{label}: a rehearsal's {what} logged {seconds:.6g} s, its stand-in at the stated "
                              f"{rate:.4g} ops/s a rank × {ranks} needs {needed:.6g} s: not the stand-in's "
                              "clock")  # fmt: skip


def _epoch(logged: Logged, seen: BoundsAsOf | None) -> Findings:
    """An ``epoch`` event: its training and validation rates under its group's bound (a rehearsal's: its phases
    no shorter than its stand-in's)."""
    event, at = logged.event, logged.number
    label = f"event {at} (epoch {event.get('epoch')} of task {event.get('task')})"
    if seen is not None and seen.rehearsal:
        yield from _stand_in(logged, seen, label)
        return
    bound, unbounded = _bound(seen, event.get("group"))
    yield from unbounded
    if bound is None:
        return
    yield count(EPOCHS)
    compile_seconds = event.get("compile", 0.0) or 0.0
    phases = (("training rate", event["ops_train"], event["compute"] + compile_seconds),
              ("validation rate", event["ops_validation"], event["evaluation"] + compile_seconds))  # fmt: skip
    for what, ops, seconds in phases:
        if ops > 0 and seconds <= 0:
            yield problem(at, f"{label}: {what}: {ops:,} operations in {seconds} s")
        elif ops > 0:
            yield from _hold(at, ops / seconds, bound, label, what, _why(seen, event.get("group")), FAST_ALGORITHMS)


def _score(logged: Logged, seen: BoundsAsOf | None) -> Findings:
    """A ``score`` event under the largest sum of a segment's hosts' bounds so far (not once a group had none)."""
    if seen is None or seen.rehearsal or not seen.score_bound or seen.unbounded:
        return
    score = logged.event.get("score")
    if isinstance(score, int | float) and score > seen.score_bound * FAST_ALGORITHMS:
        yield problem(logged.number, f"event {logged.number} (score): {score / 1e9:.4g} G ops/s is more than the "
                                     f"hardware of its groups can compute ({seen.score_bound / 1e9:.4g} G ops/s, "
                                     f"× {FAST_ALGORITHMS} for fast algorithms)")  # fmt: skip
