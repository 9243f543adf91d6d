"""The most arithmetic a piece of hardware can do: a versioned table the run cannot choose.

Verify bounds every rate a run claims by two figures.  The first is the
group's own probe (the ``peak`` event), which the run measures and therefore
writes: a forger who raises the probe raises that ceiling with it.  The second
is this table, which the run does not write: the vendors' dense peak per
precision for each accelerator model, and for a CPU its logical processors ×
the highest clock its vendor ships × the operations per cycle that the
instruction sets it reports can issue.  Every figure is an upper bound, never
an estimate: a rate above it did not happen on that hardware.  A device the
table does not know is said so, and a run on it is not valid until the table
names it (a change of :data:`HARDWARE_TABLE_VERSION`, reviewed like
:mod:`aiperf_mpi.results.rules`).

What stays on trust, and docs/verify.md says so: the ``system`` event's model
names, ISA flags and processor counts are the run's own words.  A reviewer
compares them with the site's published inventory; the table then bounds what
that inventory can compute.

Pure data and arithmetic: no TensorFlow, no MPI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

HARDWARE_TABLE_VERSION = "2026.12-3"
"""changes whenever a figure below changes or a device is added; verify.json records it (2026.12-3: a host of more
logical processors than Linux can run has no bound, :data:`MOST_LOGICAL_PROCESSORS`)"""

MOST_LOGICAL_PROCESSORS = 8192
"""the most logical processors one Linux host can run (x86-64's ``NR_CPUS`` ceiling with ``MAXSMP``; arm64's is
4,096): a host that claims more is no host, and gets no bound — a claim of 10**300 cores had verified with every
factor "×inf" (issue 52)"""

TERA = 1e12


@dataclass(frozen=True)
class Accelerator:
    """One accelerator model's dense peak (no structured sparsity), in operations per second, per precision."""

    pattern: str
    """matched, case-blind, as whole words of the name NVML (or the vendor's tool) reports: "A100" is in
    "NVIDIA A100-SXM4-80GB", not in "NVIDIA RTX A1000"; "H200" not in "GH200"; "V100" not in "V100S"."""
    peak: Mapping[str, float]
    """fp32 (the plain FP32 pipes, or TF32 tensor cores where TensorFlow uses them by default), fp16, bf16"""
    source: str


def _peaks(fp32: float, fp16: float, bf16: float) -> Mapping[str, float]:
    return MappingProxyType({"fp32": fp32 * TERA, "fp16": fp16 * TERA, "bf16": bf16 * TERA})


# The more specific pattern first within a family ("H100 NVL" and "H100 PCIe" before "H100"), though whole-word
# matching already keeps "GH200" from "H200".  fp32 is TensorFlow's default arithmetic for float32 on Ampere and
# later: TF32 tensor cores, so the TF32 figure bounds it.
ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("GB200", _peaks(1250, 2500, 2500), "NVIDIA GB200 NVL72 datasheet, dense TF32/FP16/BF16 per GPU"),
    Accelerator("B200", _peaks(1125, 2250, 2250), "NVIDIA DGX B200 datasheet, dense TF32/FP16/BF16 per GPU"),
    Accelerator("GH200", _peaks(494.7, 989.4, 989.4), "NVIDIA GH200 datasheet, dense (sparsity halved)"),
    Accelerator("H200 NVL", _peaks(417.5, 835.5, 835.5), "NVIDIA H200 NVL datasheet, dense (sparsity halved)"),
    Accelerator("H200", _peaks(494.7, 989.4, 989.4), "NVIDIA H200 SXM datasheet, dense (sparsity halved)"),
    Accelerator("H100 NVL", _peaks(417.5, 835.5, 835.5), "NVIDIA H100 NVL datasheet, per GPU, dense (sparsity "
                                                         "halved)"),
    Accelerator("H100 PCIe", _peaks(378, 756, 756), "NVIDIA H100 PCIe datasheet, dense (sparsity halved)"),
    Accelerator("H100", _peaks(494.7, 989.4, 989.4), "NVIDIA H100 SXM datasheet, dense (sparsity halved)"),
    Accelerator("A100", _peaks(156, 312, 312), "NVIDIA A100 datasheet, dense TF32/FP16/BF16"),
    Accelerator("L40S", _peaks(183, 362, 362), "NVIDIA L40S datasheet, dense (sparsity halved)"),
    Accelerator("V100S", _peaks(16.4, 130, 16.4), "NVIDIA V100S PCIe datasheet: FP32, FP16 tensor; no BF16 units"),
    Accelerator("V100", _peaks(15.7, 125, 15.7), "NVIDIA V100 SXM2 datasheet: FP32, FP16 tensor; no BF16 units"),
    Accelerator("MI300X", _peaks(653.7, 1307.4, 1307.4), "AMD Instinct MI300X datasheet, dense TF32/FP16/BF16"),
    Accelerator("MI250X", _peaks(47.9, 191.5, 191.5), "AMD Instinct MI250X datasheet (95.7 FP32 matrix, 383 "
                                                      "FP16/BF16) halved: ROCm lists each of its two GCDs as a device"),
    Accelerator("MI250", _peaks(45.3, 181.0, 181.0), "AMD Instinct MI250 datasheet (90.5 FP32 matrix, 362.1 "
                                                     "FP16/BF16) halved: ROCm lists each of its two GCDs as a device"),
)
"""the accelerators the table knows; a run on another one is reported as not in the table"""

