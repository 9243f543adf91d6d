"""Two runs side by side: ``python -m analysis.compare A B [--out DIR]``.

One Markdown table (stdout; ``--out`` also writes ``compare.md``) with the
figures that say whether a change to the machine, the stack or the
configuration helped: the score and the regulated score, efficiency against
the measured peak, models, errors, throughput per group, and where the
groups' time went — with the ratio B / A where a ratio means something.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from analysis.metrics import RunSummary, load_summary
from analysis.report import duration, percent, si


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a:.3g}×"


def _share(name: str) -> Callable[[RunSummary], float]:
    return lambda s: s.split.share(getattr(s.split, name))


def rows(a: RunSummary, b: RunSummary) -> list[list[str]]:
    """[metric, A, B, B/A] rows."""
    numeric: list[tuple[str, Callable[[RunSummary], float | None], Callable[[float | None], str]]] = [
        ("ranks", lambda s: s.ranks, lambda v: "?" if v is None else str(v)),
        ("groups", lambda s: s.groups, str),
        ("active time", lambda s: s.active_time, duration),
        ("score", lambda s: s.score, lambda v: si(v, "OPS")),
        ("regulated score", lambda s: s.regulated_score, lambda v: "not defined" if v is None else si(v, "OPS")),
        ("measured peak", lambda s: s.peak, lambda v: "not measured" if v is None else si(v, "OPS")),
        ("efficiency against peak", lambda s: s.efficiency, lambda v: "not measured" if v is None else percent(v)),
        ("OPS per group", lambda s: s.ops_per_group, lambda v: si(v, "OPS")),
        ("models trained", lambda s: s.models_trained, str),
        ("models failed", lambda s: s.models_failed, str),
        ("models per minute", lambda s: s.models_per_minute, lambda v: f"{v:.3g}"),
        ("epochs", lambda s: s.epochs, lambda v: f"{v:,}"),
        ("operations completed", lambda s: s.total_ops, si),
        ("best error", lambda s: s.best_error, lambda v: "–" if v is None else f"{v:.4f}"),
        ("training compute share", _share("compute"), percent),
        ("evaluation share", _share("evaluation"), percent),
        ("data wait share", _share("data_wait"), percent),
        ("search share", _share("search"), percent),
        ("set-up share", _share("setup"), percent),
        ("idle share", _share("idle"), percent),
        ("data staging (slowest node)", lambda s: s.staging_seconds, lambda v: "none" if v is None else duration(v)),
    ]
    table = [
        ["run", a.name, b.name, ""],
        ["data set / precision", f"{a.dataset} / {a.precision}", f"{b.dataset} / {b.precision}", ""],
        ["verdict", _verdict(a), _verdict(b), ""],
        ["segments", str(a.segments), str(b.segments), ""],
    ]
    for name, get, show in numeric:
        va, vb = get(a), get(b)
        table.append([name, show(va), show(vb), _ratio(va, vb)])
    table.append(["log", _log(a), _log(b), ""])
    return table


def _verdict(s: RunSummary) -> str:
    return "valid" if s.valid else "unofficial (" + ", ".join(s.broken_rules) + ")"


def _log(s: RunSummary) -> str:
    return "truncated last line" if s.truncated_log else "complete"


def markdown(a: RunSummary, b: RunSummary) -> str:
    lines = ["| | A | B | B / A |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(a, b)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="run directory A (or its events.jsonl)")
    parser.add_argument("b", type=Path, help="run directory B")
    parser.add_argument("--out", type=Path, default=None, help="write compare.md here")
    options = parser.parse_args(argv)
    try:
        a, b = load_summary(options.a), load_summary(options.b)
    except (FileNotFoundError, ValueError) as exc:
        print(f"analysis.compare: error: {exc}", file=sys.stderr)
        return 2
    text = markdown(a, b)
    print(text, end="")
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        (options.out / "compare.md").write_text(f"# {a.name} (A) against {b.name} (B)\n\n{text}")
        print(f"wrote {options.out / 'compare.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
