"""What the batch system's signals mean to a rank (installed first thing in ``main``).

* SIGUSR1 — the warning a job script asks for (``--signal=USR1@N``): stop
  handing out work, let the groups finish their current epoch within
  ``--grace``, score.
* SIGTERM — the kill itself has begun (time limit or ``scancel``; SIGKILL
  follows after Slurm's KillWait, 30 s by default): the master scores at
  once, without waiting for running epochs, and ends the job.  A training
  rank has nothing to save, so it leaves on its own after
  :data:`TERM_EXIT_DELAY` seconds — time for the master to write the score
  and the report — because under ``srun`` a job step being cancelled does
  not always honour the master's ``MPI_Abort``, and the ranks would
  otherwise hold their nodes until SIGKILL.
* SIGCONT (sent with SIGTERM by Slurm, or on resuming a suspended job)
  keeps its default meaning — continue — and changes nothing.

The handlers are installed before MPI, the layout and data staging, so a
signal during start-up is not lost: the run then stops as soon as it starts.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

TERM_EXIT_DELAY = 20.0
"""seconds a training rank stays after SIGTERM (under Slurm's default KillWait of 30 s)"""
EXIT_TERMINATED = 128 + signal.SIGTERM


class StopFlag:
    """Set by a signal: finish as at the time limit (see the module's table)."""

    def __init__(self) -> None:
        self.reason = ""
        self.urgent = False
        self._leave_after: float | None = None
        self._timer: threading.Timer | None = None

    def install(self) -> StopFlag:
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)
        return self

    def leave_after_term(self, delay: float = TERM_EXIT_DELAY) -> None:
        """On a training rank: after SIGTERM, exit with status 143 once ``delay`` seconds have passed."""
        self._leave_after = delay
        if self.urgent:
            self._start_timer()

    def _handle(self, signum: int, _frame: object) -> None:
        self.reason = self.reason or f"signal {signal.Signals(signum).name}"
        if signum == signal.SIGTERM:
            self.urgent = True
            self._start_timer()

    def _start_timer(self) -> None:
        if self._leave_after is None or self._timer is not None:
            return
        self._timer = threading.Timer(self._leave_after, _leave)
        self._timer.daemon = True
        self._timer.start()

    def __call__(self) -> str:
        return self.reason


def _leave() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_TERMINATED)
