"""The energy meters an HPC job can read without root, one source per meter, and the figures over a window.

Issue 53 (energy to solution): the reader, the readings as the log holds them (:func:`to_record`), and the
figures over the scored window (:class:`EnergyLedger`), computed from the log alone by the same code for the run's
score, the report and verify.  One rank a node reads its node at the start line (``mpi/run.py``) and its node's
monitor reads it at every sample (``job/monitor.py``).  ``python -m aiperf_mpi.results.energy`` says what this
node has.

The sources, each found on a node and read by one rank there:

* **NVML** (NVIDIA GPUs, Volta and newer): ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver
  loaded, per GPU.  Covers the GPUs only.
* **Cray pm_counters** (HPE Cray EX): ``/sys/cray/pm_counters/{energy,cpu_energy,memory_energy,accel<N>_energy}``,
  each ``VALUE J TIMESTAMP_US``; ``energy`` covers the node.
* **RAPL powercap** (Intel and AMD CPUs): ``/sys/class/powercap/<zone>/energy_uj``, microjoules of a package or
  of its DRAM, wrapping at ``max_energy_range_uj``; root-only at many sites since CVE-2020-8694.  Covers CPU
  packages (and DRAM where a zone says so), not the node.
* **Slurm accounting**: a job's ``ConsumedEnergyRaw`` (joules, ``sacct -P``) where the site runs an
  ``acct_gather_energy`` plugin; the whole job, read once at its end.

A source that cannot be read says why in one line; none is ever estimated.  What no source measures: the wall
plug (power supplies' losses), the network, storage, cooling.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
PM_COUNTERS = Path("/sys/cray/pm_counters")
PM_FILES = ("energy", "cpu_energy", "memory_energy")
"""the Cray counters besides the accelerators' (``accel<N>_energy``)"""


@dataclass(frozen=True)
class Reading:
    """One counter read once: ``joules`` as the counter stands (cumulative, may wrap or reset), when it was read."""

    source: str
    """``nvml``, ``pm_counters``, ``powercap`` or ``slurm``"""
    domain: str
    """what it covers: ``node``, ``cpu``, ``memory``, ``accel0``, ``package-0``, ``package-0/dram``, ``gpu0``…"""
    joules: float
    time: float
    """seconds since the epoch (the meter's own timestamp where it gives one)"""
    wraps_at: float | None = None
    """the counter's range in joules (powercap's ``max_energy_range_uj``), None when it does not wrap"""


class Unreadable(Exception):
    """A source present but unreadable here (permissions, a malformed file): its text is the one line."""


def read_pm_counters(root: Path = PM_COUNTERS) -> list[Reading]:
    """Every Cray counter under ``root``: ``energy`` (the node), ``cpu_energy``, ``memory_energy``, ``accelN_energy``.

    Each file holds ``VALUE J TIMESTAMP`` (the timestamp in microseconds); an empty list where there is no tree."""
    if not root.is_dir():
        return []
    names = [name for name in PM_FILES if (root / name).is_file()]
    names += sorted(p.name for p in root.glob("accel*_energy") if p.is_file())
    readings = []
    for name in names:
        text = _read(root / name)
        parts = text.split()
        if len(parts) < 3 or parts[1] != "J":
            raise Unreadable(f"{root / name}: {text.strip()!r} is not 'VALUE J TIMESTAMP'")
        domain = "node" if name == "energy" else name.removesuffix("_energy")
        readings.append(Reading("pm_counters", domain, _number(parts[0], root / name), _number(parts[2], root / name)
                                / 1e6))  # fmt: skip
    return readings


def read_powercap(root: Path = POWERCAP, now: float | None = None) -> list[Reading]:
    """Every top-level RAPL package zone under ``root`` and its sub-zones (``dram``, ``core``…), in joules.

    A zone's ``energy_uj`` wraps at its ``max_energy_range_uj``; ``package-N`` names its zone's ``name`` file.
    Sub-zones are part of their package's energy (DRAM on some parts is not: the domain names it apart)."""
    if not root.is_dir():
        return []
    now = time_now() if now is None else now
    readings = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if not (zone / "energy_uj").is_file():
            continue
        domain = _read(zone / "name").strip()
        if zone.name.count(":") > 1:  # a sub-zone (intel-rapl:0:0): named after its package
            domain = f"{_read(root / zone.name.rsplit(':', 1)[0] / 'name').strip()}/{domain}"
        energy = _number(_read(zone / "energy_uj"), zone / "energy_uj") / 1e6
        limit = zone / "max_energy_range_uj"
        wraps = _number(_read(limit), limit) / 1e6 if limit.is_file() else None
        readings.append(Reading("powercap", domain, energy, now, wraps))
    return readings


