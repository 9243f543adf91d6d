"""How settled a run's score is: two figures of OPS(t) on the score's grid.

The score is the last sample of OPS(t); a run that stopped while OPS(t) was
still climbing (or falling) would score differently a little later, so a
reader needs to know how much the last samples still move.  Two figures,
both pure functions of the grid (active times and OPS values, in order):

* **CV over the last half**: the coefficient of variation — *sample*
  standard deviation (n − 1) ÷ mean — of the OPS samples at active times
  t ≥ T/2, T the last sample's time (the run's active time).  Needs at
  least two such samples.
* **Change over the last quarter**: (OPS(T) − OPS(t₀)) ÷ OPS(T), t₀ the
  latest grid time at or before 3T/4 (so the span is at least a quarter of
  the run; on a coarse grid it is longer).  Positive: the score was still
  rising.  Needs a sample at or before 3T/4.

Each is None where the grid is too coarse to tell (too few samples: a
shorter ``score_step`` gives more) or the mean or the score is zero.  The
limits below mark a run as *not settled* in the report: a warning for the
reader, not a validity rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CV_LIMIT = 0.05
"""a CV of OPS(t) over the last half above this (5 %): the score has not settled"""
CHANGE_LIMIT = 0.05
"""a relative change of OPS over the last quarter above this in size (5 %): the score has not settled"""


def sample_cv(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n − 1) ÷ mean; None for fewer than two values or a zero mean."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    if mean == 0:
        return None
    variance = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance) / abs(mean)


def cv_last_half(times: Sequence[float], ops_per_second: Sequence[float]) -> float | None:
    """The CV of the OPS samples at t ≥ T/2 (see the module's doc); None where it cannot be told."""
    if not times:
        return None
    half = times[-1] / 2.0
    return sample_cv([ops for t, ops in zip(times, ops_per_second, strict=True) if t >= half])


def change_last_quarter(times: Sequence[float], ops_per_second: Sequence[float]) -> float | None:
    """(OPS(T) − OPS(t₀)) ÷ OPS(T), t₀ the latest grid time ≤ 3T/4; None where there is no such sample."""
    if not times or ops_per_second[-1] == 0:
        return None
    three_quarters = times[-1] * 0.75
    before = [ops for t, ops in zip(times[:-1], ops_per_second[:-1], strict=True) if t <= three_quarters]
    if not before:
        return None
    return (ops_per_second[-1] - before[-1]) / ops_per_second[-1]


@dataclass(frozen=True)
class Stability:
    """The two figures and what they say."""

    cv_last_half: float | None
    change_last_quarter: float | None

    @property
    def known(self) -> bool:
        """Both figures could be computed (the grid had enough samples)."""
        return self.cv_last_half is not None and self.change_last_quarter is not None

    @property
    def settled(self) -> bool | None:
        """True when both are within the limits, False when either is beyond, None when neither is known."""
        beyond = [(self.cv_last_half is not None and self.cv_last_half > CV_LIMIT),
                  (self.change_last_quarter is not None and abs(self.change_last_quarter) > CHANGE_LIMIT)]
        if any(beyond):
            return False
        return True if self.known else None


def stability(times: Sequence[float], ops_per_second: Sequence[float]) -> Stability:
    """Both figures of one grid."""
    return Stability(cv_last_half(times, ops_per_second), change_last_quarter(times, ops_per_second))
