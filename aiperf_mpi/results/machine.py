"""What this node is, described the way a run's ``system`` event describes each of its nodes.

The run gathers it from every rank (:func:`aiperf_mpi.mpi.system.system_description`); the audit
(``python -m analysis.audit``) reads it on the machine it times on, so that the two descriptions it compares
were made by the same code.  Pure: /proc/cpuinfo, and NVML when it is installed; no MPI, no TensorFlow.
"""

from __future__ import annotations

import os
import platform
import socket

from aiperf_mpi.results.hardware import CPU_FLAGS_READ


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
    """What one rank sees of its node: host, processor, cores and accelerators."""
    return {
        "host": socket.gethostname(),
        **_cpu(_cpuinfo()),
        "cores": os.cpu_count(),
        "accelerators": _accelerators(),
    }
