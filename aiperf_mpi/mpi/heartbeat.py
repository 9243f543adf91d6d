"""Rank 0 watched: its heartbeat to a few group leaders, whose watch ends the job when rank 0 falls silent.

Every other deadline of the job is kept by rank 0 or by a rank waiting in a collective.  Mid-run nobody waited
for rank 0 with a bound: a leader training a model sends its epochs and blocks only when it needs an answer,
with no deadline, so a rank 0 stopped (SIGSTOP), descheduled or hung mid-run held the allocation (issue 50: alive
300 s after a ``kill -STOP`` of rank 0, and still going).

So rank 0's master loop sends a small heartbeat every :data:`BEAT_SECONDS` to the leaders of at most
:data:`~aiperf_mpi.mpi.plan.WATCHERS` groups (:func:`~aiperf_mpi.mpi.plan.watcher_ranks`: on distinct nodes
where the layout has them).  Each such leader runs
a :class:`RankZeroWatch`, a thread that takes the heartbeats (a matched probe under their own tag, so the leader's
training is not disturbed) and, when rank 0 has been silent for ``--master-deadline`` seconds, prints ONE line
and ends the job with ``MPI_Abort`` (:func:`~aiperf_mpi.mpi.deadline.end_the_job`), the stopped rank 0 included.
The run's log is whole up to the stall (every batch is fsync'd before its replies leave), and the close
(``python -m aiperf_mpi.job.close RUN_DIR``, which the templates run after the launch) scores it, as after any
launch that ended before rank 0 could.

The cost on rank 0 is two small sends every :data:`BEAT_SECONDS`, whatever the number of groups
(the master bench's rate is unchanged).  A send whose previous one is not complete is skipped, so a stopped
watcher holds at most one send on rank 0 (small ones complete at once: it is the watcher that keeps them, a few
bytes every 2 s); a watcher whose rank failed (fault tolerance on) is dropped,
and rank 0 says so when none is left.  When its loop ends, rank 0 sends each watcher :data:`OVER`: the watch
ends there, before rank 0's end (the score, the report), which the end's own deadline bounds.  A watcher whose
group rank 0 declared lost (it hung, then woke) still gets the heartbeat and the end: it never ends a healthy job.

The watch needs ``MPI_THREAD_MULTIPLE`` (as the utilisation monitor does); where the library gives less, rank 0
is not watched and its start line says so.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable

from mpi4py import MPI

from aiperf_mpi.job.deadlines import deadline_line

HEARTBEAT = 27
"""the tag of rank 0's heartbeat (beside job/messages.py's tags, which end at 26)"""
BEAT = "beat"
OVER = "over"
"""the heartbeat's payloads: rank 0 is alive; rank 0's master loop is over (the watch ends)"""
BEAT_SECONDS = 2.0
"""seconds between two heartbeats: a few small sends against rank 0's thousands of messages a second"""
FIRST_BEAT_GRACE = 300.0
"""seconds the watch adds to its bound before rank 0's first heartbeat: rank 0 beats first as its segment begins,
and a resumed segment's history load or the log's first fsyncs on a loaded file system (each up to the I/O bound)
may come before its loop's beats"""
PHASE = "rank 0's heartbeat"
"""the watch's phase in its deadline line (``aiperf_mpi: rank R on HOST: rank 0's heartbeat passed its deadline``)"""
WHAT = ("rank 0 is stopped or hung mid-run (its log is whole up to the stall; python -m aiperf_mpi.job.close RUN_DIR "
        "scores it, as the templates do, and --resume continues the run)")  # fmt: skip


class RankZeroHeartbeat:
    """Rank 0's side: :meth:`beat` at every pass of the master loop (it sends only every ``interval``),
    :meth:`over` once the loop has ended."""

    def __init__(self, comm: MPI.Comm, watchers: list[int], interval: float = BEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.comm, self.interval, self.clock = comm, interval, clock
        self._last: dict[int, MPI.Request | None] = dict.fromkeys(watchers)
        """each watcher's latest send (None before the first)"""
        self._next = 0.0

    @property
    def watchers(self) -> list[int]:
        return sorted(self._last)

    def beat(self) -> None:
        now = self.clock()
        if now < self._next:
            return
        self._next = now + self.interval
        for watcher in list(self._last):
            self._send(watcher, BEAT)

    def over(self) -> None:
        """The loop is over: each watcher's watch ends when it reads this (after every heartbeat before it)."""
        for watcher in list(self._last):
            self._send(watcher, OVER, queue=True)

    def _send(self, watcher: int, word: str, queue: bool = False) -> None:
        previous = self._last[watcher]
        try:
            if previous is not None and not queue and not previous.Test():
                return  # the previous send is not complete (the transport's buffers toward a stopped watcher)
            self._last[watcher] = self.comm.isend(word, dest=watcher, tag=HEARTBEAT)
        except MPI.Exception as exc:  # fault tolerance on: the watcher's rank failed, it watches no more
            del self._last[watcher]
            if not self._last:
                print(f"aiperf_mpi: warning: rank 0 is no longer watched: its watchers' ranks failed "
                      f"({exc.Get_error_string().strip()}); a stall of rank 0 now holds the job until the batch "
                      "system's limit", flush=True)  # fmt: skip


class RankZeroWatch:
    """On a watching leader: the thread that takes rank 0's heartbeats and ends the job when they stop.

    ``on_silence(status)`` ends the job (:func:`~aiperf_mpi.mpi.deadline.end_the_job`); ``bound`` is
    ``--master-deadline``.  :meth:`heard` is also called by the leader's channel for a heartbeat its own receive
    took first (it receives any tag from rank 0).  :meth:`finish` waits for rank 0's :data:`OVER`.
    """

    def __init__(self, comm: MPI.Comm, bound: float, on_silence: Callable[[int], None], status: int, rank: int,
                 host: str, clock: Callable[[], float] = time.monotonic, tick: float = 0.5) -> None:  # fmt: skip
        self.comm, self.bound, self.on_silence, self.status = comm, bound, on_silence, status
        self.rank, self.host, self.clock, self.tick = rank, host, clock, tick
        self.last = clock() + FIRST_BEAT_GRACE
        """when rank 0 was last heard; before its first heartbeat, the watch's start plus :data:`FIRST_BEAT_GRACE`"""
        self.ended = threading.Event()
        """rank 0's loop is over (:data:`OVER`), or the watch ended the job"""
        self.fired = False
        self._thread = threading.Thread(target=self._watch, name="aiperf-rank0-watch", daemon=True)
        self._thread.start()

    def heard(self, word: object) -> None:
        self.last = self.clock()
        if word == OVER:
            self.ended.set()

    def finish(self, timeout: float | None = None) -> bool:
        """Wait until rank 0's loop is over (or the watch fired); whether it ended within ``timeout``."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _watch(self) -> None:
        while not self.ended.is_set():
            try:
                while (message := self.comm.improbe(source=0, tag=HEARTBEAT)) is not None:
                    self.heard(message.recv())
            except MPI.Exception:  # rank 0 failed (fault tolerance on): nothing will come, the job is over
                self.last = -float("inf")
            silent = self.clock() - self.last
            if silent > self.bound and not self.ended.is_set():
                self.fired = True
                self.ended.set()
                print(deadline_line(self.rank, self.host, PHASE, self.bound, WHAT), file=sys.stderr, flush=True)
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                self.on_silence(self.status)
                return
            self.ended.wait(self.tick)
