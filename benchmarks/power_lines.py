"""What issue 53's energy records add to a run's files, per node and hour: ``python -m benchmarks.power_lines``.

One node of a Cray EX kind (the node counter, its CPUs, memory and four accelerators: seven ``pm_counters``), its
monitor every 30 s (``--monitor-interval``'s default): the bytes of each ``power_reading`` line the master's
``mllog.log`` writer makes, and of the metered ``monitor`` event of ``events.jsonl`` it repeats, both written by the
package's own writers.  Both grow with nodes × hours ÷ the interval, never with groups × models: the figure is
the growth law a site sizes its run directory by.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter
from aiperf_mpi.results.energy import Reading, to_record
from aiperf_mpi.results.jsonline import line_encoder

DOMAINS = ("node", "cpu", "memory", "accel0", "accel1", "accel2", "accel3")
"""a Cray EX node with four accelerators: what its pm_counters hold"""
HOST = "nid001234"
START = 1.765e9


def readings(joules: float, when: float) -> list[dict]:
    return [to_record(Reading("pm_counters", domain, joules, when)) for domain in DOMAINS]


def bytes_per_sample(samples: int, interval: float) -> tuple[float, float]:
    """(bytes of ``mllog.log`` a metered sample adds, bytes of its ``monitor`` event), averaged over ``samples``."""
    encode = line_encoder()
    with tempfile.TemporaryDirectory() as folder:
        writer = MLLogWriter(Path(folder))
        writer.energy({"event": "run_start", "time": START, "segment": 1, "config": {"monitor_interval": interval}})
        writer.energy({"event": "system", "time": START + 0.1, "hosts": [{"host": HOST}],
                       "energy": [{"host": HOST, "readings": readings(5e6, START), "problems": []}]})  # fmt: skip
        writer.flush()
        before = (Path(folder) / MLLOG_FILE).stat().st_size
        event_bytes = 0
        for number in range(1, samples + 1):
            when = START + interval * number
            sample = {"event": "monitor", "time": when, "group": 0, "host": HOST, "node": 0, "source": "nvml",
                      "devices": [], "energy": readings(5e6 + 3000 * interval * number, when)}  # fmt: skip
            event_bytes += len(encode(sample)) + 1
            writer.energy(sample)
        writer.close()
        line_bytes = (Path(folder) / MLLOG_FILE).stat().st_size - before
    return line_bytes / samples, event_bytes / samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.power_lines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=30.0, help="the monitor's interval, seconds")
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--hours", type=float, default=24.0)
    options = parser.parse_args(argv)
    line, event = bytes_per_sample(120, options.interval)
    per_hour = 3600 / options.interval
    total = per_hour * options.hours * options.nodes
    print(f"power_reading line: {line:.0f} B; the metered monitor event it repeats: {event:.0f} B ({len(DOMAINS)} "
          "counters, no device list)")  # fmt: skip
    print(f"a node-hour at --monitor-interval {options.interval:g}: {line * per_hour / 1e3:.1f} kB of mllog.log, "
          f"{event * per_hour / 1e3:.1f} kB of events.jsonl")  # fmt: skip
    print(f"{options.nodes:,} nodes, {options.hours:g} h: {line * total / 1e9:.2f} GB of power lines, "
          f"{event * total / 1e9:.2f} GB of metered monitor events")


if __name__ == "__main__":
    main()
