"""A description of the machine for the run log: hosts, processors, accelerators, software."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata

from mpi4py import MPI

from aiperf_mpi.results.hardware import CPU_FLAGS_READ


def _version(package: str) -> str | None:
    for name in (package, package.replace("-", "_")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo (every core of a node is the same model)."""
    entries: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    if entries:
                        break
                    continue
                key, _, value = line.partition(":")
                entries.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return entries


def _cpu(entries: dict[str, str]) -> dict:
    """The processor's model, vendor and the ISA flags that bound its arithmetic (results/hardware.py)."""
    flags = set((entries.get("flags") or entries.get("Features") or "").split())
    arm = platform.machine().lower() in ("aarch64", "arm64")
    return {
        "cpu": entries.get("model name") or platform.processor() or platform.machine(),
        "cpu_vendor": "ARM" if arm else entries.get("vendor_id"),
        "cpu_flags": [flag for flag in CPU_FLAGS_READ if flag in flags],
    }


def _accelerators() -> list[str]:
    """NVIDIA GPUs through NVML when it is installed, else none (CPU run)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in
                    range(pynvml.nvmlDeviceGetCount())]  # fmt: skip
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver or no GPU all mean: a CPU node
        return []


def local_description() -> dict:
    """What one rank sees of its node."""
    return {
        "host": socket.gethostname(),
        **_cpu(_cpuinfo()),
        "cores": os.cpu_count(),
        "accelerators": _accelerators(),
    }


def system_description(comm: MPI.Comm) -> dict | None:
    """Collective: every rank's node, summarised on rank 0 (``None`` elsewhere)."""
    described = comm.gather(local_description(), root=0)
    if comm.Get_rank() != 0:
        return None
    hosts: dict[str, dict] = {}
    for rank, entry in enumerate(described):
        host = hosts.setdefault(entry["host"], {**entry, "ranks": []})
        host["ranks"].append(rank)
    vendor, version = MPI.get_vendor()
    return {
        "ranks": comm.Get_size(),
        "nodes": len(hosts),
        "hosts": list(hosts.values()),
        "accelerators_per_node": max((len(h["accelerators"]) for h in hosts.values()), default=0),
        "mpi": {
            "vendor": vendor,
            "version": ".".join(map(str, version)),
            "library": MPI.Get_library_version().strip("\x00 \n"),
        },
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        "horovod": _version("horovod"),
        "mpi4py": _version("mpi4py"),
        "aiperf_mpi": _version("aiperf_mpi"),
    }
