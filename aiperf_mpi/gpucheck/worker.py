"""The GPU check's TensorFlow and Horovod side: one step per process, its result written as JSON.

Each step runs in a process of its own (under ``mpirun`` where it needs
Horovod) so that the check can stop it at its timeout without losing the
others, and so that a step's GPU memory is freed when it ends.  The steps
use the benchmark's own code: :func:`aiperf_mpi.train.peak.measure_peak`,
:class:`aiperf_mpi.train.trainer.GroupTrainer`, the device pinning and
:func:`aiperf_mpi.mpi.horovod.horovod_on`.

    python -m aiperf_mpi.gpucheck.worker devices --result FILE
    python -m aiperf_mpi.gpucheck.worker probe --index I --seconds S --result FILE
    mpirun -n 1 python -m aiperf_mpi.gpucheck.worker trainer --batch B --result FILE
    mpirun -n G python -m aiperf_mpi.gpucheck.worker allreduce --result FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from aiperf_mpi.gpucheck.plan import ALLREDUCE_SIZES, PROBE_ORDER, bus_bandwidth

TRAINER_STEPS = 20
"""training steps per epoch of the trainer step: a few seconds per epoch on a current GPU"""
TRAINER_EPOCHS = 4
"""the first traces and compiles (XLA); the median of the others is the figure"""
ALLREDUCE_REPEATS = 10


def _capability(tf, device) -> tuple[int, int]:
    details = tf.config.experimental.get_device_details(device)
    return tuple(details.get("compute_capability") or (0, 0))


def devices() -> dict:
    """The GPUs TensorFlow sees, their compute capability, and the CUDA/cuDNN TensorFlow was built with."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    gpus = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device)
        gpus.append({"index": index, "name": details.get("device_name", device.name),
                     "compute_capability": list(_capability(tf, device))})  # fmt: skip
    return {"tensorflow": tf.__version__, "cuda_version": build.get("cuda_version"),
            "cudnn_version": build.get("cudnn_version"), "gpus": gpus}  # fmt: skip


def probe(index: int, seconds: float) -> dict:
    """The benchmark's peak probe on GPU ``index`` at each precision."""
    from aiperf_mpi.train.devices import pin_device
    from aiperf_mpi.train.peak import measure_peak

    device = pin_device(index)
    result: dict = {"index": index, "device": device}
    for precision in PROBE_ORDER:
        measured = measure_peak(precision, seconds)
        result[precision] = {k: measured[k] for k in ("ops_per_second", "matrix_size", "products", "seconds")}
    return result


def trainer(batch: int) -> dict:
    """ResNet-50 at 224² on synthetic data, XLA, on GPU 0, at the precision a run's ``--precision auto`` takes there.

    The benchmark's own trainer (a Horovod group of one) at the benchmark's
    own choice of precision (:func:`~aiperf_mpi.config.resolve_precision`:
    bf16 from Ampere, fp16 on older tensor-core GPUs), so the figure is what a
    run gets per GPU; operations are the analytic count the score uses.
    """
    from mpi4py import MPI

    from aiperf_mpi.config import resolve_precision
    from aiperf_mpi.data.sources import synthetic_source
    from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE
    from aiperf_mpi.graph.seeds import resnet50
    from aiperf_mpi.mpi.horovod import horovod_on
    from aiperf_mpi.search.hpo import HParams
    from aiperf_mpi.train.devices import device_caps, pin_device
    from aiperf_mpi.train.trainer import GroupTrainer, TrainConfig

    device = pin_device(0)
    precision, _ = resolve_precision("auto", [device_caps()])
    source = synthetic_source(224, 3, 1000, train=TRAINER_STEPS * batch, validation=batch)
    with horovod_on(MPI.COMM_WORLD) as hvd:
        config = TrainConfig(max_epochs=TRAINER_EPOCHS, patience=TRAINER_EPOCHS + 1, precision=precision, xla=True)
        group = GroupTrainer(hvd, MPI.COMM_WORLD, source, config)
        epochs = group.train(resnet50(224, 3, 1000), HParams(batch, DEFAULT_KERNEL_SIZE)).epochs
    measured = epochs[1:]
    compute = statistics.median(e.compute for e in measured)
    ops = statistics.median((e.ops_train + e.ops_update) / e.compute for e in measured)
    return {
        "gpu": 0, "device": device, "precision": precision, "batch": batch, "xla": True,
        "images_per_second": statistics.median(e.train_samples / e.compute for e in measured),
        "ops_per_second": ops, "epoch_compute_seconds": compute,
        "xla_compile_seconds": epochs[0].compile, "epochs": len(epochs), "steps_per_epoch": epochs[0].steps,
    }  # fmt: skip


