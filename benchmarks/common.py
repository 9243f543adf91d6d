"""Shared helpers: timing, machine description, Markdown."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable


def time_calls(function: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeat`` calls after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def summary_ms(times: list[float]) -> str:
    """``median (min–max) ms`` of a list of seconds."""
    ms = sorted(t * 1e3 for t in times)
    return f"{statistics.median(ms):.2f} ms (min {ms[0]:.2f}, max {ms[-1]:.2f}, n={len(ms)})"


def machine() -> str:
    """One line naming the machine a figure was measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
