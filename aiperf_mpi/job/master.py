"""The master's scheduler: MPI-free, driven one message at a time.

:class:`Master` keeps the authoritative history, decides who gets work,
decides duplicates, writes the event log, decides which weights files can
go, and knows when the run is over.  It never blocks: :meth:`Master.handle`
takes one message and returns the replies; :meth:`Master.tick` is called
between messages and starts the stop (time limit, signal, model budget).  A
transport (MPI or in-process) moves the messages; :func:`master_loop` ties
them together.

Cost per message does not grow with the number of groups G or of models N:
the history keeps O(1) per record plus the search's view
(:class:`~aiperf_mpi.search.view.MasterHistory`), a Work carries only the
view members its group lacks (at most the view's size), and every count the
loop or the progress line needs is kept as a counter rather than found by a
walk over the groups or the history.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiperf_mpi.config import RunConfig
from aiperf_mpi.job.batchio import BatchIO, BatchWork
from aiperf_mpi.job.faults import HangPolicy, drain_reason, first_model_reason, silent_reason
from aiperf_mpi.job.messages import (
    Accepted,
    Duplicate,
    EpochDone,
    EpochStarted,
    Failed,
    GroupLost,
    MonitorSample,
    Proposed,
    Ready,
    Result,
    Stop,
    VettedEpoch,
    VettedProposal,
    VettedResult,
    Work,
)
from aiperf_mpi.job.mllog import task_details
from aiperf_mpi.job.retention import Retention
from aiperf_mpi.job.transport import MasterTransport
from aiperf_mpi.job.vetting import Vetter, check_start
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import segment_graph_file
from aiperf_mpi.results.stored_weights import WEIGHTS_SHA256
from aiperf_mpi.results.timelimit import ends_after_limit
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import FAILED, TRAINED, ModelRecord, graph_hash, key_of_digest
from aiperf_mpi.search.registry import search_class
from aiperf_mpi.search.view import MasterHistory, ViewUpdate


@dataclass
class GroupState:
    """What the master knows of one group."""

    index: int
    seen: int = 0
    """history length at this group's last update: it holds the view as it was then"""
    task: int | None = None
    rounds: int = 0
    stopped: bool = False
    ranks: int = 0
    host: str = ""
    has_dictionary: bool = False
    """the wire records' compression dictionary was sent to this group"""
    handed_out: float = 0.0
    """rank 0's own clock (:meth:`Master.own_clock`) when this group's current Work left"""
    first_epoch_cost: float | None = None
    """seconds from this group's latest Work to its first completed epoch (search, build, trace, the epoch):
    what a new model costs before it adds any operations; None until one was measured"""
    last_heard: float = 0.0
    """rank 0's own clock (:meth:`Master.own_clock`) when this group last spoke (monitor samples aside) or was
    handed work"""
    longest_epoch: float | None = None
    """the wall seconds of this group's longest epoch so far (the scale of its hang deadline)"""
    lost: bool = False
    """a rank of the group died or hangs: it gets nothing more and what it sends is ignored"""
    first_model: float | None = None
    """this group's own first-model bound, derived from the peak its Ready reported (HangPolicy.first_model_for)"""


