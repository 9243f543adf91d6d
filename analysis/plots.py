"""The report's PNG plots, drawn with matplotlib's Agg canvas directly.

No ``pyplot``: it keeps global figure state and may pick an interactive
backend, and the master draws these at the end of a run on a node with no
display.  A :class:`~matplotlib.figure.Figure` on a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg` is private to the
call and needs no display.  Every plot is sized for the pixels it has: a
timeline of hundreds of thousands of epochs is drawn as the bars one can see
(intervals closer than a pixel merged), scatter plots are thinned.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from aiperf_mpi.results.logmodel import RunModel
from aiperf_mpi.results.score import Score
from analysis.metrics import GroupTime, union

DPI = 100
WIDTH_PX = 1000
TIMELINE_ROWS = 32
"""more groups than this are drawn as a heat map of the training fraction"""
MONITOR_SERIES = 12
"""more devices than this are drawn per node (mean utilisation, summed memory), more nodes as mean and min–max"""
TASK_LABELS = 60
"""up to this many models, the timeline writes each model's task number on its first epoch"""
MAX_POINTS = 5_000
"""scatter plots keep at most this many points (evenly thinned)"""
COLOURS = MappingProxyType({
    "epoch": ("#1f77b4", "#6baed6"), "search": "#ff7f0e", "setup": "#969696", "given_up": "#8c564b", "idle": "#f4c7c3",
    "failure": "#d62728", "score": "#1f77b4", "regulated": "#2ca02c", "compile": "#9467bd",
})  # fmt: skip


def time_unit(seconds: float) -> tuple[float, str]:
    """(divisor, name) that keeps the time axis' numbers readable."""
    if seconds >= 3 * 3600:
        return 3600.0, "h"
    if seconds >= 600:
        return 60.0, "min"
    return 1.0, "s"


SI_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si_scale(largest: float) -> tuple[float, str]:
    """(divisor, prefix) that puts ``largest`` between 1 and 1000: the axes of a laptop run and of a machine."""
    for scale, prefix in SI_PREFIXES:
        if abs(largest) >= scale:
            return scale, prefix
    return 1.0, ""


def _figure(height: float = 4.5, rows: int = 1, sharex: bool = True, left: float = 0.9, bottom: float = 0.6,
            top: float = 0.4) -> tuple[Figure, list]:  # fmt: skip
    """A figure with fixed margins (inches): a layout engine would double the drawing time of a big report."""
    figure = Figure(figsize=(WIDTH_PX / DPI, height), dpi=DPI)
    FigureCanvasAgg(figure)
    width = WIDTH_PX / DPI
    figure.subplots_adjust(left=left / width, right=1 - 0.25 / width, bottom=bottom / height, top=1 - top / height,
                           hspace=0.6 / (height / rows))  # fmt: skip
    axes = figure.subplots(rows, 1, sharex=sharex, squeeze=False)[:, 0].tolist()
    return figure, axes


REHEARSAL_MARK = "REHEARSAL: a stand-in's figures, never a result"
"""written across every plot of a rehearsal's report (``--rehearse``: aiperf_mpi/job/rehearsal.py), so that no
picture of one is taken for a run that trained"""


def _save(figure: Figure, path: Path, mark: str = "") -> Path:
    """Write the figure as PNG; ``mark``, when given, across it (a rehearsal's :data:`REHEARSAL_MARK`)."""
    if mark:
        figure.text(0.5, 0.5, mark, fontsize=22, color="tab:red", alpha=0.35, ha="center", va="center",
                    rotation=12, weight="bold")  # fmt: skip
    figure.savefig(path, dpi=DPI, format="png")
    return path


def plain() -> FuncFormatter:
    """Log-axis tick labels as plain numbers: matplotlib's default mathtext labels are slow to lay out.

    A new formatter per axis: a formatter remembers the axis it is set on.
    """
    return FuncFormatter(lambda value, _: f"{value:g}")


def _thin(count: int) -> np.ndarray:
    """Indices of at most MAX_POINTS evenly spread points."""
    if count <= MAX_POINTS:
        return np.arange(count)
    return np.linspace(0, count - 1, MAX_POINTS).astype(int)


