"""The verifier's second step: the best model's logged count of correct predictions against a recount.

``python -m analysis.verify RUN_DIR --reevaluate [--data-path DIR]`` adds a
``re-evaluation`` row to its verdict.  The recount needs TensorFlow and the
weights, and ``analysis/`` loads neither: it runs
``python -m aiperf_mpi.export.reevaluate`` (the export room) in a child
process under a timeout and reads the one JSON line it prints.  Here only the
launching and the comparison live, so both are testable without TensorFlow.

The counts must be equal when the run trained on CPUs: the child evaluates
the logged weights on the same images, through the trainer's own pipeline, in
the trainer's batches and at the run's precision, on the CPU, so nothing is
left to differ.  What may differ elsewhere (another precision, an accelerator's
kernels against the CPU's) and by how much is ``docs/verify.md``'s section
"Re-evaluating the best model": where the recount's arithmetic is not the
run's, :data:`ALLOWED_SHARE` of the predictions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHILD = "aiperf_mpi.export.reevaluate"
DEFAULT_TIMEOUT = 3600.0
"""seconds the recount may take: a digits or small CIFAR-10 run takes 5–15 s on 2 cores; ResNet-50 over ImageNet's
50,000 validation images on a CPU takes most of an hour (``--reevaluate-timeout`` to change)"""
ALLOWED_SHARE = 0.01
"""the share of the validation samples (at least one) a recount may differ by where its arithmetic is not the run's:
another precision (``--precision fp32`` on a bf16/fp16 run), or a run that trained on accelerators recounted on the
CPU (other kernels, TF32 in cuDNN's fp32 convolutions).  Measured on CPUs: 0 at the run's precision; up to 2 of 360
(0.56 %) between fp32, bf16 and fp16 (docs/verify.md)"""


class ReevaluationFailed(Exception):
    """The recount could not be made (bad input, a timeout, a crash): the one line the user sees, exit 2."""


@dataclass
class Row:
    """The verdict row: a summary and the problems (none: ok)."""

    summary: str
    problems: list[str] = field(default_factory=list)


def run_child(run_dir: Path, data_path: Path | None, precision: str | None, timeout: float) -> dict:
    """The child's JSON answer; ReevaluationFailed with its one line when it refused, failed or ran out of time."""
    command = [sys.executable, "-m", CHILD, str(run_dir)]
    command += ["--data-path", str(data_path)] if data_path is not None else []
    command += ["--precision", precision] if precision else []
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ReevaluationFailed(f"the re-evaluation did not finish within {timeout:g} s "
                                 "(--reevaluate-timeout SECONDS)") from None  # fmt: skip
    lines = done.stderr.strip().splitlines()
    if done.returncode != 0:
        last = lines[-1] if lines else f"exit status {done.returncode}"
        raise ReevaluationFailed(last.removeprefix(f"{CHILD}: error: ").strip())
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ReevaluationFailed(f"python -m {CHILD} printed no JSON line: {done.stdout[-200:]!r}") from None


def allowed_difference(answer: dict) -> int:
    """Predictions the recount may differ by: none in the run's arithmetic, else :data:`ALLOWED_SHARE` of them."""
    if answer["precision"] == answer["run_precision"] and answer.get("trained_on") == "cpus":
        return 0
    return max(1, int(ALLOWED_SHARE * answer["claim"]["validation_samples"]))


def _why_allowed(answer: dict) -> str:
    if answer["precision"] != answer["run_precision"]:
        return f"a {answer['precision']} recount of a {answer['run_precision']} run"
    return "a run on accelerators recounted on the CPU"


def compare(answer: dict) -> Row:
    """The row for the child's answer: ok when the recount is the logged count (within the allowed difference)."""
    claim = answer["claim"]
    logged, samples = claim["logged_correct"], claim["validation_samples"]
    where = f"task {claim['task']} epoch {claim['epoch']}"
    if answer.get("problem"):
        return Row(f"{where}: best/model.keras is not the logged model", [answer["problem"]])
    correct, seen = answer["correct"], answer["seen"]
    how = (f"{answer['precision']} on the CPU, batch {claim['batch_size']}, {claim['ranks']} shard(s), "
           f"{answer['seconds']:.1f} s")  # fmt: skip
    allowed = allowed_difference(answer)
    if seen != samples:
        return Row(f"{where}: {seen} images re-evaluated, {samples} logged",
                   [f"logged {logged} correct of {samples}, re-evaluated {correct} of {seen} ({how})"])  # fmt: skip
    if abs(correct - logged) > allowed:
        within = f"; {allowed} allowed: {_why_allowed(answer)}" if allowed else ""
        return Row(f"{where}: logged {logged} correct of {samples}, re-evaluated {correct}",
                   [f"logged {logged} correct of {samples} ({claim['logged_from']}), re-evaluated {correct} "
                    f"({how}{within})"])  # fmt: skip
    if correct != logged:
        return Row(f"{where}: {correct} of {samples} correct, logged {logged} (within the {allowed} allowed: "
                   f"{_why_allowed(answer)}; {how})")  # fmt: skip
    return Row(f"{where}: {correct} of {samples} correct, as logged ({how})")