def _graphs_file_end(path: Path) -> int:
    """The size of a segment's graphs file before the master appends to it (created empty if need be).

    A segment's file is new (a resume starts the next segment's); should one exist anyway, a cut last line is
    ended with a newline first, so that the next graph starts a line of its own where the master says.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        size = os.fstat(descriptor).st_size
        if size and os.pread(descriptor, 1, size - 1) != b"\n":
            size += os.write(descriptor, b"\n")
        return size
    finally:
        os.close(descriptor)


@dataclass
class Master:
    """The scheduler on rank 0."""

    config: RunConfig
    log: runlog.EventLog
    history: MasterHistory
    groups: int
    run_dir: Path
    clock: Callable[[], float] = time.monotonic
    next_task: int = 0
    mllog: object | None = None
    search_config: SearchConfig = field(default_factory=SearchConfig)
    """the leaders' search settings: which models are candidate parents"""
    weights: dict[int, str] = field(default_factory=dict)
    """weights files already in the run directory (a resumed run's), by model id"""
    segment: int = 1
    """the run segment (a start or a --resume): its graphs go to their own appended file"""
    state: dict[int, GroupState] = field(default_factory=dict)
    started: float = 0.0
    stopping: str = ""
    stop_started: float = 0.0
    tasks: dict[int, int] = field(default_factory=dict)
    """task in flight → its group"""
    ops_done: int = 0
    epochs_done: int = 0
    best_accuracy: float | None = None
    handled: int = 0
    failed: int = 0
    """tasks reported Failed"""
    duplicates: int = 0
    """proposals answered Duplicate"""
    stopped_groups: int = 0
    early_stops: int = 0
    """groups stopped before the time limit because a new model's first epoch could not end by it"""
    hang: HangPolicy | None = None
    """the deadline after which a silent group counts as lost (None: no deadline); with fault tolerance off
    (``hang.tolerant`` false) a group past it ends the run (:data:`HANG_STOP`) instead of the run going on"""
    lost_groups: int = 0
    newly_lost: list[int] = field(default_factory=list)
    """groups lost since the loop last looked (it tells the transport to forget them)"""
    ignored: int = 0
    """messages from lost groups, ignored"""
    retention: Retention = field(init=False)
    vetter: Vetter = field(default_factory=Vetter)
    """checks and encodes the leaders' messages that no relay rank vetted (job/vetting.py)"""
    paused: float = 0.0
    """seconds rank 0 itself did not run its loop, or held every reply behind a stalled write (:meth:`pace`): a
    stop, a descheduling, a blocked write; every group's deadline is measured without them"""
    stalls: list[float] = field(default_factory=list)
    """each of rank 0's own stalls, in seconds, as :meth:`pace` found them (``run_stop``'s ``rank0_stalls``)"""
    compress_later: bool = False
    """leave the compression of a Work's new view records to :meth:`take_batch`'s work (the I/O thread), which
    runs before the replies leave: what :func:`master_loop` does; off, :meth:`handle` returns complete replies"""

    def __post_init__(self) -> None:
        self.state = {g: GroupState(g) for g in range(self.groups)}
        self.started = self.clock()
        self._stop_cursor = 0
        """the next group the end's Stops go to (:meth:`tick`, :data:`STOP_SLICE` groups a call)"""
        self._graphs: list[bytes] = []
        self._graph_file = segment_graph_file(self.segment)
        self._graph_path = str(self.run_dir / self._graph_file)
        self._graph_file_json = self.log.encode(self._graph_file)
        self._graph_offset = _graphs_file_end(self.run_dir / self._graph_file)
        """where the next accepted graph will lie in its segment's file: the master tracks the file's size
        itself (the I/O thread appends in the order accepted), so the log can say where before it is written"""
        self._later: list[Callable[[], None]] = []
        self._accepted: dict[int, tuple[int, str]] = {}
        """task → (length, graph hash) of the graph the master accepted for it: its Result's graph is not hashed
        again (the leader sends the same string; the length guards against one that does not)"""
        self._task_details: dict[int, str] = {}
        """task → its MLLOG ``global_batch_size`` members after its task (group, rank batch, kernel size), until its
        first epoch starts (or it ends without one)"""
        self.retention = Retention(keep_all=self.config.keep_weights == "all")
        for model_id, weights in sorted(self.weights.items()):
            self.retention.added(model_id, weights)
        self._search = search_class(self.config.search)  # the leaders' search: which parents it may choose
        self._candidates: list[int] = []
        self._update_candidates()
        self._next_hang_check = self.started
        self._last_pace = self.started
        self._paced = False
        """the loop paces (:meth:`pace` was called): deadlines are judged at its last pass (:meth:`_judging_clock`)"""
        self._io_counted = 0.0
        """of the I/O thread's current wait, the seconds already counted as rank 0's stall"""
        self._stop_started_own = 0.0
        self._hang_cursor = self.groups
        """the next group the hang check's round looks at (``groups``: no round under way)"""

    # ------------------------------------------------------------------ messages

    def handle(self, group: int, message: object) -> list[tuple[int, object]]:
        """One message from ``group``'s leader → the replies to send."""
        self.handled += 1
        state = self.state[group]
        if state.lost:  # a group lost to its deadline may wake up: its task was discarded, it gets nothing more
            self.ignored += 1
            return []
        if isinstance(message, GroupLost):
            self.lose(group, message.ranks, message.reason)
            return []
        if not isinstance(message, MonitorSample):  # a monitor thread samples on while its group's training hangs
            state.last_heard = self.clock() - self.paused
        if isinstance(message, MonitorSample):
            energy = {"energy": message.energy} if message.energy else {}  # a node's meters (issue 53)
            sample = self.log.write(runlog.MONITOR, time=message.time, group=group, host=message.host,
                                    node=message.node, source=message.source, devices=message.devices, flush=False,
                                    **energy)  # fmt: skip
            if energy and self.mllog is not None:  # its node's power since its last sample (MLPerf's power line)
                self.mllog.energy(sample)
            return []
        kind = type(message)
        # a leader's message is vetted here (job/vetting.py), or arrives vetted from a relay rank (--relays)
        if kind is VettedEpoch or kind is EpochDone:
            vetted = message if kind is VettedEpoch else self.vetter.epoch(message, group)
            self._epoch(group, vetted)
            if vetted.next_start is not None:  # the next epoch's start rode on it (messages.EpochDone)
                self._epoch_started(vetted.next_start)
            return []
        if kind is EpochStarted:
            self._epoch_started(check_start(message))
            return []
        if kind is VettedProposal or kind is Proposed:
            proposal = message if kind is VettedProposal else self.vetter.proposal(message)
            return [(group, self._proposed(group, proposal))]
        if kind is VettedResult or kind is Result:
            self._result(group, message if kind is VettedResult else self.vetter.result(group, message))
            self._task_ended(state)
            return self._next(state)
        if isinstance(message, Ready):
            if type(message.ranks) is not int or type(message.host) is not str or len(message.host) > 255:
                raise ValueError("a Ready's ranks must be a number and its host a name")  # logged in group_lost later
            state.ranks, state.host = message.ranks, message.host
            if self.hang is not None and self.hang.first_model_epoch_ops is not None:
                state.first_model = self.hang.first_model_for(self._peak_of(message))
            if message.peak is not None:
                self.log.write(runlog.PEAK, sync=True, group=group, host=message.host, **message.peak)
            return self._next(state)
        if isinstance(message, Failed):
            self._failed(group, message)
            self._task_ended(state)
            return self._next(state)
        raise TypeError(f"the master cannot handle {type(message).__name__}")

    def tick(self, external_stop: str = "") -> list[tuple[int, object]]:
        """Between messages: start the stop when its time has come; Stop every group once, :data:`STOP_SLICE`
        groups a call (at 65,536 groups all at once were ≈ 0.25 s of the loop's CPU and as many sends in one
        pass: the groups' last epochs' messages queued behind them)."""
        if self.hang is not None:
            self._check_hangs()
        if not self.stopping:
            elapsed = self.clock() - self.started
            if external_stop:
                self._begin_stop(external_stop)
            elif elapsed >= self.config.time_limit:
                self._begin_stop("time limit")
            elif self.config.max_models and len(self.history) >= self.config.max_models:
                self._begin_stop("max models")
            elif self.stopped_groups == self.groups and not self.tasks:
                self._begin_stop(ALL_LOST if self.lost_groups == self.groups
                                 else "time limit" if self.early_stops else "max models")  # fmt: skip
        if not self.sending_stops:
            return []
        first = self._stop_cursor
        self._stop_cursor = min(self.groups, first + STOP_SLICE)  # one walk over the groups, once per run
        states = (self.state[index] for index in range(first, self._stop_cursor))
        return [(s.index, self._stop(s, self.stopping)) for s in states if not s.stopped]

    @property
    def sending_stops(self) -> bool:
        """The stop has begun and some groups were not yet sent their Stop by :meth:`tick`."""
        return bool(self.stopping) and self._stop_cursor < self.groups

    def take_batch(self) -> BatchWork:
        """The file work of the messages handled since the last call; to be done before their replies leave.

        The graphs of accepted proposals (to append to the segment's file), whether the log needs an
        fsync, and the weights files no longer inheritable — logged here as
        one ``weights_removed`` event, so that the fsync puts the reason on
        disk before the files go (:mod:`aiperf_mpi.job.batchio`).
        """
        gone = self.retention.sweep()
        if gone:
            self.log.write(runlog.WEIGHTS_REMOVED, sync=True, models=[m for m, _ in gone], files=[f for _, f in gone])
        work = BatchWork(self._graphs, self.log.take_sync(), [self.run_dir / f for _, f in gone], self._later,
                         graph_path=self._graph_path)  # fmt: skip
        if self.mllog is not None:  # after the event log's flush: mllog.log never runs ahead of it
            self.mllog.flush_due()
        self._graphs, self._later = [], []
        return work

    @property
    def running(self) -> int:
        """Tasks in flight."""
        return len(self.tasks)

    @property
    def tasks_in_flight(self) -> list[int]:
        """The tasks still training, by task number (``run_stop``'s ``discarded_tasks``; not their groups: a
        walk over them, for the end of the run, not per message)."""
        return sorted(self.tasks)

    @property
    def done(self) -> bool:
        """Every group was told to stop and no task is still running."""
        return bool(self.stopping) and self.stopped_groups == self.groups and not self.tasks

    @property
    def grace_expired(self) -> bool:
        return bool(self.stopping) and self.clock() - self.stop_started > self.config.grace

    # ------------------------------------------------------------------ lost groups

    def lose(self, group: int, ranks: list[int], reason: str) -> None:
        """Take ``group`` out of the run: log ``group_lost``, drop its running task, never send it work again.

        The task's completed epochs were logged (they count); its running
        epoch never will be, and no ``model_done`` follows its proposal (a
        verifier accepts it as a discarded task).  The run's active time is
        unchanged: lost capacity costs score, as it would on the machine.
        """
        state = self.state[group]
        if state.lost:
            return
        now = self.own_clock()
        # the task the log knows it trains: one handed out but not yet proposed (lost in its search: the
        # first-model deadline) left no trace in the log, and the log's readers hold the group to its proposals
        task = state.task if state.task in self._accepted else None
        self.log.write(runlog.GROUP_LOST, sync=True, group=group, ranks=sorted(ranks), host=state.host,
                       task=task, reason=reason, silent=round(now - state.last_heard, 3))  # fmt: skip
        state.lost = True
        self.lost_groups += 1
        self.newly_lost.append(group)
        if not state.stopped:
            state.stopped = True
            self.stopped_groups += 1
            self.retention.release(group)
        self._task_ended(state)

    @property
    def checking_hangs(self) -> bool:
        """A round of the hang check is under way (the loop should come back soon for its next slice)."""
        return self._hang_cursor < self.groups

    def _check_hangs(self) -> None:
        """A round at most once per ``check_interval``: lose every group with a task in flight silent past its
        deadline, and (given a first-model bound) every group never Ready that long after the start line (its
        leader hangs before its first message: in the set-up of its runner, its data, or a collective of its
        group).  A round goes :data:`HANG_CHECK_SLICE` groups a call: the whole walk at once took ≈ 0.5 µs a
        group, ≈ 35 ms at 65,536 groups once a second on this machine under load, a pause every message arriving
        meanwhile queued behind (benchmarks/master.py: the queueing p99's goal is 5 ms)."""
        now = self._judging_clock()
        if self._hang_cursor >= self.groups:
            if now < self._next_hang_check:
                return
            self._next_hang_check = now + self.hang.check_interval
            self._hang_cursor = 0
        first, self._hang_cursor = self._hang_cursor, min(self.groups, self._hang_cursor + HANG_CHECK_SLICE)
        state_of = self.state
        for index in range(first, self._hang_cursor):
            state = state_of[index]
            if state.lost or state.stopped:
                continue
            if state.task is None:  # waiting for its Work is the master's doing; before its first Ready, not
                if state.ranks or self.hang.first_model is None:
                    continue
                state.last_heard = state.last_heard or self.started  # silent since the start line (own clock: 0 paused)
            limit = self.hang.silent_limit(state.longest_epoch, state.first_epoch_cost, state.first_model)
            silent = now - state.last_heard
            if limit is not None and silent > limit:
                timed = state.longest_epoch is not None or state.first_epoch_cost is not None
                self.lose(state.index, [], (silent_reason if timed else first_model_reason)(silent, limit))
                if not self.hang.tolerant and not self.stopping:  # the hung rank cannot be left behind: end
                    self._begin_stop(HANG_STOP)

    def lose_silent_at_drain_end(self) -> int:
        """When the drain ends: lose each group still training that was silent through it (it hangs); the count.

        A group that spoke during the drain is slow, and its task is discarded as before
        (:meth:`HangPolicy.lost_at_drain_end`).  A stopped rank's group whose deadline falls after the drain's
        end is so logged lost with the default ``--grace`` (the multi-node SIGSTOP case), not merely discarded.
        """
        now = self._judging_clock()
        drain, lost = now - self._stop_started_own, 0
        for group in sorted(set(self.tasks.values())):
            state = self.state[group]
            silent = now - state.last_heard
            if HangPolicy.lost_at_drain_end(silent, drain, state.longest_epoch, state.first_epoch_cost):
                self.lose(group, [], drain_reason(silent, drain))
                lost += 1
        return lost

    # ------------------------------------------------------------------ internals

    def _peak_of(self, ready: Ready) -> float | None:
        """A Ready's group's peak in ops/s: its probe's, or a rehearsal's stand-in rate for its ranks (exact)."""
        peak = ready.peak.get("ops_per_second") if isinstance(ready.peak, dict) else None
        if isinstance(peak, int | float) and not isinstance(peak, bool):
            return float(peak)
        if self.config.rehearse:
            return self.config.rehearse_rate * max(1, ready.ranks)
        return None

    def _begin_stop(self, reason: str) -> None:
        self.stopping = reason
        self.stop_started = self.clock()
        self._stop_started_own = self.own_clock()

    # ------------------------------------------------------------------ rank 0's own time

    def own_clock(self) -> float:
        """The master's clock less rank 0's own stalls: what every group's deadline is measured on.

        A group is silent when it does not speak while rank 0 listens.  Measured on the wall clock, a rank 0
        that was stopped (SIGSTOP), descheduled, or blocked in a write for longer than a group's deadline
        found every healthy group silent when it ran again and declared them lost (issue 50: "2 group(s) lost |
        stopping: hang deadline" after a SIGCONT).  The time limit and the grace stay on the wall clock: the
        scored window is the declared one, whatever rank 0 did.
        """
        return self.clock() - self.paused

    def _judging_clock(self) -> float:
        """:meth:`own_clock` as a deadline judges it: never past the loop's last pass by a gap it has not counted.

        A stop can land anywhere in a pass, not only in its poll: stopped in a handler or a write, rank 0 woke up
        and judged the deadlines before the next pass's :meth:`pace` had counted the gap (CI of ed2ddd5: "group 0
        lost … group 1 lost", then "rank 0 itself was stalled for 25.0 s").  Once the loop paces, a gap of more
        than :data:`STALL_SECONDS` since its last pass is judged at that pass; the next pass counts it.
        """
        now = self.clock()
        if self._paced and now - self._last_pace > STALL_SECONDS:
            return self._last_pace - self.paused
        return now - self.paused

    def pace(self, io_wait: float = 0.0) -> float:
        """Called by the loop at every pass: count rank 0's own stall, if any; the stall that just ended (s) or 0.

        A stall is a gap of more than :data:`STALL_SECONDS` between two passes (the loop passes at least every
        0.2 s while it runs), or a wait of the I/O thread's oldest batch of more than :data:`IO_STALL_SECONDS`
        (``io_wait``: its replies, the groups' next Work among them, are held until the log is on disk), counted
        whole from the batch's submission to the end of the episode.  Either is added to
        :attr:`paused`, so every group's deadline moves by it, and kept in :attr:`stalls`.
        """
        now = self.clock()
        gap, self._last_pace, self._paced = now - self._last_pace, now, True
        if io_wait > IO_STALL_SECONDS:  # the replies wait for the disk: the loop runs, the groups cannot speak
            # an episode's whole wait when it is first seen, then each pass's gap while it lasts (the oldest batch
            # may change within it: the thread takes every queued batch at once, and a younger one waits on)
            counted = io_wait if not self._io_counted else gap
            self.paused += counted
            self._io_counted += counted
            return 0.0
        ended, self._io_counted = self._io_counted, 0.0
        if ended:
            self.stalls.append(ended)
        if gap > STALL_SECONDS:
            self.paused += gap
            self.stalls.append(gap)
            return gap
        return ended

    def stall_summary(self) -> dict:
        """``run_stop``'s ``rank0_stalls``: how many, their seconds in all, the longest (empty when none)."""
        if not self.stalls:
            return {}
        return {"count": len(self.stalls), "seconds": round(sum(self.stalls), 3), "longest": round(max(self.stalls), 3)}

    def _update(self, state: GroupState) -> ViewUpdate:
        update = self.history.update(state.seen, not state.has_dictionary, self._later if self.compress_later else None)
        state.seen = len(self.history)
        state.has_dictionary = state.has_dictionary or bool(update.dictionary)
        return update

    def _stop(self, state: GroupState, reason: str) -> Stop:
        """The group's Stop: its reason only.  A stopping leader never searches again, so the view members it
        lacks would be of no use to it, and the end's Stops go out together (:meth:`tick`): each carrying its
        group's update, rank 0 held every group's view records at once — 55–62 kB a group, 225 MB at 4,096
        groups and 4.1 GB at 65,536 in the master bench (compressed on the I/O thread, pickled, and kept by MPI
        until each leader received it).  Now a Stop is 36 bytes pickled, whatever the run's size."""
        state.stopped = True
        self.stopped_groups += 1
        self.retention.release(state.index)
        return Stop(reason)

    def _next(self, state: GroupState) -> list[tuple[int, object]]:
        budget_spent = bool(self.config.max_models) and self.next_task >= self.config.max_models
        if self.stopping or budget_spent:
            if state.stopped:
                return []
            return [(state.index, self._stop(state, self.stopping or "max models"))]
        now = self.clock()
        seconds_left = self.config.time_limit - (now - self.started)
        if ends_after_limit(seconds_left, state.first_epoch_cost):
            # a model handed out now would end its first epoch after the time limit: the run would wait for it
            # in the grace period (every other group idle) or lose it; the group stops here instead
            self.early_stops += 1
            return [(state.index, self._stop(state, "time limit: no new model's first epoch fits before it"))]
        update = self._update(state)
        self.retention.refer(state.index, self._candidates)
        state.rounds += 1
        task = self.next_task
        self.next_task += 1
        state.task = task
        state.handed_out = state.last_heard = now - self.paused
        self.tasks[task] = state.index
        return [(state.index, Work(task, update, state.rounds, seed_model=not self.history.trained,
                                   seconds_left=seconds_left))]  # fmt: skip

    def _task_ended(self, state: GroupState) -> None:
        if state.task is not None:
            self.tasks.pop(state.task, None)
            self._task_details.pop(state.task, None)
            self.retention.task_ended(state.task)
        state.task = None

    def _update_candidates(self) -> None:
        """The search's candidate parents and the best observed model, after the history changed."""
        view = self.history.view
        if self.config.inherit:
            members = view.ids() if self._search.parents_from_whole_view else []  # only a search that reads them
            best_ids = view.best(self.search_config.parents)
            self._candidates = self._search.candidate_parents(self.search_config, best_ids, members)
        else:
            self._candidates = []  # no child loads a parent's weights
        best = self.history.best_observed
        self.retention.candidates(self._candidates, None if best is None else best[1])

    def _proposed(self, group: int, proposal: VettedProposal) -> Accepted | Duplicate:
        """Accept a new architecture (log it, keep its graph) or refuse one the run has seen.

        The proposal was checked when it was vetted (its encoded fields parse and match the schema; the parent
        they log is the one the duplicate rule reads), before anything here changes.
        """
        key = key_of_digest(proposal.digest)
        if proposal.parent is not None and self.history.has_hash(key):
            self.duplicates += 1
            return Duplicate(proposal.task_id)
        offset = self._graph_offset  # the line's place is known before it is written
        data = proposal.data
        # the master's fields, then the leader's, composed (a digest is hex, the file's name encoded once):
        # tests/unit/test_vetting.py checks that each line is the log encoder's own text
        members = proposal.members
        leader = f",{members[1:]}" if len(members) > 2 else "}"
        self.log.write_tail(runlog.MODEL_PROPOSED, f',"task":{proposal.task_id},"group":{group},"graph_file":'
                            f'{self._graph_file_json},"graph_sha256":"{proposal.digest}","graph_offset":{offset},'
                            f'"graph_bytes":{len(data)}{leader}')  # fmt: skip
        self.history.add_hash(key)
        self._accepted[proposal.task_id] = (proposal.length, key)
        self._task_details[proposal.task_id] = task_details(group, proposal.hparams)
        self._graph_offset += len(data) + 1
        self._graphs.append(data + b"\n")
        self.retention.task_started(proposal.task_id, proposal.parent)
        return Accepted(proposal.task_id)

    def _epoch_started(self, message: EpochStarted) -> None:
        details = self._task_details.pop(message.task_id, "") if message.epoch == 1 else ""
        if self.mllog is not None:  # the event log records an epoch once, when it is done
            self.mllog.epoch_start(message.task_id, message.epoch, message.time, message.global_batch, details)

    def _epoch(self, group: int, message: VettedEpoch) -> None:
        state = self.state[group]
        epoch = message.epoch  # checked when vetted: joined to the master's fields as the leader encoded it
        self.log.write_tail(runlog.EPOCH, message.tail, sync=True)
        if message.task_id == state.task and epoch.get("epoch") == 1:
            state.first_epoch_cost = self.own_clock() - state.handed_out
        wall = epoch.get("end", 0.0) - epoch.get("start", 0.0)
        state.longest_epoch = wall if state.longest_epoch is None else max(state.longest_epoch, wall)
        self.ops_done += int(epoch["ops"])
        self.epochs_done += 1
        accuracy = epoch.get("val_accuracy")
        if accuracy is not None and math.isfinite(accuracy):
            self.best_accuracy = accuracy if self.best_accuracy is None else max(self.best_accuracy, accuracy)
        if self.mllog is not None:  # its text composed when it was vetted (job/mllog.epoch_stop_texts)
            self.mllog.epoch_stop_texts(epoch["end"], message.mllog)

    def append(self, record: ModelRecord, key: str | None = None, body: bytes = b"") -> None:
        """Add a finished model to the history and the retention state (it is not logged here).

        :meth:`handle` logs each Result and Failed, then calls this; the
        master benchmark calls it alone to load a history of 10⁵ models.
        ``key``: the graph's hash when known; ``body``: the view record its leader compressed.
        """
        self.history.append(record, key or graph_hash(record.graph), body)
        self.retention.added(record.id, record.weights)
        self._update_candidates()

    def _result(self, group: int, message: VettedResult) -> None:
        """Log ``model_done`` (the vetted record, its id prefixed) and add the model to the history."""
        parent, next_id = message.parent, self.history.next_id
        if parent is not None and parent >= next_id:  # its type was vetted; its range needs the history
            raise ValueError(f"task {message.task_id}: parent {parent!r} is not an earlier model, or an accuracy is "
                             "not a number")  # checked here, before model_done is written  # fmt: skip
        length, key = self._accepted.get(message.task_id, (-1, ""))
        body = message.view_record
        if length != len(message.graph) or not (type(body) is bytes and len(body) <= length + 1024
                                                 and self.history.codec.accepts(body)):  # fmt: skip
            # not the graph the master accepted, or a record whose header no leader could decode: rank 0
            # compresses it (the leader's record only saves rank 0 that work) and hashes a graph not accepted
            body = b""
            if length != len(message.graph):
                key = ""
        record = ModelRecord(id=next_id, parent=parent, graph=message.graph, status=TRAINED if message.trained
                             else FAILED, accuracy=message.accuracy, predicted_accuracy=message.predicted_accuracy,
                             weights=message.weights_file)  # the search's fields; the rest: model_text  # fmt: skip
        # the record as ModelRecord.fields() orders it, without its graph (job/vetting.py), its id first
        model = f'{{"id":{next_id},{message.model_text[1:]}'
        digest = f',"{WEIGHTS_SHA256}":"{message.weights_sha256}"' if message.weights_sha256 else ""  # vetted hex
        self.log.write_tail(runlog.MODEL_DONE, f',"model":{model},"task":{message.task_id},"group":{group}{digest}}}',
                            sync=True)  # fmt: skip
        self._accepted.pop(message.task_id, None)
        self.append(record, key or None, body)

    def _failed(self, group: int, message: Failed) -> None:
        self._accepted.pop(message.task_id, None)
        record = ModelRecord(
            id=self.history.next_id, parent=message.parent, graph=message.graph or "{}", status=FAILED,
            hparams=message.hparams, epochs=message.epochs,
            timings={"task": message.task_id, "group": group, "error": message.reason},
        )  # fmt: skip
        self.failed += 1
        self.append(record)
        self.log.write(runlog.MODEL_FAILED, sync=True, task=message.task_id, group=group, model=record.id,
                       rank=message.rank, host=message.host, reason=message.reason, traceback=message.traceback,
                       graph_hash=record.graph_hash, flush=False)  # fmt: skip

    def progress_line(self) -> str:
        elapsed = self.clock() - self.started
        rate = self.ops_done / elapsed if elapsed > 0 else 0.0
        best = "-" if self.best_accuracy is None else f"{self.best_accuracy:.4f}"
        return (
            f"[{_clock(elapsed)}] models {self.history.trained} done, {self.failed} failed, "
            f"{self.running} running | epochs {self.epochs_done} | OPS {rate / 1e9:.3f} G/s | best accuracy {best}"
            + (f" | {self.early_stops} group(s) done: no new model fits before the time limit"
               if self.early_stops and not self.stopping else "")
            + (f" | {self.lost_groups} group(s) lost" if self.lost_groups else "")
            + (f" | stopping: {self.stopping}" if self.stopping else "")
        )


