"""Hand-made event logs with answers worked out by hand, for the score and the report.

:func:`known_run` is a two-group run of 100 s whose score, regulated score,
validity, efficiency and time split are computed in its docstring; the
tests assert those exact numbers.  The lines are written the way
:class:`aiperf_mpi.results.runlog.EventLog` writes them (compact JSON), so the
report's fast paths are the ones exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import segment_graph_file


def line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":")) + "\n"


def write_log(run_dir: Path, events: list[dict], tail: str = "") -> Path:
    """Write ``events`` (and an optional raw, e.g. truncated, tail) as ``run_dir/events.jsonl``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / runlog.EVENTS_FILE
    path.write_text("".join(line(e) for e in events) + tail, encoding="utf-8")
    return run_dir


def start(t: float, **config: object) -> dict:
    base = {"dataset": "imagenet", "precision": "fp16", "search": "bayesian", "hpo": "tpe", "score_step": 50.0,
            "seed_model": "tiny", "monitor_interval": 10.0, "peak_probe": True}  # fmt: skip
    return {"event": runlog.RUN_START, "time": t, "segment": 1, "resumed": False, "config": {**base, **config}}


def epoch(task: int, group: int, number: int, start_: float, end: float, ops: int, accuracy: float | None,
          compute: float = 0.0, evaluation: float = 0.0, data_wait: float = 0.0, compile_: float | None = None,
          ) -> dict:  # fmt: skip
    return {"event": runlog.EPOCH, "time": end + 0.5, "task": task, "group": group, "epoch": number,
            "train_loss": 1.0, "val_accuracy": accuracy, "start": start_, "end": end, "ops": ops,
            "ops_train": ops, "ops_update": 0, "ops_validation": 0, "steps": 1, "train_samples": 1,
            "validation_samples": 1, "data_wait": data_wait, "compute": compute, "evaluation": evaluation,
            "learning_rate": 0.1, **({} if compile_ is None else {"compile": compile_})}  # fmt: skip


def proposed(task: int, group: int, t: float, search_seconds: float) -> dict:
    """A seed proposal placed as the master places it: task N's graph (model_done's, the tiny seed) is line N
    of segment 1's appended graphs file (no file is written: these logs are read, not verified)."""
    length = len(to_json(tiny_resnet()).encode("utf-8"))
    return {"event": runlog.MODEL_PROPOSED, "time": t, "task": task, "group": group, "parent": None,
            "hparams": {"batch_size": 32, "kernel_size": 3}, "description": "seed",
            "graph_file": segment_graph_file(1), "graph_offset": task * (length + 1), "graph_bytes": length,
            "search": {"strategy": "seed", "search_seconds": search_seconds}}  # fmt: skip


def model_done(task: int, group: int, t: float, accuracy: float, epochs: list[dict]) -> dict:
    graph = to_json(tiny_resnet())
    counts = count_ops(tiny_resnet())
    record = {
        "id": task, "parent": None, "graph": graph, "status": "trained", "hparams": {"batch_size": 32},
        "epochs": [{k: v for k, v in e.items() if k not in ("event", "time", "task", "group")} for e in epochs],
        "accuracy": accuracy, "predicted_accuracy": accuracy,
        "ops": {"total": sum(e["ops"] for e in epochs), "forward_per_sample": counts.forward_eval,
                "backward_per_sample": counts.backward, "update_per_step": counts.update, "params": counts.params},
        "timings": {"train": 60.0, "search": 1.0, "task": task, "group": group, "stop": "patience"},
        "description": "seed", "weights": f"weights/task-{task}.npz",
    }  # fmt: skip
    return {"event": runlog.MODEL_DONE, "time": t, "model": record, "task": task, "group": group}