def read_nvml() -> list[Reading]:
    """Each GPU's total energy since the driver loaded (NVML), or an empty list where there is no NVML or no GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no GPU: nothing to read
        return []
    try:
        now = time_now()
        return [Reading("nvml", f"gpu{index}",
                        pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(index)) / 1e3,
                        now) for index in range(pynvml.nvmlDeviceGetCount())]  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - pre-Volta GPUs answer NOT_SUPPORTED
        raise Unreadable(f"NVML: {type(exc).__name__}: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def parse_sacct_energy(text: str) -> float | None:
    """A job's ``ConsumedEnergyRaw`` in joules from ``sacct -j JOB -n -P -X -o ConsumedEnergyRaw``'s output (None:
    empty, as where no ``acct_gather_energy`` plugin runs; Slurm prints nothing or 0 there, which is no reading)."""
    values = [line.strip() for line in text.splitlines() if line.strip()]
    if not values:
        return None
    value = _number(values[0], "sacct's ConsumedEnergyRaw")
    return value if 0 < value < NO_VALUE else None


NO_VALUE = 2.0**63
"""Slurm's "no value" for a 64-bit field (``NO_VAL64``, 2⁶⁴ − 2) as sacct may print it: no reading, never joules"""


def energy_between(first: Reading, last: Reading) -> tuple[float, str]:
    """Joules a counter counted from ``first`` to ``last``, and '' or what happened between them.

    A counter lower the second time wrapped (it has a range: the rest of the range and what it counted since) or
    was reset (a driver reload, a node reboot: only what it counted since its reset is known, a lower bound)."""
    if (first.source, first.domain) != (last.source, last.domain):
        raise ValueError(f"two counters: {first.source} {first.domain} and {last.source} {last.domain}")
    if last.joules >= first.joules:
        return last.joules - first.joules, ""
    if first.wraps_at:
        return first.wraps_at - first.joules + last.joules, "wrapped"
    return last.joules, "reset (a lower bound)"


def series_energy(readings: list[Reading]) -> tuple[float, list[str]]:
    """Joules one counter counted over its readings in time order, each step through :func:`energy_between`.

    A counter may wrap more than once between two readings a long way apart: readings every score point (minutes)
    keep a package's ≈ 262 kJ range (about an hour at 70 W) from being lapped."""
    total, notes = 0.0, []
    for first, last in pairwise(readings):
        joules, note = energy_between(first, last)
        total += joules
        if note:
            notes.append(f"{last.source} {last.domain} {note} at {last.time:.0f}")
    return total, notes


@dataclass(frozen=True)
class EnergyFigures:
    """What a window cost: joules, mean watts, and operations per joule beside the score (and the regulated one)."""

    joules: float
    seconds: float
    ops: float
    regulated_ops: float

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else math.nan

    @property
    def ops_per_joule(self) -> float:
        return self.ops / self.joules if self.joules > 0 else math.nan

    @property
    def regulated_ops_per_joule(self) -> float:
        return self.regulated_ops / self.joules if self.joules > 0 else math.nan


def time_now() -> float:
    """The wall clock a reading without its meter's own timestamp takes."""
    return time.time()


