"""The hardware table: upper bounds a run cannot choose (results/hardware.py)."""

from __future__ import annotations

import pytest

from aiperf_mpi.results.hardware import (
    ACCELERATORS,
    CPU_FLAGS_READ,
    accelerator_peak,
    cpu_peak,
    group_bound,
)
from aiperf_mpi.results.precisions import PRECISIONS

EPYC = {"host": "n1", "cpu": "AMD EPYC", "cpu_vendor": "AuthenticAMD", "cores": 2,
        "cpu_flags": ["sse2", "avx", "fma", "avx2", "avx512f", "avx512_bf16"], "accelerators": []}  # fmt: skip
"""this project's machine as its system event describes it"""


def test_every_accelerator_has_every_precision_and_narrower_is_never_slower_than_fp32_on_tensor_cores() -> None:
    for device in ACCELERATORS:
        assert set(device.peak) == set(PRECISIONS), device
        assert all(value > 1e12 for value in device.peak.values()), device
        assert device.peak["fp16"] >= device.peak["fp32"], device


@pytest.mark.parametrize(("name", "pattern"), [("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 80GB HBM3", "H100"),
                                               ("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla V100-SXM2-32GB", "V100"),
                                               ("Tesla V100S-PCIE-32GB", "V100S"), ("NVIDIA GH200 480GB", "GH200"),
                                               ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200 NVL", "H200 NVL"),
                                               ("AMD Instinct MI250X/MI250", "MI250X")])
def test_a_device_is_read_by_its_longest_pattern(name: str, pattern: str) -> None:
    bound = accelerator_peak(name, "bf16")
    assert bound.why.startswith(pattern + ":"), bound


@pytest.mark.parametrize("name", ["NVIDIA RTX A1000", "NVIDIA RTX A1000 6GB Laptop GPU", "NVIDIA H1000",
                                  "NVIDIA B2000", "Radeon MI3000X"])  # fmt: skip
def test_a_model_number_is_never_read_inside_another(name: str) -> None:
    """The forger's RTX A1000 host verified at four A100s' 312 TF: patterns are whole words."""
    assert accelerator_peak(name, "fp16").ops_per_second is None


def test_an_mi250x_device_is_one_gcd_half_the_package() -> None:
    """ROCm lists each of an MI250X's two GCDs as a device: the datasheet's 383 TF is two devices' worth."""
    assert accelerator_peak("AMD Instinct MI250X", "fp16").ops_per_second == 191.5e12


def test_an_unknown_device_has_no_bound_and_says_so() -> None:
    bound = accelerator_peak("Imaginary X9000", "fp32")
    assert bound.ops_per_second is None and "not in the hardware table" in bound.why


def test_this_machines_measured_peak_lies_under_its_cpu_bound() -> None:
    """BENCHMARKS.md: the fp32 probe read 478–512 G ops/s on 2 cores of this AMD EPYC, 194–296 on the Xeon."""
    fp32 = cpu_peak(EPYC, "fp32").ops_per_second
    assert fp32 is not None and 512e9 < fp32 < 2 * 512e9  # an upper bound, and not a meaningless one
    assert cpu_peak(EPYC, "bf16").ops_per_second == 2 * fp32  # avx512_bf16 doubles the issue width
    assert cpu_peak(EPYC, "fp16").ops_per_second == fp32  # no FP16 arithmetic: TensorFlow widens it


def test_the_bound_follows_the_flags_and_the_logical_processors() -> None:
    avx2 = {**EPYC, "cpu_flags": ["sse2", "avx", "fma", "avx2"], "cores": 8}
    assert cpu_peak(avx2, "fp32").ops_per_second == 8 * 5.7e9 * 32
    amx = {**EPYC, "cpu": "Intel(R) Xeon(R) Platinum 8480+", "cpu_vendor": "GenuineIntel",
           "cpu_flags": ["avx512f", "amx_bf16"]}
    assert cpu_peak(amx, "bf16").ops_per_second == 2 * 6.2e9 * 2048


@pytest.mark.parametrize("change", [{"cpu_vendor": "Cyrix"}, {"cpu_flags": None}, {"cores": 0}, {"cores": True},
                                    {"cpu_flags": ["mmx"]},
                                    {"cpu_flags": ["avx512f", "amx_bf16"]},  # no AMD processor has AMX
                                    {"cpu_flags": ["avx2", "sve"]},  # nor SVE, an Arm extension
                                    {"cpu_vendor": "GenuineIntel"},  # an "AMD EPYC" is not Intel's
                                    {"cpu": "Neoverse-V2", "cpu_vendor": "ARM", "cpu_flags": ["asimd", "amx_bf16"]}])
def test_a_host_the_table_cannot_bound_says_why(change: dict) -> None:
    host = {**EPYC, **change}
    if host["cpu_flags"] is None:
        del host["cpu_flags"]  # a log older than the field
    bound = cpu_peak(host, "fp32")
    assert bound.ops_per_second is None and "n1" in bound.why


def test_a_group_counts_one_accelerator_per_rank_and_a_cpu_host_once() -> None:
    gpu = {"host": "g1", "cores": 64, "cpu_vendor": "AuthenticAMD", "cpu_flags": ["avx2"],
           "accelerators": ["NVIDIA A100-SXM4-80GB"] * 4}  # fmt: skip
    hosts = {"g1": gpu, "n1": EPYC}
    assert group_bound(hosts, {"g1": 2}, "fp16").ops_per_second == 2 * 312e12
    assert group_bound(hosts, {"g1": 8}, "fp16").ops_per_second == 4 * 312e12  # no more devices than it has
    both = group_bound(hosts, {"g1": 1, "n1": 2}, "fp32")
    assert both.ops_per_second == 156e12 + cpu_peak(EPYC, "fp32").ops_per_second
    assert group_bound(hosts, {"elsewhere": 1}, "fp32").ops_per_second is None


def test_the_system_description_records_only_flags_the_table_reads() -> None:
    assert len(CPU_FLAGS_READ) == len(set(CPU_FLAGS_READ)) and "avx512f" in CPU_FLAGS_READ
