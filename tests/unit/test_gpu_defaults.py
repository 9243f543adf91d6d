"""The GPU defaults that can be decided without a GPU: precision from device capabilities, probe size, switches."""

from __future__ import annotations

import pytest

from aiperf_mpi.config import (
    DeviceCaps,
    RunConfig,
    device_prefetch_enabled,
    load_config,
    resolve_precision,
    xla_enabled,
)
from aiperf_mpi.errors import UsageError
from aiperf_mpi.results.precisions import PRECISIONS as VALID_PRECISIONS
from aiperf_mpi.train.peak import SIZE_TARGET_SECONDS, SIZES, choose_size

A100, H100, V100, T4, P100 = ((8, 0), (9, 0), (7, 0), (7, 5), (6, 0))


def gpus(*capabilities) -> list[DeviceCaps]:
    return [DeviceCaps("GPU", f"gpu{i}", c) for i, c in enumerate(capabilities)]


@pytest.mark.parametrize(
    ("devices", "chosen"),
    [
        (gpus(A100, A100), "bf16"),
        (gpus(H100), "bf16"),
        (gpus(V100, V100), "fp16"),
        (gpus(T4), "fp16"),
        (gpus(H100, V100), "fp16"),  # one precision per run: the one every device runs fast
        (gpus(P100), "fp32"),
        ([DeviceCaps("CPU")] * 2, "fp32"),
        ([*gpus(A100), DeviceCaps("CPU")], "fp32"),
        ([DeviceCaps("GPU", "rocm", None)], "fp32"),  # capability unknown: no guess
        ([], "fp32"),
    ],
)
def test_auto_precision_follows_the_devices(devices, chosen) -> None:
    precision, why = resolve_precision("auto", devices)
    assert precision == chosen and why
    assert precision in VALID_PRECISIONS  # the validity rule (FP16 or wider) is unchanged


def test_a_precision_set_by_the_user_is_kept_whatever_the_devices() -> None:
    for setting in VALID_PRECISIONS:
        assert resolve_precision(setting, gpus(A100))[0] == setting
        assert resolve_precision(setting, [DeviceCaps("CPU")])[0] == setting


def test_auto_is_the_default_and_accepted_but_nothing_narrower_than_fp16() -> None:
    assert RunConfig().precision == "auto" and RunConfig().device_prefetch == "auto"
    assert load_config(None, {"precision": "auto"}).precision == "auto"
    with pytest.raises(UsageError, match="precision must be one of auto, fp32, fp16, bf16"):
        load_config(None, {"precision": "int8"})
    with pytest.raises(UsageError, match="device_prefetch must be one of auto, on, off"):
        load_config(None, {"device_prefetch": "sometimes"})


def test_xla_and_device_prefetch_are_on_for_gpus_and_off_for_cpus_unless_set() -> None:
    for switch in (xla_enabled, device_prefetch_enabled):
        assert switch("auto", True) and not switch("auto", False)
        assert switch("on", False) and not switch("off", True)


def test_a_gpu_probe_multiplies_at_least_8192_square_and_grows_until_a_product_takes_long_enough() -> None:
    tried: list[int] = []

    def fast_gpu(size: int) -> float:  # an H100-class bf16 GEMM: about 1e15 operations per second
        tried.append(size)
        return 2 * size**3 / 1e15

    assert choose_size("GPU", fast_gpu) == SIZES["GPU"][-1]  # never reaches 50 ms: the largest size
    assert tried == list(SIZES["GPU"]) and min(tried) >= 8192
    slow_gpu = lambda size: 2 * size**3 / 1e13  # noqa: E731  (8192³·2 / 1e13 = 0.11 s)
    assert choose_size("GPU", slow_gpu) == 8192


def test_a_cpu_probe_stops_at_the_first_size_that_takes_long_enough() -> None:
    cpu = lambda size: 2 * size**3 / 2e11  # noqa: E731  a 200 GFLOP/s CPU: 1024³·2 → 10.7 ms, 2048³·2 → 86 ms
    size = choose_size("CPU", cpu)
    assert size == 2048 and cpu(size) >= SIZE_TARGET_SECONDS > cpu(size // 2)
    assert choose_size("CPU", lambda size: 1.0) == SIZES["CPU"][0]
