"""The report of one run, from its event log alone: ``python -m analysis.report RUN_DIR [--out DIR]``.

Writes ``report.md``, a self-contained ``report.html`` (images embedded)
and the PNG plots into ``RUN_DIR/report/`` (or ``--out``): the score and the
regulated score over time, best accuracy over time, accuracy against model
size, a timeline per group (epochs, searches, set-ups, failures, idle gaps),
utilisation and memory per node, the op breakdown of the best model, and a
table with the score, the validity verdict rule by rule, the efficiency
against the measured peak, the time split and the data staging time.

:func:`write_report` is what the benchmark's master calls at the end of a
run: it imports neither TensorFlow nor mpi4py and takes a few seconds on a
small run (see BENCHMARKS.md for a 500,000-epoch log).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from aiperf_mpi.graph.model import GraphError, from_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.rules import shown_value
from aiperf_mpi.results.score import MAX_GRID_SAMPLES, Score
from aiperf_mpi.results.stability import CHANGE_LIMIT, CV_LIMIT, Stability
from analysis import plots
from analysis.document import Document
from analysis.guard import guarded
from analysis.metrics import (
    IDLE_GAP_MIN_SECONDS,
    GroupTime,
    RunSummary,
    group_times,
    measured_peak,
    no_monitor_reason,
    run_score,
    summarise,
)

MAX_TABLE_ROWS = 32
"""per-group, failure and staging tables list at most this many rows (then a summary line)"""


SERVE_RECORD = "serve.json"
"""``--serve-at-end``'s record beside ``score.json`` (:mod:`aiperf_mpi.serve.atend`, which this room may not import)"""


def si(value: float | None, unit: str = "") -> str:
    """1.234 G + unit: engineering prefixes for operations and bytes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    scale, prefix = plots.si_scale(value)
    return f"{value / scale:.4g} {prefix}{unit}".rstrip()


def duration(seconds: float | None) -> str:
    """Seconds, with minutes or hours alongside when that reads better."""
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds >= 3 * 3600:
        return f"{seconds:,.0f} s ({seconds / 3600:.2f} h)"
    if seconds >= 120:
        return f"{seconds:,.1f} s ({seconds / 60:.1f} min)"
    return f"{seconds:.2f} s"


def percent(fraction: float | None) -> str:
    return "–" if fraction is None else f"{100 * fraction:.1f} %"


def verdict(score: Score) -> str:
    broken = [f"{name} {shown_value(rule['value'])} (needs {rule['need']})"
              for name, rule in score.rules.items() if not rule["ok"]]  # fmt: skip
    return "**valid run**" if score.valid else "**unofficial run**: " + "; ".join(broken)


def signed_percent(fraction: float | None) -> str:
    return "–" if fraction is None else f"{100 * fraction:+.1f} %"


def stability_of(score: Score) -> Stability:
    """The score's two stability figures (:mod:`aiperf_mpi.results.stability`), with their verdict."""
    return Stability(score.ops_cv_last_half, score.ops_change_last_quarter)


def settledness(score: Score) -> str:
    """How settled the score is, in words, with both figures; a run beyond the limits is marked (a warning only)."""
    figures = stability_of(score)
    text = (f"CV of OPS(t) over the last half {percent(figures.cv_last_half)}, change over the last quarter "
            f"{signed_percent(figures.change_last_quarter)}")  # fmt: skip
    limits = f"limits {100 * CV_LIMIT:g} % and {100 * CHANGE_LIMIT:g} %"
    if figures.settled is False:
        return f"**not settled**: {text} ({limits}): a longer run would likely score differently"
    if figures.settled is None:
        return (f"cannot tell: {text}; the grid has {len(score.grid)} sample(s), too few (a shorter "
                "`--score-step` gives more)")  # fmt: skip
    return f"settled: {text} ({limits})"


def segment_boundaries(run: RunModel) -> list[float]:
    """Where each resumed segment starts on the active axis."""
    return np.cumsum(run.windows)[:-1].tolist()


