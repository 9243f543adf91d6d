"""verify's bounds from outside the run: the hardware table and the inventory (rule family ``hardware``).

The ``physics`` row holds each epoch to its group's *measured* peak, which
the run writes itself.  This family holds every rate to figures the run
cannot choose: the versioned table of what the hardware named in the
``system`` event can compute (:mod:`aiperf_mpi.results.hardware`), and the
world MPI gave the job, which the ``system`` and ``layout`` events must
describe once and alike (:mod:`aiperf_mpi.results.inventory`).  Two rules, one
a row (the registry's :class:`~analysis.verify.registry.Rule` entries), each
reading the segment's first ``system`` and ``layout`` from the shared view
and nothing of the other:

- ``inventory`` (:class:`InventoryRule`): per segment, the master, the relays and the groups partition
  the world the system event gathered; every rank is on the host the system
  puts it; a host gives one accelerator a training rank; a resumed segment
  runs on hardware of the kinds the first segment had (the hosts' names may
  change with the allocation, their processors and accelerators may not),
  unless its resume says why (``--resume RUN_DIR --hardware-changed REASON``,
  its ``run_start``'s ``config.hardware_changed``): the reason is then shown,
  and the segment, as every segment, is bounded by its own ``system`` and
  probe events, never by the first's;
- ``hardware bounds`` (:class:`BoundsRule`): each group's probe, each epoch's training rate
  (``ops_train ÷ (compute + compile)``) and validation rate (``ops_validation
  ÷ (evaluation + compile)``), and the score, under the table's bound of the
  hardware the group ran on, at the run's precision.  Hardware the table does
  not know is *not recorded*: such a run is not verified until the table
  names it.  A rehearsal's rates are its stand-in's: noted, not bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiperf_mpi.results import runlog
from aiperf_mpi.results.hardware import (
    FAST_ALGORITHMS,
    HARDWARE_TABLE_VERSION,
    STAND_IN_DEVICE,
    Bound,
    fastest_device,
    group_bound,
    host_bound,
)
from aiperf_mpi.results.inventory import group_ranks_by_host, inventory_problems, training_ranks_by_host
from aiperf_mpi.results.precisions import logged_precision
from aiperf_mpi.results.resumable import HARDWARE_CHANGED
from analysis.checks import Check, Run
from analysis.verify.view import SegmentView

HARDWARE_RULE = "rule: a resume on other hardware says why (--hardware-changed)"
STAND_IN_SLACK = 1e-6
"""the share by which a rehearsal's phase may fall short of its stand-in's time (the float arithmetic of the plan)"""
CLOCK_RESOLUTION = 1e-3
"""seconds a phase may fall short besides: a wait is timed with ``time.monotonic`` and logged rounded"""


@dataclass
class _SegmentBounds:
    """What the ``hardware bounds`` rule derives of the open segment; its ``system`` and ``layout`` are the shared
    view's (the first of each, :class:`analysis.verify.view.SegmentView`)."""

    number: int
    precision: str
    seen: SegmentView
    """the view's segment: its first system and layout, and how many came"""
    bounds: dict[int, Bound] = field(default_factory=dict)
    """each group's bound, once both the system and the layout are read"""
    on_cpus: set[int] = field(default_factory=set)
    """the groups whose hosts list no accelerator (bounded by their CPUs)"""
    one_rank: dict[int, float | None] = field(default_factory=dict)
    """each group's fastest device: what one rank's probe may reach (None: on CPUs, or no figure)"""


def _segment_number(event: dict, number: int) -> int:
    """The segment a ``run_start`` opens, as it logs it (its event number when it logs none)."""
    return event.get(runlog.SEGMENT, number)


def _whole(seen: SegmentView | None) -> bool:
    """Whether the segment's first system and first layout have both been read."""
    return seen is not None and seen.first_system is not None and seen.first_layout is not None


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
        count, most = census.get(kind, (0, 0))
        census[kind] = (count + 1, max(most, cores))
    return census


def _beyond(census: Mapping[str, tuple[int, int]], first: Mapping[str, tuple[int, int]]) -> list[str]:
    """What a later segment's hosts have that the first segment's did not: new kinds, more hosts or processors."""
    more = []
    for kind, (count, cores) in sorted(census.items()):
        was_count, was_cores = first.get(kind, (0, 0))
        if count > was_count or cores > was_cores:
            more.append(f"{count} × {kind}, {cores} logical processors" if kind in first else kind)
    return more


