"""XLA against the plain ``tf.function`` (oneDNN) path, per shape, as a ratio to the same process's peak.

The training default (``--xla auto``: on for GPUs, off for CPUs) stands on
this table: re-run it when TensorFlow, the trainer or the input pipeline
changes.  One process (a Horovod group of one), synthetic data, fp32,
ResNet-50.  Each contender trains two epochs of the same steps; the second
is measured (the first pays tracing and compilation, shown apart).  The
peak is the project's own matmul probe (``train/peak.py``) in the same
process, measured before and after the contenders; the lower of the two is
the denominator (the conservative ratio).
"""

from __future__ import annotations

import os

from mpi4py import MPI

from aiperf_mpi.data.sources import synthetic_source
from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import resnet50
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.search.hpo import HParams
from aiperf_mpi.train.peak import measure_peak
from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

SHAPES = ((32, 64, 12), (64, 64, 6), (224, 32, 2))
"""(image size, batch, steps per epoch); AIPERF_BENCH_XLA_SHAPES='32:64:12,64:64:6' overrides"""


def _shapes() -> tuple[tuple[int, int, int], ...]:
    text = os.environ.get("AIPERF_BENCH_XLA_SHAPES")
    if not text:
        return SHAPES
    return tuple(tuple(int(x) for x in item.split(":")) for item in text.split(","))  # type: ignore[misc]


def run() -> str:
    rows = []
    with horovod_on(MPI.COMM_WORLD) as hvd:
        peaks = [measure_peak("fp32", 5.0)["ops_per_second"]]
        for size, batch, steps in _shapes():
            graph = resnet50(size, 3, 10)
            counts = epoch_ops(count_ops(graph), steps * batch, 0, batch)
            train_ops = counts.train + counts.update
            source = synthetic_source(size, 3, 10, train=steps * batch, validation=batch)
            for label, xla in (("XLA (jit_compile)", True), ("tf.function (oneDNN)", False)):
                trainer = GroupTrainer(hvd, MPI.COMM_WORLD, source, TrainConfig(max_epochs=2, patience=5, xla=xla))
                first, second = trainer.train(graph, HParams(batch, DEFAULT_KERNEL_SIZE)).epochs[:2]
                rate = train_ops / (second.data_wait + second.compute)
                rows.append((size, batch, steps, label, first.data_wait + first.compute, rate))
        peaks.append(measure_peak("fp32", 5.0)["ops_per_second"])
    peak = min(peaks)
    table = ["| shape | batch | steps | path | first epoch | measured epoch | ratio to peak | XLA ÷ tf.function |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for index, (size, batch, steps, label, first, rate) in enumerate(rows):
        pair = rows[index - index % 2: index - index % 2 + 2]
        versus = f"{pair[0][5] / pair[1][5]:.2f}" if index % 2 == 0 else ""
        table.append(f"| ResNet-50 {size}² | {batch} | {steps} | {label} | {first:.1f} s | {rate / 1e9:.1f} G ops/s | "
                     f"{rate / peak:.3f} | {versus} |")  # fmt: skip
    return "\n".join([
        *table,
        "",
        f"Peak (fp32 matmul probe, same process): {peaks[0] / 1e9:.1f} G ops/s before, {peaks[1] / 1e9:.1f} after; "
        f"ratios use {peak / 1e9:.1f}. TensorFlow's threads: default (all cores).",
    ])  # fmt: skip
