"""The GPU check's pure part: which steps, how long each may take, the figures, the files written.

Everything here runs without TensorFlow, MPI or a GPU, so that it is tested
where the project is built; the steps themselves are in
:mod:`aiperf_mpi.gpucheck.worker`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.results.precisions import PRECISIONS
from aiperf_mpi.results.runlog import write_whole

BUDGET_SECONDS = 480
"""the whole check, at most: 8 minutes on one node"""
RUN_SECONDS = 180
"""the benchmark run's --time-limit; its step's budget adds start-up, the grace and the report"""
RUN_GRACE = 20
"""the run's --grace: seconds its running epochs get to finish after the time limit"""
ALLREDUCE_SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)
"""bytes per all-reduce (float32): from latency-bound to bandwidth-bound"""
PROBE_ORDER = tuple(reversed(PRECISIONS))
"""every precision a run accepts (:data:`~aiperf_mpi.results.precisions.PRECISIONS`), narrowest first: the
tensor-core figures lead"""
JSON_NAME = "gpu-check.json"
MD_NAME = "gpu-check.md"


@dataclass(frozen=True)
class Step:
    """One step of the check: its name, what it shows, its timeout and, if skipped, why."""

    name: str
    title: str
    seconds: int
    skip: str = ""


def plan(gpus: int, probe_seconds: float = 2.0) -> list[Step]:
    """The steps for a node with ``gpus`` GPUs; their timeouts add up to at most :data:`BUDGET_SECONDS`.

    Each timeout is the step's worst case (TensorFlow's start-up, XLA
    compilation), not its usual time; a step that overruns is stopped and
    the next one runs, so one hang cannot take the node's whole allocation.
    The probe runs all GPUs at once (one process each), so its budget does
    not grow with the GPU count.
    """
    if gpus < 1:
        raise ValueError("the GPU check needs at least one GPU")
    probe = int(40 + 3 * len(PROBE_ORDER) * probe_seconds)  # start-up, then each precision's sizes and run
    steps = [
        Step("devices", "GPUs seen by TensorFlow; its CUDA and cuDNN", 25),
        Step("probe", f"peak probe per GPU ({', '.join(PROBE_ORDER)})", probe),
        Step("trainer", "trainer, ResNet-50 224² synthetic, XLA, on GPU 0", 100),
        Step("allreduce", f"NCCL all-reduce bus bandwidth across {gpus} GPUs (Horovod)", 40,
             "" if gpus > 1 else "one GPU: nothing to all-reduce across"),
        Step("run", f"benchmark run, {RUN_SECONDS} s, {gpus + 1} ranks (master + {gpus} GPUs), report, NVML monitor",
             RUN_SECONDS + RUN_GRACE + 40),
    ]  # fmt: skip
    total = sum(s.seconds for s in steps if not s.skip)
    if total > BUDGET_SECONDS:
        raise ValueError(f"the GPU check's steps need {total} s, over its {BUDGET_SECONDS} s budget")
    return steps


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> float:
    """All-reduce bus bandwidth in bytes/s, as nccl-tests defines it: algorithm bandwidth × 2(n−1)/n.

    A ring all-reduce moves each byte 2(n−1)/n times over the busiest link, so
    this figure compares with the link's own bandwidth whatever ``n`` is; the
    algorithm bandwidth (``nbytes / seconds``) falls as ranks are added.
    """
    if ranks < 1 or seconds <= 0:
        raise ValueError("bus bandwidth needs at least one rank and a positive time")
    return nbytes / seconds * 2 * (ranks - 1) / ranks


def nvidia_gpus_in_proc(proc: Path = Path("/proc")) -> int:
    """GPUs the NVIDIA kernel driver has registered (``/proc/driver/nvidia/gpus/*``); 0 without the driver."""
    gpus = proc / "driver" / "nvidia" / "gpus"
    return sum(1 for _ in gpus.iterdir()) if gpus.is_dir() else 0


def ratio_to_probe(results: dict) -> float | None:
    """The trainer's operations per second over the peak probe of its GPU at its precision, if both ran."""
    trainer = results.get("steps", {}).get("trainer", {}).get("result") or {}
    probe = results.get("steps", {}).get("probe", {}).get("result") or {}
    gpu = next((g for g in probe.get("gpus", []) if g.get("index") == trainer.get("gpu")), None)
    peak = (gpu or {}).get(trainer.get("precision", ""), {}).get("ops_per_second")
    if not peak or not trainer.get("ops_per_second"):
        return None
    return trainer["ops_per_second"] / peak


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}"