def allreduce(max_bytes: int = ALLREDUCE_SIZES[-1]) -> dict:
    """Horovod's all-reduce (NCCL, float32 sum) across every rank's GPU, at each of :data:`ALLREDUCE_SIZES`.

    Where there is no GPU (the project's tests) the tensors stay on the CPU and Horovod uses MPI:
    the same code, timed the same way.
    """
    from mpi4py import MPI

    from aiperf_mpi.mpi.horovod import horovod_on
    from aiperf_mpi.train.devices import pin_device

    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    device = pin_device(local)
    import tensorflow as tf

    sizes = []
    with horovod_on(comm) as hvd:
        if tf.config.list_logical_devices("GPU") and not hvd.nccl_built():
            raise RuntimeError("Horovod was built without NCCL: rebuild with `make install GPU=cuda`")
        with tf.device("GPU:0"):
            for nbytes in (b for b in ALLREDUCE_SIZES if b <= max_bytes):
                tensor = tf.ones((nbytes // 4,), tf.float32)
                for _ in range(3):  # warm-up: NCCL communicator, fusion buffer
                    float(hvd.allreduce(tensor, op=hvd.Sum)[0])
                comm.Barrier()
                started = time.perf_counter()
                for _ in range(ALLREDUCE_REPEATS):
                    reduced = hvd.allreduce(tensor, op=hvd.Sum)
                if float(reduced[0]) != hvd.size():  # waits for the last one, and checks the sum
                    raise RuntimeError(f"all-reduce of ones across {hvd.size()} ranks gave {float(reduced[0])}")
                seconds = comm.allreduce((time.perf_counter() - started) / ALLREDUCE_REPEATS, op=MPI.MAX)
                sizes.append({"bytes": nbytes, "seconds": seconds,
                              "bus_bandwidth": bus_bandwidth(nbytes, seconds, hvd.size())})  # fmt: skip
        ranks = hvd.size()
    return {"ranks": ranks, "device": device, "sizes": sizes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_mpi.gpucheck.worker")
    parser.add_argument("step", choices=("devices", "probe", "trainer", "allreduce"))
    parser.add_argument("--result", type=Path, required=True, help="JSON file for the step's result")
    parser.add_argument("--index", type=int, default=0, help="probe: the GPU")
    parser.add_argument("--seconds", type=float, default=2.0, help="probe: seconds per precision")
    parser.add_argument("--batch", type=int, default=128, help="trainer: per-GPU batch")
    parser.add_argument("--max-mib", type=int, default=ALLREDUCE_SIZES[-1] >> 20, help="allreduce: largest size")
    args = parser.parse_args(argv)
    if args.step == "devices":
        result = devices()
    elif args.step == "probe":
        result = probe(args.index, args.seconds)
    elif args.step == "trainer":
        result = trainer(args.batch)
    else:
        result = allreduce(args.max_mib << 20)
    if args.step not in ("trainer", "allreduce") or _world_rank() == 0:
        args.result.write_text(json.dumps(result))
    return 0


def _world_rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


if __name__ == "__main__":
    raise SystemExit(main())
