"""The trainer's operations per second against plain Keras ``model.fit`` (goal ≥ 1.05×).

ResNet-50 at 32×32×3, 10 classes, batch 64, fp32, SGD with momentum, on
synthetic data, one process (a Horovod group of one).  Each contender runs
two epochs of the same number of steps; the second epoch is measured (the
first pays for tracing/compilation, reported separately).  Operations are the
analytic count of the training samples and updates of the measured epoch.
"""

from __future__ import annotations

import time

import keras
import numpy as np
from mpi4py import MPI

from aiperf_mpi.data.sources import synthetic_source
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.graph.seeds import resnet50
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.search.hpo import HParams
from aiperf_mpi.train.keras_model import build_keras_model
from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

BATCH = 64
STEPS = 6


def run() -> str:
    graph = resnet50(32, 3, 10)
    ops_per_epoch = epoch_ops(count_ops(graph), STEPS * BATCH, 0, BATCH)
    train_ops = ops_per_epoch.train + ops_per_epoch.update
    source = synthetic_source(32, 3, 10, train=STEPS * BATCH, validation=BATCH)
    rows = []
    with horovod_on(MPI.COMM_WORLD) as hvd:
        for label, xla in (("trainer, default (XLA)", True), ("trainer, --no-xla (tf.function)", False)):
            trainer = GroupTrainer(hvd, MPI.COMM_WORLD, source, TrainConfig(max_epochs=2, patience=5, xla=xla))
            epochs = trainer.train(graph, HParams(BATCH, 3)).epochs
            first, second = epochs[0], epochs[1]
            rows.append((label, first.data_wait + first.compute, second.data_wait + second.compute))

    images, labels = source.shard("train", 0, 1)
    x = images.astype(np.float32) / 127.5 - 1.0
    model = build_keras_model(graph)
    model.compile(optimizer=keras.optimizers.SGD(0.1 * BATCH / 256, momentum=0.9),
                  loss="sparse_categorical_crossentropy")  # fmt: skip
    times = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(x, labels, batch_size=BATCH, epochs=2, shuffle=True, verbose=0, callbacks=[Timer()])
    rows.append(("Keras model.fit (jit_compile='auto')", times[0], times[1]))

    fit_rate = train_ops / rows[-1][2]
    table = ["| contender | first epoch (tracing) | measured epoch | ops/s | vs model.fit |", "|---|---|---|---|---|"]
    for label, first, second in rows:
        rate = train_ops / second
        table.append(f"| {label} | {first:.1f} s | {second:.1f} s | {rate / 1e9:.2f} G | {rate / fit_rate:.2f}× |")
    ratio = (train_ops / rows[0][2]) / fit_rate
    return "\n".join(
        [
            *table,
            "",
            f"ResNet-50 32×32, 10 classes, batch {BATCH}, fp32, {STEPS} steps per epoch "
            f"({train_ops / 1e12:.2f} T analytic operations per epoch), one process, synthetic data.",
            "",
            f"Goal: the default trainer ≥ 1.05× model.fit — measured {ratio:.2f}× "
            f"({'meets' if ratio >= 1.05 else 'MISSES'}).",
        ]
    )
