"""The CPU sampler of the utilisation monitor, on a /proc written by the test and on the real one."""

import os
import threading
from pathlib import Path

from aiperf_mpi.job.messages import MonitorSample
from aiperf_mpi.job.monitor import CpuSampler, MonitorThread


def write_proc(root: Path, busy: int, idle: int, rss_kb: dict[int, int]) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    (root / "meminfo").write_text("MemTotal:       1000 kB\nMemFree:         500 kB\n")
    for pid, kb in rss_kb.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "status").write_text(f"Name:\tpython\nVmPeak:\t 9999 kB\nVmRSS:\t {kb} kB\n")


def test_busy_percent_over_the_interval_and_resident_memory_of_the_given_processes(tmp_path) -> None:
    write_proc(tmp_path, busy=100, idle=900, rss_kb={11: 200, 12: 100})
    sampler = CpuSampler([11, 12, 13], proc=tmp_path)  # 13 has ended: it holds nothing
    write_proc(tmp_path, busy=175, idle=925, rss_kb={11: 250, 12: 100})
    [device] = sampler.sample()
    assert device["utilization"] == 75.0  # 75 busy jiffies of 100
    assert device["memory_used"] == 350 * 1024 and device["memory_total"] == 1000 * 1024
    write_proc(tmp_path, busy=175, idle=1025, rss_kb={11: 250})
    assert sampler.sample()[0]["utilization"] == 0.0


def test_the_real_proc_gives_plausible_figures() -> None:
    sampler = CpuSampler([os.getpid()])
    sum(i * i for i in range(300_000))  # a little work between the two readings
    [device] = sampler.sample()
    assert 0.0 <= device["utilization"] <= 100.0
    assert 10 * 2**20 < device["memory_used"] < device["memory_total"]


def test_the_thread_sends_samples_and_stops_promptly(tmp_path) -> None:
    write_proc(tmp_path, busy=0, idle=0, rss_kb={1: 1})
    sent: list[MonitorSample] = []
    arrived = threading.Event()

    def send(sample: MonitorSample) -> None:
        sent.append(sample)
        if len(sent) >= 2:
            arrived.set()

    monitor = MonitorThread(CpuSampler([1], proc=tmp_path), send, 0.05, group=3, host="n1", node=8).start()
    assert arrived.wait(5)
    monitor.stop()
    count = len(sent)
    assert all(s.group == 3 and s.host == "n1" and s.node == 8 and s.source == "cpu" for s in sent)
    threading.Event().wait(0.2)
    assert len(sent) == count  # nothing after stop()


def test_a_failing_sampler_ends_the_monitor_not_the_caller(capsys) -> None:
    class Broken:
        source = "cpu"

        def sample(self) -> list[dict]:
            raise OSError("no /proc here")

        def close(self) -> None:
            pass

    monitor = MonitorThread(Broken(), lambda sample: None, 0.01, group=0, host="h", node=0).start()
    monitor._thread.join(5)
    monitor.stop()
    assert "no /proc here" in monitor.error
    assert "utilisation monitor on h stopped" in capsys.readouterr().out
