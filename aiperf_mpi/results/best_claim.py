"""The accuracy a run claims, and whether the weights it kept can back it: what ``--reevaluate`` recounts.

The regulated score rests on one number, the run's best epoch accuracy
(:func:`aiperf_mpi.results.score.score_inputs`: the highest ``val_accuracy``
of any logged epoch, of a finished task or not).  A reviewer can re-check it
only from the weights saved at that very epoch: the best model's (the best
trained model by observed accuracy, ties to the earliest, which the run's
retention keeps and the export publishes), whose trainer saved its best
epoch's weights and logged which (``weights_epoch``; a log from before it: the
last epoch).  So the claim is backed only when that saved epoch's accuracy
*is* the run's best: an epoch whose accuracy is higher than the saved one's —
raised by hand in a model whose weights are elsewhere, or an unfinished
task's, whose weights were never saved — is a claim nobody can recount, and
fails.

Pure (the run's model only): the verifier's side (``analysis``) and the
recount's (``aiperf_mpi.export.reevaluate``) decide it with the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aiperf_mpi.results.logmodel import RunModel

CLAIM_RULE = "rule: the claimed best epoch is the saved one"
"""the run's best epoch accuracy is the saved epoch's of the best model (whose weights are kept)"""
WEIGHTS_RULE = "rule: the saved weights are present and logged"
"""those weights are in the run directory, byte for byte the file whose sha256 the log records, of the graph's shapes"""
DATA_RULE = "rule: the reviewer holds the run's data"
"""the reviewer's copy of the data set is the split the run validated (its size and image shape)"""
COUNT_RULE = "rule: the recount is the logged count"
"""the recount of correct predictions equals the logged count, within the reviewer's tolerance"""


@dataclass(frozen=True)
class BestClaim:
    """The run's claimed best epoch and the weights that must back it (``problem``: why none do)."""

    accuracy: float
    """the run's best epoch accuracy: what the regulated score uses"""
    task: int
    """the task of the claimed epoch: the best model's when its saved epoch backs the claim"""
    epoch: int
    """the claimed epoch's number"""
    weights: str = ""
    """the best model's weights file as logged ('' when there is no best model)"""
    weights_sha256: str = ""
    """the sha256 its ``model_done`` logged ('' when none)"""
    problem: str = ""
    """'' when the saved epoch is the claimed one; else why not, one line (:data:`CLAIM_RULE`)"""


def _rows(model: RunModel, task: int) -> np.ndarray:
    return np.flatnonzero(model.column("task") == task)


def claimed_best(model: RunModel) -> BestClaim | None:
    """The claim of ``model``'s run and whether the best model's saved epoch backs it; None when it claims no
    accuracy (synthetic data, or no epoch with a finite accuracy)."""
    if (model.config or {}).get("dataset") == "synthetic" or not len(model.epochs):
        return None
    accuracy = model.column("val_accuracy")
    finite = np.flatnonzero(np.isfinite(accuracy))
    if not len(finite):
        return None
    claimed = float(accuracy[finite].max())
    first = int(finite[accuracy[finite] == claimed][0])  # the earliest logged epoch of the claim
    at = (int(model.column("task")[first]), int(model.column("epoch")[first]))
    best = model.best_trained()
    if best is None or best.done is None:
        return BestClaim(claimed, *at, problem=f"the run's best epoch (task {at[0]} epoch {at[1]}, accuracy "
                         f"{claimed:g}) belongs to no trained model: no weights were saved at it")  # fmt: skip
    done = best.done
    rows = _rows(model, best.task)
    numbers = model.column("epoch")[rows]
    saved = done.weights_epoch if isinstance(done.weights_epoch, int) and not isinstance(done.weights_epoch, bool) \
        else (int(numbers[-1]) if len(numbers) else None)  # fmt: skip
    own = rows[numbers == saved] if saved is not None else rows[:0]
    found = BestClaim(claimed, best.task, saved if saved is not None else at[1], done.weights,
                      done.weights_sha256)  # fmt: skip
    if not len(own):
        return _unbacked(found, at, f"the best model (task {best.task}) saved the weights of epoch {saved}, which "
                         "the log does not have")  # fmt: skip
    saved_accuracy = float(accuracy[own[0]])
    if saved_accuracy != claimed or not math.isfinite(saved_accuracy):
        return _unbacked(found, at, f"the best model (task {best.task}) saved the weights of epoch {saved}, "
                         f"accuracy {saved_accuracy:g}")  # fmt: skip
    return found


def _unbacked(found: BestClaim, at: tuple[int, int], saved: str) -> BestClaim:
    problem = (f"the run's best epoch is task {at[0]} epoch {at[1]} (accuracy {found.accuracy:g}), but {saved}: "
               "no weights back the claimed accuracy")  # fmt: skip
    return BestClaim(found.accuracy, *at, found.weights, found.weights_sha256, problem)
