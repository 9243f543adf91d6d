"""The energy meters an HPC job can read without root, one source per meter, and the figures over a window.

Issue 53 (energy to solution).  What is built here is the reader and the arithmetic; **nothing writes its
readings into a run's log yet**, so no run reports energy and verify checks none (the issue's items 2–4 are
open).  ``python -m aiperf_mpi.results.energy`` says what this node has.

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
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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


if __name__ == "__main__":
    found, unread = node_sources()
    print(node_line(found, unread))
    print("aiperf_mpi: energy: not yet written into a run's log (issue 53): a run reports no energy figure")
    sys.exit(0)
