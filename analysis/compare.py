"""Runs compared as a reviewer would: ``python -m analysis.compare RUN RUN [RUN ...] [--out DIR]``.

One Markdown document (stdout; ``--out`` also writes ``compare.md``):

* **each run**: its seed, score, regulated score, active time, models and
  how settled its score is (:mod:`aiperf_mpi.results.stability`);
* **the spread** of the score and of the regulated score over the runs:
  the olympic mean (the best and the worst run dropped, as MLPerf averages;
  with fewer than three runs nothing can be dropped and it is the plain
  mean, which the table says), the median, the min, the max, and the
  coefficient of variation — the *sample* standard deviation (n − 1) ÷ the
  mean of all runs;
* **whether the runs are comparable** — the spread means something only
  between repeats of one experiment: the same configuration
  (:data:`NOT_COMPARED` names the fields left out and why), the same shape
  (ranks and groups), the same code (the package's source hash of every
  segment, from ``run_start``'s provenance; the git commit only where no
  hash was logged), the same
  software stack, the same data (:data:`DATA_FIELDS`) — and *different*
  seeds: runs sharing a seed are flagged, since they sample one search path
  and understate the spread;
* with exactly two runs, also the two side by side with the ratio B / A
  (score, efficiency, models, errors, throughput per group, where the
  groups' time went): what says whether a change of machine, stack or
  configuration helped.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.results.logmodel import read_model
from aiperf_mpi.results.resumable import current_names
from aiperf_mpi.results.runlog import UnreadableLog
from aiperf_mpi.results.schema import admit_only_schema_events
from aiperf_mpi.results.score import Score
from aiperf_mpi.results.stability import sample_cv
from analysis.metrics import RunSummary, run_score, summarise
from analysis.report import duration, percent, si, signed_percent, stability_of

DATA_FIELDS = ("dataset", "data_path", "image_size")
"""the configuration that names the data (the log holds no fingerprint of the data's content: one path holds the
same data only as long as nobody rewrites it)"""
NOT_COMPARED = {
    "run_dir": "where the run writes, not what it measures",
    "seed": "must differ between repeats (checked on its own)",
    "stage_dir": "where file-based data is copied first: the same data, read from a node-local disk",
    "progress_interval": "how often a progress line is printed",
}
"""configuration fields that may differ between comparable runs, and why; every other field must be equal"""
STACK_FIELDS = ("python", "tensorflow", "horovod", "mpi4py", "mpi")
"""the software stack a run's provenance records"""


@dataclass
class ComparedRun:
    """What the comparison needs of one run: its summary, score, configuration and provenance."""

    summary: RunSummary
    score: Score
    config: dict
    provenances: list[dict]
    """one per segment (empty where the log has none)"""

    @property
    def name(self) -> str:
        return self.summary.name

    @property
    def seed(self) -> object:
        return self.config.get("seed")


def load_compared(path: Path) -> ComparedRun:
    """Read one run's log (directory or events.jsonl) and summarise it; ``ValueError`` for a log with an event
    off its schema (it is someone else's log: every field is checked before the arithmetic uses it)."""
    run = read_model(path, admit=admit_only_schema_events)
    score = run_score(run)
    return ComparedRun(summarise(run, score), score, current_names(run.config), list(run.provenances))


# -- the spread


@dataclass(frozen=True)
class Spread:
    """The statistics of one figure over the runs (None where the figure was not defined for any)."""

    count: int
    olympic_mean: float | None
    olympic_dropped: bool
    """whether the best and the worst were dropped (three runs or more); else the olympic mean is the plain mean"""
    median: float | None
    minimum: float | None
    maximum: float | None
    cv: float | None
    """sample standard deviation (n − 1) ÷ mean; None for fewer than two values"""