def _read(path: Path) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(4096)
    except (OSError, UnicodeDecodeError) as exc:
        raise Unreadable(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None


def _number(text: str, where: object) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise Unreadable(f"{where}: {text.strip()[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise Unreadable(f"{where}: {value} is not a counter's value")
    return value


def node_sources(pm_root: Path = PM_COUNTERS, powercap_root: Path = POWERCAP,
                 gpus: Callable[[], list[Reading]] = read_nvml) -> tuple[list[Reading], list[str]]:  # fmt: skip
    """Every reading this node's sources give now, and one line for each source found but not readable (``gpus``:
    the GPU meter, NVML's; a test of the sysfs trees gives none, so that it holds on a GPU node too)."""
    readings, problems = [], []
    for name, read in (("Cray pm_counters", lambda: read_pm_counters(pm_root)),
                       ("RAPL powercap", lambda: read_powercap(powercap_root)), ("NVML", gpus)):  # fmt: skip
        try:
            readings += read()
        except Unreadable as exc:
            problems.append(f"{name}: {exc}")
    return readings, problems


def node_line(readings: list[Reading], problems: list[str], host: str | None = None) -> str:
    """The start line's energy part for one node: what is measured, or that nothing is, and why."""
    host = host or socket.gethostname()
    if not readings:
        why = "; ".join(problems) if problems else ("no NVML GPU, no /sys/cray/pm_counters, no readable "
                                                    "/sys/class/powercap zone")  # fmt: skip
        return f"aiperf_mpi: energy: not measured on node {host}: {why}"
    covers = ", ".join(f"{r.source} {r.domain}" for r in readings)
    return f"aiperf_mpi: energy: node {host} reads {covers}" + (f" (not read: {'; '.join(problems)})" if problems
                                                                 else "")  # fmt: skip


ROOT_VARIABLES = {"pm_counters": "AIPERF_PM_COUNTERS", "powercap": "AIPERF_POWERCAP"}
"""environment variables naming where a node's Cray counters and powercap tree are, where not at their kernel
paths (a site that mounts sysfs elsewhere; the tests' fixture trees, in the kernel's and HPE's layouts)"""


def node_sources_here(environ: Mapping[str, str] = os.environ) -> tuple[list[Reading], list[str]]:
    """:func:`node_sources` at this node's paths (:data:`ROOT_VARIABLES` where set)."""
    return node_sources(Path(environ.get(ROOT_VARIABLES["pm_counters"]) or PM_COUNTERS),
                        Path(environ.get(ROOT_VARIABLES["powercap"]) or POWERCAP))  # fmt: skip


def to_record(reading: Reading) -> dict:
    """A reading as the log holds it (a ``system`` event's ``energy`` entry, a ``monitor`` event's ``energy``)."""
    record = {"source": reading.source, "domain": reading.domain, "joules": reading.joules, "time": reading.time}
    if reading.wraps_at:
        record["wraps_at"] = reading.wraps_at
    return record


def from_record(record: object) -> Reading:
    """The reading a log's record holds; ``ValueError`` naming what is wrong with one that is not a reading."""
    if not isinstance(record, Mapping):
        raise ValueError(f"an energy reading is an object, not {type(record).__name__}")
    source, domain = record.get("source"), record.get("domain")
    numbers = [record.get("joules"), record.get("time"), record.get("wraps_at")]
    if not isinstance(source, str) or not isinstance(domain, str):
        raise ValueError("an energy reading names its source and domain")
    for value in numbers[:2] + [v for v in numbers[2:] if v is not None]:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"energy reading {source} {domain}: {value!r} is not a counter's value or time")
    return Reading(source, domain, float(numbers[0]), float(numbers[1]),
                   float(numbers[2]) if numbers[2] is not None else None)  # fmt: skip


def counted(readings: Iterable[Reading]) -> list[Reading]:
    """The readings whose sum is a node's energy once, none counted twice: Cray's ``node`` counter where there is
    one (it covers the CPUs, memory and accelerators); otherwise each RAPL package and its DRAM (cores and uncore
    are inside the package; ``psys`` covers the packages, so it is left out) and each NVML GPU (not in RAPL)."""
    readings = list(readings)
    node = [r for r in readings if r.source == "pm_counters" and r.domain == "node"]
    if node:
        return node
    return [r for r in readings if r.source == "nvml" or (r.source == "powercap" and r.domain.startswith("package")
            and ("/" not in r.domain or r.domain.endswith("/dram")))]  # fmt: skip


def coverage(readings: Iterable[Reading]) -> str:
    """What :func:`counted` readings cover, in words."""
    kinds = {r.source for r in readings}
    if "pm_counters" in kinds:
        return "the node (Cray pm_counters)"
    parts = (["CPU packages and DRAM (RAPL)"] if "powercap" in kinds else []) + (["GPUs (NVML)"] if "nvml" in kinds
                                                                                 else [])  # fmt: skip
    return " and ".join(parts) or "nothing"


POWER_BOUND_W = {"node": 12_000.0, "cpu": 2_000.0, "memory": 1_000.0, "accel": 1_500.0, "package": 800.0,
                 "dram": 400.0, "gpu": 1_500.0}  # fmt: skip
"""the most watts a meter's domain can draw on average between two readings (a versioned table, which the run does
not write; verify holds every step of every counter to it): an HPE Cray EX node with four accelerators draws up to
≈ 3 kW, one accelerator (an NVIDIA B200, an AMD MI300X) up to 1 kW, a CPU package up to ≈ 500 W (AMD EPYC 9005),
its DRAM a few hundred; each bound has headroom for what is not in the table yet, and a forged counter that
counts more than any of them is named"""
POWER_FLOOR_W = {"node": 100.0, "cpu": 10.0, "memory": 2.0, "accel": 20.0, "package": 5.0, "dram": 1.0,
                 "gpu": 20.0}  # fmt: skip
"""the least watts a domain draws while it runs a job (idle is more): the most a reading lower than the truth could
have raised operations per joule is the measured mean power over the floor's (:func:`lie_factor`)"""


def domain_kind(domain: str) -> str:
    """The key of :data:`POWER_BOUND_W` a domain falls under (``accel3`` → ``accel``, ``package-0/dram`` → ``dram``)."""
    last = domain.rsplit("/", 1)[-1]
    for kind in ("package", "accel", "gpu"):
        if last.startswith(kind):
            return kind
    return last


@dataclass
class Counter:
    """One counter's readings over a segment, streamed: what it counted, over how long, and what went wrong."""

    first: Reading
    last: Reading
    joules: float = 0.0
    readings: int = 1
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, reading: Reading, where: str) -> float | None:
        """The next reading: its step counted (a wrap through its range; a decrease without one is named), its
        mean power held to :data:`POWER_BOUND_W` and returned; a reading not later than the last is named and
        skipped (None)."""
        name = f"{where} {reading.source} {reading.domain}"
        if reading.time <= self.last.time:
            self.problems.append(f"{name}: a reading at {reading.time:.3f} not after the one at {self.last.time:.3f}")
            return None
        joules, note = energy_between(self.last, reading)
        if note.startswith("reset"):  # a counter without a range went down: nothing in the log shows a reset
            self.problems.append(f"{name}: the counter went down from {self.last.joules:.6g} J to "
                                 f"{reading.joules:.6g} J at {reading.time:.0f}, and it does not wrap")  # fmt: skip
            joules = 0.0
        elif note:
            self.notes.append(f"{name} {note} at {reading.time:.0f}")
        watts = joules / (reading.time - self.last.time)
        bound = POWER_BOUND_W.get(domain_kind(reading.domain))
        if bound is not None and watts > bound:
            self.problems.append(f"{name}: {watts:,.0f} W between {self.last.time:.0f} and {reading.time:.0f}, above "
                                 f"the table's {bound:,.0f} W for a {domain_kind(reading.domain)}")  # fmt: skip
        self.joules += joules
        self.last = reading
        self.readings += 1
        return watts

    @property
    def seconds(self) -> float:
        return self.last.time - self.first.time


