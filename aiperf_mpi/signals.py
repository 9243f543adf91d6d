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

The handlers are installed before the layout, data checks and staging, so
a signal during start-up is not lost: the run then stops as soon as it
starts.

A Python signal handler runs only when the main thread executes Python
again — never while it waits inside an MPI call or a TensorFlow op, which is
where a training rank spends its life (seen under Slurm: the ranks ignored
SIGTERM until SIGKILL).  So the flag is set by a watcher thread that reads
the signal numbers Python's C-level handler writes to a wake-up pipe
(``signal.set_wakeup_fd``) the instant a signal arrives, whatever the main
thread is doing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from aiperf_mpi.errors import EXIT_TERMINATED
from aiperf_mpi.results.runlog import SIGNAL_REASON

TERM_EXIT_DELAY = 15.0
"""seconds a training rank stays after SIGTERM (well under Slurm's default KillWait of 30 s)"""
ALARM_MARGIN = 5
"""if the clean exit cannot run (a native call holding the GIL), SIGALRM ends the rank this much later"""


class StopFlag:
    """Set by a signal: finish as at the time limit (see the module's table)."""

    def __init__(self) -> None:
        self.reason = ""
        self.urgent = False
        self._leave_after: float | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.RLock()

    def install(self) -> StopFlag:
        """Handle SIGTERM and SIGUSR1 from now on (call from the main thread)."""
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._handle)
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read,), name="aiperf-signals", daemon=True).start()
        return self

    def _watch(self, read: int) -> None:
        """The watcher thread: every signal number written to the wake-up pipe, as it arrives."""
        while True:
            try:
                data = os.read(read, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGTERM, signal.SIGUSR1):
                    self._handle(signum, None)

    def leave_after_term(self, delay: float = TERM_EXIT_DELAY) -> None:
        """On a training rank: after SIGTERM, exit with status 143 once ``delay`` seconds have passed."""
        with self._lock:
            self._leave_after = delay
            if self.urgent:
                self._start_timer()

    def _handle(self, signum: int, _frame: object) -> None:
        """From the Python handler or the watcher thread, whichever comes first (both are harmless twice)."""
        with self._lock:
            self.reason = self.reason or f"{SIGNAL_REASON}{signal.Signals(signum).name}"
            if signum == signal.SIGTERM:
                self.urgent = True
                self._start_timer()

    def _start_timer(self) -> None:
        if self._leave_after is None or self._timer is not None:
            return
        self._timer = threading.Timer(self._leave_after, _leave)
        self._timer.daemon = True
        self._timer.start()
        if signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:  # the backstop needs no Python code to run
            signal.alarm(int(self._leave_after) + ALARM_MARGIN)

    def __call__(self) -> str:
        return self.reason


def _leave() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_TERMINATED)