def olympic_mean(values: Sequence[float]) -> tuple[float, bool]:
    """(mean without the single best and single worst, True); with fewer than three values (plain mean, False)."""
    if not values:
        raise ValueError("no values")
    if len(values) < 3:
        return math.fsum(values) / len(values), False
    kept = sorted(values)[1:-1]
    return math.fsum(kept) / len(kept), True


def spread(values: Sequence[float | None]) -> Spread:
    """The spread of the defined ``values`` (a run whose figure is None, e.g. no regulated score, is left out)."""
    defined = [float(v) for v in values if v is not None]
    if not defined:
        return Spread(0, None, False, None, None, None, None)
    mean, dropped = olympic_mean(defined)
    return Spread(len(defined), mean, dropped, statistics.median(defined), min(defined), max(defined),
                  sample_cv(defined))  # fmt: skip


def spread_rows(runs: Sequence[ComparedRun]) -> list[list[str]]:
    """[figure, runs, olympic mean, median, min, max, CV] for the score and the regulated score."""
    rows = []
    for name, values in (("score", [r.score.score for r in runs]),
                         ("regulated score", [r.score.regulated_score for r in runs])):  # fmt: skip
        s = spread(values)
        if s.count == 0:
            rows.append([name, f"0 of {len(runs)}", "not defined", "", "", "", ""])
            continue
        olympic = si(s.olympic_mean, "OPS") + ("" if s.olympic_dropped else " (plain mean: < 3 runs, none dropped)")
        rows.append([name, f"{s.count} of {len(runs)}", olympic, si(s.median, "OPS"), si(s.minimum, "OPS"),
                     si(s.maximum, "OPS"), percent(s.cv)])  # fmt: skip
    return rows


# -- comparability


@dataclass(frozen=True)
class Check:
    """One comparability condition: ok True (holds), False (does not) or None (the logs cannot tell)."""

    name: str
    ok: bool | None
    detail: str

    @property
    def mark(self) -> str:
        return {True: "✔ yes", False: "✘ no", None: "? cannot tell"}[self.ok]


def _differing(runs: Sequence[ComparedRun], value: Callable[[ComparedRun], object], label: str) -> str | None:
    """'label: run=value, …' when the runs do not all have the same value, else None."""
    values = [value(r) for r in runs]
    if all(v == values[0] for v in values):
        return None
    return f"{label}: " + ", ".join(f"{r.name}={v!r}" for r, v in zip(runs, values, strict=True))


def configuration_check(runs: Sequence[ComparedRun]) -> Check:
    """Every configuration field but :data:`NOT_COMPARED` and the data's (checked apart) is equal."""
    names = sorted(set().union(*(r.config for r in runs)) - set(NOT_COMPARED) - set(DATA_FIELDS))
    lines = [line for name in names if (line := _differing(runs, lambda r, n=name: r.config.get(n), name))]
    if lines:
        return Check("same configuration", False, "; ".join(lines))
    return Check("same configuration", True, f"{len(names)} fields equal (not compared: {', '.join(NOT_COMPARED)})")


def shape_check(runs: Sequence[ComparedRun]) -> Check:
    """The same number of ranks and of training groups."""
    lines = [line for line in (_differing(runs, lambda r: r.summary.ranks, "ranks"),
                               _differing(runs, lambda r: r.summary.groups, "groups")) if line]  # fmt: skip
    if lines:
        return Check("same ranks and groups", False, "; ".join(lines))
    ranks = "?" if runs[0].summary.ranks is None else runs[0].summary.ranks
    return Check("same ranks and groups", True, f"{ranks} ranks, {runs[0].summary.groups} group(s)")


def _segment_values(runs: Sequence[ComparedRun], key: str) -> tuple[set, list[str]]:
    """The distinct values of provenance ``key`` over every segment of every run, and the runs without one."""
    values: set = set()
    missing = []
    for run in runs:
        seen = [p.get(key) for p in run.provenances]
        if not seen or any(v in (None, "unknown") for v in seen):
            missing.append(run.name)
        values |= {v for v in seen if v not in (None, "unknown")}
    return values, missing


