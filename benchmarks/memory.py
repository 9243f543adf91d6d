"""Memory per rank of a rehearsal (``--rehearse``) or of a real run, by seed model and by role: what a node needs.

A rehearsal loads no TensorFlow, so what a rank holds is the package, its role's imports and the stand-in's
own buffers; a real run (``--real``) trains with TensorFlow and Horovod on the embedded digits, so a training
rank holds TensorFlow, its graph, its weights and its batches.  Each size here launches a real job (``mpirun``,
groups of 2, one relay; synthetic data for a rehearsal)
and reads every rank's ``/proc/PID/status`` twice a second while it runs: ``VmRSS`` (resident, shared pages
of the libraries included) and ``RssAnon`` (the process's own anonymous memory, what the kernel's OOM killer
weighs).  A rank's figure is its peak over the run; its role comes from the run's ``layout`` event: the master
(rank 0), the relay, a group's leader (which also runs the search and the tuner), another training rank.

Usage: ``python -m benchmarks.memory [--real] [SEED ...]`` (default: tiny and resnet50), or ``make bench``'s
runner (the rehearsal).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.results import runlog
from tests.support.mpirun import mpirun_command, start_in_background

SEEDS = ("tiny", "resnet50")
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


def job_options(seed: str, group_size: int, time_limit: float, real: bool) -> list[str]:
    """The benchmark's options for one measured job: a rehearsal on synthetic data, or a real run on digits."""
    kind = ["--dataset", "digits"] if real else ["--rehearse", "--rehearse-rate", "2e10", "--dataset", "synthetic"]
    return [*kind, "--group-size", str(group_size), "--relays", "1", "--seed-model", seed, "--time-limit",
            str(time_limit), "--score-step", "10", "--monitor-interval", "0", "--no-report"]  # fmt: skip


def measure(seed: str, ranks: int = RANKS, group_size: int = GROUP_SIZE, time_limit: float = TIME_LIMIT,
            real: bool = False) -> dict:  # fmt: skip
    """One job: each role's ranks' peak VmRSS and RssAnon (MiB), and the run's own figures."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        run_dir = Path(scratch) / "run"
        argv = [sys.executable, "-m", "aiperf_mpi", *job_options(seed, group_size, time_limit, real), "--run-dir",
                str(run_dir)]  # fmt: skip
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
    by_role: dict[str, list[tuple[float, float]]] = {}
    for rank, peak in peaks.items():
        by_role.setdefault(role_of(rank, layout), []).append(peak)
    return {"seed": seed, "ranks": ranks, "group_size": group_size, "models": models, "sampled": len(peaks),
            "roles": by_role, "load": os.getloadavg()[0], "real": real}  # fmt: skip


def span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}–{high:.0f}"


def table(results: list[dict]) -> str:
    rows = ["| seed | role | ranks | RssAnon (MiB), peak | VmRSS (MiB), peak |", "|---|---|---|---|---|"]
    for result in results:
        for role in ROLES:
            peaks = result["roles"].get(role, [])
            if peaks:
                rows.append(f"| {result['seed']} | {role} | {len(peaks)} | {span([a for _, a in peaks])} "
                            f"| {span([r for r, _ in peaks])} |")  # fmt: skip
    return "\n".join(rows)


def run(seeds: tuple[str, ...] = SEEDS, real: bool = False) -> str:
    results = [measure(seed, ranks=REAL_RANKS if real else RANKS, real=real) for seed in seeds]
    ranks = REAL_RANKS if real else RANKS
    runs = "; ".join(f"{r['seed']}: {r['models']} models, {r['sampled']} ranks sampled, load {r['load']:.0f}"
                     for r in results)  # fmt: skip
    return "\n".join([
        table(results),
        "",
        f"Each: `mpirun -n {ranks} python -m aiperf_mpi {' '.join(job_options('SEED', GROUP_SIZE, TIME_LIMIT, real))}`"
        ", every rank's "
        f"/proc/PID/status read every {SAMPLE_SECONDS} s, its peak kept ({runs}). RssAnon is what the rank "
        "holds itself (the OOM killer's measure); VmRSS adds the shared libraries' resident pages, counted once "
        "per node in fact. A node holding k ranks of a role needs about k × that role's RssAnon, plus the "
        "libraries once.",
    ])  # fmt: skip


if __name__ == "__main__":
    real = "--real" in sys.argv[1:]
    print(run(tuple(a for a in sys.argv[1:] if a != "--real") or SEEDS, real=real))
