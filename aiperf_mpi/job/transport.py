"""The job's transport contract: what the master and a leader need from whatever moves messages.

Two backends implement it: :mod:`aiperf_mpi.mpi.transport` (MPI, the real
job) and :mod:`aiperf_mpi.job.local` (threads of one process, for tests and
laptops).  The scheduler and the leader loop are written against these
Protocols only, so neither imports MPI.
"""

from __future__ import annotations

from typing import Protocol


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
