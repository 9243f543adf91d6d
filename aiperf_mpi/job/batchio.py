"""The master's file work on a thread of its own: the graphs file, the log's fsync, weights removals.

At the largest machines rank 0 hears about a thousand models a second.  A
new file costs 0.4–1.0 ms of kernel CPU on a local disk and a metadata round
trip (a millisecond or more) on a parallel file system, so the graphs go to
one appended file per run segment (:mod:`aiperf_mpi.results.graphs`), written
here in the order the loop accepted them; an fsync costs
milliseconds, and an unlink is another metadata operation: done on the loop's
thread they would take all of rank 0's time.  Here the loop hands each
batch's file work and its replies to one thread, and goes on handling
messages; the thread does the work and then releases the replies, so the
rule "what was reported is on disk before anyone hears back" holds as
before.  Work that queued up while the thread was busy is done together, so
one fsync covers every batch that waited for it (group commit).

In order: a batch's graphs are appended (and synced) before the log's fsync, its removals
come after the fsync (the ``weights_removed`` event that says why is on disk
first), and replies leave in the order the loop produced them.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

GRAPHS_WRITE = "the graphs file's write and sync"
WEIGHTS_REMOVAL = "a weights file's removal"
IO_JOIN = "the end of rank 0's file work"
"""the phases of rank 0's file work that can block on a stalled file system, each under the I/O guard (its
``--io-deadline``, as the run log's fsync): the deadline's line names which one hung"""


def no_guard(phase: str = "") -> AbstractContextManager:
    """No bound (the tests' and the benchmark's master, which run without a watchdog)."""
    return nullcontext()


@dataclass
class BatchWork:
    """One batch's file work (:meth:`aiperf_mpi.job.master.Master.take_batch`)."""

    graphs: list[bytes] = field(default_factory=list)
    """lines to append to :attr:`graph_path`, in order: each a graph's UTF-8 bytes and its newline (the master
    placed each at the file's running size, which it tracks)"""
    sync: bool = False
    """the event log must reach stable storage"""
    removals: list[Path] = field(default_factory=list)
    prepare: list[Callable[[], None]] = field(default_factory=list)
    """work on the replies before they leave: the view records a Work carries, compressed here rather than on
    the loop's thread (:meth:`~aiperf_mpi.search.view.MasterHistory.update`)"""
    graph_path: str = ""
    """the run segment's graphs file (:mod:`aiperf_mpi.results.graphs`)"""

    def __bool__(self) -> bool:
        return bool(self.graphs or self.sync or self.removals or self.prepare)


def do_work(works: list[BatchWork], fsync: Callable[[], None],
            guard: Callable[[str], AbstractContextManager] = no_guard) -> list[str]:  # fmt: skip
    """Do batches' work in order (replies prepared, graphs, one fsync, removals); returns the removals that failed.

    Each call that can block on the file system runs under ``guard(phase)`` (rank 0's watchdog: the job ends in
    one line when it outlives ``--io-deadline``); ``fsync`` guards itself (the event log's own guard)."""
    for work in works:
        for prepare in work.prepare:
            prepare()
    appends: dict[str, list[bytes]] = {}
    for work in works:
        if work.graphs:
            appends.setdefault(work.graph_path, []).extend(work.graphs)
    for path, lines in appends.items():
        # one open and one write per round, not one file per model; on stable storage before the log's fsync,
        # so no event on disk points at a graph that is not (model_done no longer carries a copy of it)
        with guard(GRAPHS_WRITE):
            append_file(path, b"".join(lines), sync=True)
    if any(work.sync for work in works):
        fsync()
    failures = []
    for work in works:
        for path in work.removals:
            try:
                with guard(WEIGHTS_REMOVAL):
                    path.unlink()
            except FileNotFoundError:  # a resumed run may list a file an earlier segment removed
                pass
            except OSError as exc:
                failures.append(f"{path}: {exc.strerror or exc}")
    return failures


def append_file(path: Path | str, data: bytes, sync: bool = False) -> None:
    """Append ``data`` to a file (created if need be), by the system calls alone; ``sync``: then fdatasync it.

    A new file per graph was the I/O thread's largest cost at 65,536 groups
    (≈ 0.9 ms of kernel CPU each, measured here); an append to an existing
    file costs tens of microseconds, and one round's graphs go in one write.
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        if sync:
            getattr(os, "fdatasync", os.fsync)(descriptor)
    finally:
        os.close(descriptor)


class BatchIO:
    """The I/O thread: ``submit`` a batch's work and replies; ``completed`` gives back releasable replies.

    An error in the work (a full disk, a failed fsync) is raised again on
    the loop's thread by the next :meth:`completed` or :meth:`close`: as
    fatal as it was when the loop did the work itself.  A weights file that
    cannot be removed is only counted (:attr:`failures`).
    """

    def __init__(self, fsync: Callable[[], None], guard: Callable[[str], AbstractContextManager] = no_guard) -> None:
        self._fsync = fsync
        self._guard = guard
        """bounds each blocking call of the work, and :meth:`close`'s wait for the thread (:func:`do_work`)"""
        self._lock = threading.Condition()
        self._queue: list[tuple[BatchWork, list]] = []
        self._released: deque = deque()
        self._submitted = 0
        self._finished = 0
        self._submit_times: deque[float] = deque()
        """when each batch not yet done was submitted (:meth:`waiting`)"""
        self._closing = False
        self._error: BaseException | None = None
        self.failures: list[str] = []
        self.busy_seconds = 0.0
        """time the thread spent doing work, waiting for the disk included (for the benchmark)"""
        self.cpu_seconds = 0.0
        """CPU time the thread spent (for the benchmark)"""
        self.rounds = 0
        """times it took the queued batches (= fsyncs, when every batch asked for one)"""
        self._thread = threading.Thread(target=self._work, name="aiperf-master-io", daemon=True)
        self._thread.start()

    def __enter__(self) -> BatchIO:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(raise_error=exc[0] is None)

    @property
    def pending(self) -> int:
        """Batches submitted whose replies were not yet released."""
        return self._submitted - self._finished

    def submit(self, work: BatchWork, replies: list) -> None:
        if not work and not replies:
            return
        with self._lock:
            self._queue.append((work, replies))
            self._submitted += 1
            self._submit_times.append(time.monotonic())
            self._lock.notify()

    def waiting(self) -> float:
        """Seconds the oldest batch not yet done has waited (0 when none): the replies it holds wait as long."""
        with self._lock:
            return time.monotonic() - self._submit_times[0] if self._submit_times else 0.0

    def completed(self) -> list:
        """The replies whose batches' work is done, in order."""
        self._raise()
        out = []
        while self._released:
            out.extend(self._released.popleft())
        return out

    def close(self, raise_error: bool = True) -> list[str]:
        """Finish the queued work; returns the removals that failed."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        with self._guard(IO_JOIN):  # the queued work's calls are bounded one by one; the wait for all of them too
            self._thread.join()
        if raise_error:
            self._raise()
        return self.failures

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait()
                if not self._queue:
                    return
                taken, self._queue = self._queue, []
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                self.failures += do_work([work for work, _ in taken], self._fsync, self._guard)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop's thread, which raises it
                self._error = exc
            self.busy_seconds += time.perf_counter() - started
            self.cpu_seconds += time.thread_time() - started_cpu
            self.rounds += 1
            with self._lock:
                for _, replies in taken:
                    self._released.append(replies)
                    self._submit_times.popleft()
                self._finished += len(taken)
