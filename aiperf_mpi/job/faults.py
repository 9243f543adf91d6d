"""When a silent group counts as lost: a deadline derived from the group's own epoch times.

A rank that dies is reported by the MPI library when it has fault tolerance
(ULFM: ``MPI_ERR_PROC_FAILED``); a rank that hangs — a stopped process, a
device that never returns, a deadlock — may never be reported.  The master
therefore also gives each group with a task in flight a deadline: no message
from the group (monitor samples do not count: a node's monitor thread goes on
sampling while its training hangs) for ``epochs`` × the group's longest epoch
so far, plus ``margin`` seconds (``--hang-margin``), and the group is lost.  Before the group has
timed anything its deadline is the first-model bound (``first_model``,
``--first-model-deadline``) from its Work: a first epoch (search, build, trace
and the epoch) has nothing of its own to be compared with, so the bound is a
generous, configured one (a false loss costs a group for the rest of the run).

When the run's drain (``--grace``) ends with a group still training, the group
is lost rather than merely discarded when it was silent through the whole drain
and longer than its own longest epoch (:meth:`HangPolicy.lost_at_drain_end`): a
healthy group told to stop speaks at its epoch's end, so one that said nothing
since before the stop, for longer than any epoch it ever took, hangs.

The scale is the group's own, so a fast group is caught in seconds and a
group training a large model is not cut off for being slow.  MPI-free: the
master (:mod:`aiperf_mpi.job.master`) applies it, unit tests drive it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiperf_mpi.job.deadlines import DEFAULT_BOUNDS, NOT_READY, PhaseBounds, first_model_for


@dataclass(frozen=True)
class HangPolicy:
    """How long a group may be silent before it counts as lost."""

    epochs: float = 3.0
    """multiples of the group's longest epoch (or first-epoch cost) it may be silent"""
    margin: float = DEFAULT_BOUNDS.hang_margin
    """seconds added (``--hang-margin``; its default has its one home in :class:`~aiperf_mpi.config.RunConfig`): a
    check-point write, a slow validation, a busy file system"""
    check_interval: float = 1.0
    """seconds between two walks over the groups (a walk is O(groups): never once per message)"""
    first_model: float | None = None
    """seconds a group may be silent after a Work before it has timed any epoch (None: no deadline then)"""
    first_model_epoch_ops: float | None = None
    """the seed's first epoch, in operations: given, each group's first-model bound is derived from the peak its
    Ready reports (:meth:`first_model_for`; :attr:`first_model` is then the bound before a group is Ready)"""
    tolerant: bool = True
    """fault tolerance on: a group past its deadline is lost and the others go on; off, the run then ends with
    its score (the hung rank is ended with the job's ``MPI_Abort``; ``--resume`` continues the run)"""

    @classmethod
    def of(cls, bounds: PhaseBounds, epoch_ops: float | None, tolerant: bool) -> HangPolicy:
        """The master's policy for a run's bounds (:func:`~aiperf_mpi.job.deadlines.bounds_of` of its
        configuration): the margin ``--hang-margin``; a group's first model derived from the peak its Ready reports
        where ``epoch_ops`` (the seed's first epoch) is given, :data:`~aiperf_mpi.job.deadlines.NOT_READY` before
        that Ready, else ``--first-model-deadline``."""
        return cls(margin=bounds.hang_margin, first_model=NOT_READY if epoch_ops is not None else bounds.first_model,
                   first_model_epoch_ops=epoch_ops, tolerant=tolerant)  # fmt: skip

    def first_model_for(self, peak: float | None) -> float | None:
        """A group's own first-model bound, from the peak (ops/s) its probe measured, where it is derived
        (:func:`~aiperf_mpi.job.deadlines.first_model_for`); None: :attr:`first_model` applies."""
        if self.first_model_epoch_ops is None:
            return None
        return first_model_for(self.first_model_epoch_ops, peak)

    def silent_limit(self, longest_epoch: float | None, first_epoch_cost: float | None,
                     first_model: float | None = None) -> float | None:  # fmt: skip
        """Seconds of silence after which the group is lost; before it has timed an epoch, ``first_model`` (the
        group's own, :meth:`first_model_for`) or :attr:`first_model`.

        The longest of the group's epochs and its first-epoch cost (from
        its Work to its first epoch's end: a new model's search, build and
        trace included) sets the scale; the group's messages come at least
        once per epoch (EpochStarted, EpochDone), so a healthy group is never
        silent for much more than one of them.
        """
        known = [t for t in (longest_epoch, first_epoch_cost) if t is not None]
        if not known:
            return self.first_model if first_model is None else first_model
        return self.epochs * max(known) + self.margin

    @staticmethod
    def lost_at_drain_end(silent: float, drain: float, longest_epoch: float | None,
                          first_epoch_cost: float | None) -> bool:  # fmt: skip
        """Whether a group still training when the drain ended hangs (lost) rather than is slow (discarded).

        ``silent``: seconds since the group last spoke; ``drain``: seconds the drain lasted.  A group that spoke
        during the drain is working; one silent through it all, and for longer than its own longest epoch (or
        first-epoch cost; through the drain alone when it has timed none), would have spoken by now.
        """
        known = [t for t in (longest_epoch, first_epoch_cost) if t is not None]
        return silent >= drain and silent > max(known, default=0.0)


def silent_reason(silent: float, limit: float) -> str:
    """The ``group_lost`` reason for a group lost to its deadline."""
    return (f"silent for {silent:.1f} s, past its deadline of {limit:.1f} s (a multiple of its own longest epoch): "
            "a rank hangs")


def drain_reason(silent: float, drain: float) -> str:
    """The ``group_lost`` reason for a group found silent when the drain ended."""
    return (f"silent for {silent:.1f} s when the drain ended ({drain:.1f} s, --grace), longer than any epoch it "
            "took: a rank hangs")


def first_model_reason(silent: float, limit: float) -> str:
    """The ``group_lost`` reason for a group lost to its first-model deadline."""
    return (f"silent for {silent:.1f} s in its first model, past its deadline of {limit:.1f} s "
            "(--first-model-deadline): a rank hangs")
