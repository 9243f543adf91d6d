"""A run directory's lock: held by rank 0 while its session runs, so a cleaner can tell a live run from a dead one.

The lock is an advisory ``flock`` on ``RUN_DIR/running.lock``.  The kernel
drops it when the holding process dies — killed, aborted, out of memory — so
a run that crashed never looks alive, and no stale PID has to be guessed at.
On a shared file system ``flock`` may be local to a node (NFS without lock
support); the cleaner is meant for the node that ran the demo, where it holds.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from types import TracebackType

LOCK_FILE = "running.lock"


class RunLock:
    """``with RunLock(run_dir):`` holds the run directory's lock for the block's duration."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._handle = None

    def __enter__(self) -> RunLock:
        self._handle = open(self.path, "a+")  # held open for the whole run, on purpose
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._handle.close()
            self._handle = None
            raise RuntimeError(f"{self.path.parent} is in use by another run (its {LOCK_FILE} is held)") from None
        self._handle.truncate(0)
        self._handle.write(f"{socket.gethostname()} {os.getpid()}\n")
        self._handle.flush()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._handle is None:
            return
        self.path.unlink(missing_ok=True)
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


def is_running(run_dir: Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (a run killed mid-way leaves the file, not the lock)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        handle = open(path)  # closed below
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False
