"""The report on a big log: 10,000 models and 500,000 epochs, in under 10 s and 1 GiB.

A synthetic log as a long run on a large machine would leave it
(``tests/support/synthetic_log.py``, which the report's unit test also
writes, smaller): 64 groups on 32 nodes (8 GPUs each), a day of active time,
every model's ``model_done`` record carrying its graph and its full epoch
list, failures, staging, peak probes and monitor samples.  ``python -m analysis.report`` runs on it in a
subprocess; its wall time and peak RSS (``RUSAGE_CHILDREN``) are the
figures.  A second subprocess only reads the log and scores it, to show
where the time goes.

The growth law of the report's per-group pass (``analysis.metrics.group_times``) is measured apart
(:func:`group_growth`): one model and two epochs per group, groups from 4,096 to 65,536, the pass's CPU time
per size and the exponent between sizes (1: linear in the log; its loop once took a mask of every proposal,
failure and model per group, O(groups × models)).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.results.logmodel import orjson
from tests.support.synthetic_log import FAILED_SHARE, GPUS_PER_NODE, RESNET_EVERY, write_synthetic_log

GOAL_SECONDS = 10.0
GOAL_RSS_GIB = 1.0
GROWTH_GROUPS = (4_096, 16_384, 65_536)
"""the per-group pass's sizes: one model and two epochs a group (a machine of 65,536 groups' first round)"""

WRAPPER = (
    "import json, resource, subprocess, sys, time; started = time.perf_counter(); "
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "seconds = time.perf_counter() - started; usage = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(json.dumps({'seconds': seconds, 'rss_kib': usage.ru_maxrss, 'cpu': usage.ru_utime + usage.ru_stime, "
    "'rc': done.returncode, 'output': (done.stdout + done.stderr)[-3000:]}))"
)
"""runs one command as its only child: RUSAGE_CHILDREN is then that command's alone, not the largest of every
process this benchmark (or an earlier one in the same ``python -m benchmarks``) ever waited for"""


def _measure(command: list[str]) -> dict:
    """Wall seconds, CPU seconds and peak RSS (GiB) of one command, measured by a wrapper process."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout)
    if figures["rc"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({figures['rc']}):\n{figures['output']}")
    return {**figures, "rss_gib": figures["rss_kib"] / 2**20}


READ_ONLY = (
    "import sys, time; from aiperf_mpi.results.logmodel import read_model; from analysis.metrics import run_score; "
    "t = time.perf_counter(); run = read_model(sys.argv[1]); score = run_score(run); "
    "print(f'{time.perf_counter() - t:.2f} s')"
)  # fmt: skip


def group_growth(sizes: tuple[int, ...] = GROWTH_GROUPS) -> list[dict]:
    """``group_times`` on logs of ``sizes`` groups, one model and two epochs each: its CPU seconds per size."""
    from aiperf_mpi.results.logmodel import read_model
    from analysis.metrics import group_times

    rows = []
    for groups in sizes:
        with tempfile.TemporaryDirectory(prefix="aiperf-report-growth-") as scratch:
            held = write_synthetic_log(Path(scratch), models=groups, epochs=2 * groups, groups=groups)
            run = read_model(Path(scratch))
            started = time.process_time()
            timed = group_times(run, held["active"])
            rows.append({"groups": groups, "models": held["models"], "epochs": held["epochs"],
                         "cpu": time.process_time() - started, "rows": len(timed)})  # fmt: skip
    return rows


def growth_text(rows: list[dict]) -> str:
    """The per-group pass's sizes, CPU seconds and the exponent between consecutive sizes."""
    cells = []
    for before, after in zip([None, *rows], rows, strict=False):
        exponent = ""
        if before is not None:
            law = math.log(after["cpu"] / before["cpu"]) / math.log(after["groups"] / before["groups"])
            exponent = f", exponent {law:.2f}"
        cells.append(f"{after['groups']:,} groups ({after['models']:,} models, {after['epochs']:,} epochs) "
                     f"{after['cpu']:.2f} s{exponent}")  # fmt: skip
    return ("The report's per-group pass (`analysis.metrics.group_times`, CPU time, one model and two epochs a "
            "group): " + "; ".join(cells) + " (1: linear in the log; 2: groups × models).")


def run() -> str:
    with tempfile.TemporaryDirectory(prefix="aiperf-report-bench-") as scratch:
        run_dir = Path(scratch) / "run"
        started = time.perf_counter()
        held = write_synthetic_log(run_dir)
        print(f"  generated {held['bytes'] / 1e6:.0f} MB in {time.perf_counter() - started:.0f} s", flush=True)
        read = _measure([sys.executable, "-c", READ_ONLY, str(run_dir)])
        command = [sys.executable, "-m", "analysis.report", str(run_dir), "--out", str(Path(scratch) / "out")]
        reports = [_measure(command) for _ in range(3)]
        report_md = (Path(scratch) / "out" / "report.md").read_text()
        images = sorted(p.name for p in (Path(scratch) / "out").glob("*.png"))
    best = min(reports, key=lambda r: r["seconds"])
    rss = max(r["rss_gib"] for r in reports)
    verdict = "meets" if best["seconds"] < GOAL_SECONDS and rss < GOAL_RSS_GIB else "MISSES"
    walls = " / ".join(f"{r['seconds']:.1f}" for r in reports)
    cpus = " / ".join(f"{r['cpu']:.1f}" for r in reports)
    parser = f"orjson {orjson.__version__}" if orjson is not None else "the standard library's json (orjson missing)"
    return "\n".join([
        f"Synthetic log: {held['models']:,} models ({FAILED_SHARE:.0%} failed), {held['epochs']:,} epochs, "
        f"{held['monitor']:,} monitor samples ({GPUS_PER_NODE} GPUs each), {held['groups']} groups on "
        f"{held['nodes']} nodes, {held['active'] / 3600:.1f} h active; {held['bytes'] / 1e6:.0f} MB of JSON lines "
        f"(every model_done carries its graph — ResNet-50 for every {RESNET_EVERY}th — and its epoch list). "
        f"Lines parsed with {parser}.",
        "",
        "| child process | wall time (s) | CPU time (s) | peak RSS |",
        "|---|---|---|---|",
        f"| `python -m analysis.report` (3 runs) | {walls} | {cpus} | {rss:.2f} GiB |",
        f"| a child that only reads and scores the log | {read['seconds']:.1f} | {read['cpu']:.1f} | "
        f"{read['rss_gib']:.2f} GiB |",
        "",
        f"In the read-only child, reading and scoring took {read['output'].strip()}; the rest is imports.  "
        f"Goal: under {GOAL_SECONDS:g} s and {GOAL_RSS_GIB:g} GiB — **{verdict}** (best run {best['seconds']:.1f} s, "
        f"peak {rss:.2f} GiB).  Plots: {', '.join(images)}; report.md {len(report_md) / 1e3:.0f} kB.  Peak RSS is "
        "each child's own (`RUSAGE_CHILDREN` of a wrapper process whose only child it is).  The machine is shared: "
        "CPU time is the steadier figure when others run.",
        "",
        growth_text(group_growth()),
    ])  # fmt: skip


if __name__ == "__main__":  # the growth law alone: python -m benchmarks.report growth
    if sys.argv[1:] == ["growth"]:
        print(growth_text(group_growth()))
