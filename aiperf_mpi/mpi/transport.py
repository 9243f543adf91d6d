"""The MPI backend of the job's transport (:mod:`aiperf_mpi.job.transport`).

The master side polls without blocking on any one leader (``Iprobe`` on any
source, with an exponential back-off from 0.5 ms to 50 ms: the receive of
:mod:`aiperf_mpi.mpi.receive`, which the relays share); a leader blocks
on its next instruction and can peek for a pending Stop between epochs.  A
leader waiting for the answer to its proposal may receive a Stop first: it
``hold``s it, and ``recv``/``stop_pending`` see held messages first.  Each
message is a dataclass of :mod:`aiperf_mpi.job.messages`, pickled by mpi4py
under its own tag.

With fault tolerance on (``fault_tolerant``: ULFM, :mod:`aiperf_mpi.mpi.tolerance`)
an ``MPI_ERR_PROC_FAILED`` from the probe, a receive or a send is not fatal:
the failed ranks are acknowledged, each one's group is handed to the master as
one :class:`~aiperf_mpi.job.messages.GroupLost`, and the transport sends that
group nothing more.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from mpi4py import MPI

from aiperf_mpi.errors import EXIT_FATAL
from aiperf_mpi.job.messages import (
    RELAY_STOP,
    RELAYED,
    TAGS,
    TO_LEADER,
    GroupLost,
    MonitorSample,
    Stop,
)
from aiperf_mpi.job.wire import WireFormatError, from_wire, leader_message, plain_loads, relayed_message, to_wire
from aiperf_mpi.mpi.faults import world_ranks
from aiperf_mpi.mpi.heartbeat import HEARTBEAT
from aiperf_mpi.mpi.receive import Receiver

MASTER = 0
TAG_TYPES = {tag: kind for kind, tag in TAGS.items()}


class MpiMasterTransport:
    """Rank 0's side: send to a group's leader, poll all leaders."""

    KEEP = 64
    """pending sends below which completed ones are not looked for"""
    PAUSES = (0.0005, 0.05)
    """poll's sleep when nothing came: its first in each poll, doubling to its longest (seconds)"""

    def __init__(self, comm: MPI.Comm, leaders: dict[int, int], members: dict[int, list[int]] | None = None,
                 fault_tolerant: bool = False, relays: tuple[int, ...] = ()) -> None:  # fmt: skip
        self.comm = comm
        self.relays = frozenset(relays)
        """the relay ranks (``--relays``, mpi/relay.py): each sends batches of its leaders' messages"""
        self._relayed: deque[tuple[int, object]] = deque()
        """the messages of the relays' batches received and not yet polled"""
        self.leaders = dict(leaders)  # group → world rank
        self.group_of = {rank: group for group, rank in leaders.items()}
        self.member_of = {rank: group for group, ranks in (members or {}).items() for rank in ranks}
        """every training rank → its group (a failed non-leader loses its group too)"""
        self.fault_tolerant = fault_tolerant
        self.lost: set[int] = set()
        self._losses: deque[tuple[int, GroupLost]] = deque()
        self._pending: list[tuple[int, MPI.Request]] = []
        self._limit = self.KEEP
        self._receiver = Receiver(comm, self.PAUSES)
        if fault_tolerant:
            comm.Set_errhandler(MPI.ERRORS_RETURN)  # mpi4py's default too; said here because it is relied on

    def send(self, group: int, message: object) -> None:
        """Send without waiting; completed sends are collected when the pending ones have doubled.

        Testing every pending request on every send cost O(pending) per
        message: at the stop, 65,536 Stops made that 2·10⁹ tests.  Collecting
        only when the list has doubled since the last collection is O(1)
        per send, amortised, and keeps at most twice the incomplete sends.
        """
        if group in self.lost:
            return
        try:
            self._pending.append((group, self.comm.isend(to_wire(message), dest=self.leaders[group],
                                                         tag=TAGS[type(message)])))  # fmt: skip
            if len(self._pending) >= self._limit:
                self._pending = [(g, r) for g, r in self._pending if g not in self.lost and not r.Test()]
                self._limit = max(self.KEEP, 2 * len(self._pending))
        except MPI.Exception as exc:
            self._failure(exc)

    def poll(self, timeout: float) -> tuple[int, object] | None:
        """The next message, or None after ``timeout`` seconds.

        The master calls this for every message of every group: its Python is kept to what a found
        message needs — one Status reused, positional MPI calls (:meth:`Receiver.take
        <aiperf_mpi.mpi.receive.Receiver.take>`), the clock read only when nothing came —
        which took it from ≈ 8 to ≈ 6 µs a small message here, MPI and unpickling ≈ 2.5 of them (BENCHMARKS.md);
        the restricted unpickling (:func:`~aiperf_mpi.job.wire.plain_loads`) costs ≈ 2 µs of that back.
        """
        receiver = self._receiver
        take = receiver.take
        receiver.woken()
        deadline = None
        while True:
            if self._relayed:
                return self._relayed.popleft()
            if self._losses:
                return self._losses.popleft()
            try:
                found = take()  # (source, tag, the pickle's bytes, unpickled by _message) or None
                if found is not None:
                    if found[0] in self.relays:
                        self._unpack(*found)
                        continue
                    return self._message(*found)
            except MPI.Exception as exc:
                self._failure(exc)
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            if now >= deadline:
                return None
            receiver.idle()

    def _message(self, source: int, tag: int, data: bytearray) -> tuple[int, object]:
        """What arrived, as its tag's message; one that is not loses its group (the run goes on).

        A rank that is not a leader is a broken job: the run stops (``RuntimeError``).  A leader's message
        under a tag no leader sends, or that does not unpickle to plain values (:func:`plain_loads`) and
        rebuild as its tag's message, is treated like one the master cannot take (``master.refuse``): the
        group is lost, with the reason in the log (:func:`~aiperf_mpi.job.wire.leader_message`).
        """
        group = self.group_of.get(source)
        if group is None:
            raise RuntimeError(f"unexpected message (tag {tag}) from rank {source}, which is not a group's leader")
        message = leader_message(source, tag, data)
        if type(message) is GroupLost:
            self.lost.add(group)
        return group, message

    def _unpack(self, source: int, tag: int, data: bytearray) -> None:
        """A relay's batch: its messages queued for :meth:`poll`, in the order the relay received them.

        A relay is the job's own code on rank 0's node: a batch that is not one (a broken relay) stops the run
        (``RuntimeError``).  What its leaders sent is checked as ever: a message the relay passed on as the
        leader's bytes is read and vetted here as if sent here, and one it could not read loses its group, as
        :meth:`_message` does (:func:`~aiperf_mpi.job.wire.relayed_message`).
        """
        try:
            if tag != RELAYED:
                raise WireFormatError(f"tag {tag} is not a relay's batch")
            for group, kind_tag, payload in plain_loads(data):
                message = relayed_message(kind_tag, payload)
                if type(message) is GroupLost:
                    self.lost.add(group)
                self._relayed.append((group, message))
        except (WireFormatError, TypeError, ValueError) as exc:
            raise RuntimeError(f"relay rank {source} sent what is not a batch of leader messages: {exc}") from None

    def stop_relays(self, timeout: float = 60.0) -> None:
        """Tell each relay the run's messages are over, and take what they still send until each answers.

        Every send of a relay then has its receive, so none is left pending at ``MPI_Finalize`` (a large one
        would wait there for ever).  What the batches still hold comes after the master's loop: dropped.
        """
        waiting = set(self.relays)
        deadline = time.monotonic() + timeout
        for relay in sorted(self.relays):
            try:
                self._pending.append((-1, self.comm.isend(b"", dest=relay, tag=RELAY_STOP)))
            except MPI.Exception as exc:
                self._failure(exc)  # a failed relay: raised, the run ends as for a failed rank 0
        while waiting and time.monotonic() < deadline:
            try:
                found = self._receiver.take()
                if found is None:
                    time.sleep(0.001)
                    continue
            except MPI.Exception as exc:
                self._failure(exc)
                continue
            source, tag, _ = found
            if source in waiting and tag == RELAY_STOP:
                waiting.discard(source)
        if waiting:  # MPI_Finalize would wait for them for ever: the score is on disk, the job ends here
            print(f"aiperf_mpi: error: relay rank(s) {sorted(waiting)} did not answer rank 0's stop within "
                  f"{timeout:.0f} s; the score and the log are written; ending the job", flush=True)  # fmt: skip
            self.comm.Abort(EXIT_FATAL)

    def close(self) -> None:
        """Wait for the sends under way, except those to lost groups (they may never complete)."""
        for group, request in self._pending:
            if group in self.lost:
                continue
            try:
                request.Wait()
            except MPI.Exception as exc:
                self._failure(exc)
        self._pending = []

    def lose(self, group: int) -> None:
        self.lost.add(group)

    def _failure(self, exc: MPI.Exception) -> None:
        """A process failure (fault tolerance on): acknowledge it and queue one GroupLost per group hit."""
        ranks = failed_ranks(self.comm, exc, self.fault_tolerant)
        if 0 in ranks or self.relays.intersection(ranks):  # rank 0's node: the run cannot go on
            raise exc
        hit: dict[int, list[int]] = {}
        for rank in ranks:
            group = self.member_of.get(rank, self.group_of.get(rank))
            if group is not None and group not in self.lost:
                hit.setdefault(group, []).append(rank)
        for group, dead in sorted(hit.items()):
            self.lost.add(group)
            self._losses.append((group, GroupLost(dead, f"rank(s) {', '.join(map(str, dead))} failed "
                                                        f"({exc.Get_error_string().strip()})")))  # fmt: skip