STAND_IN_DEVICE = "rehearsal stand-in"
"""the device a rehearsal's probe names (``--rehearse``: no hardware was measured); a run that is not a rehearsal
and names it is a relabelled rehearsal"""


@dataclass(frozen=True)
class CpuIssue:
    """Operations per cycle per logical processor that one instruction-set flag allows, per precision."""

    flag: str
    """as /proc/cpuinfo spells it (x86 ``flags``, Arm ``Features``)"""
    per_cycle: Mapping[str, int]
    vendors: frozenset[str] = field(default_factory=lambda: X86)
    """the vendors (``cpu_vendor``) whose processors have the flag: an AMD host claiming AMX, or an x86 host
    claiming SVE, describes hardware that does not exist"""


X86 = frozenset({"GenuineIntel", "AuthenticAMD"})
INTEL = frozenset({"GenuineIntel"})
ARM = frozenset({"ARM"})


def _per_cycle(fp32: int, fp16: int | None = None, bf16: int | None = None) -> Mapping[str, int]:
    return MappingProxyType({"fp32": fp32, "fp16": fp16 or fp32, "bf16": bf16 or fp32})


# Two fused multiply-add pipes per core at each vector width, a multiply-add counted as 2 operations: 512-bit
# FP32 is 2 × 16 × 2 = 64 a cycle, 256-bit 32.  A narrower precision without its own instructions runs at
# fp32's rate or slower (TensorFlow widens it), so its bound is fp32's.
CPU_ISSUE: tuple[CpuIssue, ...] = (
    CpuIssue("sse2", _per_cycle(8)),
    CpuIssue("avx", _per_cycle(16)),
    CpuIssue("fma", _per_cycle(32)),
    CpuIssue("avx2", _per_cycle(32)),
    CpuIssue("avx512f", _per_cycle(64)),
    CpuIssue("avx512_bf16", _per_cycle(64, bf16=128)),
    CpuIssue("avx512_fp16", _per_cycle(64, fp16=128), INTEL),  # Sapphire Rapids and later; no AMD core has it
    CpuIssue("amx_bf16", _per_cycle(64, bf16=2048), INTEL),  # one AMX unit: 1,024 BF16 multiply-adds a cycle
    CpuIssue("amx_fp16", _per_cycle(64, fp16=2048), INTEL),
    CpuIssue("asimd", _per_cycle(32), ARM),  # Arm NEON: up to 4 × 128-bit FMA pipes (Neoverse V2)
    CpuIssue("asimdhp", _per_cycle(32, fp16=64), ARM),
    CpuIssue("sve", _per_cycle(64), ARM),  # A64FX: 2 × 512-bit FMA pipes
    CpuIssue("bf16", _per_cycle(32, bf16=128), ARM),
)
"""the flags that raise the bound; a processor's bound per precision is the largest its flags allow"""

CLOCK_CEILING_HZ: Mapping[str, float] = MappingProxyType({
    "GenuineIntel": 6.2e9,  # the fastest boost Intel has shipped (Core i9-14900KS)
    "AuthenticAMD": 5.7e9,  # the fastest boost AMD has shipped (Ryzen 9 7950X / 9950X)
    "ARM": 4.5e9,  # Arm server and desktop cores shipped to date stay below it
})  # fmt: skip
"""the highest clock any processor of the vendor runs at: a virtual machine hides its own, this does not"""

BRANDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "GenuineIntel": ("intel", "xeon", "pentium", "celeron"),
    "AuthenticAMD": ("amd", "epyc", "ryzen", "threadripper", "opteron"),
    "ARM": ("neoverse", "grace", "a64fx", "graviton", "altra", "kunpeng", "cortex"),
})  # fmt: skip
"""words of each vendor's processor names: a processor named by one vendor's words is not another vendor's (an
"AMD EPYC" logged as GenuineIntel would borrow Intel's higher clock ceiling and its AMX)"""

FAST_ALGORITHMS = 1.5
"""how far a model's *analytic* operations per second may outrun the hardware's peak: convolution libraries
compute 3×3 layers with fewer multiplications than the analytic count (Winograd: up to 4× fewer in those
layers), which for ResNet-50, whose 3×3 layers hold ≈ 40 % of its operations, is at most ≈ 1.43×.  Applied to
epochs and the score, never to the probe (a matrix multiplication has no such shortcut)"""

CPU_FLAGS_READ = tuple(dict.fromkeys(issue.flag for issue in CPU_ISSUE))
"""the ISA flags the system description records (the others change no bound)"""


@dataclass(frozen=True)
class Bound:
    """An upper bound on operations per second, or why there is none."""

    ops_per_second: float | None
    why: str
    """where the figure comes from, or what the table lacks"""


def _names(pattern: str, name: str) -> bool:
    """Whether ``pattern`` is in ``name`` as whole words (case-blind): a model number is never read inside another."""
    return re.search(rf"(?<![a-z0-9]){re.escape(pattern.lower())}(?![a-z0-9])", name.lower()) is not None


def accelerator_peak(name: object, precision: str) -> Bound:
    """The table's dense peak of one accelerator at ``precision``."""
    if not isinstance(name, str):
        return Bound(None, f"an accelerator named {name!r} (not a name)")
    for device in ACCELERATORS:
        if _names(device.pattern, name):
            if precision not in device.peak:
                return Bound(None, f"precision {precision!r} is not in the hardware table {HARDWARE_TABLE_VERSION}")
            return Bound(device.peak[precision], f"{device.pattern}: {device.source}")
    return Bound(None, f"accelerator {name!r} is not in the hardware table {HARDWARE_TABLE_VERSION}")


def cpu_peak(host: Mapping, precision: str) -> Bound:
    """A node's CPUs at ``precision``: logical processors × its vendor's clock ceiling × its flags' issue width.

    ``host`` is one entry of the ``system`` event's ``hosts``: ``cores`` (logical processors), ``cpu_vendor``
    and ``cpu_flags``.  A log older than those fields has no bound: it is said so, never guessed.
    """
    vendor, flags, cores = host.get("cpu_vendor"), host.get("cpu_flags"), host.get("cores")
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        return Bound(None, f"host {host.get('host')!r}: no count of logical processors")
    if cores > MOST_LOGICAL_PROCESSORS:
        return Bound(None, f"host {str(host.get('host'))[:40]!r}: {str(cores)[:20]} logical processors, more than "
                           f"one Linux host can run ({MOST_LOGICAL_PROCESSORS:,})")  # fmt: skip
    if vendor not in CLOCK_CEILING_HZ:
        return Bound(None, f"host {host.get('host')!r}: CPU vendor {vendor!r} is not in the hardware table "
                           f"{HARDWARE_TABLE_VERSION}")  # fmt: skip
    if not isinstance(flags, list):
        return Bound(None, f"host {host.get('host')!r}: no ISA flags logged (a log older than the table)")
    processor = host.get("cpu")
    others = [v for v, words in BRANDS.items() if v != vendor and isinstance(processor, str)
              and any(_names(word, processor) for word in words)]  # fmt: skip
    if others:
        return Bound(None, f"host {host.get('host')!r}: a processor named {processor!r} is {others[0]}'s, "
                           f"not {vendor}'s")  # fmt: skip
    foreign = [issue.flag for issue in CPU_ISSUE if issue.flag in flags and vendor not in issue.vendors]
    if foreign:
        return Bound(None, f"host {host.get('host')!r}: {vendor} processors have no {', '.join(foreign)}")
    if precision not in CPU_ISSUE[0].per_cycle:
        return Bound(None, f"precision {precision!r} is not in the hardware table {HARDWARE_TABLE_VERSION}")
    widths = [issue.per_cycle[precision] for issue in CPU_ISSUE if issue.flag in flags]
    if not widths:
        return Bound(None, f"host {host.get('host')!r}: none of the ISA flags the table knows")
    clock = CLOCK_CEILING_HZ[vendor]
    per_cycle = max(widths)
    return Bound(cores * clock * per_cycle, f"{cores} logical processors × {clock / 1e9:g} GHz ({vendor}'s "
                                            f"ceiling) × {per_cycle} {precision} operations a cycle")  # fmt: skip


