"""Warm-up prediction: extrapolate a learning curve to the epoch limit.

During a group's first rounds the search is fed a *predicted* final accuracy,
so that short early trainings do not mislead it: a saturating curve
``a − b·exp(−c·epoch)`` is fitted to the validation accuracy per epoch and
evaluated at the epoch limit.  The prediction is never below the best accuracy
observed, never above 1, and with fewer than three points (or a failed fit)
it is the best observation.  The score never uses predictions.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np


def _curve(epoch: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a - b * np.exp(-c * epoch)


def predict_final_accuracy(accuracies: Sequence[float], epoch_limit: int) -> float:
    """Predicted validation accuracy at ``epoch_limit`` from ``accuracies`` (epochs 1, 2, …)."""
    observed = np.asarray(accuracies, dtype=float)
    if observed.size == 0:
        raise ValueError("no accuracy to extrapolate from")
    best = float(observed.max())
    if observed.size < 3 or epoch_limit <= observed.size:
        return best
    epochs = np.arange(1, observed.size + 1, dtype=float)
    from scipy.optimize import OptimizeWarning, curve_fit  # here, not at the top: ≈ 0.6 s of every rank's start-up

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", OptimizeWarning)
            params, _ = curve_fit(
                _curve, epochs, observed, p0=(min(1.0, best + 0.05), 0.5, 0.5),
                bounds=([0.0, -1.0, 1e-3], [1.0, 2.0, 5.0]), maxfev=2000,
            )  # fmt: skip
    except (RuntimeError, ValueError, OptimizeWarning):
        return best
    predicted = float(_curve(np.array([float(epoch_limit)]), *params)[0])
    if not np.isfinite(predicted):
        return best
    return float(min(1.0, max(best, predicted)))
