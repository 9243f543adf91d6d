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
    """The reading a log's record holds; ``ValueError`` naming what is wrong with one that is not a reading.

    ``wraps_at`` only from powercap (the one meter with a range), above the reading itself."""
    if not isinstance(record, Mapping):
        raise ValueError(f"an energy reading is an object, not {type(record).__name__}")
    source, domain = record.get("source"), record.get("domain")
    if not isinstance(source, str) or not isinstance(domain, str):
        raise ValueError("an energy reading names its source and domain")
    values = []
    for name in ("joules", "time", "wraps_at"):
        value = record.get(name)
        if value is None and name == "wraps_at":
            values.append(None)
            continue
        try:
            number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
        except OverflowError:  # an integer beyond the floats (valid JSON): no counter's value
            number = math.nan
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"energy reading {source} {domain}: {name} {str(value)[:40]!r} is not a counter's "
                             "value or time")  # fmt: skip
        values.append(number)
    joules, when, wraps = values
    if wraps is not None and (source != "powercap" or wraps <= joules):
        raise ValueError(f"energy reading {source} {domain}: wraps_at {wraps:.6g} (only powercap's counters wrap, "
                         "and above their value)")  # fmt: skip
    return Reading(source, domain, joules, when, wraps)


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
"""the least watts a domain draws on average while a node runs a job (idle draws more): a node's mean power below
the sum of its counted domains' is named, as above the bound"""
STALE_SECONDS = 30.0
"""how much older than its event a reading may be (a meter's own timestamp lags its read; the start line's
readings precede the ``system`` event by start-up's last collective; nodes' clocks differ by NTP's error)"""
AHEAD_SECONDS = 5.0
"""how much later than its event a reading may be (the same, the other way): a reading's time outside its event's
window is named, so that no forged timestamp stretches a counter's span"""
LATE_END_SECONDS = 10.0
"""past two monitor intervals, how long before its segment's end a node's readings may stop and still give its
mean power over the segment (a monitor that stopped, a node lost: its power after is unknown, so no figure)"""
SHOWN_LINES = 3
"""problem lines kept per counter (then a count): whatever the run's length, the ledger's lines stay bounded"""


def domain_kind(domain: str) -> str:
    """The key of :data:`POWER_BOUND_W` a domain falls under (``accel3`` → ``accel``, ``package-0/dram`` → ``dram``)."""
    last = domain.rsplit("/", 1)[-1]
    for kind in ("package", "accel", "gpu"):
        if last.startswith(kind):
            return kind
    return last


def bound_of(domains: Iterable[str], table: Mapping[str, float]) -> float:
    """The sum of ``table``'s figure over the domains (0 for a domain it does not know)."""
    return sum(table.get(domain_kind(domain), 0.0) for domain in domains)