def code_check(runs: Sequence[ComparedRun]) -> Check:
    """The package's source hash is one for every segment of every run (the git commit where no hash says).

    The hash covers the package's source, what measures and scores; two
    commits that differ only outside it (documentation, tests) run the same
    code, so a commit made between two repeats does not part them.
    """
    hashes, no_hash = _segment_values(runs, "source_sha256")
    commits, _ = _segment_values(runs, "git_commit")
    if len(hashes) > 1:
        return Check("same code", False, f"{len(hashes)} different package source hashes (run_start provenance)")
    if no_hash and len(commits) > 1:
        return Check("same code", False, f"{len(commits)} different git commits")
    dirty = sorted({r.name for r in runs for p in r.provenances if p.get("git_dirty")})
    if no_hash:
        return Check("same code", None, f"no source hash in the log of {', '.join(no_hash)} (a version before "
                     "provenance was logged)")  # fmt: skip
    detail = f"source sha256 {next(iter(hashes))[:12]}…"
    if len(commits) > 1:
        detail += f", {len(commits)} git commits that differ only outside the package (the same source hash)"
    elif commits:
        detail += f", git {next(iter(commits))[:12]}"
    if dirty:
        detail += f" (checkout with local changes in {', '.join(dirty)}: the hash, not the commit, identifies it)"
    return Check("same code", True, detail)


def stack_check(runs: Sequence[ComparedRun]) -> Check:
    """The same Python, TensorFlow, Horovod, mpi4py and MPI in every segment."""
    if any(not r.provenances or not any(r.provenances) for r in runs):
        return Check("same software stack", None, "a log has no provenance")
    lines = []
    for key in STACK_FIELDS:
        values = {str(p.get(key)) for r in runs for p in r.provenances}
        if len(values) > 1:
            lines.append(f"{key}: {', '.join(sorted(values))}")
    if lines:
        return Check("same software stack", False, "; ".join(lines))
    first = runs[0].provenances[0]
    return Check("same software stack", True, ", ".join(f"{k} {first.get(k)}" for k in STACK_FIELDS if k != "mpi4py"))


def data_check(runs: Sequence[ComparedRun]) -> Check:
    """The same :data:`DATA_FIELDS` (the log holds no fingerprint of the data's content)."""
    lines = [line for name in DATA_FIELDS if (line := _differing(runs, lambda r, n=name: r.config.get(n), name))]
    if lines:
        return Check("same data", False, "; ".join(lines))
    config = runs[0].config
    path = f" at {config['data_path']}" if config.get("data_path") else ""
    size = config.get("image_size", 0) or "its own"
    return Check("same data", True, f"{config.get('dataset', '?')}{path}, image size {size} (by name and path: the "
                 "log holds no fingerprint of the content)")  # fmt: skip


def seed_check(runs: Sequence[ComparedRun]) -> Check:
    """Every run has its own seed; runs sharing one are named."""
    by_seed: dict[object, list[str]] = {}
    for run in runs:
        by_seed.setdefault(run.seed, []).append(run.name)
    if None in by_seed:
        return Check("different seeds", None, f"no seed logged by {', '.join(by_seed[None])}")
    shared = [f"seed {seed} in {', '.join(names)}" for seed, names in by_seed.items() if len(names) > 1]
    if shared:
        return Check("different seeds", False, "the same " + "; the same ".join(shared) + " (one search path sampled "
                     "twice: the spread is understated; a run without --seed draws its own)")  # fmt: skip
    return Check("different seeds", True, ", ".join(str(r.seed) for r in runs))


def comparability(runs: Sequence[ComparedRun]) -> list[Check]:
    """Every condition under which the runs' spread is a spread of repeats."""
    return [configuration_check(runs), shape_check(runs), code_check(runs), stack_check(runs), data_check(runs),
            seed_check(runs)]  # fmt: skip