TRACE_POINTS = 100_000
"""the most points :class:`PowerTrace` keeps, whatever the run's nodes and length"""


@dataclass
class PowerTrace:
    """Each node's mean power between two of its readings, for the report's plot of power over time: at most
    :data:`TRACE_POINTS` kept (past it every other point is dropped and the stride doubles: the whole run stays
    covered, at a bounded cost)."""

    times: list[float] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    watts: list[float] = field(default_factory=list)
    stride: int = 1
    seen: int = 0

    def add(self, when: float, host: str, watts: float) -> None:
        self.seen += 1
        if (self.seen - 1) % self.stride:
            return
        self.times.append(when)
        self.hosts.append(host)
        self.watts.append(watts)
        if len(self.times) > TRACE_POINTS:
            self.times, self.hosts, self.watts = self.times[::2], self.hosts[::2], self.watts[::2]
            self.stride *= 2


@dataclass
class NodeSeries:
    """A node's counters over one segment: each counted (:func:`counted`) counter's joules, from the start line's
    reading on."""

    host: str
    counters: dict[tuple[str, str], Counter] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """a node's readings that were not readings (a malformed record)"""

    def add(self, records: object, where: str, trace: PowerTrace | None = None) -> None:
        try:
            readings = [from_record(record) for record in (records if isinstance(records, list) else [records])]
        except ValueError as exc:
            self.problems.append(f"{where} on {self.host}: {exc}")
            return
        steps = []
        for reading in counted(readings):
            key = (reading.source, reading.domain)
            if key in self.counters:
                steps.append(self.counters[key].add(reading, f"{where} on {self.host}:"))
            else:
                self.counters[key] = Counter(reading, reading)
        if trace is not None and steps and None not in steps:
            trace.add(max(r.time for r in counted(readings)), self.host, sum(steps))  # type: ignore[arg-type]

    @property
    def watts(self) -> float | None:
        """Mean watts over the readings (the sum of each counter's), None when no counter was read twice."""
        spans = [c for c in self.counters.values() if c.seconds > 0]
        return sum(c.joules / c.seconds for c in spans) if spans else None


