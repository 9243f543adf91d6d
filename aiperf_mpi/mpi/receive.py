"""How a rank here receives from any rank without blocking on one: probe, receive the bytes, back off when idle.

Rank 0's transport (:mod:`aiperf_mpi.mpi.transport`) and the relays
(:mod:`aiperf_mpi.mpi.relay`) both take messages from many leaders, in the
same way, written once here: ``Iprobe`` on any source and tag, then ``Recv``
of exactly the probed message into a buffer of its size — the pickle's
bytes, which the caller unpickles its own way (restricted on rank 0, vetted
on a relay); mpi4py's ``recv`` cost more per message (benchmarks/receive.py,
BENCHMARKS.md).  When nothing has come the rank sleeps, from its shortest
pause doubling to its longest, so an idle rank costs little CPU and a busy
one answers at once; what it does with a message, and how many it takes
before it hands them on, is its caller's.
"""

from __future__ import annotations

import time

from mpi4py import MPI

ANY_SOURCE, ANY_TAG, BYTE = MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.BYTE


class Receiver:
    """One rank's receive from every rank: :meth:`take` a waiting message, :meth:`idle` when none was."""

    def __init__(self, comm: MPI.Comm, pauses: tuple[float, float]) -> None:
        self.comm = comm
        self.status = MPI.Status()
        """the probe's, reused: one object fewer per message"""
        self.shortest, self.longest = pauses
        """the first sleep after a message, and the most it doubles to (seconds)"""
        self.pause = self.shortest

    def take(self) -> tuple[int, int, bytearray] | None:
        """The next message of any rank and tag, received: (source, tag, its bytes); None when none is waiting.

        Positional MPI calls and one Status reused: the master calls this for every message of every group.
        An ``MPI.Exception`` (a failed rank under fault tolerance) goes to the caller, which knows what it costs.
        """
        comm, status = self.comm, self.status
        if not comm.Iprobe(ANY_SOURCE, ANY_TAG, status):
            return None
        source, tag = status.source, status.tag
        data = bytearray(status.Get_count(BYTE))
        comm.Recv([data, BYTE], source, tag)
        return source, tag, data

    def idle(self, at_most: float | None = None) -> None:
        """Nothing came: sleep the pause (``at_most`` at the most), and double it, up to the longest, for the next."""
        time.sleep(self.pause if at_most is None else min(self.pause, at_most))
        self.pause = min(2 * self.pause, self.longest)

    def woken(self) -> None:
        """Something came, or a new wait begins: the next sleep is the shortest again."""
        self.pause = self.shortest
