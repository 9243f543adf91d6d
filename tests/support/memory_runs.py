"""One measured job's memory per rank, by role: what ``benchmarks/memory.py`` tabulates and the table test holds.

Each job launches ``mpirun`` with the benchmark (groups of 2, one relay; a rehearsal on synthetic data, or a real
run on the embedded digits) and reads every rank's ``/proc/PID/status`` twice a second while it runs: ``VmRSS``
and ``RssAnon`` (what the kernel's OOM killer weighs).  A rank's figure is its peak; its role comes from the
run's ``layout`` event.  Here, in tests/support, so that ``make bench`` and ``tests/scale/test_memory_table.py``
measure the same way (tests may not import benchmarks/).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.results import runlog
from tests.support.mpirun import mpirun_command, start_in_background

RANKS = 8
GROUP_SIZE = 2
TIME_LIMIT = 40.0
SAMPLE_SECONDS = 0.5
REAL_RANKS = 6
"""a real run's job: the master, the relay and two groups of 2 (TensorFlow in each training rank: ≈ 0.5 GiB before
any model, so a 2-core machine holds a few)"""
TIMEOUT = 900.0
ROLES = ("master", "relay", "leader", "other training rank")


def rank_memory(pid: int) -> tuple[int, float, float] | None:
    """(world rank, VmRSS MiB, RssAnon MiB) of an Open MPI rank, None when it is gone or not a rank."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    rank = next((int(item.split(b"=", 1)[1]) for item in environ if item.startswith(b"OMPI_COMM_WORLD_RANK=")), None)
    fields = {line.split(":")[0]: line.split()[1] for line in status.splitlines()
              if line.startswith(("VmRSS:", "RssAnon:"))}  # fmt: skip
    if rank is None or len(fields) < 2:
        return None
    return rank, int(fields["VmRSS"]) / 1024, int(fields["RssAnon"]) / 1024


def ranks_of(run_dir: Path) -> list[int]:
    """The PIDs of the processes whose command line names ``run_dir`` (the ranks, and mpirun)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(run_dir).encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def role_of(rank: int, layout: dict) -> str:
    if rank == layout["master_rank"]:
        return "master"
    if rank in layout.get("relay_ranks", []):
        return "relay"
    return "leader" if any(rank == group["leader"] for group in layout["groups"]) else "other training rank"


def job_options(seed: str, group_size: int, time_limit: float, real: bool, dataset: str = "synthetic",
                batch: int | None = None) -> list[str]:  # fmt: skip
    """The benchmark's options for one measured job: a rehearsal (on synthetic data unless ``dataset`` says), or a
    real run on digits; ``batch``: the warm-up's per-rank batch (``--batch-size``; None: the default), which a
    training rank's memory follows (mpi/limits.py, ``ACTIVATION_FACTOR``)."""
    kind = ["--dataset", "digits"] if real else ["--rehearse", "--rehearse-rate", "2e10", "--dataset", dataset]
    sized = [] if batch is None else ["--batch-size", str(batch), "--ignore-limits"]  # measured, not refused
    return [*kind, "--group-size", str(group_size), "--relays", "1", "--seed-model", seed, "--time-limit",
            str(time_limit), "--score-step", "10", "--monitor-interval", "0", *sized]  # the report too: rank 0's


def measure(seed: str, ranks: int = RANKS, group_size: int = GROUP_SIZE, time_limit: float = TIME_LIMIT,
            real: bool = False, dataset: str = "synthetic", batch: int | None = None) -> dict:  # fmt: skip
    """One job: each role's ranks' peak VmRSS and RssAnon (MiB), and the run's own figures (``batch``:
    :func:`job_options`)."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        run_dir = Path(scratch) / "run"
        argv = [sys.executable, "-m", "aiperf_mpi", *job_options(seed, group_size, time_limit, real, dataset, batch),
                "--run-dir", str(run_dir)]  # fmt: skip
        job = start_in_background(mpirun_command(ranks, argv), Path(scratch) / "output.txt")
        peaks: dict[int, tuple[float, float]] = {}
        deadline = time.monotonic() + TIMEOUT
        while job.process.poll() is None and time.monotonic() < deadline:
            for pid in ranks_of(run_dir):
                found = rank_memory(pid)
                if found is not None:
                    rank, rss, anon = found
                    old = peaks.get(rank, (0.0, 0.0))
                    peaks[rank] = (max(old[0], rss), max(old[1], anon))
            time.sleep(SAMPLE_SECONDS)
        output = job.finish(max(1.0, deadline - time.monotonic()))
        if job.process.returncode != 0:
            raise RuntimeError(f"the job failed ({job.process.returncode}): {output[-3000:]}")
        events = runlog.read_events(run_dir).events
        [layout] = [e for e in events if e[runlog.EVENT] == runlog.LAYOUT]
        models = sum(1 for e in events if e[runlog.EVENT] == runlog.MODEL_DONE)
        batches = sorted({e["hparams"].get("batch_size") for e in events if e[runlog.EVENT] == runlog.MODEL_PROPOSED})
    by_role: dict[str, list[tuple[float, float]]] = {}
    for rank, peak in peaks.items():
        by_role.setdefault(role_of(rank, layout), []).append(peak)
    return {"seed": seed, "ranks": ranks, "group_size": group_size, "models": models, "sampled": len(peaks),
            "roles": by_role, "load": os.getloadavg()[0], "real": real, "batch": batch,
            "batches": batches}