def comparable_verdict(checks: Sequence[Check]) -> str:
    """One line: comparable, not comparable (naming why) or cannot tell."""
    failed = [c.name for c in checks if c.ok is False]
    unknown = [c.name for c in checks if c.ok is None]
    if failed:
        return f"**not comparable as repeats**; fails: {', '.join(failed)}" + (f"; unknown: {', '.join(unknown)}"
                                                                             if unknown else "")  # fmt: skip
    if unknown:
        return f"**comparable as far as the logs tell**; unknown: {', '.join(unknown)}"
    return "**comparable**: repeats of one experiment with different seeds"


def _settled(score: Score) -> str:
    """How settled a run's score is, in a table cell (the report has the sentence: :func:`settledness`)."""
    figures = stability_of(score)
    word = {True: "yes", False: "**no**", None: "cannot tell"}[figures.settled]
    return f"{word} (CV {percent(figures.cv_last_half)}, last quarter {signed_percent(figures.change_last_quarter)})"


# -- two runs side by side


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


# -- the document


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in body]


def markdown_two(a: RunSummary, b: RunSummary) -> str:
    """Two runs side by side, with B / A."""
    return "\n".join(_table(["", "A", "B", "B / A"], rows(a, b))) + "\n"


def markdown(runs: Sequence[ComparedRun]) -> str:
    """The whole comparison of two runs or more."""
    lines = ["## Runs", ""]
    lines += _table(["run", "seed", "score", "regulated score", "active time", "models", "score settled?"],
                    [[r.name, str(r.seed), si(r.score.score, "OPS"),
                      "not defined" if r.score.regulated_score is None else si(r.score.regulated_score, "OPS"),
                      duration(r.score.active_time), str(r.score.models_trained), _settled(r.score)]
                     for r in runs])  # fmt: skip
    lines += ["", "## Spread", ""]
    lines += _table(["", "runs", "olympic mean", "median", "min", "max", "CV"], spread_rows(runs))
    lines += ["", "Olympic mean: the mean without the best and the worst run (with fewer than 3 runs, the plain mean). "
              "CV: the sample standard deviation (n − 1) ÷ the mean of all runs.  Publish the olympic mean with the "
              "CV, over at least 5 comparable runs (docs/running.md).", ""]  # fmt: skip
    checks = comparability(runs)
    lines += ["## Comparable?", ""]
    lines += _table(["condition", "", "detail"], [[c.name, c.mark, c.detail] for c in checks])
    lines += ["", f"Verdict: {comparable_verdict(checks)}.", ""]
    if len(runs) == 2:
        lines += ["## Side by side", "", markdown_two(runs[0].summary, runs[1].summary)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _error(message: str) -> int:
    """One line on stderr, exit status 2: bad input to a reviewer's tool is never a traceback."""
    print(f"analysis.compare: error: {' '.join(message.split())[:300]}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run directories (or their events.jsonl)")
    parser.add_argument("--out", type=Path, default=None, help="write compare.md here")
    options = parser.parse_args(argv)
    if len(options.runs) < 2:
        return _error("give at least two runs to compare")
    if options.out is not None and options.out.exists() and not options.out.is_dir():
        return _error(f"--out {options.out} is a file, not a directory (compare.md is written into it)")
    runs = []
    for path in options.runs:
        try:
            runs.append(load_compared(path))
        except (OSError, ValueError, UnreadableLog) as exc:
            return _error(f"{path}: {exc}")
    text = markdown(runs)
    print(text, end="")
    if options.out is not None:
        title = " against ".join(r.name for r in runs) if len(runs) == 2 else f"{len(runs)} runs"
        try:
            options.out.mkdir(parents=True, exist_ok=True)
            (options.out / "compare.md").write_text(f"# {title}\n\n{text}")
        except OSError as exc:
            return _error(f"--out {options.out}: {exc}")
        print(f"wrote {options.out / 'compare.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
