"""The hardware bounds as they held at each event of the log, which the unit stream puts on its units (the ``hardware``
family's ``hardware bounds`` row, :mod:`analysis.verify.hardware`).

A group's bound is the hardware table's figure for the hosts the segment's *first* ``system`` and ``layout``
events put it on, at the precision known when the second of the two was read: computed once, at that event
(:func:`derive`), and changed after it only by a GPU probe of a group whose hosts list no accelerator (then there
is no bound).  The score's bound is the largest sum of a segment's hosts' bounds so far, and the score is held to it
only while no probe or epoch before it lacked a bound.  All of this depends on the log's order, so the unit stream
(:class:`analysis.verify.units.UnitStream`) keeps one :class:`BoundsTracker` and hands each ``peak``, ``epoch``
and ``score`` event the :class:`BoundsAsOf` of its moment: an immutable snapshot, shared by the events between two
changes, so memory does not grow with the epochs.

This module sits below :mod:`analysis.verify.units` (which imports it) and the hardware family (which reads what
it derives); it judges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from aiperf_mpi.results import runlog
from aiperf_mpi.results.hardware import STAND_IN_DEVICE, Bound, fastest_device, group_bound, host_bound
from aiperf_mpi.results.inventory import group_ranks_by_host, training_ranks_by_host
from aiperf_mpi.results.precisions import logged_precision
from analysis.verify.view import RunView, SegmentView


@dataclass(frozen=True)
class GroupBounds:
    """What a segment's first ``system`` and ``layout`` (both read) make of its groups, derived once."""

    bounds: Mapping[int, Bound]
    """each group's bound"""
    on_cpus: frozenset[int]
    """the groups whose hosts list no accelerator (bounded by their CPUs)"""
    one_rank: Mapping[int, float | None]
    """each group's fastest device: what one rank's probe may reach (None: on CPUs, or no figure)"""
    ranks: Mapping[int, int]
    """each group's ranks, as the layout puts them on the system's hosts (what a rehearsal's stand-in waits by)"""
    total: float | None
    """the sum of the hosts' bounds (the score's bound in this segment; None: a host without one)"""