class InventoryRule:
    """The row ``inventory``: each segment's first system and layout (the shared view's) describe the world once
    and alike, and a resumed segment runs on the first segment's kinds of host unless its resume says why."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.check = Check("inventory")
        self.number = 0
        """the open segment's number, as its run_start logs it"""
        self.seen: SegmentView | None = None
        """the open segment, as the shared view keeps it (None before the first run_start)"""
        self.hardware_changed = ""
        """why the open segment's hardware may differ from the first's, as its resume said ('' : it may not)"""
        self.first_census: dict[str, tuple[int, int]] | None = None

    def run_start(self, event: dict, number: int) -> None:
        self._close()
        config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
        reason = config.get(HARDWARE_CHANGED)
        self.number, self.seen = _segment_number(event, number), self.run.view.segment
        self.hardware_changed = reason.strip() if isinstance(reason, str) else ""

    def _second(self, number: int, name: str, count: int, what: str) -> bool:
        """Whether the event is its segment's second of its kind (the view has counted it): named, never read."""
        if count > 1:
            self.check.problems.append(f"event {number} ({name}): segment {self.number} has a second {what}")
        return count > 1

    def system(self, event: dict, number: int) -> None:
        if self.seen is None or self._second(number, "system", self.seen.systems,
                                             "system description (one a segment: the bounds read the first)"):
            return
        census = _census(event)
        if self.first_census is None:
            self.first_census = census
        elif new := _beyond(census, self.first_census)[:3]:  # part of the first allocation is fine
            if self.hardware_changed:  # said why: bounded by its own system and probes
                self.check.notes.append(f"segment {self.number} runs on other hardware than the first "
                                        f"segment ({new}), as its resume says: {self.hardware_changed!r}")
            else:
                self.check.problems.append(f"segment {self.number}: hosts of kinds the first segment did "
                                           f"not have, or more of them: {new}, and its resume does not say why "
                                           f"({HARDWARE_RULE})")  # fmt: skip
        self._ready()

    def layout(self, event: dict, number: int) -> None:
        if self.seen is None or self._second(number, "layout", self.seen.layouts, "layout (one a segment)"):
            return
        self._ready()

    def _ready(self) -> None:
        """With the segment's system and layout both read: the world they describe."""
        if not _whole(self.seen):
            return
        problems = inventory_problems(self.seen.first_layout, self.seen.first_system)  # type: ignore[union-attr,arg-type]
        self.check.problems += [f"segment {self.number}: {problem}" for problem in problems]

    def _close(self) -> None:
        if self.seen is not None and not _whole(self.seen):
            self.check.missing.append(f"segment {self.number}: no system description or no layout")
        self.seen = None

    def finish(self) -> list[Check]:
        self._close()
        self.check.summary = ("the master, relays and groups partition the world the system event gathered; "
                              "every rank on its host, one accelerator a training rank; every segment on the "
                              "same kinds of host, or its resume says why")  # fmt: skip
        return [self.check]


