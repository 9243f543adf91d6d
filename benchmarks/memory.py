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

import sys

from tests.support.memory_runs import (
    GROUP_SIZE,
    RANKS,
    REAL_RANKS,
    ROLES,
    SAMPLE_SECONDS,
    TIME_LIMIT,
    job_options,
    measure,
)

SEEDS = ("tiny", "resnet50")


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
