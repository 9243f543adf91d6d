"""A synthetic event log as a long run on a large machine would leave it, for the report's tests and benchmark.

64 groups on 32 nodes (8 GPUs each) by default, a day of active time, every
model's ``model_done`` record carrying its graph (the tiny seed for most, a
ResNet-50-sized one for every seventh, as the real records do) and its full
epoch list, failures, staging, peak probes and monitor samples of every node
every 2 minutes.  ``tests/unit/test_analysis.py`` writes a small one;
``benchmarks/report.py`` writes the full size and times the report on it.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

from aiperf_mpi.graph.model import from_json, to_json
from aiperf_mpi.graph.ops import count_ops
from aiperf_mpi.graph.seeds import resnet50, tiny_resnet
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import segment_graph_file

MODELS = 10_000
EPOCHS = 500_000
GROUPS = 64
NODES = 32
GPUS_PER_NODE = 8
MONITOR_INTERVAL = 120.0
FAILED_SHARE = 0.02
RESNET_EVERY = 7
START = 1_800_000_000.0
TRAIN_SAMPLES = 50_000
VALIDATION_SAMPLES = 10_000


def _line(record: dict) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def _epochs_per_model(rng: random.Random, models: int, epochs: int) -> list[int]:
    """Between 1 and 99 epochs per model (early stopping), summing to exactly ``epochs``."""
    if not models <= epochs <= 99 * models:
        raise ValueError(f"{epochs} epochs cannot be spread over {models} models at 1 to 99 each")
    counts = [rng.randint(1, 99) for _ in range(models)]
    diff = epochs - sum(counts)
    while diff:
        index = rng.randrange(models)
        change = min(diff, 99 - counts[index]) if diff > 0 else -min(-diff, counts[index] - 1)
        counts[index] += change
        diff -= change
    return counts


def _group_events(group: int, tasks: list[tuple[int, int]], graphs: dict, rng: random.Random,
                  t0: float) -> Iterator[tuple[float, int, str]]:  # fmt: skip
    """One group's proposals, epochs and results, in time order."""
    t = t0
    for task, epochs in tasks:
        kind = "resnet" if task % RESNET_EVERY == 0 else "tiny"
        graph, counts, offset = graphs[kind]
        search = rng.uniform(1.0, 6.0)
        t += search
        hparams = {"batch_size": rng.choice([64, 128, 256]), "kernel_size": rng.choice([3, 5, 7])}
        yield t, task, _line({"event": runlog.MODEL_PROPOSED, "time": t, "task": task, "group": group,
                              "parent": task - GROUPS if task >= GROUPS else None, "hparams": hparams,
                              "description": "deeper" if task % 2 else "wider",
                              "graph_file": segment_graph_file(1), "graph_offset": offset,
                              "graph_bytes": len(graph.encode("utf-8")),
                              "search": {"strategy": "bayesian", "search_seconds": search}})  # fmt: skip
        t += rng.uniform(2.0, 5.0)  # set-up: build, transfer, compile
        final = 0.76 * (1.0 - math.exp(-3.0 * task / MODELS)) + rng.uniform(-0.05, 0.02)
        steps = TRAIN_SAMPLES // (hparams["batch_size"] * 4)
        ops_train = TRAIN_SAMPLES * (counts.forward_train + counts.backward)
        ops_update = steps * counts.update
        ops_validation = VALIDATION_SAMPLES * counts.forward_eval
        records = []
        for number in range(1, epochs + 1):
            start = t
            compute, evaluation, wait = rng.uniform(7.0, 11.0), rng.uniform(0.8, 1.5), rng.uniform(0.0, 0.3)
            end = start + compute + evaluation + wait + 0.05
            t = end + 0.02
            epoch = {
                "epoch": number, "train_loss": 4.0 * math.exp(-number / 20), "val_accuracy":
                max(0.0, final * (1.0 - math.exp(-number / 8.0))), "start": start, "end": end,
                "ops": ops_train + ops_update + ops_validation, "ops_train": ops_train, "ops_update": ops_update,
                "ops_validation": ops_validation, "steps": steps, "train_samples": TRAIN_SAMPLES,
                "validation_samples": VALIDATION_SAMPLES, "data_wait": wait, "compute": compute,
                "evaluation": evaluation, "learning_rate": 0.1,
            }  # fmt: skip
            records.append(epoch)
            yield end + 0.01, task, _line({"event": runlog.EPOCH, "time": end + 0.01, "task": task, "group": group,
                                           **epoch})  # fmt: skip
        t += 0.1
        if rng.random() < FAILED_SHARE:
            yield t, task, _line({"event": runlog.MODEL_FAILED, "time": t, "task": task, "group": group,
                                  "model": task, "rank": group * 4 + 1, "host": f"node{group // 2:03d}",
                                  "reason": "ResourceExhaustedError: OOM when allocating tensor",
                                  "traceback": "Traceback (most recent call last):\n  ...\n" * 5})  # fmt: skip
            continue
        accuracy = max(e["val_accuracy"] for e in records)
        model = {
            "id": task, "parent": task - GROUPS if task >= GROUPS else None, "graph": graph, "status": "trained",
            "hparams": hparams, "epochs": records, "accuracy": accuracy, "predicted_accuracy": accuracy,
            "ops": {"total": sum(e["ops"] for e in records), "forward_per_sample": counts.forward_eval,
                    "backward_per_sample": counts.backward, "update_per_step": counts.update,
                    "params": counts.params},
            "timings": {"train": t - records[0]["start"], "fresh_layers": 0, "search": search, "task": task,
                        "group": group, "stop": "patience"},
            "description": "deeper" if task % 2 else "wider", "weights": f"weights/task-{task}.npz",
        }  # fmt: skip
        yield t, task, _line({"event": runlog.MODEL_DONE, "time": t, "model": model, "task": task, "group": group})


