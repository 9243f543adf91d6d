"""The end-of-run rule: no work is begun that would end after the run's time limit.

The scored window is the time limit.  Work still running when it passes
either finishes in the grace period while every other group waits (the
run's active time grows by it) or is lost; so the master hands out no model
whose first epoch would not fit, the leader begins no epoch that would not
fit and the trainer gives up a new model's first epoch once its measured
steps say it would not fit.  Each measures what the work takes in its own
way (the group's first epoch, the task's last epoch, the median step); the
rule they apply to it is this one function, so all three stop at the same
boundary.
"""

from __future__ import annotations


def ends_after_limit(seconds_left: float | None, seconds_needed: float | None) -> bool:
    """Whether work taking ``seconds_needed``, begun ``seconds_left`` before the time limit, would end after it.

    ``None`` for either says there is nothing to judge (no time limit, or
    nothing measured yet): the work goes ahead.  Work that ends exactly at
    the limit fits.
    """
    return seconds_left is not None and seconds_needed is not None and seconds_needed > seconds_left