@dataclass
class SegmentEnergy:
    """One segment's nodes: those that logged their meters at the start line, and their counters since."""

    number: int
    nodes: dict[str, NodeSeries] = field(default_factory=dict)
    hosts: int = 0
    """the segment's nodes (its ``system`` event's), measured or not"""
    unmeasured: list[str] = field(default_factory=list)
    """one line a node without a reading: its host and why (what the start line said)"""


ENERGY_EVENTS = frozenset({"run_start", "system", "monitor", "run_stop"})
"""the events :class:`EnergyLedger` reads"""


class EnergyLedger:
    """A run log's energy readings, streamed segment by segment into each node's counters (O(nodes × counters)
    held, whatever the run's length), and the figures over the scored window: the same code for the run's score,
    the report and verify (issue 53).

    Readings come from two events: the ``system`` event (``energy``: each node's start-line readings, read by one
    rank a node, or why it read none) and ``monitor`` events (``energy``: the node's readings at each sample of its
    monitor).  A reading after the segment's ``run_stop`` is not in its window."""

    def __init__(self) -> None:
        self.segments: list[SegmentEnergy] = []
        self._stopped = False
        self.trace = PowerTrace()
        """each node's power over time, bounded (the report's plot)"""

    def event(self, event: Mapping) -> None:
        kind = event.get("event")
        if kind == "run_start":
            self.segments.append(SegmentEnergy(len(self.segments) + 1))
            self._stopped = False
        elif kind == "run_stop":
            self._stopped = True
        elif not self.segments or self._stopped:
            return
        elif kind == "system":
            self._system(event)
        elif kind == "monitor" and "energy" in event:
            host = str(event.get("host", ""))
            node = self.segments[-1].nodes.get(host)
            if node is None:  # a node that read nothing at the start line: no window begins here
                return
            when = event.get("time")
            where = f"monitor sample at {when:.0f}" if isinstance(when, int | float) else "a monitor sample"
            node.add(event.get("energy"), where, self.trace)

    def _system(self, event: Mapping) -> None:
        segment = self.segments[-1]
        hosts = event.get("hosts")
        segment.hosts = len(hosts) if isinstance(hosts, list) else 0
        entries = event.get("energy")
        if not isinstance(entries, list):
            return
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            host = str(entry.get("host", ""))
            readings = entry.get("readings") if isinstance(entry.get("readings"), list) else []
            if readings:
                segment.nodes[host] = NodeSeries(host)
                segment.nodes[host].add(readings, "the start line")
            else:
                why = "; ".join(str(p) for p in entry.get("problems", []) if isinstance(p, str)) or "no meter"
                segment.unmeasured.append(f"{host}: {why}")

    def problems(self) -> list[str]:
        """Every reading that is not physics (a counter down, a step above the table's power, time backwards)."""
        return [problem for segment in self.segments for node in segment.nodes.values()
                for problem in [*node.problems, *(p for c in node.counters.values() for p in c.problems)]]  # fmt: skip

    def notes(self) -> list[str]:
        return [note for segment in self.segments for node in segment.nodes.values()
                for counter in node.counters.values() for note in counter.notes]  # fmt: skip

    def figures(self, active_time: float, ops: float, regulated_ops: float | None) -> dict:
        """The score's ``energy`` record: joules over the scored window at the measured mean power, the mean watts,
        operations (and regulated operations) per joule; or why there is none.

        A segment's power is the sum of its nodes' mean power over their readings; the run's mean power weighs
        each segment by the seconds its readings span.  Every node of every segment must have been measured (a
        node without a meter counts no joules, and operations per joule would then be raised by what was not
        counted): otherwise the record says which nodes were not, and gives no figure."""
        if not self.segments or all(not s.nodes and not s.unmeasured for s in self.segments):
            return {"measured": False, "why": "no energy readings in the log (a run before issue 53, or none taken)"}
        unmeasured = [f"segment {s.number}: {line}" for s in self.segments for line in s.unmeasured]
        unread = [f"segment {s.number}: {node.host}: no reading after the start line's (no monitor there, or the "
                  "segment too short)" for s in self.segments for node in s.nodes.values() if node.watts is None]
        if unmeasured or unread:
            lines = unmeasured + unread
            return {"measured": False, "why": f"{len(lines)} node(s) not measured, e.g. {lines[0]}",
                    "nodes_unmeasured": len(lines)}  # fmt: skip
        weighted, spanned, nodes, covers = 0.0, 0.0, 0, set()
        for segment in self.segments:
            watts = sum(node.watts or 0.0 for node in segment.nodes.values())
            span = min(c.seconds for node in segment.nodes.values() for c in node.counters.values() if c.seconds > 0)
            weighted += watts * span
            spanned += span
            nodes = max(nodes, len(segment.nodes))
            covers |= {coverage(c.first for c in node.counters.values()) for node in segment.nodes.values()}
        watts = weighted / spanned
        joules = watts * active_time
        return {"measured": True, "joules": joules, "watts": watts, "seconds_read": spanned, "nodes": nodes,
                "covers": sorted(covers), "ops_per_joule": ops / joules if joules > 0 else None,
                "regulated_ops_per_joule": regulated_ops / joules if joules > 0 and regulated_ops is not None
                else None}  # fmt: skip


