"""``serve report OUT LOG_DIR [LOG_DIR …]``: the serving runs' figures as a page with plots.

From one or more serving logs (say, the same bundle on 1, 2 and 4 ranks): ``OUT/report.md`` with a table of
each run's figures, and three PNG plots — the latency distribution (single-stream, and the server trials),
throughput against ranks (offline samples/s of each run, by its rank count), and throughput against batch size
(every run's batch sweep).  Drawn with matplotlib's Agg canvas directly (no ``pyplot``, no display), as the
benchmark's own report is.  Everything on the page comes from the event logs (:func:`aiperf_mpi.serve.check.summary_of`
and the events), so a log the check passes gives a report of checked figures.
"""

from __future__ import annotations

from pathlib import Path

from aiperf_mpi.serve import ServeError
from aiperf_mpi.serve.check import summary_of
from aiperf_mpi.serve.log import read_serve_events

DPI = 100


def _figure(title: str, xlabel: str, ylabel: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.5), dpi=DPI)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 1, 1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return figure, ax


def _save(figure, path: Path) -> str:
    figure.tight_layout()
    figure.savefig(path)
    return path.name


def plot_latencies(runs: list[tuple[str, dict]], path: Path) -> str | None:
    figure, ax = _figure("Latency distribution", "latency (ms)", "queries")
    drawn = False
    for name, events in runs:
        if "single_stream" in events:
            ax.hist([x * 1e3 for x in events["single_stream"]["latencies"]], bins=40, alpha=0.6,
                    label=f"{name}: single-stream")  # fmt: skip
            drawn = True
        for trial in events.get("server", {}).get("trials", []):
            ax.hist([x * 1e3 for x in trial["latencies"]], bins=40, alpha=0.35, histtype="step",
                    label=f"{name}: server {trial['rate']:.1f}/s{'' if trial['met'] else ' (missed)'}")  # fmt: skip
            drawn = True
    if not drawn:
        return None
    ax.legend(fontsize=7)
    return _save(figure, path)


def plot_ranks(summaries: list[tuple[str, dict]], path: Path) -> str | None:
    points = sorted((s["ranks"], s["offline"]["samples_per_second"]) for _, s in summaries)
    if not points:
        return None
    figure, ax = _figure("Offline throughput against ranks", "ranks", "samples/s (all ranks)")
    ax.plot([p[0] for p in points], [p[1] for p in points], "o-")
    ax.set_xticks(sorted({p[0] for p in points}))
    return _save(figure, path)


def plot_batches(runs: list[tuple[str, dict]], path: Path) -> str | None:
    sweeps = [(name, events["batch_sweep"]) for name, events in runs if "batch_sweep" in events]
    if not sweeps:
        return None
    figure, ax = _figure("Throughput against batch size (one device)", "batch size", "samples/s")
    for name, sweep in sweeps:
        ax.plot([r["batch"] for r in sweep["rows"]], [r["samples_per_second"] for r in sweep["rows"]], "o-",
                label=f"{name} (best {sweep['best']})")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    return _save(figure, path)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:.2f}"


def report(out: Path | str, log_dirs: list[Path]) -> Path:
    """Write ``out/report.md`` and its plots from the serving logs ``log_dirs``; returns the page's path."""
    out = Path(out)
    runs, summaries = [], []
    for folder in log_dirs:
        if not (Path(folder) / "serve_events.jsonl").is_file():
            raise ServeError(f"{folder} has no serve_events.jsonl: not the log directory of a serving run")
        runs.append((Path(folder).name, {e["event"]: e for e in read_serve_events(folder)}))
        summaries.append((Path(folder).name, summary_of(folder)))
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Serving report", "", "| run | servable | ranks | host | samples | batch | samples/s | per rank | "
             "inference ops/s | of peak | accuracy | single-stream p90 ms | server best rate /s | time to "
             "solution s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, s in summaries:
        offline = s["offline"]
        accuracy = s.get("accuracy", {}).get("ensemble")
        rate = s.get("server", {}).get("best_rate")
        lines.append(
            f"| {name} | {s['servable']} | {s['ranks']} | {s['host']} | {s['samples']} | {offline['batch']} | "
            f"{offline['samples_per_second']:.1f} | "
            f"{', '.join(f'{x:.1f}' for x in s['samples_per_second_per_rank'])} | "
            f"{offline['ops_per_second'] / 1e9:.2f} G | "
            f"{_percent(offline['peak_ratio'])} | "
            f"{'–' if accuracy is None else f'{accuracy:.4f}'} | {_ms(s.get('single_stream', {}).get('p90'))} | "
            f"{'–' if rate is None else f'{rate:.1f}'} | {s['time_to_solution']:.1f} |"
        )
    for name, s in summaries:
        if "accuracy" in s:
            members = ", ".join(f"{m} {a:.4f}" for m, a in s["accuracy"]["members"].items())
            lines += ["", f"{name}: ensemble accuracy {s['accuracy']['ensemble']:.4f}; members: {members}."]
    plots = [plot_latencies(runs, out / "latency.png"), plot_ranks(summaries, out / "ranks.png"),
             plot_batches(runs, out / "batch.png")]  # fmt: skip
    lines += [""] + [f"![{name}]({name})" for name in plots if name] + [""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out / "report.md"
