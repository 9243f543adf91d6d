"""A small Gaussian process on architecture embeddings, that fails loudly.

The kernel is a squared-exponential on an embedding (distances to anchor
architectures), hence positive semi-definite by construction; noise and, if
the Cholesky factorisation still fails, an escalating jitter make it
definite.  If even the largest jitter fails, :meth:`GaussianProcess.fit`
returns a failed :class:`FitStatus` — the caller must report it; the classic
implementation swallowed this and silently stopped learning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

JITTERS = (0.0, 1e-8, 1e-6, 1e-4, 1e-2)
NOISE = 1e-3


@dataclass(frozen=True)
class FitStatus:
    ok: bool
    jitter: float
    message: str


def rbf(a: np.ndarray, b: np.ndarray, lengthscale: float) -> np.ndarray:
    """exp(−‖a − b‖² / 2ℓ²) for every row pair."""
    sq = np.sum(a * a, axis=1)[:, None] + np.sum(b * b, axis=1)[None, :] - 2.0 * a @ b.T
    return np.exp(-np.maximum(sq, 0.0) / (2.0 * lengthscale**2))


class GaussianProcess:
    """GP regression with standardised targets and a data-driven length scale."""

    def __init__(self, kernel=rbf) -> None:
        self.kernel = kernel
        self._x: np.ndarray | None = None
        self._factor = None
        self._alpha: np.ndarray | None = None
        self._mean = 0.0
        self._scale = 1.0
        self.lengthscale = 1.0

    def fit(self, x: np.ndarray, y: np.ndarray) -> FitStatus:
        """Condition on ``x`` (n×d) → ``y`` (n); returns how it went, never raises for numerics."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        self._factor = None
        if len(x) == 0:
            return FitStatus(False, 0.0, "no data")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            return FitStatus(False, 0.0, "non-finite inputs or targets")
        self._mean = float(y.mean())
        self._scale = float(y.std()) or 1.0
        target = (y - self._mean) / self._scale
        if len(x) > 1:
            diffs = np.sqrt(np.maximum(np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1), 0.0))
            positive = diffs[diffs > 0]
            self.lengthscale = float(np.median(positive)) if positive.size else 1.0
        k = self.kernel(x, x, self.lengthscale) + NOISE * np.eye(len(x))
        if not np.all(np.isfinite(k)):
            return FitStatus(False, 0.0, "the kernel matrix has non-finite entries")
        scale = float(np.mean(np.abs(np.diag(k)))) or 1.0
        from scipy.linalg import LinAlgError, cho_factor, cho_solve  # not at the top: 0.6 s of each rank's start-up

        last_error = ""
        for jitter in JITTERS:
            try:
                factor = cho_factor(k + jitter * scale * np.eye(len(x)), lower=True, check_finite=True)
            except (LinAlgError, ValueError) as exc:
                last_error = str(exc)
                continue
            self._x, self._factor = x, factor
            self._alpha = cho_solve(factor, target)
            message = "ok" if jitter == 0.0 else f"ok with jitter {jitter:g}"
            return FitStatus(True, jitter, message)
        return FitStatus(False, JITTERS[-1], f"Cholesky failed even with jitter {JITTERS[-1]:g}: {last_error}")

    @property
    def target_scale(self) -> float:
        """Standard deviation of the fitted targets (the units of the posterior)."""
        return self._scale

    @property
    def fitted(self) -> bool:
        return self._factor is not None

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at ``x`` (in the targets' units)."""
        if not self.fitted:
            raise RuntimeError("the GP is not fitted")
        x = np.asarray(x, dtype=float)
        cross = self.kernel(x, self._x, self.lengthscale)
        mean = cross @ self._alpha
        from scipy.linalg import cho_solve  # loaded by fit already

        v = cho_solve(self._factor, cross.T)
        var = np.maximum(1.0 + NOISE - np.sum(cross * v.T, axis=1), 1e-12)
        return self._mean + self._scale * mean, self._scale * np.sqrt(var)
