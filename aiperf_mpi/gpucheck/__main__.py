"""``make gpu-check`` / ``python -m aiperf_mpi.gpucheck``: a GPU node's first check, at most 8 minutes.

Stops at once (one line, exit 2) where there is no NVIDIA GPU.  Otherwise
runs the steps of :func:`aiperf_mpi.gpucheck.plan.plan`, each in its own
process under its own timeout, prints one line per step, and writes
gpu-check.json and gpu-check.md.  Exit 0 when every step passed (or was
skipped for a stated reason), 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.gpucheck.plan import (
    RUN_GRACE,
    RUN_SECONDS,
    Step,
    headline,
    nvidia_gpus_in_proc,
    plan,
    ratio_to_probe,
    write_outputs,
)
from aiperf_mpi.results.logmodel import read_model

PREFIX = "gpu-check:"


def nvml_inventory() -> tuple[dict | None, str]:
    """The driver, its CUDA version and each GPU, from NVML; ``(None, why)`` where NVML cannot answer."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (make install GPU=cuda installs it)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML: {exc}"
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append({"index": index, "name": str(pynvml.nvmlDeviceGetName(handle)),
                         "uuid": str(pynvml.nvmlDeviceGetUUID(handle)),
                         "memory_total": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)})  # fmt: skip
        driver = str(pynvml.nvmlSystemGetDriverVersion())
        return {"driver": driver, "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}", "gpus": gpus}, ""
    finally:
        pynvml.nvmlShutdown()


def _mpirun() -> list[str]:
    """The mpirun beside this Python (the venv's MPI wheel) or on PATH (MPI=system), for one node."""
    beside = Path(sys.executable).parent / "mpirun"
    found = str(beside) if beside.exists() else shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("no mpirun beside this Python or on PATH")
    return [found, "--oversubscribe", "--bind-to", "none"]


def _run(command: list[str], timeout: float, log: Path) -> tuple[str, str]:
    """Run ``command`` in its own session with a timeout; ``(status, reason)``, output appended to ``log``."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return "timed out", f"stopped after its {timeout:.0f} s budget (output in {log.name})"
    if code != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        return "failed", f"exit {code}: {tail[0][:300] if tail else ''} (output in {log.name})"
    return "ok", ""


def _worker(step: str, result: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "aiperf_mpi.gpucheck.worker", step, "--result", str(result), *extra]


def run_step(step: Step, gpus: int, args: argparse.Namespace, scratch: Path, memory_gb: float) -> dict:
    """One step: its command(s), under its budget; the entry gpu-check.json keeps for it."""
    entry: dict = {"title": step.title, "budget_seconds": step.seconds}
    if step.skip:
        return {**entry, "status": "skipped", "reason": step.skip, "seconds": 0.0}
    log = args.out / f"gpu-check-{step.name}.log"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    result_file = scratch / f"{step.name}.json"
    status, reason, result = "ok", "", None
    if step.name == "devices":
        status, reason = _run(_worker("devices", result_file), step.seconds, log)
    elif step.name == "probe":  # every GPU at once, one process each
        files = [scratch / f"probe-{i}.json" for i in range(gpus)]
        with log.open("w") as out:
            commands = [_worker("probe", files[i], "--index", str(i), "--seconds", str(args.probe_seconds))
                        for i in range(gpus)]  # fmt: skip
            processes = [subprocess.Popen(c, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                         for c in commands]  # fmt: skip
            deadline = started + step.seconds
            for process in processes:
                try:
                    process.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    status, reason = "timed out", f"stopped after its {step.seconds} s budget (output in {log.name})"
        if status == "ok":
            failed = [i for i, p in enumerate(processes) if p.returncode != 0]
            if failed:
                status, reason = "failed", f"GPU(s) {failed} failed (output in {log.name})"
            else:
                result = {"gpus": [json.loads(f.read_text()) for f in files]}
    elif step.name == "trainer":
        command = [*_mpirun(), "-n", "1", *_worker("trainer", result_file, "--batch", str(args.batch))]
        status, reason = _run(command, step.seconds, log)
    elif step.name == "allreduce":
        command = [*_mpirun(), "-n", str(gpus), *_worker("allreduce", result_file)]
        status, reason = _run(command, step.seconds, log)
    elif step.name == "run":
        run_dir = args.out / "gpu-check-run"
        shutil.rmtree(run_dir, ignore_errors=True)
        command = [*_mpirun(), "-n", str(gpus + 1), sys.executable, "-m", "aiperf_mpi", "--dataset", "synthetic",
                               "--image-size", "224", "--time-limit", str(RUN_SECONDS), "--grace", str(RUN_GRACE),
                               "--score-step", "30", "--progress-interval", "30", "--search-warmup-epochs", "2",
                               "--max-epochs", "3", "--monitor-interval", "5", "--peak-seconds", "2",
                               "--device-memory-gb", f"{memory_gb:.1f}", "--run-dir", str(run_dir)]  # fmt: skip
        status, reason = _run(command, step.seconds, log)
        if status == "ok":
            result, problem = _run_result(run_dir)
            if problem:
                status, reason = "failed", problem
    if status == "ok" and result is None:
        result = json.loads(result_file.read_text())
    return {**entry, "status": status, "reason": reason, "seconds": time.monotonic() - started, "result": result}


def _run_result(run_dir: Path) -> tuple[dict | None, str]:
    """The benchmark run's score, report and NVML monitor samples; a reason if any is missing."""
    score_file, report = run_dir / "score.json", run_dir / "report" / "report.md"
    if not score_file.exists():
        return None, f"the run wrote no {score_file}"
    score = json.loads(score_file.read_text())
    samples = 0

    def count(event: dict, _model: object) -> None:
        nonlocal samples
        samples += event.get("event") == "monitor" and event.get("source") == "nvml" and bool(event["devices"])

    read_model(run_dir, on_event=count, require_start=False)
    result = {"run_dir": str(run_dir), "score": score["score"], "regulated_score": score["regulated_score"],
              "active_time": score["active_time"], "models": score["models_trained"], "epochs": score["epochs"],
              "report": str(report), "nvml_samples": samples}  # fmt: skip
    if not report.exists():
        return result, f"the run wrote no {report}"
    if samples == 0:
        return result, "the run's monitor wrote no NVML sample (is nvidia-ml-py installed?)"
    return result, ""


