"""The reviewer's check of a serving run: ``python -m aiperf_mpi.serve check LOG_DIR BUNDLE``.

As ``analysis.verify`` does for training, it believes no figure: it recounts each from what it rests on, and
reports every disagreement.

* **the bundle** — every file's size and sha256 against its manifest (:func:`~aiperf_mpi.serve.bundle.open_bundle`),
  the manifest's sha256 against the one the run logged, and each member's forward operations per sample
  recounted from its own ``graph.json`` by the score's counter (:func:`aiperf_mpi.graph.ops.count_ops`);
* **the work** — the ranks' shards cut the input exactly as :func:`~aiperf_mpi.serve.scenarios.shards` cuts it,
  every sample once; the offline figures (samples/s, operations = samples × forward count, operations per
  second, the ratio to the logged peak, itself the sum of the ranks') recomputed;
* **the predictions** — the file's values hash to the logged sha256, one row per sample, each class the argmax
  of its probabilities, the accuracies recounted from the file's labels (and members' classes);
* **the scenarios** — each latency summary recomputed from the logged latencies, each server trial's verdict
  from its p99 and the bound, the best rate and the best batch re-chosen;
* **the other records** — each ``:::MLLOG`` result line and ``summary.json`` equal to what the events give.

* **the re-execution** (the reviewer's, from the command line) — the bundle loaded and run:
  :mod:`aiperf_mpi.serve.reexecute`.

The records' checks are pure (JSON, NumPy files and graphs); the re-execution loads TensorFlow.  No MPI.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
import zlib
from pathlib import Path

import numpy as np

from aiperf_mpi.graph.model import from_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.serve import ServeError, scenarios
from aiperf_mpi.serve.bundle import MANIFEST, open_bundle, read_manifest
from aiperf_mpi.serve.log import MLLOG_KEYS, SUMMARY, read_mllog, read_serve_events
from aiperf_mpi.serve.predictions import predictions_digest, read_predictions
from aiperf_mpi.serve.reexecute import Reexecution, reexecute

RELATIVE = 1e-9


def _close(a: object, b: object) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=RELATIVE, abs_tol=1e-12)
    return a == b


def _events(folder: Path) -> dict[str, list[dict]]:
    by_name: dict[str, list[dict]] = {}
    for record in read_serve_events(folder):
        by_name.setdefault(record["event"], []).append(record)
    return by_name


def summary_of(folder: Path) -> dict:
    """The run's figures as its event log gives them (what ``summary.json`` holds)."""
    events = _events(Path(folder))
    start, offline = events["serve_start"][0], events["offline"][0]
    shards = sorted(events.get("shard", []), key=lambda e: e["rank"])
    summary = {
        "servable": start["servable"],
        "type": start["type"],
        "ranks": start["ranks"],
        "host": start["host"],
        "data": start["data"],
        "samples": start["samples"],
        "forward_ops_per_sample": start["forward_ops_per_sample"],
        "offline": {
            k: offline[k]
            for k in ("batch", "samples", "seconds", "samples_per_second", "ops", "ops_per_second", "peak_ratio")
        },
        "samples_per_second_per_rank": [s["samples_per_second"] for s in shards],
        "peak_ops_per_second": events["peak"][0]["ops_per_second"] if "peak" in events else None,
        "time_to_solution": events["serve_stop"][0]["time_to_solution"] if "serve_stop" in events else None,
    }
    if "accuracy" in events:
        accuracy = events["accuracy"][0]
        summary["accuracy"] = {
            "ensemble": accuracy["correct"] / accuracy["samples"],
            "members": {
                name: correct / accuracy["samples"]
                for name, correct in zip(accuracy["members"], accuracy["member_correct"], strict=True)
            },
        }
    if "batch_sweep" in events:
        sweep = events["batch_sweep"][0]
        summary["batch_sweep"] = {
            "best": sweep["best"],
            "samples_per_second": {str(r["batch"]): r["samples_per_second"] for r in sweep["rows"]},
        }
    if "single_stream" in events:
        stream = events["single_stream"][0]
        summary["single_stream"] = {k: stream[k] for k in ("queries", "p50", "p90", "p99")}
    if "server" in events:
        server = events["server"][0]
        summary["server"] = {
            "p99_bound_seconds": server["bound_seconds"],
            "best_rate": server["best_rate"],
            "trials": [{k: t[k] for k in ("rate", "p50", "p90", "p99", "met")} for t in server["trials"]],
        }
    return summary