HANG_STOP = runlog.HANG_REASON
"""the run_stop reason when fault tolerance is off and a group passed its deadline: the run ends with its score
(on the axis as it ran, like a signal's stop: ``--resume`` continues it)"""
ALL_LOST = "all groups lost"
"""the run_stop reason when every group was lost before the time limit (the window is still the time limit)"""


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


STOP_SLICE = 4096
"""groups :meth:`Master.tick` sends their Stop per call at the end (≈ 16 ms of the loop's CPU on this machine)"""
STALL_SECONDS = 2.0
"""a gap between two passes of the master's loop (or a wait of its I/O thread) longer than this is rank 0's own
stall (:meth:`Master.pace`): a pass polls at most 0.2 s and handles at most :data:`BATCH` messages (milliseconds;
the collector's full pass ≈ 50 ms at 65,536 groups), an fsync takes milliseconds on a healthy file system"""
IO_STALL_SECONDS = 10.0
"""a wait of the I/O thread's oldest batch longer than this is rank 0's own stall (:meth:`Master.pace`): longer
than :data:`STALL_SECONDS`, so that a slow but working file system (fsyncs of seconds, one after another) does not
stop rank 0's own clock, and with it every group's deadline"""
HANG_CHECK_SLICE = 1024
"""groups the hang check looks at per call of :meth:`Master.tick` (≈ 0.5 ms): a round over 65,536 groups takes 64
passes of the loop, which polls every millisecond while one is under way (:func:`master_loop`)"""
BATCH = 64
"""messages the master handles before it hands their file work (fsync included) and replies to its I/O thread"""


