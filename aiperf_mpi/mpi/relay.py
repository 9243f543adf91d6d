"""A relay rank (``--relays N``): it takes its leaders' messages for rank 0, vets them, and hands them on in batches.

Why: at 65,536 groups one rank 0 in Python needs ≈ 575 µs of CPU per model
— ≈ 130 µs receiving six MPI messages, ≈ 360 µs handling them, the rest
its batches and replies — against the ≈ 458 µs that half of one core allows
at one model per group per minute (BENCHMARKS.md, the master).  What does not
need the run's state — receiving, unpickling, checking each message against
the schema and rank 0's bounds, encoding its log text
(:mod:`aiperf_mpi.job.vetting`) — is done here, on other ranks of rank 0's
node, and rank 0 receives one message per batch instead of one per leader
message.  Rank 0 keeps what must be serial: ids, the duplicate check, the
history, retention and the one event log's order.

The relays are ranks of the same MPI job on rank 0's node (the plan's
``relay_ranks``); each serves every ``N``-th group's leader, which sends it
what it would have sent rank 0 and still hears from rank 0 directly (Work,
Accepted, Stop).  A batch is a list of ``(group, tag, wire tuple)``: a message
vetted (:data:`~aiperf_mpi.job.messages.VETTED`), one passed on as the
leader's own bytes (one that is not vetted, or failed its check: rank 0 reads
and refuses it in its own words), or
:data:`~aiperf_mpi.job.messages.UNREADABLE` with the reason
(:func:`~aiperf_mpi.job.vetting.relay_item`).  The
order of one leader's messages is kept (one relay per leader, MPI's order
between two ranks).  At the end rank 0 sends each relay
:data:`~aiperf_mpi.job.messages.RELAY_STOP`; the relay sends its last batch
and the same tag back, after which rank 0 has received everything it sent.

Under fault tolerance (ULFM) a relay acknowledges a failed leader and goes
on; rank 0 sees the same failure on its own receive and loses the group.  A
failed master or relay ends the run: they share rank 0's node.
"""

from __future__ import annotations

import pickle
import time

from mpi4py import MPI

from aiperf_mpi.job.messages import RELAY_STOP, RELAYED
from aiperf_mpi.job.vetting import Vetter, relay_item
from aiperf_mpi.mpi.receive import Receiver
from aiperf_mpi.mpi.transport import MASTER, failed_ranks

BATCH = 256
"""leader messages at most per batch: rank 0 takes a batch at once, and a larger one would only wait longer"""
BATCH_BYTES = 8 << 20
"""leader bytes at most per batch (one message may pass it alone): a forger's many large messages make many
batches, not one beyond what MPI's int count can receive"""
INTERVAL = 0.002
"""seconds at most between two batches to rank 0 while messages wait: what a message may wait here for company"""
PAUSES = (0.0002, 0.005)
"""the relay's sleep when nothing came: its first, doubling to its longest (a message then waits ≤ 5 ms more)"""


class Relay:
    """One relay rank's loop: :meth:`run` until rank 0 says the run's messages are over."""

    def __init__(self, comm: MPI.Comm, leaders: dict[int, int], fault_tolerant: bool = False,
                 master: int = MASTER) -> None:  # fmt: skip
        self.comm = comm
        self.group_of = dict(leaders)
        """the world rank of every group's leader → its group (a relay serves some; it knows all)"""
        self.master = master
        self.fault_tolerant = fault_tolerant
        self.vetter = Vetter()
        self.batches = 0
        self.cpu_seconds = 0.0
        """this thread's CPU time in the passes that found messages (for the master bench: the relay's load)"""
        self._pending: list[tuple[MPI.Request, bytes]] = []
        self._bytes = 0
        """the leader bytes in the batch being gathered"""
        self._receiver = Receiver(comm, PAUSES)
        """the same receive as rank 0's (mpi/receive.py), with the relay's shorter pauses"""
        if fault_tolerant:
            comm.Set_errhandler(MPI.ERRORS_RETURN)

    def run(self) -> None:
        """Receive, vet and hand on until rank 0's :data:`RELAY_STOP`; then the last batch and the answer.

        What has come is handed on at most every :data:`INTERVAL` (or as soon as :data:`BATCH` messages wait):
        rank 0 pays ≈ 30 µs for each receive, whatever it holds, so a batch of a dozen messages costs it a
        fraction of a dozen receives, for ≤ 2 ms more on the way (BENCHMARKS.md, the master).
        """
        receiver = self._receiver
        take = receiver.take
        items: list[tuple] = []
        last_sent = time.monotonic()
        while True:
            stop = False
            found = 0
            started = time.thread_time()
            try:
                while len(items) < BATCH and self._bytes < BATCH_BYTES and (message := take()) is not None:
                    source, tag, data = message
                    if source == self.master:
                        if tag != RELAY_STOP:
                            raise RuntimeError(f"a relay got tag {tag} from rank 0, which sends it only {RELAY_STOP}")
                        stop = True
                        break
                    items.append(self.item(source, tag, data))
                    found += 1
            except MPI.Exception as exc:
                self._failure(exc)
            now = time.monotonic()
            handing_on = bool(items) and (stop or len(items) >= BATCH or self._bytes >= BATCH_BYTES
                                          or now - last_sent >= INTERVAL)  # fmt: skip
            if handing_on:
                self._send(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL), RELAYED)
                self.batches += 1
                items = []
                self._bytes = 0
                last_sent = now
            if found or handing_on:
                self.cpu_seconds += time.thread_time() - started
            if stop:
                self._send(b"", RELAY_STOP)
                for request, _ in self._pending:
                    request.Wait()
                self._pending = []
                return
            if found:
                receiver.woken()
            else:  # nothing came: wait, doubling, but hand on what waits within its interval
                receiver.idle(max(0.0, last_sent + INTERVAL - now) if items else None)

    def item(self, source: int, tag: int, data: bytearray) -> tuple:
        """One leader message as a batch item (:func:`~aiperf_mpi.job.vetting.relay_item`).

        Every relay knows every leader: a message from a leader that is not this relay's (its leader chose the
        rank it sends to) goes on under its own group, as rank 0 would take it, not as a broken job.  A rank
        that leads no group is one (``RuntimeError``), as on rank 0.
        """
        group = self.group_of.get(source)
        if group is None:
            raise RuntimeError(f"unexpected message (tag {tag}) from rank {source}, which is not a group's leader")
        self._bytes += len(data)
        return relay_item(self.vetter, source, group, tag, data)

    def _send(self, data: bytes, tag: int) -> None:
        """Send to rank 0 without waiting (the buffer is kept until the send completes)."""
        try:
            self._pending.append((self.comm.Isend([data, MPI.BYTE], dest=self.master, tag=tag), data))
            self._pending = [(request, kept) for request, kept in self._pending if not request.Test()]
        except MPI.Exception as exc:
            self._failure(exc)

    def _failure(self, exc: MPI.Exception) -> None:
        """A failed leader (ULFM): acknowledged, and rank 0 loses its group; a failed rank 0 ends this relay."""
        if self.master in failed_ranks(self.comm, exc, self.fault_tolerant):
            raise exc