class BoundsRule:
    """The row ``hardware bounds``: every probe, epoch rate and score under the hardware table's bound of the
    hardware the segment's first system and layout (the shared view's) put each group on."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.bounds = Check("hardware bounds")
        self.segment: _SegmentBounds | None = None
        self.rehearsal = False
        self.epochs = self.peaks = 0
        self.highest = 0.0
        """the highest ratio of a rate to its bound"""
        self.score_bound = 0.0
        """the largest sum of the groups' bounds of a segment so far"""
        self.unbounded: set[str] = set()
        self.stand_in_rate: float | None = None
        """a rehearsal's stated rate, operations per second per rank (``rehearse_rate``)"""
        self.stand_in_epochs = 0

    def run_start(self, event: dict, number: int) -> None:
        config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
        self.rehearsal = self.rehearsal or bool(config.get("rehearse"))
        rate = config.get("rehearse_rate")
        self.stand_in_rate = rate if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0 else None
        precision = logged_precision(config)
        self.segment = _SegmentBounds(_segment_number(event, number), str(precision), self.run.view.segment)

    def system(self, event: dict, number: int) -> None:
        if self.segment is None:
            return
        chosen = event.get("precision")
        chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
        if isinstance(chosen, str) and self.segment.precision == "auto":
            self.segment.precision = chosen
        if self.segment.seen.systems > 1:  # a second one: the inventory row names it, the bounds read the first
            return
        self._ready()

    def layout(self, event: dict, number: int) -> None:
        if self.segment is None or self.segment.seen.layouts > 1:
            return
        self._ready()

    def _ready(self) -> None:
        """With the segment's system and layout both read: each group's bound, and the score's."""
        segment = self.segment
        if segment is None or not _whole(segment.seen):
            return
        system, layout = segment.seen.first_system, segment.seen.first_layout
        hosts: dict[str, Mapping] = {}
        for host in system.get("hosts") if isinstance(system.get("hosts"), list) else []:  # type: ignore[union-attr]
            if isinstance(host, Mapping):
                hosts.setdefault(str(host.get("host")), host)  # the first entry, as the ranks' hosts read it
        training = training_ranks_by_host(layout, system)  # type: ignore[arg-type]
        for group, ranks in group_ranks_by_host(layout, system).items():  # type: ignore[arg-type]
            segment.bounds[group] = group_bound(hosts, ranks, segment.precision, training)
            segment.one_rank[group] = fastest_device(hosts, list(ranks), segment.precision)
            if not any(isinstance(hosts.get(name), Mapping) and hosts[name].get("accelerators") for name in ranks):
                segment.on_cpus.add(group)
        # the score by the hosts, not the groups: groups sharing a host's accelerators share their arithmetic
        total = [host_bound(hosts[name], count, segment.precision).ops_per_second if name in hosts else None
                 for name, count in training.items()]  # fmt: skip
        if total and None not in total:
            self.score_bound = max(self.score_bound, sum(total))  # type: ignore[arg-type]

    def _bound(self, group: object) -> float | None:
        """The group's bound in the open segment; None (and the reason kept) when there is none."""
        segment = self.segment
        if segment is None or self.rehearsal:
            return None
        bound = segment.bounds.get(group) if isinstance(group, int) else None
        if bound is None:
            self.unbounded.add(f"segment {segment.number} group {group}: no system description and layout "
                               "to bound it by")  # fmt: skip
            return None
        if bound.ops_per_second is None or bound.ops_per_second <= 0:
            self.unbounded.add(f"segment {segment.number} group {group}: {bound.why}")
            return None
        return bound.ops_per_second

    def _hold(self, rate: float, bound: float, label: str, what: str, group: object, allowed: float = 1.0) -> None:
        bound *= allowed
        ratio = rate / bound
        self.highest = max(self.highest, ratio)
        if ratio > 1.0:
            why = self.segment.bounds[group].why if self.segment is not None else ""  # type: ignore[index]
            self.bounds.problems.append(f"{label}: {what} {rate / 1e9:.4g} G ops/s is {ratio:.2f} × what the "
                                        f"hardware can compute ({bound / 1e9:.4g} G ops/s: {why})")  # fmt: skip

    def peak(self, event: dict, number: int) -> None:
        label = f"event {number} (peak)"
        group, segment = event.get("group"), self.segment
        if event.get("device") == STAND_IN_DEVICE and not self.rehearsal:
            self.bounds.problems.append(f"{label}: group {group} names the {STAND_IN_DEVICE!r} as its device, but "
                                        "the configuration is not a rehearsal (a relabelled rehearsal)")  # fmt: skip
            return
        self._measured(event, label)
        bound_of = segment.bounds.get(group) if segment is not None and isinstance(group, int) else None
        if bound_of is not None and "GPU" in str(event.get("device", "")).upper() and group in segment.on_cpus:
            # probed on a GPU the system description does not list (no NVML on the node, another vendor's):
            # the CPUs are no bound of it, and the table cannot say what is
            segment.bounds[group] = Bound(None, f"group {group} probed on {event.get('device')}, which the system "
                                                "description does not list (no NVML there?)")  # fmt: skip
        bound = self._bound(group)
        if bound is not None and isinstance(event.get("ops_per_second"), int | float):
            self.peaks += 1
            self._hold(float(event["ops_per_second"]), bound, label, "the probe's", event.get("group"))
        single = segment.one_rank.get(group) if segment is not None and isinstance(group, int) else None
        per_rank = event.get("per_rank")
        if bound is not None and single and isinstance(per_rank, list):
            for rank, figure in enumerate(per_rank):  # a rank drives one device: its probe is under its figure
                if isinstance(figure, int | float) and not isinstance(figure, bool):
                    self._hold(float(figure), single, label, f"rank {rank}'s probe", group)

    def _measured(self, event: dict, label: str) -> None:
        """A probe is a measurement (train/peak.py): a matrix multiplied for some seconds by each of its ranks, the
        group's figure their sum.  One that multiplied nothing (a rehearsal's stand-in with its name changed) or
        whose ranks do not add up is not one."""
        if self.rehearsal:
            return
        for key in ("matrix_size", "seconds"):
            value = event.get(key)
            if key in event and not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
                self.bounds.problems.append(f"{label}: {key} {value!r}: a probe that measured nothing")
        per_rank, total = event.get("per_rank"), event.get("ops_per_second")
        if isinstance(per_rank, list) and isinstance(total, int | float):
            numbers = [v for v in per_rank if isinstance(v, int | float) and not isinstance(v, bool)]
            if len(numbers) != len(per_rank) or len(per_rank) != event.get("ranks", len(per_rank)):
                self.bounds.problems.append(f"{label}: per_rank holds {len(per_rank)} figures for "
                                            f"{event.get('ranks')!r} ranks")  # fmt: skip
            elif abs(sum(numbers) - total) > 1e-6 * max(abs(total), 1.0):
                self.bounds.problems.append(f"{label}: its ranks' figures add up to {sum(numbers) / 1e9:.4g} G ops/s, "
                                            f"not the {total / 1e9:.4g} it logs")  # fmt: skip

    def _stand_in(self, event: dict, label: str) -> None:
        """A rehearsal's epoch against its stand-in's stated rate (issue 45: a rehearsal whose clocks were divided
        by 1,000 verified, unofficial, at a 1,000 × score): the stand-in waits its phases out
        (:mod:`aiperf_mpi.job.rehearsal`: ``(train + update) ÷ (rate × ranks)``, then ``validation ÷ (rate ×
        ranks)``), so a phase logged shorter than that was not the stand-in's."""
        segment, group = self.segment, event.get("group")
        ranks = None
        if segment is not None and _whole(segment.seen):
            seen = segment.seen
            ranks = sum(group_ranks_by_host(seen.first_layout, seen.first_system)  # type: ignore[arg-type]
                        .get(group, {}).values()) or None
        if self.stand_in_rate is None or ranks is None:
            self.unbounded.add(f"a rehearsal without its stated rate (rehearse_rate) or its group {group}'s ranks: "
                               "its clocks cannot be held to its stand-in")  # fmt: skip
            return
        self.stand_in_epochs += 1
        group_rate = self.stand_in_rate * ranks
        phases = (("training", event["ops_train"] + event["ops_update"], event["compute"]),
                  ("validation", event["ops_validation"], event["evaluation"]))  # fmt: skip
        for what, ops, seconds in phases:
            needed = ops / group_rate
            if seconds < needed * (1 - STAND_IN_SLACK) - CLOCK_RESOLUTION:
                self.bounds.problems.append(f"{label}: a rehearsal's {what} logged {seconds:.6g} s, its stand-in at "
                                            f"the stated {self.stand_in_rate:.4g} ops/s a rank × {ranks} needs "
                                            f"{needed:.6g} s: not the stand-in's clock")  # fmt: skip

    def epoch(self, event: dict, number: int) -> None:
        label = f"event {number} (epoch {event.get('epoch')} of task {event.get('task')})"
        if self.rehearsal:
            self._stand_in(event, label)
            return
        bound = self._bound(event.get("group"))
        if bound is None:
            return
        self.epochs += 1
        compile_seconds = event.get("compile", 0.0) or 0.0
        phases = (("training rate", event["ops_train"], event["compute"] + compile_seconds),
                  ("validation rate", event["ops_validation"], event["evaluation"] + compile_seconds))  # fmt: skip
        for what, ops, seconds in phases:
            if ops > 0 and seconds <= 0:
                self.bounds.problems.append(f"{label}: {what}: {ops:,} operations in {seconds} s")
            elif ops > 0:
                self._hold(ops / seconds, bound, label, what, event.get("group"), FAST_ALGORITHMS)

    def score(self, event: dict, number: int) -> None:
        if self.rehearsal or not self.score_bound or self.unbounded:
            return
        score = event.get("score")
        if isinstance(score, int | float) and score > self.score_bound * FAST_ALGORITHMS:
            self.bounds.problems.append(f"event {number} (score): {score / 1e9:.4g} G ops/s is more than the "
                                        f"hardware of its groups can compute ({self.score_bound / 1e9:.4g} G ops/s, "
                                        f"× {FAST_ALGORITHMS} for fast algorithms)")  # fmt: skip

    def finish(self) -> list[Check]:
        if self.rehearsal:
            self.bounds.missing += sorted(self.unbounded)
            self.bounds.notes.append("a rehearsal (--rehearse): its rates are the stand-in's, held to its stated rate")
            self.bounds.summary = (f"a rehearsal: {self.stand_in_epochs} epochs' phases no shorter than its "
                                   "stand-in's stated rate makes them")  # fmt: skip
            return [self.bounds]
        self.bounds.missing += sorted(self.unbounded)
        self.bounds.summary = (f"{self.peaks} probe(s) and {self.epochs} epochs' training and validation rates ≤ "
                               f"the hardware table {HARDWARE_TABLE_VERSION} (highest {self.highest:.2f} ×), "
                               "the score ≤ its groups' sum")  # fmt: skip
        return [self.bounds]
