"""The job's transport contract: what the master and a leader need from whatever moves messages.

Two backends implement it: :mod:`aiperf_mpi.mpi.transport` (MPI, the real
job) and :mod:`aiperf_mpi.job.local` (threads of one process, for tests and
laptops).  The scheduler and the leader loop are written against these
Protocols only, so neither imports MPI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from aiperf_mpi.job.messages import Work


class MasterTransport(Protocol):
    """Rank 0's side: send to a group's leader without waiting, poll every leader."""

    def send(self, group: int, message: object) -> None: ...

    def poll(self, timeout: float) -> tuple[int, object] | None:
        """The next (group, message), or None after ``timeout`` seconds."""
        ...

    def close(self) -> None:
        """Wait for the sends still under way (none to a lost group)."""
        ...

    def lose(self, group: int) -> None:
        """``group`` is out of the run: send it nothing more and wait for none of its sends."""
        ...


class Heartbeat(Protocol):
    """Rank 0's heartbeat to the leaders that watch it (over MPI: :mod:`aiperf_mpi.mpi.heartbeat`)."""

    def beat(self) -> None:
        """Called at every pass of the master loop; sends only when its interval has passed."""

    def over(self) -> None:
        """The master loop has ended: the watchers stop watching."""


class LeaderChannel(Protocol):
    """A leader's side: talk to the master."""

    def send(self, message: object) -> None: ...

    def recv(self) -> object:
        """The master's next instruction (blocks)."""
        ...

    def hold(self, messages: list) -> None:
        """Put received messages back, in order, ahead of anything not yet received."""
        ...

    def stop_pending(self) -> bool:
        """Whether a Stop has arrived (without consuming it)."""
        ...


class FirstWorkClock:
    """A :class:`MasterTransport` that says, once, when the last group got its first ``Work``: the last start-up
    phase ("first Work to every group"), measured on rank 0 from the start line.

    At scale it is where the master's first round shows: every leader's ``Ready`` and proposal arrive at once,
    and the groups served last wait for all the others (``--rehearse`` measures it before the accelerator
    hours).  A group lost before its first ``Work`` is not waited for.  Everything else is ``inner``'s.
    """

    def __init__(self, inner: MasterTransport, groups: int, start_line: float,
                 say: Callable[[str], None] = print) -> None:  # fmt: skip
        self.inner = inner
        self.waiting = set(range(groups))
        self.start_line = start_line
        self.say = say

    def send(self, group: int, message: object) -> None:
        self.inner.send(group, message)
        if self.waiting and isinstance(message, Work):
            self._served(group)

    def poll(self, timeout: float) -> tuple[int, object] | None:
        return self.inner.poll(timeout)

    def close(self) -> None:
        self.inner.close()

    def lose(self, group: int) -> None:
        self.inner.lose(group)
        if self.waiting:
            self._served(group)

    def _served(self, group: int) -> None:
        if group in self.waiting:
            self.waiting.discard(group)
            if not self.waiting:
                seconds = time.monotonic() - self.start_line
                self.say(f"aiperf_mpi: start-up on rank 0: first Work to every group {seconds:.1f} s after the "
                         "start line")  # fmt: skip