def _predictions_file(logged: str, folder: Path) -> Path:
    """The predictions file, logged relative to the log directory (a run copied with its log still finds it)."""
    return folder / logged


def check_bundle(bundle: Path, start: dict) -> list[str]:
    problems = []
    manifest = open_bundle(bundle)
    sha = hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest()
    if sha != start["manifest_sha256"]:
        problems.append(f"the bundle's manifest has sha256 {sha}; the run served {start['manifest_sha256']}")
    recount = 0
    for member in manifest["members"]:
        if member.get("keras") not in manifest["files"]:  # the model loaded and served must be one the hashes cover
            problems.append(f"{member['name']}: its model {member.get('keras')} is not one of the bundle's listed "
                            "files")
        if member["graph"] not in manifest["files"]:  # only a listed file is checked for its size and sha256
            problems.append(f"{member['name']}: its graph {member['graph']} is not one of the bundle's listed files")
            continue
        forward = count_ops(from_json((bundle / member["graph"]).read_text(encoding="utf-8"))).forward_eval
        recount += forward
        if forward != member["forward_ops_per_sample"]:
            problems.append(
                f"{member['name']}: its graph counts {forward:,} forward ops/sample, the manifest "
                f"says {member['forward_ops_per_sample']:,}"
            )
    if recount != start["forward_ops_per_sample"]:
        problems.append(
            f"the members' graphs count {recount:,} forward ops/sample, the log {start['forward_ops_per_sample']:,}"
        )
    return problems


def check_work(events: dict[str, list[dict]]) -> list[str]:
    problems = []
    start, offline = events["serve_start"][0], events["offline"][0]
    shards = sorted(events.get("shard", []), key=lambda e: e["rank"])
    expected = scenarios.shards(start["samples"], start["ranks"], offline["batch"])
    if [(s["start"], s["end"]) for s in shards] != expected or [s["rank"] for s in shards] != list(
        range(start["ranks"])
    ):
        problems.append(
            f"the shards {[(s['rank'], s['start'], s['end']) for s in shards]} are not the input cut "
            f"into {start['ranks']} at batch {offline['batch']}: {expected}"
        )
    for shard in shards:
        if shard["samples"] != shard["end"] - shard["start"] or not _close(
            shard["samples_per_second"],
            shard["samples"] / shard["predict_seconds"] if shard["predict_seconds"] else 0.0,
        ):
            problems.append(f"rank {shard['rank']}'s shard: samples or samples/s do not follow from its range and time")
    peak = events["peak"][0] if "peak" in events else None
    if peak and not _close(peak["ops_per_second"], sum(peak["per_rank"])):
        problems.append(f"the peak {peak['ops_per_second']} is not the sum of the ranks' {peak['per_rank']}")
    figures = scenarios.offline_figures(
        sum(s["samples"] for s in shards),
        offline["seconds"],
        start["forward_ops_per_sample"],
        peak["ops_per_second"] if peak else None,
    )
    if figures["samples"] != start["samples"]:
        problems.append(f"the shards served {figures['samples']} samples; the input has {start['samples']}")
    for key, value in figures.items():
        if not _close(offline[key], value):
            problems.append(f"offline {key}: logged {offline[key]}, recounted {value}")
    return problems


SUMMARY_BYTES = 1 << 20
"""the most a summary can take: a few dozen figures and each server trial's five (a real one is a few kB)"""
CELL_BYTES = 32
"""the most a predictions file's cell takes (a float32's text, its comma); a file larger than its rows and classes
can fill is refused before it is read"""


def largest_predictions(rows: int, classes: int) -> int:
    """The most bytes a predictions file of ``rows`` rows of ``classes`` probabilities can hold, as either format
    writes it (the row, the class, each member's class and the label besides, and the header or the archive's
    own): a larger one is not the run's, and reading it could take the whole memory (a 1 TiB sparse file)."""
    return rows * (classes + 3 + MEMBERS_BOUND) * CELL_BYTES + 65536


MEMBERS_BOUND = 64
"""an ensemble's members, at most, in the predictions size bound (each adds a class column to the .npz)"""


