"""The MPI backend of the job's transport (:mod:`aiperf_mpi.job.transport`).

The master side polls without blocking on any one leader (``Iprobe`` on any
source, with an exponential back-off from 0.5 ms to 50 ms); a leader blocks
on its next instruction and can peek for a pending Stop between epochs.  A
leader waiting for the answer to its proposal may receive a Stop first: it
``hold``s it, and ``recv``/``stop_pending`` see held messages first.  Each
message is a dataclass of :mod:`aiperf_mpi.job.messages`, pickled by mpi4py
under its own tag.
"""

from __future__ import annotations

import time
from collections import deque

from mpi4py import MPI

from aiperf_mpi.job.messages import TAGS, MonitorSample, Stop

MASTER = 0
TAG_TYPES = {tag: kind for kind, tag in TAGS.items()}


class MpiMasterTransport:
    """Rank 0's side: send to a group's leader, poll all leaders."""

    KEEP = 64
    """pending sends below which completed ones are not looked for"""

    def __init__(self, comm: MPI.Comm, leaders: dict[int, int]) -> None:
        self.comm = comm
        self.leaders = dict(leaders)  # group → world rank
        self.group_of = {rank: group for group, rank in leaders.items()}
        self._pending: list[MPI.Request] = []
        self._limit = self.KEEP

    def send(self, group: int, message: object) -> None:
        """Send without waiting; completed sends are collected when the pending ones have doubled.

        Testing every pending request on every send cost O(pending) per
        message: at the stop, 65,536 Stops made that 2·10⁹ tests.  Collecting
        only when the list has doubled since the last collection is O(1)
        per send, amortised, and keeps at most twice the incomplete sends.
        """
        self._pending.append(self.comm.isend(message, dest=self.leaders[group], tag=TAGS[type(message)]))
        if len(self._pending) >= self._limit:
            self._pending = [r for r in self._pending if not r.Test()]
            self._limit = max(self.KEEP, 2 * len(self._pending))

    def poll(self, timeout: float) -> tuple[int, object] | None:
        deadline = time.monotonic() + timeout
        pause = 0.0005
        status = MPI.Status()
        while True:
            if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
                source, tag = status.Get_source(), status.Get_tag()
                message = self.comm.recv(source=source, tag=tag)
                if source not in self.group_of or not isinstance(message, TAG_TYPES.get(tag, ())):
                    raise RuntimeError(f"unexpected message {type(message).__name__} (tag {tag}) from rank {source}")
                return self.group_of[source], message
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def close(self) -> None:
        for request in self._pending:
            request.Wait()
        self._pending = []


class MpiLeaderChannel:
    """A leader's side: talk to rank 0."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self._held: deque = deque()

    def send(self, message: object) -> None:
        self.comm.send(message, dest=MASTER, tag=TAGS[type(message)])

    def send_monitor(self, sample: MonitorSample) -> None:
        """From the monitor thread (needs MPI_THREAD_MULTIPLE): a small message, sent eagerly."""
        self.comm.send(sample, dest=MASTER, tag=TAGS[MonitorSample])

    def recv(self) -> object:
        if self._held:
            return self._held.popleft()
        return self.comm.recv(source=MASTER, tag=MPI.ANY_TAG)

    def hold(self, messages: list) -> None:
        """Put received messages back, in order, ahead of anything not yet received."""
        self._held.extendleft(reversed(messages))

    def stop_pending(self) -> bool:
        return any(isinstance(m, Stop) for m in self._held) or bool(self.comm.Iprobe(source=MASTER, tag=TAGS[Stop]))