class _Builder:
    """Assembles the document section by section (one method each, in report order)."""

    def __init__(self, run: RunModel, score: Score, out: Path) -> None:
        self.run, self.score, self.out = run, score, out
        self.mark = plots.REHEARSAL_MARK if run.config.get("rehearse") else ""
        """across every plot of a rehearsal's report, and in its title"""
        kind = "REHEARSAL report (a stand-in's figures, never a result)" if self.mark else "run report"
        self.doc = Document(f"aiperf_mpi {kind}: {run.run_dir.name}")
        self.boundaries = segment_boundaries(run)
        self.groups: list[GroupTime] = []
        self.summary: RunSummary | None = None

    def build(self) -> Document:
        self.groups = group_times(self.run, self.score.active_time)
        self.summary = summarise(self.run, self.score, self.groups)
        self.intro()
        self.summary_table()
        self.validity()
        self.score_over_time()
        self.accuracy()
        self.timeline()
        self.time_split()
        self.monitor()
        self.energy()
        self.best_model()
        self.serving()
        self.failures()
        self.staging()
        self.log()
        return self.doc

    def intro(self) -> None:
        run, config = self.run, self.run.config
        ranks = "?" if run.ranks is None else str(run.ranks)
        nodes = "?" if self.summary.nodes is None else str(self.summary.nodes)
        self.doc.paragraph(
            f"Run directory `{run.run_dir}`; data set `{config.get('dataset', '?')}`, precision "
            f"`{run.precision}`, seed model `{config.get('seed_model', '?')}`; {ranks} ranks on "
            f"{nodes} node(s), {run.groups} training group(s); {self.score.segments} segment(s), "
            f"{duration(self.score.active_time)} of active time.  Everything below comes from the event log "
            f"(`{run.path.name}`, {run.lines:,} lines, {si(run.bytes, 'B')}); the score is computed by "
            "`aiperf_mpi.results.score`, as the run computed it."
        )
        if run.truncated_tail:
            self.doc.paragraph(
                "**The log's last line was cut off** (the run was killed mid-write); it was skipped: "
                f"`{run.truncated_line[:120].strip()}…`"
            )

    def summary_table(self) -> None:
        s, score, run = self.summary, self.score, self.run
        peak = measured_peak(run)
        if peak.ops_per_second:
            note = (f"{percent(s.efficiency)} of the measured peak {si(peak.ops_per_second, 'OPS')} "
                    f"({peak.precision} matrix multiply, {peak.groups_measured} of {peak.groups} groups)")  # fmt: skip
            if peak.groups_measured < peak.groups:
                note += " — groups without a probe are missing from the peak, so this overstates the efficiency"
        else:
            note = f"not measured: {peak.why_not}"
        regulated = (si(score.regulated_score, "OPS") if score.regulated_score is not None
                     else "not defined (no validation accuracy: synthetic data or no epoch)")  # fmt: skip
        split = s.split
        busy = split.compute + split.evaluation + split.data_wait + split.compile + split.other_in_epochs
        rows = [
            ["score", f"**{si(score.score, 'OPS')}** ({score.score:.6g} operations/s)"],
            ["regulated score", regulated],
            ["score settled?", settledness(score)],
            ["verdict", verdict(score)],
            ["efficiency against the measured peak", note],
            ["models trained / failed", f"{score.models_trained} / {score.models_failed}"],
            ["epochs", f"{score.epochs:,}"],
            ["operations completed", si(score.total_ops)],
            ["best error", "–" if s.best_error is None else f"{s.best_error:.4f} (accuracy {s.best_accuracy:.4f})"],
            ["models per minute", f"{s.models_per_minute:.3g}"],
            ["OPS per group", si(s.ops_per_group, "OPS")],
            ["active time", f"{duration(score.active_time)} in {score.segments} segment(s)"],
            ["time in epochs", f"{percent(split.share(busy))} of group time "
                               f"(training {percent(split.share(split.compute))}, "
                               f"evaluation {percent(split.share(split.evaluation))}, "
                               f"data wait {percent(split.share(split.data_wait))}, "
                               f"compilation {percent(split.share(split.compile))})"],
            ["time in search / set-up / given up at the time limit / idle",
             f"{percent(split.share(split.search))} / {percent(split.share(split.setup))} / "
             f"{percent(split.share(split.given_up))} / {percent(split.share(split.idle))}"],
            ["data staging", "none logged" if s.staging_seconds is None
             else f"{duration(s.staging_seconds)} (slowest node; {si(sum(x.get('bytes', 0) for x in run.staging), 'B')}"
                  f" on {len(run.staging)} node(s))"],
            ["log", "last line truncated (killed mid-write), skipped" if run.truncated_tail else "complete"],
        ]  # fmt: skip
        logged = run.logged_score
        if logged and "score" in logged:
            same = math.isclose(float(logged["score"]), score.score, rel_tol=1e-9)
            note = " (the same)" if same else " (differs: another grid step or a later segment)"
            rows.append(["score the run printed", si(float(logged["score"]), "OPS") + note])
        self.doc.heading("Summary")
        self.doc.table(["", "value"], rows)

    def validity(self) -> None:
        self.doc.heading("Validity")
        self.doc.paragraph(
            "A run is valid (as the AIPerf paper defines it) when every rule holds; anything else is reported as "
            f"an unofficial run, never refused.  Verdict: {verdict(self.score)} (rules version "
            f"{self.score.rules_version}, `aiperf_mpi/results/rules.py`)."
        )
        rows = []
        for name, rule in self.score.rules.items():
            rows.append([name, shown_value(rule["value"]), str(rule["need"]), "✔ ok" if rule["ok"] else "✘ broken"])
        self.doc.table(["rule", "value", "needs", "checked"], rows)

    def score_over_time(self) -> None:
        run, score = self.run, self.score
        path = plots.plot_score(score, run.active(run.column("end")), np.nan_to_num(run.column("ops")),
                                self.boundaries, self.out / "score.png", mark=self.mark)  # fmt: skip
        self.doc.heading("Score over time")
        step = score.grid_step or (score.grid[0].active_time if score.grid else 0.0)
        capped = (f", grid capped: the asked step would give more than {MAX_GRID_SAMPLES:,} samples"
                  if score.grid_capped else "")  # fmt: skip
        self.doc.paragraph(
            f"OPS(t) = operations of the epochs completed by active time t, divided by t, on the benchmark's grid "
            f"(step {step:g} s, {len(score.grid)} samples{capped}; the last sample, at the end of the active time, "
            "is the score).  The regulated score multiplies by −ln E(t), E the lowest validation error reached by t."
        )
        self.doc.paragraph(
            f"How settled the score is — {settledness(score)}.  The CV is the sample standard deviation ÷ mean of "
            "the OPS samples in the last half of the active time; the change is (score − OPS at the last sample "
            "at or before ¾ of the active time) ÷ score.  A warning, not a validity rule."
        )
        self.doc.image(path, "OPS and regulated score over time")
        last = score.grid[-5:]
        self.doc.table(
            ["active time", "operations", "OPS", "best accuracy", "regulated"],
            [[duration(s.active_time), si(s.ops), si(s.ops_per_second), "–" if s.best_accuracy is None
              else f"{s.best_accuracy:.4f}", si(s.regulated)] for s in last],
        )  # fmt: skip

    def accuracy(self) -> None:
        run, score = self.run, self.score
        has_accuracy = run.config.get("dataset") != "synthetic"
        accuracy = run.column("val_accuracy") if has_accuracy else np.full(len(run.epochs), np.nan)
        self.doc.heading("Accuracy")
        path = plots.plot_best_accuracy(run.active(run.column("end")), accuracy, score.active_time,
                                        self.out / "best_accuracy.png", mark=self.mark)  # fmt: skip
        self.doc.image(path, "best validation accuracy over time")
        models = run.models
        forward = np.array([np.nan if m.forward_per_sample is None else m.forward_per_sample for m in models])
        model_accuracy = np.array([np.nan if m.accuracy is None or not has_accuracy else m.accuracy for m in models])
        done = run.active(np.array([m.time for m in models], dtype=float))
        best_index = None
        if run.best is not None:
            best_index = next((i for i, m in enumerate(models) if m.id == run.best.id), None)
        path = plots.plot_accuracy_vs_ops(forward.astype(float), model_accuracy.astype(float), done, best_index,
                                          score.active_time, self.out / "accuracy_vs_ops.png",
                                          mark=self.mark)  # fmt: skip
        self.doc.paragraph(
            "Each trained model's best validation accuracy against its analytic forward operations per sample "
            "(the model's size), coloured by when it finished: a search that learns moves up and to the right."
        )
        self.doc.image(path, "accuracy against forward operations per sample")

    def timeline(self) -> None:
        run, score, groups = self.run, self.score, self.groups
        self.doc.heading("Timeline per group")
        path = plots.plot_timeline(groups, score.active_time, self.boundaries, self.out / "timeline.png",
                                   mark=self.mark)
        drawn = ("one row per group" if len(groups) <= plots.TIMELINE_ROWS
                 else "a heat map: the share of each time bin each group spent in epochs")  # fmt: skip
        self.doc.paragraph(
            f"What each group's ranks did, on the active time axis ({drawn}): epochs, the leader's search for the "
            "next model (CPU only: the accelerators wait), the set-up of a proposed model before its first epoch, "
            "models given up at the time limit (no epoch ended), failed models, and idle gaps longer than "
            f"{IDLE_GAP_MIN_SECONDS:g} s.  Dashed lines mark resumed segments."
        )
        self.doc.image(path, "timeline per group")
        if not groups:
            return
        hosts = {g.get("index", i): g for i, g in enumerate((run.layout or {}).get("groups") or [])}
        failed = {}
        for f in run.failures:
            failed[f.group] = failed.get(f.group, 0) + 1
        active = score.active_time if score.active_time > 0 else 1.0
        rows = []
        for g in groups[:MAX_TABLE_ROWS]:
            layout = hosts.get(g.group, {})
            epochs_time = float(np.sum(g.epoch_end - g.epoch_start))
            peak = run.peaks.get(g.group, {}).get("ops_per_second")
            rows.append([
                str(g.group), str(layout.get("host", "?")), str(len(layout.get("ranks", [])) or "?"),
                str(g.models), str(failed.get(g.group, 0)), f"{g.epochs:,}", percent(epochs_time / active),
                percent(g.idle / active), str(len(g.idle_start)), duration(g.longest_gap), si(peak, "OPS"),
            ])  # fmt: skip
        self.doc.table(["group", "host", "ranks", "models", "failed", "epochs", "in epochs", "idle", "idle gaps",
                        "longest gap", "peak"], rows)  # fmt: skip
        if len(groups) > MAX_TABLE_ROWS:
            idle = np.array([g.idle / active for g in groups])
            self.doc.paragraph(
                f"… {len(groups) - MAX_TABLE_ROWS} more groups.  Idle share over all {len(groups)} groups: "
                f"min {percent(idle.min())}, median {percent(float(np.median(idle)))}, max {percent(idle.max())}."
            )

    def time_split(self) -> None:
        split = self.summary.split
        self.doc.heading("Time split")
        self.doc.paragraph(
            f"Group time = {len(self.groups)} group(s) × {duration(self.score.active_time)} of active time = "
            f"{duration(split.group_seconds)} (group-seconds).  Epoch categories come from the epochs' own "
            "accounting; search from `model_proposed`; idle is what no epoch, search or set-up covers."
        )
        rows = [[name, duration(seconds), percent(split.share(seconds)), why] for name, seconds, why in split.rows()]
        self.doc.table(["category", "group-seconds", "share", "what"], rows)

    def monitor(self) -> None:
        run, score = self.run, self.score
        self.doc.heading("Utilisation and memory")
        if not len(run.monitor):
            self.doc.paragraph(f"**No monitor samples**: {no_monitor_reason(run, score.active_time)}.")
            return
        path = plots.plot_monitor(run, score.active_time, self.boundaries, self.out / "utilisation.png",
                                  mark=self.mark)
        sources = sorted({info.get("source", "?") for info in run.monitor_nodes.values()})
        self.doc.paragraph(
            f"{len(run.monitor):,} device samples from {len(run.monitor_nodes)} node(s) (source: "
            f"{', '.join(sources)}).  `nvml`: each GPU's utilisation (share of the interval a kernel ran) and "
            "memory; `cpu`: the node's CPU busy percent and the resident memory of the benchmark's processes."
        )
        self.doc.image(path, "utilisation and memory per node")
        utilization = run.monitor_column("utilization")
        rows = []
        for node, info in sorted(run.monitor_nodes.items())[:MAX_TABLE_ROWS]:
            mine = run.monitor_column("node") == node
            used = run.monitor_column("memory_used")[mine]
            total = run.monitor_column("memory_total")[mine]
            rows.append([str(node), str(info.get("host", "?")), str(info.get("source", "?")),
                         str(len(info.get("devices", {}))), f"{np.nanmean(utilization[mine]):.1f} %",
                         si(float(np.nanmax(used)) if len(used) else None, "B"),
                         si(float(np.nanmax(total)) if len(total) else None, "B")])  # fmt: skip
        self.doc.table(["node", "host", "source", "devices", "mean utilisation", "peak memory used", "memory"], rows)

    def energy(self) -> None:
        """Energy to solution (issue 53): the score's figures and the nodes' power over time."""
        record = self.score.energy or {}
        self.doc.heading("Energy")
        if not record.get("measured"):
            self.doc.paragraph(f"**Not measured**: {record.get('why', 'no energy readings in the log')}.  The "
                               "score does not depend on it (docs/energy.md).")  # fmt: skip
            return
        regulated = record.get("regulated_ops_per_joule")
        self.doc.paragraph(
            f"{record['joules'] / 1e3:,.4g} kJ over the scored window at {record['watts']:,.4g} W mean "
            f"({record['nodes']} node(s), {', '.join(record['covers'])}; the readings span "
            f"{duration(record['seconds_read'])}): {record['ops_per_joule'] / 1e9:.4g} G operations per joule"
            + (f", {regulated / 1e9:.4g} G regulated" if regulated is not None else "")
            + ".  What the meters cover, not the wall plug, the network or cooling (docs/energy.md)."
        )
        if self.run.energy.trace.times:
            path = plots.plot_power(self.run, self.score.active_time, self.boundaries, self.out / "power.png",
                                    mark=self.mark)  # fmt: skip
            self.doc.image(path, "power per node over time")

    def best_model(self) -> None:
        best = self.run.best
        self.doc.heading("Best model: operations by layer type")
        if best is None:
            self.doc.paragraph("No trained model with a graph in the log.")
            return
        if best.graph_error:
            self.doc.paragraph(f"The graph of model {best.id} (task {best.task}) could not be read: {best.graph_error}")
            return
        try:
            counts = count_ops(from_json(best.graph))
        except GraphError as exc:
            self.doc.paragraph(f"The graph of model {best.id} (task {best.task}) could not be read: {exc}")
            return
        accuracy = "" if best.accuracy is None else f", accuracy {best.accuracy:.4f}"
        check = ""
        if best.forward_per_sample is not None:
            same = int(best.forward_per_sample) == counts.forward_eval
            check = (" The recount matches the forward count the run logged." if same else
                     f" **The recount ({counts.forward_eval}) differs from the logged forward count "
                     f"({int(best.forward_per_sample)}).**")  # fmt: skip
        self.doc.paragraph(
            f"Model {best.id} (task {best.task}, {best.description or 'no description'}{accuracy}; chosen by "
            f"{best.why}), its graph taken from {best.source} and counted again by "
            f"`aiperf_mpi.graph.ops.count_ops`: {counts.params:,} parameters, {si(counts.forward_eval)} operations "
            f"forward (evaluation), {si(counts.forward_train + counts.backward)} per training sample.{check}"
        )
        table: dict[str, dict] = {}
        for layer in counts.layers:
            row = table.setdefault(layer.type, {"type": layer.type, "layers": 0, "params": 0, "forward_train": 0,
                                                "forward_eval": 0, "backward": 0, "update": 0})  # fmt: skip
            row["layers"] += 1
            for name in ("params", "forward_train", "forward_eval", "backward", "update"):
                row[name] += getattr(layer, name)
        rows = sorted(table.values(), key=lambda r: -(r["forward_train"] + r["backward"]))
        training = counts.forward_train + counts.backward
        self.doc.table(
            ["layer type", "layers", "parameters", "forward (train) / sample", "forward (eval) / sample",
             "backward / sample", "update / step", "share of training"],
            [[r["type"], str(r["layers"]), f"{r['params']:,}", si(r["forward_train"]), si(r["forward_eval"]),
              si(r["backward"]), si(r["update"]), percent((r["forward_train"] + r["backward"]) / training
                                                          if training else None)] for r in rows]
            + [["**total**", str(len(counts.layers)), f"{counts.params:,}", si(counts.forward_train),
                si(counts.forward_eval), si(counts.backward), si(counts.update), "100.0 %"]],
        )  # fmt: skip
        path = plots.plot_op_breakdown(rows, f"Model {best.id}: operations per training sample by layer type",
                                       self.out / "op_breakdown.png", mark=self.mark)  # fmt: skip
        self.doc.image(path, "operations by layer type of the best model")

    def serving(self) -> None:
        """``--serve-at-end``'s inference figures (``RUN_DIR/serve.json``, :mod:`aiperf_mpi.serve.atend`): a section
        of their own, beside the score and never part of it; none when the run did not serve."""
        path = self.run.run_dir / SERVE_RECORD
        if not path.is_file():
            return
        self.doc.heading("Serving at the end (inference, not part of the score)")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            per_rank = [float(v) for v in record["samples_per_second_per_rank"]]
            accuracy = record.get("accuracy") or {}
            rows = [
                ["servable", f"{record['type']} of {record['top']} ({record['servable']})"],
                ["served on", f"{record['ranks']} training rank(s) of {record['groups']} group(s), segment "
                              f"{record['segment']}"],
                ["data", f"{record['samples']:,} samples of {record['data']}, batch {record['batch']}"],
                ["samples/s", f"{float(record['samples_per_second']):.1f} in all; per rank {min(per_rank):.1f} – "
                              f"{max(per_rank):.1f}"],
                ["inference ops/s", f"{si(float(record['inference_ops_per_second']), 'OPS')} "
                                    f"({si(float(record['forward_ops_per_sample']))} analytic forward ops a sample)"],
                ["accuracy", "–" if not accuracy else f"{accuracy['ensemble']:.4f} (members: " + ", ".join(
                    f"{name} {value:.4f}" for name, value in accuracy["members"].items()) + ")"],
                ["time to solution", f"{duration(record['time_to_solution'])} (publish "
                                     f"{duration(record['publish_seconds'])}, serve "
                                     f"{duration(record['serve_seconds'])})"],
                ["reviewer's check", f"{record['check']} at the run's end (python -m aiperf_mpi.serve check "
                                     f"{self.run.run_dir})"],
            ]  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.doc.paragraph(f"`{SERVE_RECORD}` cannot be read: {type(exc).__name__}: {exc}")
            return
        self.doc.paragraph(f"The run's best models, published and served over its validation split by every training "
                           f"rank after the score (`{SERVE_RECORD}`; the serving log in `{record.get('log_dir')}`).")
        self.doc.table(["figure", "value"], rows)

    def failures(self) -> None:
        run = self.run
        self.doc.heading("Failures")
        if not run.failures:
            self.doc.paragraph("No model failed.")
            return
        times = run.active(np.array([f.time for f in run.failures], dtype=float))
        rows = [[duration(float(t)), str(f.group), str(f.task), "–" if f.rank is None else str(f.rank), f.host,
                 f.reason or "–"] for f, t in zip(run.failures[:MAX_TABLE_ROWS], times, strict=False)]  # fmt: skip
        self.doc.table(["active time", "group", "task", "rank", "host", "reason"], rows)
        if len(run.failures) > MAX_TABLE_ROWS:
            self.doc.paragraph(f"… and {len(run.failures) - MAX_TABLE_ROWS} more (the log has every traceback).")

    def staging(self) -> None:
        run = self.run
        self.doc.heading("Data staging")
        if not run.staging:
            self.doc.paragraph("No data was staged to node-local storage (no `staging` events).")
            return
        rows = []
        for s in run.staging[:MAX_TABLE_ROWS]:
            seconds, size = float(s.get("seconds", 0.0)), float(s.get("bytes", 0))
            rows.append([str(s.get("host", "?")), duration(seconds), si(size, "B"),
                         si(size / seconds if seconds > 0 else None, "B/s")])  # fmt: skip
        self.doc.table(["host", "time", "bytes", "rate"], rows)
        if len(run.staging) > MAX_TABLE_ROWS:
            self.doc.paragraph(f"… and {len(run.staging) - MAX_TABLE_ROWS} more nodes.")

    def log(self) -> None:
        run = self.run
        self.doc.heading("The event log")
        rows = [[name or "(none)", f"{count:,}"] for name, count in sorted(run.events.items())]
        self.doc.table(["event", "count"], rows)
        for index, stop in enumerate(run.run_stops, start=1):
            discarded = stop.get("discarded_tasks") or []
            self.doc.paragraph(
                f"Segment {stop.get('segment', index)} stopped: {stop.get('reason', '?')}"
                + (f"; unfinished tasks discarded: {discarded}" if discarded else "")
                + "."
            )
        for lost in run.lost_groups:
            self.doc.paragraph(f"Group {lost.get('group')} on {lost.get('host') or '?'} was lost: "
                               f"{lost.get('reason', '?')}; its task {lost.get('task')} was discarded (its completed "
                               "epochs count, its running one does not), and the other groups went on.")  # fmt: skip
        if len(run.run_stops) < self.score.segments:
            self.doc.paragraph("The last segment has no `run_stop`: it was killed; it ends at its last event.")
        if run.truncated_tail:
            self.doc.paragraph(
                "The last line was truncated (the run was killed while writing it) and skipped; it began: "
                f"`{run.truncated_line[:120].strip()}`"
            )


def build_report(run: RunModel, score: Score, out: Path) -> Document:
    """The report's document; its plots are written into ``out`` on the way."""
    return _Builder(run, score, out).build()


def write_report(run_dir: Path | str, out_dir: Path | str | None = None) -> Path:
    """Write report.md, report.html and the plots for a run; return report.md's path.

    Reads only the event log.  Meant for the end of a run, on the master:
    no TensorFlow, no MPI, seconds on a small run.
    """
    run = read_model(Path(run_dir))
    score = run_score(run)
    out = run.run_dir / "report" if out_dir is None else Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = build_report(run, score, out)
    markdown = out / "report.md"
    markdown.write_text(document.markdown(out), encoding="utf-8")
    (out / "report.html").write_text(document.html(), encoding="utf-8")
    return markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory (or its events.jsonl)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_DIR/report)")
    options = parser.parse_args(argv)
    return guarded("analysis.report", options.run_dir, lambda: _main(options))


def _main(options: argparse.Namespace) -> int:
    try:
        markdown = write_report(options.run_dir, options.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"analysis.report: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {markdown} and {markdown.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