def check_predictions(events: dict[str, list[dict]], folder: Path, classes: int) -> list[str]:
    problems = []
    logged = events["predictions"][0]
    path = _predictions_file(logged["file"], folder)
    if not path.is_file():
        return [f"the predictions file {logged['file']} is missing"]
    largest = largest_predictions(int(logged["rows"]), classes)
    if path.stat().st_size > largest:
        return [f"{path} has {path.stat().st_size:,} bytes: larger than {logged['rows']} rows of {classes} classes "
                f"can be ({largest:,}); not read"]  # fmt: skip
    found = read_predictions(path)
    probabilities, classes = found["probabilities"], found["classes"]
    if len(probabilities) != events["serve_start"][0]["samples"] or logged["rows"] != len(probabilities):
        problems.append(
            f"{path} has {len(probabilities)} rows; the log says {logged['rows']} of "
            f"{events['serve_start'][0]['samples']} samples"
        )
    if predictions_digest(probabilities, classes) != logged["values_sha256"]:
        problems.append(f"{path}'s values do not hash to the logged sha256: not the predictions the run made")
    if len(classes) and not np.array_equal(classes, probabilities.argmax(axis=1)):
        problems.append(f"{path}: a class is not the argmax of its probabilities")
    if "accuracy" in events and found["labels"] is not None:
        accuracy = events["accuracy"][0]
        correct = int((classes == found["labels"]).sum())
        if correct != accuracy["correct"] or accuracy["samples"] != len(classes):
            problems.append(
                f"accuracy: the file gives {correct} of {len(classes)} correct, the log "
                f"{accuracy['correct']} of {accuracy['samples']}"
            )
        if path.suffix == ".npz":
            with np.load(path) as data:
                members = [int((row == found["labels"]).sum()) for row in data["member_classes"]]
            if members != accuracy["member_correct"]:
                problems.append(
                    f"members' accuracy: the file gives {members} correct, the log {accuracy['member_correct']}"
                )
    return problems


def check_scenarios(events: dict[str, list[dict]]) -> list[str]:
    problems = []
    if "batch_sweep" in events:
        sweep = events["batch_sweep"][0]
        for row in sweep["rows"]:
            if not _close(row["samples_per_second"], row["samples"] / row["seconds"]):
                problems.append(
                    f"batch sweep: batch {row['batch']}'s samples/s does not follow from its count and time"
                )
        if scenarios.best_batch(sweep["rows"]) != sweep["best"]:
            problems.append(
                f"batch sweep: the best batch is {scenarios.best_batch(sweep['rows'])}, the log says {sweep['best']}"
            )
    if "single_stream" in events:
        stream = events["single_stream"][0]
        for key, value in scenarios.latency_summary(stream["latencies"]).items():
            if not _close(stream[key], value):
                problems.append(f"single-stream {key}: logged {stream[key]}, recomputed {value}")
    if "server" in events:
        server = events["server"][0]
        trials = []
        for trial in server["trials"]:
            summary = scenarios.latency_summary(trial["latencies"])
            for key, value in summary.items():
                if not _close(trial[key], value):
                    problems.append(
                        f"server trial at {trial['rate']:.3f}/s {key}: logged {trial[key]}, recomputed {value}"
                    )
            met = summary["p99"] <= server["bound_seconds"]
            if met != trial["met"]:
                problems.append(
                    f"server trial at {trial['rate']:.3f}/s: p99 {summary['p99']} against the bound "
                    f"{server['bound_seconds']} is {'met' if met else 'missed'}, the log says otherwise"
                )
            trials.append(scenarios.Trial(trial["rate"], summary, met))
        if not _close(scenarios.best_rate(trials), server["best_rate"]):
            problems.append(
                f"server: the highest rate meeting the bound is {scenarios.best_rate(trials)}, the log "
                f"says {server['best_rate']}"
            )
    return problems


