"""The verifier's second step: the run's claimed best epoch, recounted from the weights saved at it.

``python -m analysis.verify RUN_DIR --reevaluate [--data-path DIR]`` adds a
``re-evaluation`` row to its verdict.  What can be decided without
TensorFlow is decided here, first (:func:`before_the_recount`): the claim —
the run's best epoch accuracy, the one the regulated score uses — must be
the epoch whose weights the best model saved
(:func:`aiperf_mpi.results.best_claim.claimed_best`), and those weights must
be in the run directory, byte for byte the file whose sha256 the log
recorded (:func:`aiperf_mpi.results.stored_weights.trusted_weights`).  The
recount itself needs TensorFlow, and ``analysis/`` loads none: it runs
``python -m aiperf_mpi.export.reevaluate`` (the export room) in a child
process under a timeout and reads the one JSON line it prints.

A claim that cannot be recounted fails the row, with one line naming the
rule it breaks: no weights saved at the claimed epoch, the weights missing or
not the logged ones, the reviewer's data missing or not the run's, a recount
that crashed or ran out of time.  Nothing is taken on trust for want of a
file.  Only bad input — not a run directory, a run that claims no accuracy,
an option that does not apply — is exit 2.

The counts are compared within the reviewer's tolerance
(``--reevaluate-tolerance SHARE``, default :data:`ALLOWED_SHARE`), never one
the log chooses: where the recount's arithmetic is the run's (a CPU run at
its precision) they are equal, and ``--reevaluate-tolerance 0`` demands it;
what may differ elsewhere, and by how much, is ``docs/verify.md``'s section
"Re-evaluating the best model".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.results.best_claim import CLAIM_RULE, COUNT_RULE, DATA_RULE, WEIGHTS_RULE, BestClaim, claimed_best
from aiperf_mpi.results.child import ChildFailed, json_answer
from aiperf_mpi.results.logmodel import read_model
from aiperf_mpi.results.stored_weights import trusted_weights

CHILD = "aiperf_mpi.export.reevaluate"
DEFAULT_TIMEOUT = 3600.0
"""seconds the recount may take: a digits or small CIFAR-10 run takes 5–15 s on 2 cores; ResNet-50 over ImageNet's
50,000 validation images on a CPU takes most of an hour (``--reevaluate-timeout`` to change)"""
RULES = (CLAIM_RULE, WEIGHTS_RULE, DATA_RULE, COUNT_RULE)
"""the rules a claim can break, each named on the failing row's line (aiperf_mpi.results.best_claim)"""
ALLOWED_SHARE = 0.01
"""the default of ``--reevaluate-tolerance``: the share of the validation samples (at least one, unless the share is
0) a recount may differ by, for where its arithmetic is not the run's: another precision (``--precision fp32`` on a
bf16/fp16 run), or a run that trained on accelerators recounted on the CPU (other kernels, TF32 in cuDNN's fp32
convolutions).  Measured on CPUs: 0 at the run's precision; up to 2 of 360 (0.56 %) between fp32, bf16 and fp16
(docs/verify.md).  The reviewer's setting, never the log's: a run cannot widen it by what it claims it ran on"""


class ReevaluationFailed(Exception):
    """The child refused its input (not a run directory, no accuracy claimed, an option that does not apply):
    the one line the user sees, exit 2."""


class RecountFailed(Exception):
    """The recount was not made (the child crashed or ran out of time): the claim fails, with this line."""


@dataclass
class Row:
    """The verdict row: a summary and the problems (none: ok)."""

    summary: str
    problems: list[str] = field(default_factory=list)


def before_the_recount(run_dir: Path) -> tuple[BestClaim | None, Row | None]:
    """The claim, and the failing row when it cannot be recounted whatever the data (no TensorFlow needed): no
    weights saved at the claimed epoch, or none tied to the log.  (None, None): the run claims no accuracy."""
    claim = claimed_best(read_model(run_dir, require_start=False))
    if claim is None:
        return None, None
    where = f"task {claim.task} epoch {claim.epoch}"
    if claim.problem:
        return claim, Row(f"{where}: no weights saved at the claimed best epoch", [f"{claim.problem} ({CLAIM_RULE})"])
    path, problem = trusted_weights(run_dir, claim.weights, claim.weights_sha256)
    if path is None:
        return claim, Row(f"{where}: its saved weights are missing or not the logged ones",
                          [f"{problem} ({WEIGHTS_RULE})"])  # fmt: skip
    return claim, None


def run_child(run_dir: Path, data_path: Path | None, precision: str | None, timeout: float) -> dict:
    """The child's JSON answer; ReevaluationFailed with its one line when it refused (bad input, exit 2);
    :class:`RecountFailed` when it crashed or ran out of time (the claim was not recounted)."""
    args = [str(run_dir)]
    args += ["--data-path", str(data_path)] if data_path is not None else []
    args += ["--precision", precision] if precision else []
    try:
        return json_answer(CHILD, args, timeout=timeout, what="the re-evaluation",
                           timeout_option="--reevaluate-timeout")  # fmt: skip
    except ChildFailed as exc:
        raise (ReevaluationFailed if exc.returncode == 2 else RecountFailed)(str(exc)) from None


def allowed_difference(samples: int, share: float) -> int:
    """Predictions a recount may differ by: ``share`` of ``samples`` (at least one, unless the share is 0)."""
    return 0 if share <= 0 else max(1, int(share * samples))


def _why_differs(answer: dict) -> str:
    if answer["precision"] != answer["run_precision"]:
        return f"a {answer['precision']} recount of a {answer['run_precision']} run"
    if answer.get("trained_on") == "cpus":
        return "a CPU run at its own precision, where the counts are expected equal"
    return "a run on accelerators recounted on the CPU"


def compare(answer: dict, share: float = ALLOWED_SHARE) -> Row:
    """The row for the child's answer: ok when the recount is the logged count, within ``share`` of the samples."""
    claim = answer["claim"]
    logged, samples = claim["logged_correct"], claim["validation_samples"]
    where = f"task {claim['task']} epoch {claim['epoch']}"
    if answer.get("problem"):
        rule = answer.get("rule") or COUNT_RULE
        return Row(f"{where}: not recounted", [f"{answer['problem']} ({rule})"])
    correct, seen = answer["correct"], answer["seen"]
    how = (f"{answer['precision']} on the CPU, batch {claim['batch_size']}, {claim['ranks']} shard(s), "
           f"{claim.get('weights_file') or 'the weights'}, {answer['seconds']:.1f} s")  # fmt: skip
    allowed = allowed_difference(samples, share)
    if seen != samples:
        return Row(f"{where}: {seen} images re-evaluated, {samples} logged",
                   [f"logged {logged} correct of {samples}, re-evaluated {correct} of {seen} ({how}) "
                    f"({COUNT_RULE})"])  # fmt: skip
    if abs(correct - logged) > allowed:
        return Row(f"{where}: logged {logged} correct of {samples}, re-evaluated {correct}",
                   [f"logged {logged} correct of {samples} ({claim['logged_from']}), re-evaluated {correct} "
                    f"({how}; {allowed} allowed by the tolerance {share:g}) ({COUNT_RULE})"])  # fmt: skip
    if correct != logged:
        return Row(f"{where}: {correct} of {samples} correct, logged {logged} (within the {allowed} the tolerance "
                   f"{share:g} allows; {_why_differs(answer)}; {how})")  # fmt: skip
    return Row(f"{where}: {correct} of {samples} correct, as logged ({how})")
