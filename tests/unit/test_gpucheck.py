"""The GPU check's CPU side: the no-GPU exit through the real command, its plan and budget, the figures, the files."""

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiperf_mpi.gpucheck.plan import (
    BUDGET_SECONDS,
    RUN_SECONDS,
    bus_bandwidth,
    markdown,
    nvidia_gpus_in_proc,
    plan,
    ratio_to_probe,
    verdict,
    write_outputs,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(nvidia_gpus_in_proc() > 0, reason="this machine has an NVIDIA GPU: the check would run")
def test_without_a_gpu_the_command_stops_at_once_with_one_line_and_exit_2(tmp_path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "aiperf_mpi.gpucheck", "--out", str(out)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 20  # no TensorFlow, no MPI: at once
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("gpu-check: no NVIDIA GPU on this machine (") and line.endswith("run it on a GPU node")
    assert not out.exists()  # nothing written


def test_the_make_target_runs_the_module_in_the_gpu_venv() -> None:
    """`make gpu-check` runs the module with the GPU venv's Python, into GPU_CHECK_DIR."""
    dry = subprocess.run(["make", "-n", "--no-print-directory", "gpu-check", "GPU_CHECK_DIR=/tmp/x"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "/.venv-gpu/bin/python -m aiperf_mpi.gpucheck" in dry.stdout and "--out /tmp/x" in dry.stdout


def test_nvidia_gpus_are_counted_from_the_drivers_proc_entries(tmp_path) -> None:
    assert nvidia_gpus_in_proc(tmp_path) == 0  # no driver
    gpus = tmp_path / "driver" / "nvidia" / "gpus"
    for bus in ("0000:07:00.0", "0000:0f:00.0"):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text("Model: NVIDIA H100 80GB HBM3\n")
    assert nvidia_gpus_in_proc(tmp_path) == 2


@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 16])
def test_the_plan_fits_eight_minutes_whatever_the_gpu_count(gpus: int) -> None:
    steps = plan(gpus)
    assert [s.name for s in steps] == ["devices", "probe", "trainer", "allreduce", "run"]
    assert sum(s.seconds for s in steps if not s.skip) <= BUDGET_SECONDS
    run = steps[-1]
    assert run.seconds > RUN_SECONDS and f"{gpus + 1} ranks" in run.title  # the master and a rank per GPU
    allreduce = steps[3]
    assert bool(allreduce.skip) == (gpus == 1)


def test_one_gpu_skips_the_all_reduce_with_a_line_and_the_plan_refuses_what_does_not_fit() -> None:
    assert plan(1)[3].skip == "one GPU: nothing to all-reduce across"
    with pytest.raises(ValueError, match="at least one GPU"):
        plan(0)
    with pytest.raises(ValueError, match="over its 480 s budget"):
        plan(8, probe_seconds=10.0)


def test_bus_bandwidth_is_nccl_tests_algorithm_bandwidth_times_2_n_minus_1_over_n() -> None:
    assert bus_bandwidth(10**9, 1.0, 2) == pytest.approx(1e9)  # two ranks: each byte crosses once each way
    assert bus_bandwidth(10**9, 0.5, 8) == pytest.approx(2e9 * 1.75)
    assert bus_bandwidth(256 << 20, 0.01, 4) == pytest.approx((256 << 20) / 0.01 * 1.5)
    assert bus_bandwidth(10**9, 1.0, 1) == 0.0  # nothing crosses a link
    with pytest.raises(ValueError):
        bus_bandwidth(10**9, 0.0, 2)


def results_of_a_node(trainer_status: str = "ok", gpus: int = 2) -> dict:
    """What the command gathers on a two-GPU node: the workers' results in their own shapes."""
    probe = {"gpus": [{"index": i, "device": f"/physical_device:GPU:{i}",
                       "bf16": {"ops_per_second": 7.0e14, "matrix_size": 8192, "products": 900, "seconds": 2.0},
                       "fp16": {"ops_per_second": 7.2e14, "matrix_size": 8192, "products": 920, "seconds": 2.0},
                       "fp32": {"ops_per_second": 5.0e13, "matrix_size": 8192, "products": 64, "seconds": 2.1}}
                      for i in range(gpus)]}  # fmt: skip
    trainer = {"gpu": 0, "device": "/physical_device:GPU:0", "precision": "bf16", "batch": 128, "xla": True,
               "images_per_second": 2600.0, "ops_per_second": 2.1e14, "epoch_compute_seconds": 0.98,
               "xla_compile_seconds": 41.5, "epochs": 4, "steps_per_epoch": 20}  # fmt: skip
    timed = {1 << 20: 5e-5, 256 << 20: (256 << 20) / 1.2e11}  # latency-bound, then bandwidth-bound
    sizes = [{"bytes": b, "seconds": t, "bus_bandwidth": bus_bandwidth(b, t, gpus)} for b, t in timed.items()]
    steps = {
        "devices": {"title": "GPUs seen by TensorFlow", "status": "ok", "seconds": 9.0,
                    "result": {"tensorflow": "2.18.1", "cuda_version": "12.5.1", "cudnn_version": "9",
                               "gpus": [{"index": i, "name": "NVIDIA H100", "compute_capability": [9, 0]}
                                        for i in range(gpus)]}},
        "probe": {"title": "peak probe per GPU", "status": "ok", "seconds": 31.0, "result": probe},
        "trainer": {"title": "trainer", "status": trainer_status, "seconds": 77.0,
                    "reason": "" if trainer_status == "ok" else "exit 1: ResourceExhaustedError (output in x.log)",
                    "result": trainer if trainer_status == "ok" else None},
        "allreduce": {"title": "NCCL all-reduce", "status": "ok", "seconds": 20.0,
                      "result": {"ranks": gpus, "device": "/physical_device:GPU:0", "sizes": sizes}},
        "run": {"title": "benchmark run", "status": "ok", "seconds": 230.0,
                "result": {"run_dir": "gpu-check-run", "score": 3.0e14, "regulated_score": 6.0e14,
                           "active_time": 185.0, "models": 6, "epochs": 15, "report": "gpu-check-run/report/report.md",
                           "nvml_samples": 37}},
    }  # fmt: skip
    return {"date": "2026-12-01T03:00:00+00:00", "host": "gpu001", "elapsed_seconds": 367.0,
            "nvml": {"driver": "580.65.06", "cuda_driver": "13.0",
                     "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}",
                               "memory_total": 80 * 2**30} for i in range(gpus)]},
            "build": {"route": "wheels", "nvcc": "13.0", "horovod": "0.28.1", "nccl_built": True, "mpi_built": True},
            "warnings": [], "steps": steps}  # fmt: skip


