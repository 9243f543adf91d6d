"""verify's bounds from outside the run: the hardware table and the inventory (rule family ``hardware``).

The ``physics`` row holds each epoch to its group's *measured* peak, which
the run writes itself.  This family holds every rate to figures the run
cannot choose: the versioned table of what the hardware named in the
``system`` event can compute (:mod:`aiperf_mpi.results.hardware`), and the
world MPI gave the job, which the ``system`` and ``layout`` events must
describe once and alike (:mod:`aiperf_mpi.results.inventory`).  Two rows:

- ``inventory``: per segment, the master, the relays and the groups partition
  the world the system event gathered; every rank is on the host the system
  puts it; a host gives one accelerator a training rank; a resumed segment
  runs on hardware of the kinds the first segment had (the hosts' names may
  change with the allocation, their processors and accelerators may not),
  unless its resume says why (``--resume RUN_DIR --hardware-changed REASON``,
  its ``run_start``'s ``config.hardware_changed``): the reason is then shown,
  and the segment, as every segment, is bounded by its own ``system`` and
  probe events, never by the first's;
- ``hardware bounds``: each group's probe, each epoch's training rate
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
from aiperf_mpi.results.hardware import FAST_ALGORITHMS, HARDWARE_TABLE_VERSION, Bound, group_bound
from aiperf_mpi.results.inventory import group_ranks_by_host, inventory_problems, training_ranks_by_host
from aiperf_mpi.results.resumable import HARDWARE_CHANGED
from analysis.checks import Check, Run

HARDWARE_RULE = "rule: a resume on other hardware says why (--hardware-changed)"


@dataclass
class _Segment:
    number: int
    precision: str
    hardware_changed: str = ""
    """why the segment's hardware may differ from the first's, as its resume said ('' : it may not)"""
    system: Mapping | None = None
    layout: Mapping | None = None
    bounds: dict[int, Bound] = field(default_factory=dict)
    """each group's bound, once both the system and the layout are read"""
    on_cpus: set[int] = field(default_factory=set)
    """the groups whose hosts list no accelerator (bounded by their CPUs)"""


def _kinds(system: Mapping) -> set[str]:
    """The kinds of host a system description lists: processor, vendor, ISA flags, accelerators (not the number
    of logical processors: the same node with SMT off is the same hardware)."""
    hosts = system.get("hosts") if isinstance(system.get("hosts"), list) else []
    return {f"{h.get('cpu')} ({h.get('cpu_vendor')}; {' '.join(map(str, h.get('cpu_flags') or []))}) with "
            f"{sorted(map(str, h.get('accelerators') or [])) if isinstance(h.get('accelerators'), list) else '?'}"
            for h in hosts if isinstance(h, Mapping)}  # fmt: skip