def _monitor_events(node: int, t0: float, t1: float, rng: random.Random) -> Iterator[tuple[float, int, str]]:
    t = t0 + MONITOR_INTERVAL
    while t < t1:
        devices = [{"index": i, "name": "NVIDIA H100", "utilization": rng.uniform(60, 100),
                    "memory_used": rng.randint(20, 70) * 2**30, "memory_total": 80 * 2**30}
                   for i in range(GPUS_PER_NODE)]  # fmt: skip
        yield t, -1, _line({"event": runlog.MONITOR, "time": t, "group": node * 2, "host": f"node{node:03d}",
                            "node": node, "source": "nvml", "devices": devices})  # fmt: skip
        t += MONITOR_INTERVAL


def write_synthetic_log(run_dir: Path, models: int = MODELS, epochs: int = EPOCHS, groups: int = GROUPS,
                        seed: int = 0) -> dict:  # fmt: skip
    """Write ``run_dir/events.jsonl``; return what it holds (counts, bytes, active time)."""
    rng = random.Random(seed)
    nodes = max(1, groups // 2)
    graphs = {}  # every task placed at one of two lines of segment 1's graphs file (not written: a log to read,
    # not one to verify)
    offset = 0
    for kind, graph in (("tiny", tiny_resnet(32, 3, 10)), ("resnet", resnet50(224, 3, 1000))):
        text = to_json(graph)
        graphs[kind] = (text, count_ops(from_json(text)), offset)
        offset += len(text.encode("utf-8")) + 1
    per_model = _epochs_per_model(rng, models, epochs)
    assignment: list[list[tuple[int, int]]] = [[] for _ in range(groups)]
    for task, count in enumerate(per_model):
        assignment[task % groups].append((task, count))
    t0 = START + 60.0
    config = {"time_limit": 90_000.0, "dataset": "imagenet", "precision": "fp16", "score_step": 360.0,
              "search": "bayesian", "hpo": "tpe", "seed_model": "resnet50", "monitor_interval": MONITOR_INTERVAL,
              "peak_probe": True, "peak_seconds": 3.0}  # fmt: skip
    ranks_per_group = GPUS_PER_NODE // 2
    layout_groups = [
        {"index": g, "node": g // 2, "host": f"node{g // 2:03d}", "leader": 1 + g * ranks_per_group,
         "ranks": list(range(1 + g * ranks_per_group, 1 + (g + 1) * ranks_per_group)), "horovod_size": ranks_per_group}
        for g in range(groups)
    ]  # fmt: skip
    layout = {"world_size": 1 + groups * ranks_per_group, "master_rank": 0, "node_count": nodes,
              "groups": layout_groups}  # fmt: skip
    head = [
        {"event": runlog.RUN_START, "time": START, "segment": 1, "resumed": False, "config": config},
        {"event": runlog.SYSTEM, "time": START + 0.1, "ranks": layout["world_size"], "nodes": nodes},
        {"event": runlog.LAYOUT, "time": START + 0.2, **layout},
    ]
    head += [{"event": runlog.STAGING, "time": START + 30.0, "seconds": rng.uniform(20, 30), "bytes": 150 * 10**9,
              "host": f"node{n:03d}"} for n in range(nodes)]  # fmt: skip
    head += [{"event": runlog.PEAK, "time": START + 50.0, "group": g, "host": f"node{g // 2:03d}", "precision": "fp16",
              "ranks": ranks_per_group, "ops_per_second": ranks_per_group * 7.0e14, "matrix_size": 8192,
              "seconds": 3.0, "device": "GPU:0"} for g in range(groups)]  # fmt: skip
    streams = [_group_events(g, assignment[g], graphs, random.Random(seed * 1000 + g), t0) for g in range(groups)]
    # the run's length is known only after the groups' streams: the busiest group's expected time bounds it
    busiest = max(sum(count for _, count in tasks) for tasks in assignment)
    horizon = t0 + 10.4 * busiest + 7.1 * max(len(tasks) for tasks in assignment)
    streams += [_monitor_events(n, START, horizon, random.Random(seed * 7 + n)) for n in range(nodes)]
    path = Path(run_dir) / runlog.EVENTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    last = START
    counts = {"epochs": 0, "models": 0, "monitor": 0}
    with open(path, "w", encoding="utf-8") as handle:
        for event in head:
            handle.write(_line(event))
        for t, _, line in heapq.merge(*streams):
            handle.write(line)
            last = max(last, t)
            if line.startswith('{"event":"epoch"'):
                counts["epochs"] += 1
            elif line.startswith('{"event":"monitor"'):
                counts["monitor"] += 1
            elif line.startswith(('{"event":"model_done"', '{"event":"model_failed"')):
                counts["models"] += 1
        handle.write(_line({"event": runlog.RUN_STOP, "time": last + 5.0, "reason": "time limit", "segment": 1}))
    return {**counts, "bytes": path.stat().st_size, "active": last + 5.0 - START, "groups": groups, "nodes": nodes}