def retire_survivors() -> None:
    """Put what survived the batch just handled out of the cyclic collector's sight (after the loop's batch).

    The master's objects hold no reference cycles (records, views, replies, group states): reference counts
    free them, and the cyclic collector only walks them.  Its full collections still came every second or so
    at 65,536 groups and took ≈ 50 ms each — a pause every message arriving meanwhile queues behind — and its
    collections were ≈ 11 % of the loop's CPU (BENCHMARKS.md, the master).  So each batch's survivors are
    frozen (:func:`gc.freeze` is a list splice): a collection then walks only the current batch's objects.
    What is frozen is never collected as a cycle, so the young generations go first: a cycle the batch made
    (an exception's traceback, say) is freed here, not frozen for the run.
    """
    gc.collect(1)
    gc.freeze()


REFUSED = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError)
"""what a handler raises for a message it cannot take — a leader's bug, a forged or damaged message — having
checked it before changing anything: the master loses that group, not the run (:func:`refuse`).  The last two
are a net: a number too large for a float, a list that holds itself (the log's encoder recurses), which the
handlers' own checks are meant to stop first"""


def refuse(master: Master, group: int, message: object, exc: Exception) -> None:
    """A message rank 0 cannot take ends its group's part in the run, as a dead node does: ``group_lost``.

    Its running task is discarded and it gets nothing more; the other groups go on, and the run ends with the
    exit status of a run that lost groups.  Before, one such message ended the whole run with a traceback.
    """
    reason = f"rank 0 could not take its {type(message).__name__}: {type(exc).__name__}: {exc}"
    print(f"aiperf_mpi: warning: group {group}: {reason}", flush=True)
    master.lose(group, [], reason[:2000])