def _segment_lines(ax, boundaries: list[float], unit: float) -> None:
    for i, boundary in enumerate(boundaries):
        ax.axvline(boundary / unit, color="#555", linestyle="--", linewidth=0.8,
                   label="resumed here" if i == 0 else None)  # fmt: skip


def plot_score(score: Score, epoch_end: np.ndarray, epoch_ops: np.ndarray, boundaries: list[float], path: Path,
               mark: str = "") -> Path:
    """OPS(t) and the regulated score on the benchmark's grid, final values marked; completed operations below."""
    unit, unit_name = time_unit(score.active_time)
    figure, (top, bottom) = _figure(6.5, rows=2)
    t = np.array([s.active_time for s in score.grid]) / unit
    ops_rate = np.array([s.ops_per_second for s in score.grid])
    regulated = np.array([np.nan if s.regulated is None else s.regulated for s in score.grid])
    scale, prefix = si_scale(float(np.nanmax(np.concatenate((ops_rate, regulated, [0.0])))))
    top.plot(t, ops_rate / scale, "o-", color=COLOURS["score"], markersize=3, label="OPS(t) (analytic operations / s)")
    top.plot([t[-1]], [ops_rate[-1] / scale], "D", color=COLOURS["score"], markersize=8)
    regulated_final = score.regulated_score
    score_above = regulated_final is None or regulated_final <= score.score  # the higher label above its point
    top.annotate(f"score {score.score / scale:.4g} {prefix}OPS", (t[-1], ops_rate[-1] / scale),
                 xytext=(-10, 10 if score_above else -16), textcoords="offset points", ha="right",
                 color=COLOURS["score"], fontweight="bold")  # fmt: skip
    if regulated_final is not None:
        top.plot(t, regulated / scale, "s-", color=COLOURS["regulated"], markersize=3,
                 label="regulated score(t) = OPS(t) · (−ln E(t))")  # fmt: skip
        top.plot([t[-1]], [regulated_final / scale], "D", color=COLOURS["regulated"], markersize=8)
        top.annotate(f"regulated {regulated_final / scale:.4g} {prefix}OPS", (t[-1], regulated_final / scale),
                     xytext=(-10, -16 if score_above else 10), textcoords="offset points", ha="right",
                     color=COLOURS["regulated"], fontweight="bold")  # fmt: skip
    top.margins(y=0.2)
    top.set_ylim(bottom=0)
    top.set_ylabel(f"{prefix} operations / s".strip())
    top.set_title(f"Score on the benchmark's grid (step {score.grid[0].active_time / unit:.3g} {unit_name})"
                  if len(score.grid) > 1 else "Score")  # fmt: skip
    _segment_lines(top, boundaries, unit)
    top.legend(loc="lower right", fontsize="small")
    top.grid(alpha=0.3)

    order = np.argsort(epoch_end, kind="stable")
    ends, cumulative = epoch_end[order], np.cumsum(epoch_ops[order])
    samples = np.linspace(0.0, score.active_time, 2000)
    reached = np.searchsorted(ends, samples, side="right")
    total = np.where(reached > 0, cumulative[np.maximum(reached - 1, 0)], 0.0) if len(ends) else np.zeros_like(samples)
    scale, prefix = si_scale(float(total.max()) if len(total) else 0.0)
    bottom.plot(samples / unit, total / scale, color="#444", drawstyle="steps-post",
                label="operations of completed epochs")  # fmt: skip
    bottom.plot(t, np.array([s.ops for s in score.grid], dtype=float) / scale, "o", color=COLOURS["score"],
                markersize=3, label="grid samples")  # fmt: skip
    bottom.set_ylabel(f"{prefix} operations (cumulative)".strip())
    bottom.set_xlabel(f"active time ({unit_name})")
    _segment_lines(bottom, boundaries, unit)
    bottom.legend(loc="upper left", fontsize="small")
    bottom.grid(alpha=0.3)
    return _save(figure, path, mark)


