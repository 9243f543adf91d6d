"""The utilisation monitor: how busy the accelerators (or CPUs) of each node were, over the run.

The paper's worry is that accelerators sit idle while CPUs generate models;
the per-group timeline shows the gaps, the monitor shows the devices
themselves.  One monitor runs per node — on the node's first group leader —
because every sample describes the whole node (more monitors would repeat
it).  Every ``interval`` seconds it samples

* NVIDIA GPUs through NVML (``nvidia-ml-py``) when the node has any:
  utilisation (percent of the interval a kernel ran) and memory per device;
* otherwise the CPU: the node's busy percent over the interval (from
  ``/proc/stat``) and the resident memory of the benchmark's processes on the
  node, the master's included where it runs (``/proc/PID/status``),

and sends it to the master, which writes a ``monitor`` event.  The samplers
are plain objects, testable without MPI; :class:`MonitorThread` is the thin
threaded layer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from aiperf_mpi.job.messages import MonitorSample


class CpuSampler:
    """Node CPU busy percent between two calls, and the resident memory of given processes."""

    source = "cpu"

    def __init__(self, pids: Sequence[int], proc: Path = Path("/proc")) -> None:
        self.pids = list(pids)
        self.proc = proc
        self._last = self._cpu_times()

    def _cpu_times(self) -> tuple[int, int]:
        """(busy, total) jiffies of all CPUs since boot."""
        fields = (self.proc / "stat").read_text().split("\n", 1)[0].split()[1:]
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle = values[3] + values[4]
        return sum(values) - idle, sum(values)

    def _rss(self, pid: int) -> int:
        try:
            for line in (self.proc / str(pid) / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass  # the process ended: it holds no memory
        return 0

    def _memory_total(self) -> int:
        for line in (self.proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
        return 0

    def sample(self) -> list[dict]:
        busy, total = self._cpu_times()
        last_busy, last_total = self._last
        self._last = (busy, total)
        utilisation = 100.0 * (busy - last_busy) / (total - last_total) if total > last_total else 0.0
        return [{
            "index": 0,
            "name": "cpu",
            "utilization": round(utilisation, 2),
            "memory_used": sum(self._rss(pid) for pid in self.pids),
            "memory_total": self._memory_total(),
        }]  # fmt: skip

    def close(self) -> None:
        pass


class NvmlSampler:
    """Every NVIDIA GPU of the node, through NVML."""

    source = "nvml"

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self.handles:
            pynvml.nvmlShutdown()
            raise RuntimeError("NVML sees no GPU")
        self.names = [str(pynvml.nvmlDeviceGetName(h)) for h in self.handles]

    def sample(self) -> list[dict]:
        devices = []
        for index, handle in enumerate(self.handles):
            memory = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append({
                "index": index,
                "name": self.names[index],
                "utilization": float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                "memory_used": int(memory.used),
                "memory_total": int(memory.total),
            })  # fmt: skip
        return devices

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def node_sampler(pids: Sequence[int]) -> CpuSampler | NvmlSampler:
    """NVML when the node has NVIDIA GPUs and ``nvidia-ml-py`` is installed, else the CPU."""
    try:
        return NvmlSampler()
    except Exception:  # noqa: BLE001 - no NVML library, no driver, no GPU: all mean a CPU node
        return CpuSampler(pids)


def node_energy() -> list[dict]:
    """This node's energy readings as the log holds them (the monitor's node: one rank a node reads it)."""
    from aiperf_mpi.results.energy import node_sources_here, to_record

    readings, _ = node_sources_here()
    return [to_record(reading) for reading in readings]


class MonitorThread:
    """Samples every ``interval`` seconds in a daemon thread and hands each sample to ``send``.

    ``send`` runs in this thread: over MPI it needs ``MPI_THREAD_MULTIPLE``,
    which Horovod needs as well (the caller checks).  A sampler error ends
    the monitor with one line, never the run.
    """

    def __init__(self, sampler, send: Callable[[MonitorSample], None], interval: float, group: int, host: str,
                 node: int) -> None:  # fmt: skip
        self.sampler = sampler
        self.send = send
        self.interval = interval
        self.identity = {"group": group, "host": host, "node": node}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="aiperf-monitor", daemon=True)
        self.error = ""
        self.energy: Callable[[], list[dict]] = node_energy
        """the node's energy meters at each sample (issue 53); a meter that cannot be read gives none, and the
        run's figure then says so (:class:`~aiperf_mpi.results.energy.EnergyLedger`)"""

    def start(self) -> MonitorThread:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                devices = self.sampler.sample()
                energy = self.energy()
                self.send(MonitorSample(time=time.time(), source=self.sampler.source, devices=devices,
                                        energy=energy, **self.identity))  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - the monitor must never end the run
                self.error = f"{type(exc).__name__}: {exc}"
                print(f"aiperf_mpi: warning: utilisation monitor on {self.identity['host']} stopped: {self.error}",
                      flush=True)  # fmt: skip
                return

    def stop(self) -> None:
        """Stop sampling and wait for the thread (a sample being sent completes first)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 10)
        self.sampler.close()