@dataclass
class Counter:
    """One counter's readings over a segment, streamed: what it counted, over how long, and what went wrong."""

    first: Reading
    last: Reading
    joules: float = 0.0
    readings: int = 1
    wraps: int = 0
    problems: list[str] = field(default_factory=list)
    """what no honest meter logs (a decrease without a wrap, a step above the table's power): the row fails"""
    unusable: list[str] = field(default_factory=list)
    """what an honest meter may log (a reading not after the one before: a stale or stepped clock): the node then
    gives no figure"""
    more: int = 0
    """lines beyond :data:`SHOWN_LINES`, counted"""

    def _say(self, lines: list[str], line: str) -> None:
        if len(lines) < SHOWN_LINES:
            lines.append(line)
        else:
            self.more += 1

    def add(self, reading: Reading, where: str) -> float | None:
        """The next reading: its step counted (a wrap through its range; a decrease without one is named), its
        mean power held to :data:`POWER_BOUND_W` and returned; a reading not later than the last is named and
        skipped (None)."""
        name = f"{where} {reading.source} {reading.domain}"
        if reading.time <= self.last.time:
            self._say(self.unusable, f"{name}: a reading at {reading.time:.3f} not after the one at "
                                     f"{self.last.time:.3f}")  # fmt: skip
            return None
        if reading.wraps_at != self.first.wraps_at:
            self._say(self.problems, f"{name}: its wrap range changed from {self.first.wraps_at} to "
                                     f"{reading.wraps_at}")  # fmt: skip
            return None
        joules, note = energy_between(self.last, reading)
        if note.startswith("reset"):  # a counter without a range went down: nothing in the log shows a reset
            self._say(self.problems, f"{name}: the counter went down from {self.last.joules:.6g} J to "
                                     f"{reading.joules:.6g} J at {reading.time:.0f}, and it does not wrap")
            joules = 0.0
        elif note:
            self.wraps += 1
        watts = joules / (reading.time - self.last.time)
        bound = POWER_BOUND_W.get(domain_kind(reading.domain))
        if bound is not None and watts > bound:
            self._say(self.problems, f"{name}: {watts:,.0f} W between {self.last.time:.0f} and {reading.time:.0f}, "
                                     f"above the table's {bound:,.0f} W for a {domain_kind(reading.domain)}")
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
    """A node's counters over one segment: the counters its start-line reading counted (:func:`counted`), fixed
    then, each read at every later sample."""

    host: str
    counters: dict[tuple[str, str], Counter] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """what no honest run logs (a record that is not a reading): the row fails"""
    unusable: list[str] = field(default_factory=list)
    """why the node gives no figure though nothing need be forged (a sample without one of its counters, a reading
    whose time is outside its event's: a stale or stepped meter clock), at most :data:`SHOWN_LINES`"""

    def start(self, records: list, when: float, where: str) -> None:
        readings = self._readings(records, when, where)
        for reading in counted(readings or []):
            self.counters[(reading.source, reading.domain)] = Counter(reading, reading)
        if readings is not None and not self.counters:
            self.unusable.append(f"{self.host}: its start-line readings count nothing (no node, package or GPU)")

    def _readings(self, records: object, when: float, where: str) -> list[Reading] | None:
        """The records as readings, each within its event's time (None, and a problem, where one is not)."""
        try:
            readings = [from_record(record) for record in (records if isinstance(records, list) else [records])]
        except ValueError as exc:
            if len(self.problems) < SHOWN_LINES:
                self.problems.append(f"{where} on {self.host}: {exc}")
            return None
        for reading in readings:  # a stale or stepped meter clock, or a forged time: no figure (nothing to gain)
            if not when - STALE_SECONDS <= reading.time <= when + AHEAD_SECONDS:
                if len(self.unusable) < SHOWN_LINES:
                    self.unusable.append(f"{self.host}: {where}: {reading.source} {reading.domain} read at "
                                         f"{reading.time:.3f}, outside its event's {when:.3f} − {STALE_SECONDS:.0f} s "
                                         f"… + {AHEAD_SECONDS:.0f} s")  # fmt: skip
                return None
        return readings

    def add(self, records: object, when: float, where: str) -> tuple[float, float] | None:
        """The node's next sample: each counter's step counted; (when the last of them was read, the node's mean
        watts since its previous sample: the sum of its counters') when every counter stepped, else None."""
        readings = self._readings(records, when, where)
        if readings is None or not self.counters:
            return None
        read = {(r.source, r.domain): r for r in readings}
        missing = [f"{source} {domain}" for source, domain in self.counters if (source, domain) not in read]
        if missing:  # a sample without a counted counter: its span would be shorter than the others'
            if len(self.unusable) < SHOWN_LINES:
                self.unusable.append(f"{self.host}: {where} lacks {', '.join(missing)}")
            return None
        steps = [self.counters[key].add(read[key], f"{where} on {self.host}:") for key in self.counters]
        if None in steps:
            return None
        return max(read[key].time for key in self.counters), sum(steps)  # type: ignore[arg-type]

    @property
    def watts(self) -> float | None:
        """Mean watts over the readings (the sum of each counter's), None when a counter was not read twice."""
        if not self.counters or any(c.seconds <= 0 for c in self.counters.values()):
            return None
        return sum(c.joules / c.seconds for c in self.counters.values())

    @property
    def last_read(self) -> float:
        return min((c.last.time for c in self.counters.values()), default=math.nan)


@dataclass
class SegmentEnergy:
    """One segment's nodes: those that logged their meters at the start line, and their counters since."""

    number: int
    hosts: list[str] = field(default_factory=list)
    """the segment's nodes as its ``system`` event lists them, measured or not"""
    nodes: dict[str, NodeSeries] = field(default_factory=dict)
    unmeasured: list[str] = field(default_factory=list)
    """one line a node without a reading: its host and why (what the start line said)"""
    problems: list[str] = field(default_factory=list)
    """what does not hold together in the segment's energy records (hosts not the system event's)"""
    logged: bool = False
    """its ``system`` event carried ``energy`` (a segment from before issue 53 did not)"""
    stop: float | None = None
    interval: float = 0.0
    """its monitor's interval (``monitor_interval``), 0 when off"""


@dataclass(frozen=True)
class PowerStep:
    """A node's mean power between two of its samples: the figure of MLPerf's ``power_reading`` line (watts, at
    the time of the later reading, ``host`` in its metadata)."""

    host: str
    time: float
    """when the sample's last counter was read"""
    watts: float


ENERGY_EVENTS = frozenset({"run_start", "system", "monitor", "run_stop"})
"""the events :class:`EnergyLedger` reads"""
ENERGY_ERRORS = (TypeError, ValueError, AttributeError, OverflowError, KeyError)
"""what a malformed energy record may raise inside the ledger: caught there, named, never another reader's end"""


