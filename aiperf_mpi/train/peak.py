"""The same-run peak probe: dense matrix-multiply throughput of each rank's device.

A score in operations per second means little without the machine's own
ceiling next to it.  Data-sheet peaks are not comparable across vendors and
clocks, so each group measures, at start-up, for a few seconds, what its
devices do on the one kernel that dominates training — a large dense
matrix multiply at the run's precision — with every rank of the group
multiplying at the same time, as they will when they train.  The report
states the score as a fraction of the summed peak.

Operations are counted as everywhere else in the benchmark: a multiply-add
is 2 operations, so an n×n by n×n product is 2·n³.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiperf_mpi.results.precisions import PRECISIONS

SIZES = {"CPU": (256, 512, 1024, 2048, 4096, 8192), "GPU": (8192, 12288, 16384)}
"""the sizes tried on each kind of device, smallest first.  A GPU starts at 8192²: a tensor-core GEMM
needs thousands of tiles in flight to fill a device of 100+ multiprocessors, and smaller products measure
kernel launch and tail effects, not the peak (3 × 16384² bf16 matrices are 1.5 GiB)."""
SIZE_TARGET_SECONDS = 0.05
"""the matrix grows until one product takes this long (or reaches the largest size)"""


def choose_size(device_kind: str, seconds_per_product: Callable[[int], float]) -> int:
    """The probe's matrix size: the first of :data:`SIZES` whose product takes :data:`SIZE_TARGET_SECONDS`.

    ``seconds_per_product(size)`` times one product (after its warm-up).  Small
    devices stop early rather than wait on one huge product; large ones grow
    until dispatch is a small share of the time, up to the largest size.
    """
    sizes = SIZES["GPU" if device_kind == "GPU" else "CPU"]
    for size in sizes:
        if seconds_per_product(size) >= SIZE_TARGET_SECONDS:
            return size
    return sizes[-1]


def matmul_ops(size: int) -> int:
    """Operations of one size×size by size×size product (multiply-add = 2)."""
    return 2 * size**3


def measure_peak(precision: str, seconds: float) -> dict:
    """Multiply for about ``seconds`` on this rank's device; the throughput reached.

    The matrix size is chosen first (:func:`choose_size`), so small devices
    are not stuck on one huge product and large ones are not timing dispatch.
    The result is synchronised by reading one element back: GPUs run
    asynchronously.
    """
    import tensorflow as tf

    from aiperf_mpi.train.threads import current_threads

    dtype = getattr(tf, PRECISIONS[precision].dtype)
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    with tf.device(device):

        def timed(a, b, repeats: int) -> float:
            started = time.perf_counter()
            product = a
            for _ in range(repeats):
                product = tf.linalg.matmul(a, b)
            float(product[0, 0])  # waits for the device
            return time.perf_counter() - started

        operands: dict[int, tuple] = {}

        def one_product(size: int) -> float:
            operands.clear()  # one pair of matrices in memory at a time
            operands[size] = tuple(tf.cast(tf.random.uniform((size, size), dtype=tf.float32, seed=seed), dtype)
                                   for seed in (1, 2))  # fmt: skip
            timed(*operands[size], 1)  # warm-up: kernel selection, allocation
            return timed(*operands[size], 1)

        size = choose_size(device.split(":")[0], one_product)
        a, b = operands[size]
        products, elapsed = 0, 0.0
        while elapsed < seconds:
            repeats = max(1, products)  # doubling batches: few host round trips
            elapsed += timed(a, b, repeats)
            products += repeats
    return {
        "precision": precision,
        "device": device,
        "matrix_size": size,
        "products": products,
        "seconds": elapsed,
        "ops_per_second": matmul_ops(size) * products / elapsed,
        "threads": current_threads(),
    }


def group_peak(group_comm, precision: str, seconds: float) -> dict | None:
    """Collective over the group: every rank measures at once; the leader gets the sum (others None).

    ``threads`` lists each rank's TensorFlow pools (intra-op, inter-op: :mod:`aiperf_mpi.train.threads`),
    the ones it trains with, so the ``peak`` event says what the run chose.
    """
    group_comm.Barrier()  # all ranks multiply together, as they train together
    mine = measure_peak(precision, seconds)
    measured = group_comm.gather(mine, root=0)
    if group_comm.Get_rank() != 0:
        return None
    return {
        "precision": precision,
        "ranks": len(measured),
        "device": mine["device"],
        "matrix_size": mine["matrix_size"],
        "seconds": max(m["seconds"] for m in measured),
        "ops_per_second": sum(m["ops_per_second"] for m in measured),
        "per_rank": [m["ops_per_second"] for m in measured],
        "threads": [m["threads"] for m in measured],
    }
