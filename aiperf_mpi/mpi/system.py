"""A description of the machine for the run log: hosts, processors, accelerators, software."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata

from mpi4py import MPI


def _version(package: str) -> str | None:
    for name in (package, package.replace("-", "_")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
        "cpu": _cpu_model(),
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