class EnergyLedger:
    """A run log's energy readings, streamed segment by segment into each node's counters (O(nodes × counters)
    held, whatever the run's length), and the figures over the scored window: the same code for the run's score,
    the report and verify (issue 53).

    Readings come from two events: the ``system`` event (``energy``: each node's start-line readings, read by one
    rank a node, or why it read none) and ``monitor`` events (``energy``: the node's readings at each sample of its
    monitor).  A reading after the segment's ``run_stop`` is not in its window.  Nothing here raises on a
    malformed record: it is named (:meth:`problems`) and the figure says there is none."""

    def __init__(self) -> None:
        self.segments: list[SegmentEnergy] = []
        self._stopped = False
        self.trace = PowerTrace()
        """each node's power over time, bounded (the report's plot)"""
        self.last_step: PowerStep | None = None
        """the node's mean power since its previous sample that the event just read gave (None: it gave none):
        what ``mllog.log``'s ``power_reading`` line of that sample holds (:mod:`aiperf_mpi.job.mllog`)"""

    def event(self, event: Mapping) -> None:
        self.last_step = None
        try:
            self._event(event)
        except ENERGY_ERRORS as exc:  # a record of a shape no writer makes: named, the walk goes on
            if self.segments:
                self.segments[-1].problems.append(f"a {event.get('event')} event's energy: {type(exc).__name__}")

    def _event(self, event: Mapping) -> None:
        kind = event.get("event")
        when = event.get("time")
        if kind == "run_start":
            config = event.get("config") if isinstance(event.get("config"), Mapping) else {}
            interval = config.get("monitor_interval", 0.0)
            self.segments.append(SegmentEnergy(len(self.segments) + 1,
                                               interval=float(interval) if isinstance(interval, int | float) else 0.0))
            self._stopped = False
        elif not self.segments or self._stopped or not isinstance(when, int | float) or isinstance(when, bool):
            return
        elif kind == "run_stop":
            self._stopped = True
            self.segments[-1].stop = float(when)
        elif kind == "system":
            self._system(event, float(when))
        elif kind == "monitor" and "energy" in event:
            host = event.get("host")
            segment = self.segments[-1]
            node = segment.nodes.get(host) if isinstance(host, str) else None
            if node is None:
                if host not in segment.hosts and len(segment.problems) < SHOWN_LINES:
                    segment.problems.append(f"a monitor sample's energy from {str(host)[:40]!r}, not a host of the "
                                            "segment's system event")  # fmt: skip
                return  # a node that read nothing at the start line: no window begins here
            step = node.add(event.get("energy"), float(when), f"monitor sample at {when:.0f}")
            if step is not None:
                self.last_step = PowerStep(host, *step)
                self.trace.add(step[0], host, step[1])

    def _system(self, event: Mapping, when: float) -> None:
        segment = self.segments[-1]
        hosts = event.get("hosts")
        segment.hosts = [str(h.get("host")) for h in hosts if isinstance(h, Mapping)] if isinstance(hosts, list) else []
        if "energy" not in event:
            return
        segment.logged = True
        entries = event.get("energy")
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            segment.problems.append("the system event's energy is not a list of each node's record")
            return
        named = [str(entry.get("host")) for entry in entries]
        if sorted(named) != sorted(segment.hosts):
            segment.problems.append(f"the system event's energy names the nodes {sorted(set(named))[:4]} "
                                    f"({len(named)}), its hosts are {sorted(segment.hosts)[:4]} "
                                    f"({len(segment.hosts)}): each host once")  # fmt: skip
            return
        for host, entry in zip(named, entries, strict=True):
            readings = entry.get("readings")
            if isinstance(readings, list) and readings:
                segment.nodes[host] = NodeSeries(host)
                segment.nodes[host].start(readings, when, "the start line")
            else:
                problems = entry.get("problems") if isinstance(entry.get("problems"), list) else []
                why = "; ".join(str(p)[:200] for p in problems[:3]) or "no meter"
                segment.unmeasured.append(f"{host}: {why}")

    def problems(self) -> list[str]:
        """What no honest run logs: a counter down without a wrap, a step above the power table's bound or a node
        below its floor, a reading outside its event's time, a record that is not one, hosts not the system's."""
        lines = []
        for segment in self.segments:
            lines += [f"segment {segment.number}: {line}" for line in segment.problems]
            for node in segment.nodes.values():
                lines += [f"segment {segment.number}: {line}" for line in node.problems]
                for counter in node.counters.values():
                    lines += [f"segment {segment.number}: {line}" for line in counter.problems]
                    if counter.problems and counter.more:
                        lines.append(f"segment {segment.number}: … and {counter.more} more of {node.host}'s")
                floor = bound_of((domain for _, domain in node.counters), POWER_FLOOR_W)
                watts = node.watts
                if watts is not None and watts < floor:
                    lines.append(f"segment {segment.number}: {node.host} drew {watts:.3g} W mean, below the floor "
                                 f"of its counted domains ({floor:.0f} W: POWER_FLOOR_W)")  # fmt: skip
        return lines

    def notes(self) -> list[str]:
        """What the reviewer may want: wraps counted, and each node that gives no figure though nothing is wrong."""
        lines = []
        for segment in self.segments:
            wraps = sum(c.wraps for node in segment.nodes.values() for c in node.counters.values())
            if wraps:
                lines.append(f"segment {segment.number}: {wraps} counter wrap(s) counted through their range")
            lines += [f"segment {segment.number}: {line}" for line in self._unusable(segment)[:SHOWN_LINES]]
        return lines

    def _unusable(self, segment: SegmentEnergy) -> list[str]:
        """Why the segment's nodes give no figure, though nothing is forged: not measured, a counter read once, a
        sample without a counter, readings that stop before the segment's end, a reading not after the last."""
        lines = list(segment.unmeasured)
        if not segment.logged:
            lines.append("no energy readings logged (a segment from before issue 53, or none taken)")
        elif not segment.nodes and not segment.unmeasured:
            lines.append("its system event's energy names no node")
        late = 2 * segment.interval + LATE_END_SECONDS
        for node in segment.nodes.values():
            lines += node.unusable
            lines += [line for c in node.counters.values() for line in c.unusable]
            if node.watts is None:
                lines.append(f"{node.host}: no reading after the start line's (no monitor there, or the segment "
                             "too short)")  # fmt: skip
            elif segment.stop is not None and node.last_read < segment.stop - late:
                lines.append(f"{node.host}: its readings stop {segment.stop - node.last_read:.0f} s before the "
                             f"segment's end (more than two monitor intervals + {LATE_END_SECONDS:.0f} s)")
        return lines

    def figures(self, windows: list[float], ops: float, regulated_ops: float | None) -> dict:
        """The score's ``energy`` record: joules over the scored window (each segment's nodes' mean power, the sum
        of each node's mean over its readings, times the segment's scored seconds), the mean watts, operations
        (and regulated operations) per joule; or why there is none.

        Every node of every segment must have been measured over the segment (a node without a meter counts no
        joules, and operations per joule would then be raised by what was not counted), and nothing may be
        wrong with the readings (:meth:`problems`): otherwise the record says why, and gives no figure."""
        if not self.segments or not any(s.logged for s in self.segments):
            return {"measured": False, "why": "no energy readings in the log (a run before issue 53, or none taken)"}
        wrong = self.problems()
        if wrong:
            return {"measured": False, "why": f"the readings do not hold together: {wrong[0]}"}
        unusable = [f"segment {s.number}: {line}" for s in self.segments for line in self._unusable(s)]
        if unusable:
            return {"measured": False, "why": f"{len(unusable)} node(s) not measured over the window, e.g. "
                                              f"{unusable[0]}"}  # fmt: skip
        joules, covers, nodes, read = 0.0, set(), 0, 0.0
        for segment, window in zip(self.segments, windows, strict=False):
            joules += sum(node.watts or 0.0 for node in segment.nodes.values()) * window
            nodes = max(nodes, len(segment.nodes))
            covers |= {coverage(c.first for c in node.counters.values()) for node in segment.nodes.values()}
            read += min(c.seconds for node in segment.nodes.values() for c in node.counters.values())
        seconds = sum(windows[: len(self.segments)])
        watts = joules / seconds if seconds > 0 else 0.0
        return {"measured": True, "joules": joules, "watts": watts, "seconds_read": read, "nodes": nodes,
                "covers": sorted(covers), "ops_per_joule": ops / joules if joules > 0 else None,
                "regulated_ops_per_joule": regulated_ops / joules if joules > 0 and regulated_ops is not None
                else None}  # fmt: skip

    def bound_watts(self) -> float:
        """The most the counted domains could have drawn (the power table's bounds summed over the busiest
        segment's nodes): what a reading lower than the truth could at most have hidden."""
        return max((sum(bound_of((d for _, d in node.counters), POWER_BOUND_W) for node in segment.nodes.values())
                    for segment in self.segments), default=0.0)  # fmt: skip


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


def lie_factor(record: Mapping, bound_watts: float) -> float | None:
    """The most a reading lower than the truth could have raised operations per joule within verify's bounds: the
    truth could have been up to the table's bound for the read domains (:meth:`EnergyLedger.bound_watts`), and verify
    holds the readings to no more than that; the factor is that bound over the measured mean power."""
    if not record.get("measured") or not record.get("watts"):
        return None
    return max(1.0, bound_watts / float(record["watts"]))


if __name__ == "__main__":
    found, unread = node_sources()
    print(node_line(found, unread))
    sys.exit(0)
