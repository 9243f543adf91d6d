"""Training scenarios on one group (all ranks but none excluded: this script runs the group alone).

Usage: train_group.py MODE[+MODE...] [H5]
Several modes run one after the other in one launch (TensorFlow and Horovod start once: on CI's 2 cores a
launch costs ≈ 15 s before the first step); each prints its own RESULT lines, tagged with its mode.
  identical        three epochs of the tiny seed on the HDF5 file, tf.function; prints each epoch's loss and
                   a per-rank checksum of all weights
  identical-xla    the same with the step compiled by XLA (the GPU default path; CPUs train without it)
  digits           the tiny seed on the embedded digits, 1 rank, DIGITS_EPOCHS epochs; then a morphed child
                   inherits the weights and its accuracy before training is printed
  precision        two epochs at fp16 (with loss scaling) and at bf16
  nan              a trial with a huge learning rate (NaN) must fail on every rank, then a
                   normal trial must succeed on the same group, then a child whose parent's
                   weights fit no layer trains from scratch
  deadline         a trial whose deadline (first rank only) passed is given up a few steps into
                   its first epoch on every rank; then one with an hour left trains every epoch
"""
import hashlib
import json
import random
import sys
import time

import numpy as np
from mpi4py import MPI

from aiperf_mpi.data import open_source
from aiperf_mpi.graph.morph import compose, deeper, wider
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.mpi.guard import run_guarded
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.search.hpo import HParams
from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig, TrialFailed


def checksum(model) -> str:
    digest = hashlib.sha1()
    for variable in model.variables:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


DIGITS_EPOCHS = 6


def rank_main(comm: MPI.Comm, modes: str, args: list[str]) -> int:
    with horovod_on(comm) as hvd:
        for mode in modes.split("+"):
            status = run_mode(comm, hvd, mode, args)
            if status:
                return status
    return 0


def run_mode(comm: MPI.Comm, hvd, mode: str, args: list[str]) -> int:
    """One scenario on the group, its results printed as RESULT lines carrying ``mode``."""

    def emit(**data) -> None:
        print("RESULT " + json.dumps({"mode": mode, **data}), flush=True)

    if mode in ("identical", "identical-xla"):
        source = open_source("hdf5", args[0])
        xla = mode == "identical-xla"
        trainer = GroupTrainer(hvd, comm, source, TrainConfig(max_epochs=3, patience=5, seed=1, xla=xla))
        captured = {}
        original = trainer._epoch

        def epoch_with_checksum(epoch, model, *rest, **options):
            result = original(epoch, model, *rest, **options)
            captured.setdefault("sums", []).append(checksum(model))
            return result

        trainer._epoch = epoch_with_checksum
        result = trainer.train(tiny_resnet(), HParams(16, 3), max_epochs=3)
        emit(rank=comm.Get_rank(), losses=[e.train_loss for e in result.epochs], sums=captured["sums"],
             ops=[e.ops for e in result.epochs], samples=[e.train_samples for e in result.epochs],
             compile=[e.compile for e in result.epochs], compute=[e.compute for e in result.epochs])  # fmt: skip
    elif mode == "digits":
        source = open_source("digits")
        config = TrainConfig(max_epochs=DIGITS_EPOCHS, patience=10, seed=0, base_lr=1.0)
        trainer = GroupTrainer(hvd, comm, source, config)
        parent_graph = tiny_resnet()
        parent = trainer.train(parent_graph, HParams(32, 3))
        morphed = compose(deeper(parent_graph, "b1_out"), wider(deeper(parent_graph, "b1_out").graph,
                                                                "b2_conv1", 8, random.Random(0)))  # fmt: skip
        child = trainer.train(morphed.graph, HParams(32, 3), parent=(parent.weights, morphed.plan),
                              max_epochs=1, evaluate_first=True)  # fmt: skip
        kernel5 = trainer.train(parent_graph, HParams(32, 5), parent=(parent.weights, []), max_epochs=1,
                                evaluate_first=True)  # fmt: skip
        emit(parent=[e.val_accuracy for e in parent.epochs], child=child.initial_accuracy,
             kernel5=kernel5.initial_accuracy, fresh=child.fresh_layers)  # fmt: skip
    elif mode == "precision":
        source = open_source("hdf5", args[0])
        losses = {}
        for precision in ("fp16", "bf16"):
            trainer = GroupTrainer(hvd, comm, source, TrainConfig(max_epochs=2, seed=3, precision=precision))
            losses[precision] = [e.train_loss for e in trainer.train(tiny_resnet(), HParams(16, 3)).epochs]
        emit(losses=losses)
    elif mode == "nan":
        source = open_source("hdf5", args[0])
        failing = GroupTrainer(hvd, comm, source, TrainConfig(max_epochs=2, base_lr=1e12, seed=2))
        try:
            failing.train(tiny_resnet(), HParams(16, 3))
            emit(rank=comm.Get_rank(), failed=None)
            return 1
        except TrialFailed as failed:
            caught = failed.reason
        healthy = GroupTrainer(hvd, comm, source, TrainConfig(max_epochs=1, seed=2))
        result = healthy.train(tiny_resnet(), HParams(16, 3))
        # a parent whose arrays fit no layer (first rank only, as the runner reads it): trained from scratch
        misfit = {name: [np.zeros(3, np.float32)] for name in result.weights} if comm.Get_rank() == 0 else None
        child = healthy.train(tiny_resnet(), HParams(16, 3), parent=(misfit, []) if misfit else None)
        emit(rank=comm.Get_rank(), failed=caught, after=result.epochs[0].train_loss,
             misfit=[len(child.epochs), len(child.fresh_layers), len(result.weights or {})])  # fmt: skip
    elif mode == "deadline":
        source = open_source("hdf5", args[0])
        trainer = GroupTrainer(hvd, comm, source, TrainConfig(max_epochs=2, seed=4))
        first = comm.Get_rank() == 0  # the deadline is on the leader's clock: only it reads it
        late = trainer.train(tiny_resnet(), HParams(16, 3), deadline=time.monotonic() if first else None)
        timely = trainer.train(tiny_resnet(), HParams(16, 3), deadline=time.monotonic() + 3600 if first else None)
        emit(rank=comm.Get_rank(), late=[len(late.epochs), late.stop_reason],
             timely=[len(timely.epochs), timely.stop_reason])  # fmt: skip
    else:
        raise ValueError(f"train_group.py: no mode {mode!r}")
    return 0


if __name__ == "__main__":
    world = MPI.COMM_WORLD
    sys.exit(run_guarded(world, lambda: rank_main(world, sys.argv[1], sys.argv[2:])))