def plot_best_accuracy(epoch_end: np.ndarray, accuracy: np.ndarray, active_time: float, path: Path,
                       mark: str = "") -> Path:
    """The best validation accuracy reached by each moment, over every epoch's accuracy."""
    unit, unit_name = time_unit(active_time)
    figure, (ax,) = _figure(4.0)
    keep = ~np.isnan(accuracy)
    ends, accuracy = epoch_end[keep], accuracy[keep]
    order = np.argsort(ends, kind="stable")
    ends, accuracy = ends[order], accuracy[order]
    if len(ends):
        thin = _thin(len(ends))
        ax.plot(ends[thin] / unit, accuracy[thin], "o", color="#9ecae1", markersize=3, label="each epoch")
        best = np.maximum.accumulate(accuracy)
        improved = np.flatnonzero(np.diff(best, prepend=-np.inf) > 0)
        xs = np.append(ends[improved], active_time) / unit
        ys = np.append(best[improved], best[-1])
        ax.step(xs, ys, where="post", color="#08519c", linewidth=2, label="best so far")
        ax.annotate(f"best {best[-1]:.4f} (error {1 - best[-1]:.4f})", (xs[-1], ys[-1]), xytext=(-10, -14),
                    textcoords="offset points", ha="right", color="#08519c", fontweight="bold")  # fmt: skip
        ax.legend(loc="lower right", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no validation accuracy in this run", transform=ax.transAxes, ha="center")
    ax.set_xlim(0, active_time / unit if active_time > 0 else 1)
    ax.set_xlabel(f"active time ({unit_name})")
    ax.set_ylabel("validation top-1 accuracy")
    ax.set_title("Best validation accuracy over time")
    ax.grid(alpha=0.3)
    return _save(figure, path, mark)


def plot_accuracy_vs_ops(forward: np.ndarray, accuracy: np.ndarray, done: np.ndarray, best_index: int | None,
                         active_time: float, path: Path, mark: str = "") -> Path:  # fmt: skip
    """Each trained model's accuracy against its forward operations per sample, coloured by when it finished."""
    unit, unit_name = time_unit(active_time)
    figure, (ax,) = _figure(4.5)
    keep = ~np.isnan(accuracy) & (forward > 0)
    scale, prefix = 1.0, ""
    if np.any(keep):
        index = np.flatnonzero(keep)[_thin(int(np.sum(keep)))]
        scale, prefix = si_scale(float(np.max(forward[index])))
        points = ax.scatter(forward[index] / scale, accuracy[index], c=done[index] / unit, cmap="viridis", s=12)
        figure.colorbar(points, ax=ax, label=f"finished at active time ({unit_name})")
        if best_index is not None and keep[best_index]:
            ax.plot(forward[best_index] / scale, accuracy[best_index], "*", color="#d62728", markersize=16,
                    label="best model")  # fmt: skip
            ax.legend(loc="lower right", fontsize="small")
        if np.max(forward[index]) > 10 * np.min(forward[index]):  # sizes over decades: a log axis
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(plain())
            ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "no trained model with an accuracy", transform=ax.transAxes, ha="center")
    ax.set_xlabel(f"forward {prefix} operations per sample (analytic count)".replace("  ", " "))
    ax.set_ylabel("best validation top-1 accuracy")
    ax.set_title("Models: accuracy against size")
    ax.grid(alpha=0.3, which="both")
    return _save(figure, path, mark)


def _bars(ax, starts: np.ndarray, ends: np.ndarray, row: float, pixel: float, unit: float, colour: str,
          height: float = 0.8, label: str | None = None) -> None:  # fmt: skip
    starts, ends = union(starts, ends, gap=pixel)
    if len(starts):
        widths = np.maximum(ends - starts, pixel)
        ax.broken_barh(list(zip(starts / unit, widths / unit, strict=True)), (row - height / 2, height),
                       facecolors=colour, linewidth=0, label=label)  # fmt: skip