def stall_line(seconds: float) -> str:
    """The line rank 0 prints when it finds it was itself stalled (:meth:`Master.pace`)."""
    return (f"aiperf_mpi: rank 0 itself was stalled for {seconds:.1f} s (stopped, descheduled or waiting on its file "
            "system); every group's deadline moves by as much: no group is blamed for it")


def _forget_lost(master: Master, transport: MasterTransport) -> None:
    """Tell the transport about groups lost since the last call (it sends them nothing more), and say so once."""
    for group in master.newly_lost:
        transport.lose(group)
        state = master.state[group]
        print(f"aiperf_mpi: group {group} on {state.host or '?'} lost; its running task is discarded, the other "
              f"groups go on ({master.groups - master.stopped_groups} "
              "still training)", flush=True)  # fmt: skip
    master.newly_lost.clear()


def master_loop(
    master: Master,
    transport: MasterTransport,
    stop_flag: Callable[[], str],
    progress_interval: float,
    urgent: Callable[[], bool] = lambda: False,
    beat: Callable[[], None] = lambda: None,
) -> str:
    """Poll leaders, hand out work, stop; ``'done'``, ``'grace expired'`` or ``'terminated'``.

    ``urgent()`` true (SIGTERM: the kill is under way) ends the loop as soon
    as the stop has begun, without waiting for the groups' running epochs.
    ``beat()`` is called at every pass: rank 0's heartbeat to the leaders that watch it (over MPI,
    :class:`~aiperf_mpi.mpi.heartbeat.RankZeroHeartbeat`, which sends only every few seconds).  Every pass also
    tells the master how long it took (:meth:`Master.pace`): a stall of rank 0's own moves every group's deadline.

    Progress is printed as plain periodic lines, never as a refreshing line:
    Open MPI gives rank 0 a pseudo-terminal even when mpirun's output goes to
    a file, so ``isatty()`` cannot tell, and carriage returns garbled the
    batch logs (seen here).
    """
    last_progress = time.monotonic()
    master.compress_later = True  # every reply below leaves through the I/O thread, which completes it first
    # what exists now lives for the run (a state per group, a resumed history, the modules): out of the cyclic
    # collector's sight, a full collection walks only what was made since — 20–25 ms instead of 80–90 ms at
    # 65,536 groups (BENCHMARKS.md, the master), a pause that every message arriving meanwhile queues behind
    gc.collect()  # garbage first: what is frozen is never collected
    gc.freeze()
    # the graphs file, fsyncs and removals, off this thread, each under the log's stall guard (--io-deadline)
    with BatchIO(master.log.fsync, master.log.stall_guard) as io:
        # the Stops first, then the file work (when a Stop carried view records, the batch that carried it
        # compressed them; taken the other way round, a resumed run stopped at once sent its groups empty records)
        if stall := master.pace():  # rank 0 stopped between the start line and here: no group's silence
            print(stall_line(stall), flush=True)
        stops = master.tick(stop_flag())
        io.submit(master.take_batch(), stops)
        replies: list[tuple[int, object]] = []
        held = 0  # messages handled since the last batch went to the I/O thread
        while not master.done or io.pending:
            # replies may be released any moment; a round of the hang check, or the Stops, go on at the next pass
            item = transport.poll(0.001 if io.pending or master.checking_hangs or master.sending_stops else 0.2)
            beat()
            stall = master.pace(io.waiting())
            if stall:
                print(stall_line(stall), flush=True)
            handled = 0
            while item is not None and handled < BATCH:  # a burst of messages shares one fsync
                try:
                    replies += master.handle(*item)
                except REFUSED as exc:  # checked before it changed anything (the handlers): its group is lost
                    refuse(master, *item, exc)
                handled += 1
                item = transport.poll(0.0) if handled < BATCH else None
                if item is None:
                    break
            held += handled
            replies += master.tick(stop_flag())
            _forget_lost(master, transport)
            # the batch goes to the I/O thread when that is free (or BATCH messages wait): taken while it is busy,
            # a batch would only wait in its queue, and each costs the loop ≈ 35 µs (the log's write, the sweep);
            # at 65,536 groups batches of two or three messages made that ≈ 100 µs of the loop's CPU per model
            # (BENCHMARKS.md, the master).  While it is busy, io.pending keeps this loop going.
            if not io.pending or held >= BATCH:
                io.submit(master.take_batch(), replies)  # what was reported is on disk before anyone hears back
                replies = []
                if held:
                    retire_survivors()
                held = 0
            for group, message in io.completed():
                transport.send(group, message)
            now = time.monotonic()
            if now - last_progress >= progress_interval:
                last_progress = now
                print(master.progress_line(), flush=True)
            if master.stopping and master.running and urgent():
                return "terminated"
            if master.grace_expired and master.running and not master.lose_silent_at_drain_end():
                return "grace expired"
            _forget_lost(master, transport)
        for failure in io.close()[:1]:
            print(f"aiperf_mpi: warning: {len(io.failures)} weights file(s) could not be removed, e.g. {failure}",
                  flush=True)  # fmt: skip
        # replies the I/O thread released between the loop's last look and its test of io.pending (the last
        # Stops, say): without this a leader could wait for its Stop for ever
        for group, message in io.completed():
            transport.send(group, message)
    return "done"