def _device_peaks(host: Mapping, precision: str) -> list[Bound] | Bound:
    """Each of a host's accelerators' table peak, the fastest first; the first device the table lacks instead."""
    peaks = [accelerator_peak(device, precision) for device in host.get("accelerators") or []]
    unknown = [p for p in peaks if p.ops_per_second is None]
    return unknown[0] if unknown else sorted(peaks, key=lambda p: -p.ops_per_second)  # type: ignore[operator]


def group_bound(hosts: Mapping[str, Mapping], ranks_on_host: Mapping[str, int], precision: str,
                training_on_host: Mapping[str, int] | None = None) -> Bound:  # fmt: skip
    """The most a group can compute: on each host it runs on, its fastest accelerators, one a rank, or its CPU share.

    ``hosts`` maps a host name to its ``system`` entry; ``ranks_on_host`` the group's ranks there, and
    ``training_on_host`` every group's (None: the group's alone).  A host with accelerators trains on them: a rank
    drives one at a time, so ``r`` ranks are bounded by the ``r`` fastest the host has (a mixed host's slower ones
    are not counted at its best one's figure).  A host without trains on its CPUs, which its training ranks share:
    each takes its share of the cores (train/threads.py), so groups on one host together never exceed the host.
    What groups sharing a host's accelerators can do together is :func:`host_bound`'s, which bounds the score.
    """
    if not ranks_on_host:
        return Bound(None, "a group without a list of ranks to bound it by")
    total = 0.0
    reasons: list[str] = []
    for name, ranks in sorted(ranks_on_host.items()):
        host = hosts.get(name)
        if host is None:
            return Bound(None, f"host {name!r} is not in the system description")
        if not isinstance(host.get("accelerators") or [], list):
            return Bound(None, f"host {name!r}: its accelerators are not a list")
        if host.get("accelerators"):
            peaks = _device_peaks(host, precision)
            if isinstance(peaks, Bound):
                return peaks
            used = peaks[:ranks]
            total += sum(p.ops_per_second for p in used)  # type: ignore[misc]
            reasons.append(f"{name}: {len(used)} × {used[0].why}")
        else:
            bound = cpu_peak(host, precision)
            if bound.ops_per_second is None:
                return bound
            sharing = max(ranks, (training_on_host or {}).get(name, ranks))
            total += bound.ops_per_second * ranks / sharing
            share = f"{ranks} of its {sharing} training ranks' share of " if sharing > ranks else ""
            reasons.append(f"{name}: {share}{bound.why}")
    return Bound(total, "; ".join(reasons))


def host_bound(host: Mapping, training_ranks: int, precision: str) -> Bound:
    """The most one host's training ranks can compute together: its ``training_ranks`` fastest accelerators (four
    ranks on a two-GPU host share two GPUs, whatever groups they form), or all of its CPUs."""
    if not isinstance(host.get("accelerators") or [], list):
        return Bound(None, f"host {host.get('host')!r}: its accelerators are not a list")
    if not host.get("accelerators"):
        return cpu_peak(host, precision)
    peaks = _device_peaks(host, precision)
    if isinstance(peaks, Bound):
        return peaks
    used = peaks[:max(training_ranks, 0)]
    return Bound(sum(p.ops_per_second for p in used), f"{len(used)} of its {len(peaks)} accelerators")  # type: ignore[misc]


def fastest_device(hosts: Mapping[str, Mapping], names: Sequence[str], precision: str) -> float | None:
    """The table's figure of the fastest accelerator on any of ``names`` (a group's hosts): what one rank's probe
    can reach at most; None when they have none (CPUs: a rank's share is the group's bound)."""
    best = None
    for name in names:
        host = hosts.get(name)
        if isinstance(host, Mapping) and host.get("accelerators") and isinstance(host.get("accelerators"), list):
            peaks = _device_peaks(host, precision)
            if isinstance(peaks, Bound):
                return None
            best = max(best or 0.0, peaks[0].ops_per_second or 0.0)
    return best
