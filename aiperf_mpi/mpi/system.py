"""A description of the machine for the run log: hosts, processors, accelerators, software."""

from __future__ import annotations

import platform
from importlib import metadata

from mpi4py import MPI

from aiperf_mpi.results.machine import local_description


def _version(package: str) -> str | None:
    for name in (package, package.replace("-", "_")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


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