def _build_info() -> dict | None:
    info = Path(sys.prefix) / ".aiperf-stamps" / "horovod-gpu-build.json"
    return json.loads(info.read_text()) if info.exists() else None


def _warnings(nvml: dict, build: dict | None) -> list[str]:
    warnings = []
    if build is None:
        warnings.append("this venv has no record of a GPU build of Horovod (make install GPU=cuda)")
    elif build.get("min_driver") and int(nvml["driver"].split(".")[0]) < int(build["min_driver"]):
        warnings.append(f"Horovod's CUDA kernels were compiled by nvcc {build['nvcc']} (the PyPI route), which "
                        f"needs driver {build['min_driver']} or newer; this node has {nvml['driver']}. Rebuild "
                        "with the site's CUDA 12 toolkit: module load cuda, then make install GPU=cuda")  # fmt: skip
    return warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_mpi.gpucheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check"),
                        help="folder for gpu-check.json/.md, each step's log and the run (default gpu-check)")
    parser.add_argument("--batch", type=int, default=128, help="the trainer step's per-GPU batch (default 128)")
    parser.add_argument("--probe-seconds", type=float, default=2.0, help="seconds per precision of the peak probe")
    parser.add_argument("--steps", help="comma list of steps to run (default all: devices,probe,trainer,allreduce,run)")
    args = parser.parse_args(argv)

    nvml, why = nvml_inventory()
    gpus = len(nvml["gpus"]) if nvml else nvidia_gpus_in_proc()
    if gpus == 0:
        reason = why or "NVML sees none"
        print(f"{PREFIX} no NVIDIA GPU on this machine ({reason}); run it on a GPU node", file=sys.stderr)
        return 2
    if nvml is None:
        print(f"{PREFIX} the NVIDIA driver shows {gpus} GPU(s) but {why}", file=sys.stderr)
        return 2
    try:
        steps = plan(gpus, args.probe_seconds)
    except ValueError as exc:
        print(f"{PREFIX} error: {exc}", file=sys.stderr)
        return 2
    if args.steps:
        wanted = set(args.steps.split(","))
        unknown = wanted - {s.name for s in steps}
        if unknown:
            print(f"{PREFIX} error: unknown step(s) {sorted(unknown)}", file=sys.stderr)
            return 2
        steps = [s for s in steps if s.name in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    build = _build_info()
    results: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(), "nvml": nvml, "build": build, "warnings": _warnings(nvml, build), "steps": {},
    }  # fmt: skip
    print(f"{PREFIX} {gpus} GPU(s): {', '.join(sorted({g['name'] for g in nvml['gpus']}))}; driver {nvml['driver']} "
          f"(CUDA {nvml['cuda_driver']}); {len(steps)} steps, at most {sum(s.seconds for s in steps if not s.skip)} s",
          flush=True)  # fmt: skip
    for warning in results["warnings"]:
        print(f"{PREFIX} warning: {warning}", flush=True)
    started = time.monotonic()
    memory_gb = min(g["memory_total"] for g in nvml["gpus"]) / 2**30
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        for step in steps:
            entry = run_step(step, gpus, args, Path(scratch), memory_gb)
            results["steps"][step.name] = entry
            if step.name == "trainer" and entry["status"] == "ok":
                entry["ratio_to_probe"] = ratio_to_probe(results)
            print(f"{PREFIX} {step.title}: {headline(step.name, entry)} ({entry['seconds']:.0f} s)", flush=True)
    results["elapsed_seconds"] = time.monotonic() - started
    json_path, md_path = write_outputs(results, args.out)
    verdict = json.loads(json_path.read_text())["verdict"]
    print(f"{PREFIX} {verdict} in {results['elapsed_seconds']:.0f} s; wrote {json_path} and {md_path}")
    return 0 if verdict == "passed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