def busy_fraction(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each bin [edges[i], edges[i+1]) that intervals cover (intervals assumed disjoint)."""
    s, e = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate(([0.0], np.cumsum(s))), np.concatenate(([0.0], np.cumsum(e)))
    ks, ke = np.searchsorted(s, edges, side="right"), np.searchsorted(e, edges, side="right")
    covered = ks * edges - cs[ks] - (ke * edges - ce[ke])
    return np.clip(np.diff(covered) / np.diff(edges), 0.0, 1.0)


def plot_timeline(groups: list[GroupTime], active_time: float, boundaries: list[float], path: Path,
                  mark: str = "") -> Path:
    """Per group: epochs (alternating shades per model) with their compilation, searches, set-ups, idle gaps,
    failures."""
    unit, unit_name = time_unit(active_time)
    span = active_time if active_time > 0 else 1.0
    pixel = span / WIDTH_PX
    if len(groups) > TIMELINE_ROWS:
        return _heatmap(groups, span, boundaries, unit, unit_name, path, mark)
    figure, (ax,) = _figure(max(2.5, 1.6 + 0.45 * len(groups)), left=1.0, bottom=1.0)
    if not groups:
        ax.text(0.5, 0.5, "no training group in this log", transform=ax.transAxes, ha="center")
        ax.set_xlabel(f"active time ({unit_name})")
        return _save(figure, path, mark)
    labelled = set()

    def label(name: str) -> str | None:
        if name in labelled:
            return None
        labelled.add(name)
        return name

    for g in groups:
        row = g.group
        if len(g.idle_start):
            _bars(ax, g.idle_start, g.idle_end, row, 0.0, unit, COLOURS["idle"], 0.95, label("idle"))
        search_label = label("search (CPU)") if len(g.search[0]) else None
        _bars(ax, *g.search, row, pixel, unit, COLOURS["search"], 0.8, search_label)
        _bars(ax, *g.setup, row, pixel, unit, COLOURS["setup"], 0.8, label("set-up") if len(g.setup[0]) else None)
        _bars(ax, *g.given_up, row, pixel, unit, COLOURS["given_up"], 0.8,
              label("given up at the time limit") if len(g.given_up[0]) else None)  # fmt: skip
        ordinal = np.unique(g.epoch_task, return_inverse=True)[1].reshape(-1)  # the group's 1st, 2nd, … model
        for parity in (0, 1):
            mine = (ordinal % 2) == parity
            if np.any(mine):
                _bars(ax, g.epoch_start[mine], g.epoch_end[mine], row, pixel, unit, COLOURS["epoch"][parity], 0.6,
                      label("epochs (shade alternates per model)") if parity == 0 else None)  # fmt: skip
        if len(g.compile[0]):
            _bars(ax, *g.compile, row, pixel, unit, COLOURS["compile"], 0.6, label("compilation (within epochs)"))
        if len(g.failures):
            ax.plot(g.failures / unit, np.full(len(g.failures), row), "x", color=COLOURS["failure"], markersize=9,
                    markeredgewidth=2, label=label("failed model"))  # fmt: skip
    if sum(len(np.unique(g.epoch_task)) for g in groups) <= TASK_LABELS:  # few models: say which is which
        for g in groups:
            tasks, first = np.unique(g.epoch_task, return_index=True)
            for task, index in zip(tasks.tolist(), first.tolist(), strict=True):
                ax.text(g.epoch_start[index] / unit, g.group, f" {task}", va="center", ha="left", fontsize="x-small",
                        color="white", clip_on=True)  # fmt: skip
    _segment_lines(ax, boundaries, unit)
    ax.set_yticks([g.group for g in groups], [f"group {g.group}" for g in groups])
    ax.set_ylim(len(groups) - 0.5, -0.5)
    ax.set_xlim(0, span / unit)
    ax.set_xlabel(f"active time ({unit_name})")
    ax.set_title("Timeline per group: what each group's ranks did (numbers: task of each model)")
    if labelled:
        figure.legend(loc="lower center", ncol=6, fontsize="small", frameon=False)
    return _save(figure, path, mark)


def _heatmap(groups: list[GroupTime], span: float, boundaries: list[float], unit: float, unit_name: str,
             path: Path, mark: str = "") -> Path:  # fmt: skip
    edges = np.linspace(0.0, span, 401)
    fraction = np.vstack([busy_fraction(*union(g.epoch_start, g.epoch_end), edges) for g in groups])
    figure, (ax,) = _figure(max(3.0, min(9.0, 1.5 + 0.02 * len(groups))), left=0.8)
    image = ax.imshow(fraction, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                      extent=(0, span / unit, len(groups) - 0.5, -0.5))  # fmt: skip
    figure.colorbar(image, ax=ax, label="fraction of the time in epochs")
    for g in groups:
        if len(g.failures):
            ax.plot(g.failures / unit, np.full(len(g.failures), g.group), "x", color=COLOURS["failure"], markersize=4)
    _segment_lines(ax, boundaries, unit)
    ax.set_xlabel(f"active time ({unit_name})")
    ax.set_ylabel("group")
    ax.set_title(f"Timeline of {len(groups)} groups: share of each time bin spent training (× failed model)")
    return _save(figure, path, mark)


def plot_monitor(run: RunModel, active_time: float, boundaries: list[float], path: Path,
                 mark: str = "") -> Path:
    """Utilisation (percent) and memory (GiB) per node and device over time."""
    unit, unit_name = time_unit(active_time)
    figure, (util_ax, memory_ax) = _figure(6.5, rows=2)
    times = run.active(run.monitor_column("time"))
    node, device = run.monitor_column("node").astype(int), run.monitor_column("device").astype(int)
    utilization, used = run.monitor_column("utilization"), run.monitor_column("memory_used") / 2**30
    keys = sorted(set(zip(node.tolist(), device.tolist(), strict=True)))
    nodes = sorted(set(node.tolist()))
    if len(keys) <= MONITOR_SERIES:
        for n, d in keys:
            info = run.monitor_nodes.get(n, {})
            name = info.get("devices", {}).get(d, "")
            label = f"node {n} ({info.get('host', '?')}) {'CPU' if info.get('source') == 'cpu' else f'{name} #{d}'}"
            mine = np.flatnonzero((node == n) & (device == d))
            mine = mine[np.argsort(times[mine], kind="stable")]
            util_ax.plot(times[mine] / unit, utilization[mine], ".-", markersize=3, label=label)
            memory_ax.plot(times[mine] / unit, used[mine], ".-", markersize=3, label=label)
        util_ax.legend(loc="lower right", fontsize="small")
    elif len(nodes) <= MONITOR_SERIES:  # many devices on few nodes: one line per node
        for n in nodes:
            mine = node == n
            sample_times, slot = np.unique(times[mine], return_inverse=True)
            count = np.bincount(slot, minlength=len(sample_times))
            mean = np.bincount(slot, weights=np.nan_to_num(utilization[mine]), minlength=len(sample_times)) / count
            memory = np.bincount(slot, weights=np.nan_to_num(used[mine]), minlength=len(sample_times))
            devices = len(run.monitor_nodes.get(n, {}).get("devices", {}))
            label = f"node {n} ({run.monitor_nodes.get(n, {}).get('host', '?')}), {devices} devices"
            util_ax.plot(sample_times / unit, mean, ".-", markersize=3, label=f"{label}: mean")
            memory_ax.plot(sample_times / unit, memory, ".-", markersize=3, label=f"{label}: sum")
        util_ax.legend(loc="lower right", fontsize="small")
        memory_ax.legend(loc="lower right", fontsize="small")
    else:
        edges = np.linspace(0.0, max(active_time, 1e-9), 301)
        for ax, values in ((util_ax, utilization), (memory_ax, used)):
            index = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, len(edges) - 2)
            ok = ~np.isnan(values)
            count = np.bincount(index[ok], minlength=len(edges) - 1)
            mean = np.bincount(index[ok], weights=values[ok], minlength=len(edges) - 1) / np.maximum(count, 1)
            low, high = np.full(len(edges) - 1, np.inf), np.full(len(edges) - 1, -np.inf)
            np.minimum.at(low, index[ok], values[ok])
            np.maximum.at(high, index[ok], values[ok])
            has = count > 0
            centre = (edges[:-1] + edges[1:]) / 2 / unit
            ax.fill_between(centre[has], low[has], high[has], color="#c6dbef", label="min–max over devices")
            ax.plot(centre[has], mean[has], color="#08519c", label=f"mean of {len(keys)} devices on {len(nodes)} nodes")
        util_ax.legend(loc="lower right", fontsize="small")
    sources = {info.get("source") for info in run.monitor_nodes.values()}
    util_ax.set_ylabel("utilisation (%)")
    util_ax.set_ylim(-2, 102)
    util_ax.set_title("Utilisation and memory per node" + (" (CPU: node busy %, benchmark RSS)" if "cpu" in sources
                                                           else ""))  # fmt: skip
    memory_ax.set_ylabel("memory used (GiB)" if len(keys) <= MONITOR_SERIES or len(nodes) > MONITOR_SERIES
                         else "memory used per node (GiB)")  # fmt: skip
    memory_ax.set_xlabel(f"active time ({unit_name})")
    for ax in (util_ax, memory_ax):
        _segment_lines(ax, boundaries, unit)
        ax.grid(alpha=0.3)
        ax.set_xlim(0, max(active_time, 1e-9) / unit)
    return _save(figure, path, mark)


def plot_power(run: RunModel, active_time: float, boundaries: list[float], path: Path, mark: str = "") -> Path:
    """Each node's mean power between two readings of its meters over active time (issue 53): one line a node up
    to :data:`MONITOR_SERIES` nodes, else the sum over nodes binned with its spread."""
    trace = run.energy.trace
    unit, unit_name = time_unit(active_time)
    figure, (ax,) = _figure(4.5)
    times = run.active(np.asarray(trace.times, dtype=float))
    watts = np.asarray(trace.watts, dtype=float)
    hosts = sorted(set(trace.hosts))
    names = np.asarray(trace.hosts)
    if len(hosts) <= MONITOR_SERIES:
        for host in hosts:
            mine = np.flatnonzero(names == host)
            mine = mine[np.argsort(times[mine], kind="stable")]
            ax.plot(times[mine] / unit, watts[mine], ".-", markersize=3, label=host)
        ax.legend(loc="lower right", fontsize="small")
    else:
        edges = np.linspace(0.0, max(active_time, 1e-9), 301)
        index = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, len(edges) - 2)
        count = np.bincount(index, minlength=len(edges) - 1)
        mean = np.bincount(index, weights=watts, minlength=len(edges) - 1) / np.maximum(count, 1)
        has = count > 0
        centre = (edges[:-1] + edges[1:]) / 2 / unit
        ax.plot(centre[has], mean[has] * len(hosts), color="#08519c",
                label=f"{len(hosts)} nodes: the mean node's power × nodes")  # fmt: skip
        ax.legend(loc="lower right", fontsize="small")
    ax.set_ylabel("power (W)")
    ax.set_xlabel(f"active time ({unit_name})")
    ax.set_title("Power per node, from its meters (between two readings)")
    _segment_lines(ax, boundaries, unit)
    ax.grid(alpha=0.3)
    ax.set_xlim(0, max(active_time, 1e-9) / unit)
    return _save(figure, path, mark)


def plot_op_breakdown(rows: list[dict], title: str, path: Path, mark: str = "") -> Path:
    """Forward (training) and backward operations per sample of each layer type, stacked."""
    rows = sorted(rows, key=lambda r: r["forward_train"] + r["backward"])
    figure, (ax,) = _figure(max(2.5, 1.0 + 0.4 * len(rows)), left=1.0)
    names = [r["type"] for r in rows]
    scale, prefix = si_scale(max((r["forward_train"] + r["backward"] for r in rows), default=0))
    forward = np.array([r["forward_train"] for r in rows], dtype=float) / scale
    backward = np.array([r["backward"] for r in rows], dtype=float) / scale
    ax.barh(names, forward, color="#1f77b4", label="forward (training)")
    ax.barh(names, backward, left=forward, color="#ff7f0e", label="backward")
    ax.set_xlabel(f"{prefix} operations per sample (analytic count)".strip())
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3, axis="x")
    return _save(figure, path, mark)
