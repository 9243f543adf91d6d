"""Weak scaling over runs of different sizes: ``python -m analysis.scaling RUN_DIR... [--out DIR]``.

The benchmark scales by adding groups, each training its own models, so the
figure of merit per group should stay flat as the machine grows: weak
scaling.  Per run: ranks, groups, the score, OPS per group, models trained
per minute (MLPerf HPC's throughput metric for many concurrent trainings)
and the weak-scaling efficiency — OPS per group relative to the smallest run
(fewest ranks, then fewest groups).  Prints a Markdown table; with ``--out``
also writes ``scaling.md`` and ``scaling.png``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from analysis.metrics import RunSummary, load_summary
from analysis.plots import plain, si_scale
from analysis.report import duration, si


@dataclass
class ScalingRow:
    summary: RunSummary
    efficiency: float | None
    """OPS per group / the smallest run's OPS per group"""


def scaling(summaries: list[RunSummary]) -> list[ScalingRow]:
    """Rows in order of size, each with its weak-scaling efficiency against the smallest run."""
    if not summaries:
        return []

    def size(s: RunSummary) -> tuple[float, int]:
        return (float("inf") if s.ranks is None else s.ranks, s.groups)

    ordered = sorted(summaries, key=size)
    base = ordered[0].ops_per_group
    return [ScalingRow(s, s.ops_per_group / base if base > 0 else None) for s in ordered]


def markdown(rows: list[ScalingRow]) -> str:
    header = ["run", "ranks", "groups", "score", "OPS per group", "models / min", "weak-scaling efficiency",
              "active time", "verdict"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        s = row.summary
        lines.append("| " + " | ".join([
            s.name, "?" if s.ranks is None else str(s.ranks), str(s.groups), si(s.score, "OPS"),
            si(s.ops_per_group, "OPS"), f"{s.models_per_minute:.3g}",
            "–" if row.efficiency is None else f"{100 * row.efficiency:.1f} %", duration(s.active_time),
            "valid" if s.valid else "unofficial",
        ]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(rows: list[ScalingRow], path: Path) -> Path:
    """Score against groups with the ideal (linear) line, and the efficiency."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    groups = [r.summary.groups for r in rows]
    scale, prefix = si_scale(max(r.summary.score for r in rows))
    scores = [r.summary.score / scale for r in rows]
    base = rows[0].summary.ops_per_group / scale
    left.plot(groups, scores, "o-", label="measured score")
    left.plot(groups, [base * g for g in groups], "--", color="#777", label="ideal (smallest run's OPS per group)")
    left.set_xlabel("groups")
    left.set_ylabel(f"score ({prefix} operations / s)".replace("( ", "("))
    left.set_title("Score against size")
    left.legend(fontsize="small")
    left.grid(alpha=0.3)
    right.plot(groups, [100 * (r.efficiency or 0.0) for r in rows], "o-", color="#2ca02c")
    right.axhline(100, color="#777", linestyle="--")
    right.set_xlabel("groups")
    right.set_ylabel("weak-scaling efficiency (%)")
    right.set_title("OPS per group relative to the smallest run")
    right.set_ylim(0, max(110, *(100 * (r.efficiency or 0.0) + 10 for r in rows)))
    right.grid(alpha=0.3)
    for ax in (left, right):
        if len(set(groups)) > 1 and max(groups) / max(min(groups), 1) >= 8:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(plain())  # plain numbers, not mathtext powers of two
    figure.savefig(path, format="png")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="run directories (or their events.jsonl)")
    parser.add_argument("--out", type=Path, default=None, help="write scaling.md and scaling.png here")
    options = parser.parse_args(argv)
    try:
        rows = scaling([load_summary(path) for path in options.run_dirs])
    except (FileNotFoundError, ValueError) as exc:
        print(f"analysis.scaling: error: {exc}", file=sys.stderr)
        return 2
    text = markdown(rows)
    print(text, end="")
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        (options.out / "scaling.md").write_text(f"# Weak scaling\n\n{text}\n![scaling](scaling.png)\n")
        plot(rows, options.out / "scaling.png")
        print(f"wrote {options.out / 'scaling.md'} and {options.out / 'scaling.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
