"""The trainer's operations per second against plain Keras ``model.fit``, like with like (goal ≥ 1.05×).

ResNet-50 at 32×32×3, 10 classes, batch 64, fp32, SGD with momentum, on
synthetic data, one process (a Horovod group of one), TensorFlow's default
threads (the project's default for one rank on a node).  Two pairs, each
compiled alike: the trainer's default ``tf.function`` step against
``model.fit(jit_compile=False)``, and the trainer with ``--xla on`` against
``model.fit(jit_compile=True)``.  Within a pair the two take turns epoch by
epoch (the ``model.fit`` epoch runs from the trainer's epoch callback), so
both see the same load on a shared machine; the first epoch of each pays for
tracing/compilation and is shown apart, the next :data:`ROUNDS` are measured
and their median is the figure.  Operations are the analytic count of the
training samples and updates of one epoch.
"""

from __future__ import annotations

import statistics
import time

import keras
import numpy as np
from mpi4py import MPI

from aiperf_mpi.data.sources import synthetic_source
from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import resnet50
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.search.hpo import HParams
from aiperf_mpi.train.keras_model import build_keras_model
from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

BATCH = 64
STEPS = 16
ROUNDS = 3
"""measured epochs of each contender, after the one that traces"""


def run() -> str:
    graph = resnet50(32, 3, 10)
    ops_per_epoch = epoch_ops(count_ops(graph), STEPS * BATCH, 0, BATCH)
    train_ops = ops_per_epoch.train + ops_per_epoch.update
    source = synthetic_source(32, 3, 10, train=STEPS * BATCH, validation=BATCH)
    images, labels = source.shard("train", 0, 1)
    x = images.astype(np.float32) / 127.5 - 1.0
    rows = []
    with horovod_on(MPI.COMM_WORLD) as hvd:
        for xla in (False, True):
            model = build_keras_model(graph)
            model.compile(optimizer=keras.optimizers.SGD(0.1 * BATCH / 256, momentum=0.9),
                          loss="sparse_categorical_crossentropy", jit_compile=xla)  # fmt: skip
            fit_times: list[float] = []

            def fit_epoch(_result, model=model, fit_times=fit_times) -> None:
                started = time.perf_counter()
                model.fit(x, labels, batch_size=BATCH, epochs=1, shuffle=True, verbose=0)
                fit_times.append(time.perf_counter() - started)

            trainer = GroupTrainer(hvd, MPI.COMM_WORLD, source,
                                   TrainConfig(max_epochs=1 + ROUNDS, patience=ROUNDS + 2, xla=xla))  # fmt: skip
            epochs = trainer.train(graph, HParams(BATCH, DEFAULT_KERNEL_SIZE), on_epoch=fit_epoch).epochs
            times = [e.data_wait + e.compute for e in epochs]
            first = epochs[0].data_wait + epochs[0].compute + epochs[0].compile
            label = "trainer, --xla on (XLA)" if xla else "trainer, default (tf.function)"
            rows.append((label, first, times[1:]))
            rows.append((f"Keras model.fit (jit_compile={xla})", fit_times[0], fit_times[1:]))

    table = ["| contender | first epoch (tracing) | measured epochs (median, min–max) | ops/s | "
             "vs model.fit compiled alike |", "|---|---|---|---|---|"]  # fmt: skip
    ratios = {}
    for index, (label, first, measured) in enumerate(rows):
        seconds = statistics.median(measured)
        versus = ""
        if index % 2 == 0:
            ratios[label] = statistics.median(rows[index + 1][2]) / seconds
            versus = f"{ratios[label]:.2f}×"
        table.append(f"| {label} | {first:.1f} s | {seconds:.2f} s ({min(measured):.2f}–{max(measured):.2f}) | "
                     f"{train_ops / seconds / 1e9:.2f} G | {versus} |")  # fmt: skip
    default = ratios["trainer, default (tf.function)"]
    xla_ratio = ratios["trainer, --xla on (XLA)"]
    plain_fit = statistics.median(rows[1][2])
    xla_fit = statistics.median(rows[3][2])
    return "\n".join([
        *table,
        "",
        f"ResNet-50 32×32, 10 classes, batch {BATCH}, fp32, {STEPS} steps per epoch "
        f"({train_ops / 1e12:.2f} T analytic operations per epoch), one process, synthetic data; {ROUNDS} measured "
        "epochs each, taken in turns with the other of its pair. The trainer's time is its steps (data wait + "
        "compute); model.fit's is the whole `fit` call of one epoch (no validation).",
        "",
        f"Goal: the default trainer ≥ 1.05× model.fit compiled alike (jit_compile=False) — measured {default:.2f}× "
        f"({'meets' if default >= 1.05 else 'MISSES'}); with XLA on both sides {xla_ratio:.2f}×. "
        f"XLA ÷ no XLA: model.fit {plain_fit / xla_fit:.2f}×, the trainer "
        f"{statistics.median(rows[0][2]) / statistics.median(rows[2][2]):.2f}×.",
    ])  # fmt: skip