def derive(system: Mapping, layout: Mapping, precision: str) -> GroupBounds:
    """Each group's bound, and the score's, by the hardware table, for the hosts ``system`` lists and the groups
    ``layout`` puts on them, at ``precision``."""
    hosts: dict[str, Mapping] = {}
    for host in system.get("hosts") if isinstance(system.get("hosts"), list) else []:
        if isinstance(host, Mapping):
            hosts.setdefault(str(host.get("host")), host)  # the first entry, as the ranks' hosts read it
    training = training_ranks_by_host(layout, system)  # type: ignore[arg-type]
    by_host = group_ranks_by_host(layout, system)  # type: ignore[arg-type]
    bounds: dict[int, Bound] = {}
    one_rank: dict[int, float | None] = {}
    on_cpus: set[int] = set()
    for group, ranks in by_host.items():
        bounds[group] = group_bound(hosts, ranks, precision, training)
        one_rank[group] = fastest_device(hosts, list(ranks), precision)
        if not any(isinstance(hosts.get(name), Mapping) and hosts[name].get("accelerators") for name in ranks):
            on_cpus.add(group)
    # the score by the hosts, not the groups: groups sharing a host's accelerators share their arithmetic
    total = [host_bound(hosts[name], count, precision).ops_per_second if name in hosts else None
             for name, count in training.items()]  # fmt: skip
    return GroupBounds(bounds, frozenset(on_cpus), one_rank, {group: sum(ranks.values()) for group, ranks in
                                                              by_host.items()},  # fmt: skip
                       sum(total) if total and None not in total else None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class BoundsAsOf:
    """The hardware bounds as they held at one event (after it, for a ``peak``: its own probe counts)."""

    opened: bool = False
    """a ``run_start`` came before (False: none yet, nothing is bounded)"""
    segment: object = None
    """the segment the last ``run_start`` opened, as it logs its number (its event number when it logs none)"""
    rehearsal: bool = False
    """a ``run_start`` so far configured a rehearsal (``rehearse``): its rates are the stand-in's"""
    stand_in_rate: float | None = None
    """the last ``run_start``'s stated rehearsal rate, operations per second per rank (``rehearse_rate``)"""
    groups: GroupBounds | None = None
    """what the segment's first system and layout make of its groups (None: not both read yet)"""
    bounds: Mapping[int, Bound] = field(default_factory=dict)
    """each group's bound: ``groups``'s, less those a GPU probe on a host that lists none took away"""
    score_bound: float = 0.0
    """the largest sum of the hosts' bounds of a segment so far"""
    unbounded: bool = False
    """a probe or an epoch so far (not a rehearsal's) had no bound: the score is then held to none"""


def bound_of(seen: BoundsAsOf, group: object) -> tuple[float | None, str]:
    """The group's bound in operations per second, or None and why there is none ("": no reason to name: before
    the first ``run_start``, or a rehearsal)."""
    if not seen.opened or seen.rehearsal:
        return None, ""
    bound = seen.bounds.get(group) if isinstance(group, int) else None
    if bound is None:
        return None, f"segment {seen.segment} group {group}: no system description and layout to bound it by"
    if bound.ops_per_second is None or bound.ops_per_second <= 0:
        return None, f"segment {seen.segment} group {group}: {bound.why}"
    return bound.ops_per_second, ""


class BoundsTracker:
    """The bounds through the log: :meth:`see` takes each event (after the shared view) and returns the bounds as of
    it."""

    def __init__(self) -> None:
        self.now = BoundsAsOf()
        self.precision = ""
        """the open segment's precision: its configuration's, or under ``auto`` the first ``system`` that chose"""
        self.first_system: dict | None = None
        """the run's first system event that was its segment's first (the ``inventory`` row's first hardware)"""

    def see(self, event: dict, number: int, view: RunView) -> BoundsAsOf:
        name, now = event[runlog.EVENT], self.now
        if name == runlog.RUN_START:
            config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
            rate = config.get("rehearse_rate")
            rate = rate if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0 else None
            self.precision = str(logged_precision(config))
            rehearsal = now.rehearsal or bool(config.get("rehearse"))
            self.now = BoundsAsOf(True, event.get(runlog.SEGMENT, number), rehearsal, rate, None, {}, now.score_bound,
                                  now.unbounded)  # fmt: skip
        elif name == runlog.SYSTEM and now.opened and view.segment is not None:
            chosen = event.get("precision")
            chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
            if isinstance(chosen, str) and self.precision == "auto":
                self.precision = chosen
            if view.segment.systems == 1:  # a second one: the inventory row names it, the bounds read the first
                self.first_system = self.first_system if self.first_system is not None else event
                self._ready(view.segment)
        elif name == runlog.LAYOUT and now.opened and view.segment is not None and view.segment.layouts == 1:
            self._ready(view.segment)
        elif name == runlog.PEAK and not (event.get("device") == STAND_IN_DEVICE and not now.rehearsal):
            self._probed(event)  # (a relabelled rehearsal's probe is judged as that: its bound is not read)
            self._bounded(event.get("group"))
        elif name == runlog.EPOCH and not now.rehearsal:
            self._bounded(event.get("group"))
        return self.now

    def _ready(self, seen: SegmentView) -> None:
        """With the segment's first system and layout both read: each group's bound, and the score's."""
        if seen.first_system is None or seen.first_layout is None:
            return
        groups = derive(seen.first_system, seen.first_layout, self.precision)
        score_bound = self.now.score_bound if groups.total is None else max(self.now.score_bound, groups.total)
        self.now = replace(self.now, groups=groups, bounds=dict(groups.bounds), score_bound=score_bound)

    def _probed(self, event: dict) -> None:
        """A probe on a GPU the system description does not list (no NVML on the node, another vendor's): the CPUs
        are no bound of its group, and the table cannot say what is."""
        group, now = event.get("group"), self.now
        if isinstance(group, int) and now.groups is not None and group in now.bounds and \
                "GPU" in str(event.get("device", "")).upper() and group in now.groups.on_cpus:  # fmt: skip
            why = (f"group {group} probed on {event.get('device')}, which the system description does not list "
                   "(no NVML there?)")
            self.now = replace(now, bounds={**now.bounds, group: Bound(None, why)})

    def _bounded(self, group: object) -> None:
        """Whether the event's group had a bound (the score is held to none once one had not)."""
        bound, why = bound_of(self.now, group)
        if bound is None and why and not self.now.unbounded:
            self.now = replace(self.now, unbounded=True)