def test_the_trainer_is_compared_with_its_gpus_probe_at_its_precision() -> None:
    results = results_of_a_node()
    assert ratio_to_probe(results) == pytest.approx(2.1e14 / 7.0e14)
    results["steps"]["trainer"]["result"]["precision"] = "fp16"
    assert ratio_to_probe(results) == pytest.approx(2.1e14 / 7.2e14)
    del results["steps"]["probe"]
    assert ratio_to_probe(results) is None  # the probe did not run: no ratio, no error


def test_json_and_markdown_are_written_from_the_results(tmp_path) -> None:
    results = results_of_a_node()
    results["steps"]["trainer"]["ratio_to_probe"] = ratio_to_probe(results)
    json_path, md_path = write_outputs(results, tmp_path / "out")
    assert (json_path.name, md_path.name) == ("gpu-check.json", "gpu-check.md")
    written = json.loads(json_path.read_text())
    assert written == {**results, "verdict": "passed"}
    text = md_path.read_text()
    assert "# GPU check of gpu001" in text and "**passed**" in text
    assert "driver 580.65.06, CUDA driver API 13.0; 2 GPU(s) seen by NVML" in text
    assert "GPU 0: bf16 700.00 Tops/s, fp16 720.00 Tops/s, fp32 50.00 Tops/s" in text
    assert "2600 images/s, 210.00 Tops/s at bf16 (batch 128), 0.30 of the probe; XLA compile 41.5 s" in text
    assert "bus bandwidth 120.00 GB/s at 256 MiB across 2 GPUs" in text
    assert "| 256 MiB | 2.24 ms | 120.00 GB/s |" in text
    assert "37 NVML monitor samples" in text
    assert not list((tmp_path / "out").glob("*.partial"))


def test_a_failed_step_makes_the_verdict_and_says_why_while_a_skipped_one_does_not(tmp_path) -> None:
    results = results_of_a_node(trainer_status="failed", gpus=1)
    results["steps"]["allreduce"] = {"title": "NCCL all-reduce", "status": "skipped", "seconds": 0.0,
                                     "reason": plan(1)[3].skip}  # fmt: skip
    assert verdict(results) == "failed: trainer"
    text = markdown({**results, "verdict": verdict(results)})
    assert "FAILED: exit 1: ResourceExhaustedError (output in x.log)" in text
    assert "skipped: one GPU: nothing to all-reduce across" in text
    json_path, _ = write_outputs(results, tmp_path)
    assert json.loads(json_path.read_text())["verdict"] == "failed: trainer"


def test_only_resolve_precision_chooses_a_narrow_precision_for_a_device() -> None:
    """The GPU check's trainer trains at what a run's ``--precision auto`` takes (config.resolve_precision): no
    module but config.py and the precision table names bf16 or a compute capability to choose by itself (the
    hardware table names bf16 as a key of what each device computes, and chooses nothing)."""
    package = Path(__file__).resolve().parents[2] / "aiperf_mpi"
    choosing = set()
    for path in package.rglob("*.py"):
        if path.relative_to(package).as_posix() in ("config.py", "results/precisions.py", "results/hardware.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value == "bf16":
                choosing.add(path.relative_to(package).as_posix())
            if isinstance(node, ast.Tuple) and [getattr(e, "value", None) for e in node.elts] in ([8, 0], [7, 0]):
                choosing.add(path.relative_to(package).as_posix())
    assert not choosing, f"a precision chosen outside config.resolve_precision: {sorted(choosing)}"
