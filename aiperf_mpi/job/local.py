"""The in-process backend of the job's transport: master and leaders as threads of one process.

No MPI here: the same :class:`~aiperf_mpi.job.master.Master`, leader loop and
search run in unit tests and on a laptop through this hub, and over MPI
through :mod:`aiperf_mpi.mpi.transport`; one contract test suite drives both.
"""

from __future__ import annotations

import queue
from collections import deque

from aiperf_mpi.job.messages import Stop


class LocalHub:
    """In-process transport: the master and the leaders are threads of one process."""

    def __init__(self, groups: int) -> None:
        self.to_master: queue.Queue = queue.Queue()
        self.to_leader = {g: queue.Queue() for g in range(groups)}

    # master side
    def send(self, group: int, message: object) -> None:
        self.to_leader[group].put(message)

    def poll(self, timeout: float) -> tuple[int, object] | None:
        try:
            return self.to_master.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass

    def channel(self, group: int) -> LocalChannel:
        return LocalChannel(self, group)


class LocalChannel:
    """A leader thread's side of :class:`LocalHub`."""

    def __init__(self, hub: LocalHub, group: int) -> None:
        self.hub, self.group = hub, group
        self._buffer: deque = deque()

    def send(self, message: object) -> None:
        self.hub.to_master.put((self.group, message))

    def recv(self) -> object:
        if self._buffer:
            return self._buffer.popleft()
        return self.hub.to_leader[self.group].get()

    def hold(self, messages: list) -> None:
        """Put received messages back, in order, ahead of anything not yet received."""
        self._buffer.extendleft(reversed(messages))

    def stop_pending(self) -> bool:
        inbox = self.hub.to_leader[self.group]
        while True:
            try:
                self._buffer.append(inbox.get_nowait())
            except queue.Empty:
                break
        return any(isinstance(m, Stop) for m in self._buffer)