def known_run(run_dir: Path, monitor: bool = True, peaks: bool = True, tail: str = "") -> Path:
    """Two groups, 100 s of active time, one model trained and one failed.

    Group 0: search 1000–1001, proposal at 1001, epochs 1005–1030 (600 ops,
    accuracy 0.5) and 1040–1070 (900 ops, 0.75), model_done at 1071.
    Group 1: search 1000–1002, proposal at 1002, epoch 1010–1095 (300 ops,
    0.7), failed at 1096.  Run from 1000 to 1100, grid step 50:

    * OPS(50) = 600 / 50 = 12, OPS(100) = 1800 / 100 = 18 = the score;
    * best accuracy 0.75 → regulated = 18 × (−ln 0.25);
    * valid: imagenet, error 0.25 ≤ 0.3, fp16, bayesian+tpe;
    * peaks 100 + 300 = 400 OPS → efficiency 18 / 400 = 4.5 %;
    * time (active axis): group 0 searches 0–1, sets up 1–5, trains 5–30
      and 40–70, so idle 30–40 and 70–100 = 40 s; group 1 searches 0–2,
      sets up 2–10, trains 10–95, idle 95–100 = 5 s → idle 45 s, search 3 s,
      set-up 12 s, epochs 140 s (compute 20 + 25 + 80 = 125, evaluation
      3 + 4 + 4 = 11, data wait 1 + 0 + 0.5 = 1.5, other 2.5) of 200 group-seconds.
    """
    e1 = epoch(0, 0, 1, 1005, 1030, 600, 0.5, compute=20, evaluation=3, data_wait=1, compile_=0.75)
    e2 = epoch(0, 0, 2, 1040, 1070, 900, 0.75, compute=25, evaluation=4)
    e3 = epoch(1, 1, 1, 1010, 1095, 300, 0.7, compute=80, evaluation=4, data_wait=0.5)
    events = [
        start(1000),
        {"event": runlog.SYSTEM, "time": 1000.1, "ranks": 5, "nodes": 1},
        {"event": runlog.LAYOUT, "time": 1000.2, "world_size": 5, "node_count": 1,
         "groups": [{"index": 0, "node": 0, "host": "h0", "ranks": [1, 2], "leader": 1},
                    {"index": 1, "node": 0, "host": "h0", "ranks": [3, 4], "leader": 3}]},
        {"event": runlog.STAGING, "time": 1000.3, "seconds": 2.5, "bytes": 1_000_000, "host": "h0"},
    ]  # fmt: skip
    if peaks:
        events += [{"event": runlog.PEAK, "time": 1000.4, "group": g, "host": "h0", "precision": "fp16", "ranks": 2,
                    "ops_per_second": ops, "matrix_size": 512, "seconds": 3.0, "device": "CPU:0"}
                   for g, ops in ((0, 100.0), (1, 300.0))]  # fmt: skip
    events += [proposed(0, 0, 1001, 1.0), proposed(1, 1, 1002, 2.0), e1]
    if monitor:
        events += [{"event": runlog.MONITOR, "time": t, "group": 0, "host": "h0", "node": 0, "source": "cpu",
                    "devices": [{"index": 0, "name": "cpu", "utilization": u, "memory_used": 2**30,
                                 "memory_total": 8 * 2**30}]}
                   for t, u in ((1020, 50.0), (1050, 90.0), (1080, 70.0))]  # fmt: skip
    events += [
        e2, model_done(0, 0, 1071, 0.75, [e1, e2]), e3,
        {"event": runlog.MODEL_FAILED, "time": 1096, "task": 1, "group": 1, "model": 1, "rank": 3, "host": "h0",
         "reason": "ResourceExhaustedError: OOM\nmore detail", "traceback": "Traceback ..."},
        {"event": runlog.RUN_STOP, "time": 1100, "reason": "time limit", "discarded_tasks": [], "segment": 1},
    ]  # fmt: skip
    return write_log(run_dir, events, tail)


def scaled_run(run_dir: Path, groups: int, ops_per_group: int, models_per_group: int = 1) -> Path:
    """``groups`` groups that each complete ``ops_per_group`` operations in one epoch per model, in 100 s."""
    events = [
        start(0, score_step=100.0),
        {"event": runlog.SYSTEM, "time": 0.1, "ranks": 1 + 2 * groups, "nodes": groups},
        {"event": runlog.LAYOUT, "time": 0.2, "world_size": 1 + 2 * groups,
         "groups": [{"index": g, "host": f"n{g}", "ranks": [1 + 2 * g, 2 + 2 * g]} for g in range(groups)]},
    ]  # fmt: skip
    for g in range(groups):
        for m in range(models_per_group):
            task = g * models_per_group + m
            share = ops_per_group // models_per_group
            e = epoch(task, g, 1, 10 + m, 20 + m, share, 0.5)
            events += [proposed(task, g, 5 + m, 1.0), e, model_done(task, g, 21 + m, 0.5, [e])]
    events.append({"event": runlog.RUN_STOP, "time": 100, "reason": "time limit"})
    return write_log(run_dir, events)
