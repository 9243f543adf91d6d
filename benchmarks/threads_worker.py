"""One contender of ``benchmarks.threads``: a process, or an ``mpirun`` group of them, that trains in turns.

``python -m benchmarks.threads_worker train TURNS NAME --intra N --inter M --batch 64 --samples 256 --epochs 5``
sets TensorFlow's thread pools (0 = TensorFlow's default) before TensorFlow
runs anything, starts Horovod on ``COMM_WORLD`` and trains ResNet-50 32² on
synthetic data with the project's :class:`GroupTrainer` (``tf.function``
path, XLA off).  Before each epoch every rank waits for its turn — the file
``TURNS/NAME.<epoch>.go``, written by the bench — having said so in
``TURNS/NAME.<rank>.<epoch>.wait``; after each epoch rank 0 writes the epoch's
analytic training operations and step seconds (data wait + compute, tracing
excluded) to ``TURNS/NAME.<epoch>.done``.  So the bench runs one contender's
epoch at a time and interleaves the contenders, epoch by epoch, while the
others are stopped (``SIGSTOP``: Horovod's background thread would
otherwise keep negotiating, and spinning in MPI, while they wait).  After training
every rank waits for ``TURNS/NAME.exit.go`` before it shuts Horovod down.

``python -m benchmarks.threads_worker idle OUT --seconds 8`` starts Horovod
and trains nothing: the CPU its ranks burn meanwhile (Horovod's background
thread negotiates with the other ranks every cycle) goes to ``OUT``.

``python -m benchmarks.threads_worker onednn OUT`` runs one fp32 and one bf16
matmul and convolution (forward and both backward passes) — with
``ONEDNN_VERBOSE=1`` set by the caller, oneDNN names on stdout the
implementation and ISA of each — and times one 3×3 convolution's training
step in NHWC against NCHW, writing the medians to ``OUT``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

POLL = 0.02
"""seconds between two looks for a turn file"""


def _threads(intra: int, inter: int) -> dict:
    import tensorflow as tf

    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    return {"intra": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter": tf.config.threading.get_inter_op_parallelism_threads()}  # fmt: skip


def _wait_turn(turns: Path, name: str, rank: int, turn: str) -> None:
    (turns / f"{name}.{rank}.{turn}.wait").write_text(str(os.getpid()))  # the bench stops and continues this pid
    go = turns / f"{name}.{turn}.go"
    while not go.exists():
        time.sleep(POLL)


def _cpu() -> float:
    """CPU seconds of this process so far, every thread (user + system)."""
    times = os.times()
    return times.user + times.system


def _write(path: Path, data: object) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data))
    partial.rename(path)  # the bench never reads half a file


def train(options: argparse.Namespace) -> None:
    threads = _threads(options.intra, options.inter)
    from mpi4py import MPI

    from aiperf_mpi.data.sources import synthetic_source
    from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE
    from aiperf_mpi.graph.seeds import resnet50
    from aiperf_mpi.mpi.horovod import horovod_on
    from aiperf_mpi.search.hpo import HParams
    from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    turns, name = Path(options.turns), options.name
    graph = resnet50(32, 3, 10)
    per_rank = max(options.samples, options.min_steps * options.batch)
    source = synthetic_source(32, 3, 10, train=per_rank * size, validation=size)
    config = TrainConfig(max_epochs=options.epochs, patience=options.epochs + 1, precision=options.precision)
    epoch_count = iter(range(1, options.epochs + 1))
    started: list[float] = []

    def should_stop() -> bool:
        _wait_turn(turns, name, rank, str(next(epoch_count)))
        started[:] = [_cpu(), time.perf_counter()]
        return False

    def on_epoch(epoch) -> None:
        cpu = comm.gather(_cpu() - started[0], root=0)  # every rank's CPU seconds in this epoch, all threads
        if rank == 0:
            _write(turns / f"{name}.{epoch.epoch}.done",
                   {"ops": epoch.ops_train + epoch.ops_update, "seconds": epoch.data_wait + epoch.compute,
                    "samples": epoch.train_samples, "data_wait": epoch.data_wait, "compile": epoch.compile,
                    "steps": epoch.steps, "threads": threads, "cpu": cpu,
                    "wall": time.perf_counter() - started[1]})  # fmt: skip

    with horovod_on(comm) as hvd:
        trainer = GroupTrainer(hvd, comm, source, config)
        trainer.train(graph, HParams(options.batch, DEFAULT_KERNEL_SIZE), on_epoch=on_epoch, should_stop=should_stop)
        _wait_turn(turns, name, rank, "exit")


def idle(options: argparse.Namespace) -> None:
    """CPU seconds per second of each rank while Horovod is up and nothing is trained, for ``--seconds``."""
    from mpi4py import MPI

    from aiperf_mpi.mpi.horovod import horovod_on

    comm = MPI.COMM_WORLD
    with horovod_on(comm):
        comm.Barrier()
        time.sleep(1.0)
        cpu, started = _cpu(), time.perf_counter()
        time.sleep(options.seconds)
        used = comm.gather((_cpu() - cpu) / (time.perf_counter() - started), root=0)
    if comm.Get_rank() == 0:
        _write(Path(options.turns), {"cores": used})


def onednn(options: argparse.Namespace) -> None:
    import tensorflow as tf

    def conv_step(x, w, data_format):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.nn.conv2d(x, w, 1, "SAME", data_format=data_format)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)  # needs the forward output: all three passes run
        return tape.gradient(loss, [x, w])

    for dtype in (tf.float32, tf.bfloat16):
        print(f"== probe {dtype.name}", flush=True)
        a = tf.cast(tf.random.uniform((1024, 1024)), dtype)
        tf.linalg.matmul(a, a)
        x = tf.cast(tf.random.uniform((64, 8, 8, 256)), dtype)
        w = tf.cast(tf.random.uniform((3, 3, 256, 256)), dtype)
        conv_step(x, w, "NHWC")
    layouts: dict[str, object] = {}
    x = tf.random.uniform((64, 8, 8, 256))
    w = tf.random.uniform((3, 3, 256, 256))
    for data_format, tensor in (("NHWC", x), ("NCHW", tf.transpose(x, (0, 3, 1, 2)))):
        print(f"== layout {data_format}", flush=True)
        step = tf.function(lambda t, f=data_format: conv_step(t, w, f))
        try:
            step(tensor)
            times = []
            for _ in range(9):
                started = time.perf_counter()
                float(tf.reduce_sum(step(tensor)[1]))
                times.append(time.perf_counter() - started)
            layouts[data_format] = sorted(times)[len(times) // 2]
        except Exception as exc:  # noqa: BLE001 - a layout the CPU kernels refuse is a result
            layouts[data_format] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    print("== end", flush=True)
    _write(Path(options.turns), {"layouts": layouts})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads_worker")
    parser.add_argument("mode", choices=("train", "idle", "onednn"))
    parser.add_argument("turns", help="train: the bench's turn directory; idle, onednn: the JSON file to write")
    parser.add_argument("name", nargs="?", default="contender")
    parser.add_argument("--intra", type=int, default=0)
    parser.add_argument("--inter", type=int, default=0)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=256, help="training samples per rank per epoch (at least)")
    parser.add_argument("--min-steps", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--seconds", type=float, default=8.0, help="idle: how long to watch")
    options = parser.parse_args(argv)
    {"train": train, "idle": idle, "onednn": onednn}[options.mode](options)


if __name__ == "__main__":
    main()
