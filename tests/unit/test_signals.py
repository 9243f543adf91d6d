"""The signal flag: what SIGUSR1, SIGTERM and SIGCONT mean to a rank (real signals to this process)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from aiperf_mpi.errors import EXIT_TERMINATED
from aiperf_mpi.signals import StopFlag


def restore(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def test_usr1_is_a_graceful_stop_and_sigcont_changes_nothing() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        flag = StopFlag().install()
        os.kill(os.getpid(), signal.SIGCONT)
        assert flag() == "" and not flag.urgent
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flag() == "signal SIGUSR1" and not flag.urgent
        os.kill(os.getpid(), signal.SIGTERM)  # the kill follows the warning: urgent, the first reason stays
        assert flag() == "signal SIGUSR1" and flag.urgent
    finally:
        restore(saved)


def run_child(code: str, timeout: float = 30) -> tuple[int, float]:
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout, capture_output=True)
    return child.returncode, time.monotonic() - started


def test_a_training_rank_leaves_by_itself_after_sigterm() -> None:
    code, elapsed = run_child("""
        import os, signal, time
        from aiperf_mpi.signals import StopFlag
        flag = StopFlag().install()
        flag.leave_after_term(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(20)  # a rank busy training: the timer ends it
        raise SystemExit(0)
    """)
    assert code == EXIT_TERMINATED and elapsed < 15


def test_a_sigterm_before_the_rank_knew_its_role_still_counts() -> None:
    code, _ = run_child("""
        import os, signal, time
        from aiperf_mpi.signals import StopFlag
        flag = StopFlag().install()
        os.kill(os.getpid(), signal.SIGTERM)  # during start-up: noted, not fatal
        assert flag.urgent and flag() == "signal SIGTERM"
        flag.leave_after_term(0.2)  # the role is known now: a training rank
        time.sleep(20)
    """)
    assert code == EXIT_TERMINATED


def test_the_master_never_leaves_on_its_own() -> None:
    code, _ = run_child("""
        import os, signal, time
        from aiperf_mpi.signals import StopFlag
        flag = StopFlag().install()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
        assert flag.urgent
    """)
    assert code == 0


def test_a_rank_blocked_in_native_code_still_leaves_after_sigterm() -> None:
    """The Python handler cannot run while the main thread waits in C (an MPI call, a TF op): the watcher does."""
    code, elapsed = run_child("""
        import os, signal, threading
        from aiperf_mpi.signals import StopFlag
        flag = StopFlag().install()
        flag.leave_after_term(0.5)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        # the main thread waits where no Python handler runs (as in MPI_Recv), and another thread
        # takes the signal (as an MPI or TensorFlow thread may)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        threading.Event().wait()
    """)
    assert code == EXIT_TERMINATED and elapsed < 15