def headline(name: str, entry: dict) -> str:
    """One line for a step: what it measured, or why it was skipped or failed."""
    status, result = entry.get("status", "not run"), entry.get("result") or {}
    if status == "skipped":
        return f"skipped: {entry.get('reason', '')}"
    if status != "ok":
        return f"{status.upper()}: {entry.get('reason', '')}"
    if name == "devices":
        return (f"TensorFlow sees {len(result.get('gpus', []))} GPU(s); built with CUDA {result.get('cuda_version')}, "
                f"cuDNN {result.get('cudnn_version')}")  # fmt: skip
    if name == "probe":
        parts = []
        for gpu in result.get("gpus", []):
            figures = ", ".join(f"{p} {_si(gpu[p]['ops_per_second'], 'ops/s')}" for p in PROBE_ORDER if p in gpu)
            parts.append(f"GPU {gpu['index']}: {figures}")
        return "; ".join(parts)
    if name == "trainer":
        ratio = entry.get("ratio_to_probe")
        return (f"{result['images_per_second']:.0f} images/s, {_si(result['ops_per_second'], 'ops/s')} "
                f"at {result['precision']} (batch {result['batch']}), "
                f"{'no' if ratio is None else f'{ratio:.2f}'} of the probe; "
                f"XLA compile {result['xla_compile_seconds']:.1f} s")  # fmt: skip
    if name == "allreduce":
        best = max(result["sizes"], key=lambda s: s["bus_bandwidth"])
        return (f"bus bandwidth {_si(best['bus_bandwidth'], 'B/s')} at {best['bytes'] >> 20} MiB "
                f"across {result['ranks']} GPUs")  # fmt: skip
    if name == "run":
        return (f"score {_si(result['score'], 'ops/s')} over {result['active_time']:.0f} s, {result['models']} models; "
                f"{result['nvml_samples']} NVML monitor samples; report {result['report']}")  # fmt: skip
    return status


def markdown(results: dict) -> str:
    """gpu-check.md: the verdict, a line per step, then the figures a reader compares with the data sheet."""
    nvml = results.get("nvml") or {}
    build = results.get("build") or {}
    lines = [
        f"# GPU check of {results.get('host', '?')}",
        "",
        f"{results.get('date', '')}; {results.get('elapsed_seconds', 0):.0f} s of a {BUDGET_SECONDS} s budget; "
        f"**{results.get('verdict', '?')}**",
        "",
        f"- driver {nvml.get('driver', '?')}, CUDA driver API {nvml.get('cuda_driver', '?')}; "
        f"{len(nvml.get('gpus', []))} GPU(s) seen by NVML",
    ]
    for gpu in nvml.get("gpus", []):
        lines.append(f"  - GPU {gpu['index']}: {gpu['name']}, {gpu['memory_total'] / 2**30:.0f} GiB")
    if build:
        lines.append(f"- Horovod {build.get('horovod')} built by the {build.get('route')} route with nvcc "
                     f"{build.get('nvcc')}, NCCL {'yes' if build.get('nccl_built') else 'NO'}, "
                     f"MPI {'yes' if build.get('mpi_built') else 'NO'}")  # fmt: skip
    for warning in results.get("warnings", []):
        lines.append(f"- **warning**: {warning}")
    lines += ["", "| step | seconds | result |", "|---|---|---|"]
    for name, entry in results.get("steps", {}).items():
        lines.append(f"| {entry.get('title', name)} | {entry.get('seconds', 0):.0f} | {headline(name, entry)} |")
    allreduce = (results.get("steps", {}).get("allreduce") or {}).get("result")
    if allreduce:
        lines += ["", "NCCL all-reduce (float32, sum), bus bandwidth = size / time × 2(n−1)/n:", "",
                  "| size | time | bus bandwidth |", "|---|---|---|"]  # fmt: skip
        for size in allreduce["sizes"]:
            lines.append(f"| {size['bytes'] >> 20} MiB | {size['seconds'] * 1e3:.2f} ms | "
                         f"{_si(size['bus_bandwidth'], 'B/s')} |")  # fmt: skip
    lines += ["", f"Everything measured is in {JSON_NAME} beside this file.", ""]
    return "\n".join(lines)


def verdict(results: dict) -> str:
    """``passed`` when every step ran or was skipped for a stated reason, else the steps that did not."""
    bad = [name for name, entry in results.get("steps", {}).items() if entry.get("status") not in ("ok", "skipped")]
    return "passed" if not bad else "failed: " + ", ".join(bad)


def write_outputs(results: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write gpu-check.json and gpu-check.md into ``out_dir`` (each whole or not at all)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {**results, "verdict": verdict(results)}
    paths = out_dir / JSON_NAME, out_dir / MD_NAME
    for path, text in zip(paths, (json.dumps(results, indent=1) + "\n", markdown(results)), strict=True):
        write_whole(path, text)
    return paths
