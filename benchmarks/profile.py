"""Where a ResNet-50 training step's time goes on CPU, by TensorFlow op type (fp32, one process).

Why the whole model stays below the efficiency goals of issue 13 when its
large convolutions run at or above the matmul peak (bench ``layers``): the
trainer's own step (:mod:`aiperf_mpi.train.trainer`'s maths: forward,
gradients, SGD with momentum) runs a few steps under TensorFlow's profiler,
and the host plane's op events are summed by op type.  Ops run on several
threads at once, so their seconds add up to more than the wall time: the
table gives each group's share of all op seconds, which is what the step
spends its cores on.
"""

from __future__ import annotations

import collections
import glob
import tempfile
import time

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from benchmarks.resnet_step import resnet50_step

SHAPES = ((32, 64, 10), (224, 32, 3))
"""(image size, batch, profiled steps)"""
GROUPS = {
    "convolution (forward, backward data, backward filter)": (
        "_MklNativeConv2D", "_MklNativeConv2DBackpropInput", "_MklNativeConv2DBackpropFilter", "Conv2D",
        "Conv2DBackpropInput", "Conv2DBackpropFilter", "_MklNativeFusedConv2D", "_FusedConv2D"),
    "batch normalisation's arithmetic (moments, scale, their gradients)": (
        "Mul", "Sum", "Mean", "Tile", "SquaredDifference", "Sub", "Rsqrt", "RsqrtGrad", "RealDiv", "Square",
        "FusedBatchNormV3", "FusedBatchNormGradV3", "_MklNativeFusedBatchNormV3", "_MklNativeFusedBatchNormGradV3"),
    "ReLU, residual additions, gradient sums": ("Relu", "ReluGrad", "AddV2", "AddN", "Add"),
    "optimizer and variables": ("AssignAddVariableOp", "AssignVariableOp", "ReadVariableOp", "AssignSubVariableOp",
                                "ResourceApplyKerasMomentum", "AssignAdd", "Assign"),
}  # fmt: skip
CONTAINERS = ("Process", "Run", "__inference", "ExecutorState", "FunctionRun")
"""host events that wrap others (the step, the executor): not ops"""


def _op_seconds(size: int, batch: int, steps: int) -> tuple[dict[str, float], float]:
    """Op type → seconds over ``steps`` profiled steps (after two unprofiled), and their wall time."""
    step, x, y = resnet50_step(size, batch)
    for _ in range(2):
        float(step(x, y))
    directory = tempfile.mkdtemp(prefix="aiperf-profile-")
    tf.profiler.experimental.start(directory)
    started = time.perf_counter()
    for _ in range(steps):
        float(step(x, y))
    wall = time.perf_counter() - started
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    [path] = glob.glob(f"{directory}/**/*.xplane.pb", recursive=True)
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    seconds: collections.Counter[str] = collections.Counter()
    for plane in space.planes:
        if "host" not in plane.name.lower():
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name:
                    continue
                op_type = name.rsplit(":", 1)[1].strip()
                if op_type and not any(op_type.startswith(c) for c in CONTAINERS):
                    seconds[op_type] += event.duration_ps / 1e12
    return dict(seconds), wall


def run() -> str:
    rows = []
    notes = []
    for size, batch, steps in SHAPES:
        seconds, wall = _op_seconds(size, batch, steps)
        total = sum(seconds.values())
        grouped = {group: sum(seconds.get(t, 0.0) for t in types) for group, types in GROUPS.items()}
        grouped["other"] = total - sum(grouped.values())
        for group, value in grouped.items():
            rows.append(f"| ResNet-50 {size}² | {batch} | {group} | {value / steps:.3f} | {value / total:.1%} |")
        top = sorted(seconds.items(), key=lambda item: -item[1])[:8]
        notes.append(f"- {size}², batch {batch}: {wall / steps:.3f} s a step (wall), {total / steps:.3f} op-seconds "
                     f"a step; largest op types: " + ", ".join(f"`{t}` {s / total:.1%}" for t, s in top))  # fmt: skip
    return "\n".join([
        "| shape | batch | ops | op-seconds per step | share of op time |",
        "|---|---|---|---|---|",
        *rows,
        "",
        *notes,
        "",
        "Op time is summed over TensorFlow's threads (default: all cores), from the profiler's host plane.",
    ])  # fmt: skip