def failed_ranks(comm: MPI.Comm, exc: MPI.Exception, fault_tolerant: bool) -> list[int]:
    """The world ranks ULFM reports failed on ``comm``, acknowledged; ``exc`` raised again if it is no such failure.

    Without fault tolerance, or for any other MPI error, there is nothing to go on with: the error stands.
    """
    if not fault_tolerant or exc.Get_error_class() not in _FAILURE_CLASSES:
        raise exc
    comm.Ack_failed()
    failed = comm.Get_failed()
    try:
        return world_ranks(failed, comm)
    finally:
        failed.Free()


_FAILURE_CLASSES = tuple(getattr(MPI, name) for name in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED")
                         if hasattr(MPI, name))  # fmt: skip
"""ULFM's error classes for a failed process (mpi4py names them whether or not the library has ULFM)"""


class MpiLeaderChannel:
    """A leader's side: talk to rank 0 (its messages go through its relay rank, when the run has relays)."""

    def __init__(self, comm: MPI.Comm, upstream: int = MASTER) -> None:
        self.comm = comm
        self.upstream = upstream
        """where this leader's messages go: rank 0, or its relay (``LayoutPlan.relay_of``); answers come from 0"""
        self._held: deque = deque()
        self.on_heartbeat: Callable[[object], None] = lambda word: None
        """a watching leader's :meth:`RankZeroWatch.heard <aiperf_mpi.mpi.heartbeat.RankZeroWatch.heard>`: this
        channel receives any tag from rank 0, so a heartbeat its receive took first is handed on"""

    def send(self, message: object) -> None:
        self.comm.send(to_wire(message), dest=self.upstream, tag=TAGS[type(message)])

    def send_monitor(self, sample: MonitorSample) -> None:
        """From the monitor thread (needs MPI_THREAD_MULTIPLE): a small message, sent eagerly."""
        self.comm.send(to_wire(sample), dest=self.upstream, tag=TAGS[MonitorSample])

    def recv(self) -> object:
        if self._held:
            return self._held.popleft()
        status = MPI.Status()
        data = self.comm.recv(source=MASTER, tag=MPI.ANY_TAG, status=status)
        while status.Get_tag() == HEARTBEAT:  # rank 0's heartbeat to a watching leader (mpi/heartbeat.py)
            self.on_heartbeat(data)
            data = self.comm.recv(source=MASTER, tag=MPI.ANY_TAG, status=status)
        kind = TAG_TYPES.get(status.Get_tag())
        if kind not in TO_LEADER:
            raise RuntimeError(f"unexpected message (tag {status.Get_tag()}) from rank 0")
        return from_wire(kind, data)

    def hold(self, messages: list) -> None:
        """Put received messages back, in order, ahead of anything not yet received."""
        self._held.extendleft(reversed(messages))

    def stop_pending(self) -> bool:
        return any(isinstance(m, Stop) for m in self._held) or bool(self.comm.Iprobe(source=MASTER, tag=TAGS[Stop]))
