"""A thorough forger of a serving run: after an edit, every record the check recounts is made to agree again.

Issue 52 (item 4): a check that recounts the records from one another passes whatever a forger rewrites
consistently.  :func:`reseal` is that forger: it recomputes, from the (edited) bundle and event log, the bundle's
file hashes and forward counts, the manifest's hash in the log, the offline figures, the predictions' digest and
accuracy, the ``:::MLLOG`` values and ``summary.json`` — so what still fails is what only a re-execution sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aiperf_mpi.graph.model import from_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.results.mllog_format import PREFIX, read_line
from aiperf_mpi.serve import scenarios
from aiperf_mpi.serve.bundle import MANIFEST, digest
from aiperf_mpi.serve.check import summary_of
from aiperf_mpi.serve.log import MLLOG_KEYS, SUMMARY
from aiperf_mpi.serve.predictions import predictions_digest, read_predictions


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in (log / "serve_events.jsonl").read_text().splitlines()]


def _write_events(log: Path, events: list[dict]) -> None:
    (log / "serve_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def reseal_bundle(bundle: Path) -> str:
    """Every listed file's size and sha256, each member's forward count from its graph; the manifest's sha256."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    for name in manifest["files"]:
        sha, size = digest(bundle / name)
        manifest["files"][name] = {"sha256": sha, "bytes": size}
    for member in manifest["members"]:
        member["forward_ops_per_sample"] = count_ops(from_json((bundle / member["graph"]).read_text())).forward_eval
    manifest["forward_ops_per_sample"] = sum(m["forward_ops_per_sample"] for m in manifest["members"])
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return digest(bundle / MANIFEST)[0]


def reseal(log: Path, bundle: Path) -> None:
    """The serving log made to agree with the bundle and with itself again (the module's list)."""
    manifest_sha = reseal_bundle(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    events = _events(log)
    by_name = {e["event"]: e for e in events}
    start, offline = by_name["serve_start"], by_name["offline"]
    start["manifest_sha256"] = manifest_sha
    start["forward_ops_per_sample"] = manifest["forward_ops_per_sample"]
    start["members"] = [{"name": m["name"], "forward_ops_per_sample": m["forward_ops_per_sample"]}
                        for m in manifest["members"]]  # fmt: skip
    for shard in (e for e in events if e["event"] == "shard"):
        shard["samples_per_second"] = shard["samples"] / shard["predict_seconds"]
    peak = by_name["peak"]["ops_per_second"] if "peak" in by_name else None
    offline.update(scenarios.offline_figures(offline["samples"], offline["seconds"], start["forward_ops_per_sample"],
                                             peak))  # fmt: skip
    path = log / by_name["predictions"]["file"]
    found = read_predictions(path)
    by_name["predictions"]["values_sha256"] = predictions_digest(found["probabilities"], found["classes"])
    if "accuracy" in by_name and found["labels"] is not None:
        by_name["accuracy"]["correct"] = int((found["classes"] == found["labels"]).sum())
        if path.suffix == ".npz":
            with np.load(path) as arrays:
                by_name["accuracy"]["member_correct"] = [int((row == found["labels"]).sum())
                                                         for row in arrays["member_classes"]]  # fmt: skip
    _write_events(log, events)
    values = {MLLOG_KEYS["offline"][0]: offline["samples_per_second"],
              "aiperf_inference_ops_per_second": offline["ops_per_second"],
              "aiperf_forward_ops_per_sample": start["forward_ops_per_sample"]}  # fmt: skip
    if "accuracy" in by_name:
        values["aiperf_ensemble_accuracy"] = by_name["accuracy"]["correct"] / by_name["accuracy"]["samples"]
    members = None
    if "accuracy" in by_name:
        accuracy = by_name["accuracy"]
        members = [c / accuracy["samples"] for c in accuracy["member_correct"]]
    lines = []
    for text in (log / "mllog.log").read_text().splitlines():
        if text.startswith(PREFIX) and read_line(text).get("key") in values:
            record = read_line(text)
            record["value"] = values[record["key"]]
            if record["key"] == "aiperf_ensemble_accuracy" and members is not None:  # its members' too
                record.setdefault("metadata", {})["members"] = members
            text = PREFIX + json.dumps(record)
        lines.append(text)
    (log / "mllog.log").write_text("\n".join(lines) + "\n")
    (log / SUMMARY).write_text(json.dumps(summary_of(log)))