SHOWN_NODES = 4
"""nodes the start line names one by one (at thousands of nodes, the rest are counted)"""


def start_lines(nodes: list[Mapping]) -> list[str]:
    """Rank 0's lines at the start line: which sources were found, on how many nodes, what they cover; each node
    not measured, and why (the first :data:`SHOWN_NODES`, then a count).  ``nodes``: each node's ``{"host",
    "readings", "problems"}`` as the ``system`` event keeps them."""
    measured = [n for n in nodes if n.get("readings")]
    unmeasured = [n for n in nodes if not n.get("readings")]
    lines = []
    if measured:
        covers = sorted({coverage(counted(from_record(r) for r in n["readings"])) for n in measured})
        sources = sorted({r["source"] for n in measured for r in n["readings"]})
        lines.append(f"aiperf_mpi: energy: measured on {len(measured)} of {len(nodes)} node(s) by "
                     f"{', '.join(sources)}, covering {'; '.join(covers)}; read at the start line and at every "
                     "monitor sample (--monitor-interval), figured beside the score")  # fmt: skip
    for node in unmeasured[:SHOWN_NODES]:
        readings = [from_record(r) for r in node.get("readings") or []]
        lines.append(node_line(readings, list(node.get("problems") or []), str(node.get("host", "?"))))
    if len(unmeasured) > SHOWN_NODES:
        lines.append(f"aiperf_mpi: energy: not measured on {len(unmeasured) - SHOWN_NODES} more node(s)")
    if unmeasured:
        lines.append("aiperf_mpi: energy: no figure for the run (a node without a meter would count no joules); "
                     "the score is unchanged")  # fmt: skip
    return lines


def energy_line(record: Mapping) -> str:
    """The run's line on energy beside its score."""
    if not record.get("measured"):
        return f"aiperf_mpi: energy: not measured: {record.get('why', 'no readings')}"
    regulated = record.get("regulated_ops_per_joule")
    return (f"aiperf_mpi: energy: {record['joules'] / 1e3:,.4g} kJ over the scored window at {record['watts']:,.4g} W "
            f"mean ({record['nodes']} node(s), {', '.join(record['covers'])}; read over {record['seconds_read']:.0f} "
            f"s); {record['ops_per_joule'] / 1e9:.4g} G operations per joule"
            + (f", {regulated / 1e9:.4g} G regulated" if regulated is not None else "")
            + " (the meters' own: not the wall plug, the network or cooling)")


def lie_factor(record: Mapping, floor_watts: float) -> float | None:
    """The most a reading lower than the truth could have raised operations per joule within verify's bounds: the
    measured mean power over the least the measured domains draw (:data:`POWER_FLOOR_W`)."""
    if not record.get("measured") or floor_watts <= 0:
        return None
    return max(1.0, float(record["watts"]) / floor_watts)


if __name__ == "__main__":
    found, unread = node_sources()
    print(node_line(found, unread))
    sys.exit(0)