class HardwareRules:
    """The two rows of the ``hardware`` family, fed the events the registry names."""

    def __init__(self, run: Run) -> None:
        del run
        self.inventory, self.bounds = Check("inventory"), Check("hardware bounds")
        self.segment: _Segment | None = None
        self.first_kinds: set[str] | None = None
        self.rehearsal = False
        self.epochs = self.peaks = 0
        self.highest = 0.0
        """the highest ratio of a rate to its bound"""
        self.score_bound = 0.0
        """the largest sum of the groups' bounds of a segment so far"""
        self.unbounded: set[str] = set()

    def run_start(self, event: dict, number: int) -> None:
        self._close()
        config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
        self.rehearsal = self.rehearsal or bool(config.get("rehearse"))
        precision = config.get("precision", "fp32")
        reason = config.get(HARDWARE_CHANGED)
        self.segment = _Segment(event.get(runlog.SEGMENT, number), str(precision),
                                reason.strip() if isinstance(reason, str) else "")  # fmt: skip

    def system(self, event: dict, number: int) -> None:
        if self.segment is None:
            return
        chosen = event.get("precision")
        chosen = chosen.get("chosen") if isinstance(chosen, Mapping) else chosen
        if isinstance(chosen, str) and self.segment.precision == "auto":
            self.segment.precision = chosen
        if self.segment.system is not None:
            self.inventory.problems.append(f"event {number} (system): segment {self.segment.number} has a second "
                                           "system description (one a segment: the bounds read the first)")
            return
        self.segment.system = event
        kinds = _kinds(event)
        if self.first_kinds is None:
            self.first_kinds = kinds
        elif not kinds <= self.first_kinds:  # a resume on part of the first allocation's kinds is fine
            new = sorted(kinds - self.first_kinds)[:3]
            if self.segment.hardware_changed:  # said why: bounded by its own system and probes (_ready, peak)
                self.inventory.notes.append(f"segment {self.segment.number} runs on other hardware than the first "
                                            f"segment ({new}), as its resume says: "
                                            f"{self.segment.hardware_changed!r}")  # fmt: skip
            else:
                self.inventory.problems.append(f"segment {self.segment.number}: hosts of kinds the first segment "
                                               f"did not have: {new}, and its resume does not say why "
                                               f"({HARDWARE_RULE})")  # fmt: skip
        self._ready()

    def layout(self, event: dict, number: int) -> None:
        if self.segment is None:
            return
        if self.segment.layout is not None:
            self.inventory.problems.append(f"event {number} (layout): segment {self.segment.number} has a second "
                                           "layout (one a segment)")
            return
        self.segment.layout = event
        self._ready()

    def _ready(self) -> None:
        """With the segment's system and layout both read: its inventory, and each group's bound."""
        segment = self.segment
        if segment is None or segment.system is None or segment.layout is None:
            return
        label = f"segment {segment.number}"
        self.inventory.problems += [f"{label}: {problem}" for problem in
                                    inventory_problems(segment.layout, segment.system)]  # fmt: skip
        hosts: dict[str, Mapping] = {}
        for host in segment.system.get("hosts") if isinstance(segment.system.get("hosts"), list) else []:
            if isinstance(host, Mapping):
                hosts.setdefault(str(host.get("host")), host)  # the first entry, as the ranks' hosts read it
        training = training_ranks_by_host(segment.layout, segment.system)
        for group, ranks in group_ranks_by_host(segment.layout, segment.system).items():
            segment.bounds[group] = group_bound(hosts, ranks, segment.precision, training)
            if not any(isinstance(hosts.get(name), Mapping) and hosts[name].get("accelerators") for name in ranks):
                segment.on_cpus.add(group)
        total = [b.ops_per_second for b in segment.bounds.values()]
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

    def epoch(self, event: dict, number: int) -> None:
        label = f"event {number} (epoch {event.get('epoch')} of task {event.get('task')})"
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

    def _close(self) -> None:
        if self.segment is not None and (self.segment.system is None or self.segment.layout is None):
            self.inventory.missing.append(f"segment {self.segment.number}: no system description or no layout")
        self.segment = None

    def finish(self) -> list[Check]:
        self._close()
        self.inventory.summary = ("the master, relays and groups partition the world the system event gathered; "
                                  "every rank on its host, one accelerator a training rank; every segment on the "
                                  "same kinds of host, or its resume says why")  # fmt: skip
        if self.rehearsal:
            self.bounds.notes.append("a rehearsal (--rehearse): its rates are the stand-in's, not bounded")
            self.bounds.summary = "a rehearsal: not bounded"
            return [self.inventory, self.bounds]
        self.bounds.missing += sorted(self.unbounded)
        self.bounds.summary = (f"{self.peaks} probe(s) and {self.epochs} epochs' training and validation rates ≤ "
                               f"the hardware table {HARDWARE_TABLE_VERSION} (highest {self.highest:.2f} ×), "
                               "the score ≤ its groups' sum")  # fmt: skip
        return [self.inventory, self.bounds]
