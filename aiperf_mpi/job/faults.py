"""When a silent group counts as lost: a deadline derived from the group's own epoch times.

A rank that dies is reported by the MPI library when it has fault tolerance
(ULFM: ``MPI_ERR_PROC_FAILED``); a rank that hangs — a stopped process, a
device that never returns, a deadlock — may never be reported.  The master
therefore also gives each group with a task in flight a deadline: no message
from the group (monitor samples do not count: a node's monitor thread goes on
sampling while its training hangs) for ``epochs`` × the group's longest epoch
so far, plus ``margin`` seconds, and the group is lost.  Before the group has
timed anything there is no deadline: a first epoch (search, build, trace and
the epoch) has nothing to be compared with, and a false loss costs a group for
the rest of the run.

The scale is the group's own, so a fast group is caught in seconds and a
group training a large model is not cut off for being slow.  MPI-free: the
master (:mod:`aiperf_mpi.job.master`) applies it, unit tests drive it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HangPolicy:
    """How long a group may be silent before it counts as lost."""

    epochs: float = 3.0
    """multiples of the group's longest epoch (or first-epoch cost) it may be silent"""
    margin: float = 60.0
    """seconds added: a check-point write, a slow validation, a busy file system"""
    check_interval: float = 1.0
    """seconds between two walks over the groups (a walk is O(groups): never once per message)"""

    def silent_limit(self, longest_epoch: float | None, first_epoch_cost: float | None) -> float | None:
        """Seconds of silence after which the group is lost; None (no deadline) until it has timed an epoch.

        The longest of the group's epochs and its first-epoch cost (from
        its Work to its first epoch's end: a new model's search, build and
        trace included) sets the scale; the group's messages come at least
        once per epoch (EpochStarted, EpochDone), so a healthy group is never
        silent for much more than one of them.
        """
        known = [t for t in (longest_epoch, first_epoch_cost) if t is not None]
        if not known:
            return None
        return self.epochs * max(known) + self.margin


def silent_reason(silent: float, limit: float) -> str:
    """The ``group_lost`` reason for a group lost to its deadline."""
    return (f"silent for {silent:.1f} s, past its deadline of {limit:.1f} s (a multiple of its own longest epoch): "
            "a rank hangs")