def check_records(events: dict[str, list[dict]], folder: Path) -> list[str]:
    problems = []
    lines = {line["key"]: line for line in read_mllog(folder)}
    expected = {
        MLLOG_KEYS["offline"][0]: events["offline"][0]["samples_per_second"],
        "aiperf_inference_ops_per_second": events["offline"][0]["ops_per_second"],
        "aiperf_forward_ops_per_sample": events["serve_start"][0]["forward_ops_per_sample"],
    }
    if "single_stream" in events:
        expected[MLLOG_KEYS["single_stream"][0]] = int(events["single_stream"][0]["p90"] * 1e9)
    if "server" in events:
        expected[MLLOG_KEYS["server"][0]] = events["server"][0]["best_rate"]
    if "batch_sweep" in events:
        expected["aiperf_best_batch"] = events["batch_sweep"][0]["best"]
    if "accuracy" in events:
        accuracy = events["accuracy"][0]
        expected["aiperf_ensemble_accuracy"] = accuracy["correct"] / accuracy["samples"]
    for key, value in expected.items():
        if key not in lines:
            problems.append(f"mllog.log has no {key} line")
        elif not _close(lines[key]["value"], value):
            problems.append(f"mllog.log {key}: {lines[key]['value']}, the event log gives {value}")
    if "accuracy" in events and "aiperf_ensemble_accuracy" in lines:  # its members' too (a forger's review: unread)
        accuracy = events["accuracy"][0]
        members = [c / accuracy["samples"] for c in accuracy["member_correct"]]
        written = (lines["aiperf_ensemble_accuracy"].get("metadata") or {}).get("members")
        if not isinstance(written, list) or len(written) != len(members) or not all(
                _close(a, b) for a, b in zip(written, members, strict=True)):  # fmt: skip
            problems.append(f"mllog.log aiperf_ensemble_accuracy's members: {str(written)[:80]}, the event log "
                            f"gives {members}")  # fmt: skip
    path = folder / SUMMARY
    if not path.is_file():
        problems.append("summary.json is missing")
    elif path.stat().st_size > SUMMARY_BYTES:
        problems.append(f"summary.json has {path.stat().st_size:,} bytes: no summary is that large; not read")
    elif json.loads(path.read_text(encoding="utf-8")) != summary_of(folder):
        problems.append("summary.json differs from the figures the event log gives")
    return problems


def check_run(folder: Path | str, bundle: Path | str, reexecution: Reexecution | None = None) -> list[str]:
    """Every disagreement between the serving run's records, its predictions and the bundle (empty: it holds).

    ``reexecution``: the reviewer's re-execution (:mod:`aiperf_mpi.serve.reexecute`: the bundle loaded, its
    operations recounted from the models, a drawn sample re-predicted, the accuracy counted against the reviewer's
    labels, the rates named as claims); None: the records only (a run's own check of its serving at its end)."""
    folder, bundle = Path(folder), Path(bundle)
    if not (folder / "serve_events.jsonl").is_file():
        raise ServeError(f"{folder} has no serve_events.jsonl: not the log directory of a serving run")
    try:
        events = _events(folder)
    except ValueError as exc:
        raise ServeError(f"{folder}: {exc}") from None
    for needed in ("serve_start", "offline", "predictions", "serve_stop"):
        if needed not in events:
            return [f"the event log has no {needed} event (the run did not finish, or the log was cut)"]
    classes = int(read_manifest(bundle)["signature"]["outputs"][0]["classes"])
    sections = {
        "bundle": lambda: check_bundle(bundle, events["serve_start"][0]),
        "shards and offline figures": lambda: check_work(events),
        "predictions": lambda: check_predictions(events, folder, classes),
        "scenarios": lambda: check_scenarios(events),
        "mllog and summary": lambda: check_records(events, folder),
    }
    if reexecution is not None:
        sections["re-execution"] = lambda: reexecute(bundle, folder, events, reexecution)
    problems = []
    for name, section in sections.items():
        try:
            problems += section()
        except ServeError:
            raise
        except UNCHECKABLE as exc:  # a record of the wrong shape (issue 52: a traceback before): this part fails
            what = "a file it reads" if isinstance(exc, OSError) else "a record of the wrong shape"
            problems.append(f"the {name} cannot be checked: {what} ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:160]})")  # fmt: skip
    return problems


UNCHECKABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError,
               RecursionError, MemoryError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
               runlog.UnreadableLog)  # fmt: skip
"""what a record of the wrong shape, or a file the records name that cannot be read, raises where the recount reads
it: that part of the check fails, in words"""
