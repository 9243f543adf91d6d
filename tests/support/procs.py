"""What the test fixtures that start real daemons share: Debian packages, marked processes, a watchdog.

Two fixtures start long-lived processes for the tests — a real Slurm
(:mod:`tests.support.slurm`) and a cluster of hosts made of Linux namespaces
(:mod:`tests.support.multihost`) — and both follow the same rules:

- what they need comes from Debian's packages, installed with apt-get when
  missing (as root; a ``policy-rc.d`` keeps the packages' services from
  starting system-wide);
- every process they start carries one marker in its environment,
  ``NAME=<scratch directory>``, and they stop processes by PID, found by that
  marker, never by name, so nothing of anyone else's on the machine is touched;
- a watchdog process holds the read end of a pipe whose write end only the
  test process holds; when the test process dies in any way (even SIGKILL)
  the pipe reaches EOF and the watchdog sweeps the marked processes and the
  scratch directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def missing_debian_packages(packages: Sequence[str], unavailable: type[Exception], hint: str) -> list[str]:
    """The Debian packages of ``packages`` that are not installed (``unavailable`` raised without dpkg)."""
    if shutil.which("dpkg-query") is None:
        raise unavailable(f"no dpkg-query: these tests need Debian's packages {' '.join(packages)} ({hint})")
    missing = []
    for package in packages:
        status = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        ).stdout
        if status.strip() != "install ok installed":
            missing.append(package)
    return missing


def ensure_debian_packages(packages: Sequence[str], unavailable: type[Exception], hint: str) -> float:
    """Install the missing ``packages`` with apt-get; return the seconds it took (0 when none were missing).

    Debian's maintainer scripts would start system-wide daemons (munge,
    Slurm, sshd); a ``policy-rc.d`` that says no is put in place for the
    install when the machine has none (container images usually do).
    ``hint`` says how to run the tests without these packages.
    """
    missing = missing_debian_packages(packages, unavailable, hint)
    if not missing:
        return 0.0
    if os.geteuid() != 0:
        raise unavailable(f"packages missing ({' '.join(missing)}) and not root to install them; "
                          f"install them or {hint}")  # fmt: skip
    start = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\n# aiperf_mpi tests: no service starts while packages are installed\nexit 101\n")
        policy.chmod(0o755)
    try:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True, check=False)
            done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise unavailable(f"apt-get install {' '.join(missing)} failed:\n{done.stdout[-2000:]}{done.stderr}")
    finally:
        if own_policy:
            policy.unlink(missing_ok=True)
    return time.monotonic() - start


def marked_pids(marker: str, value: str | os.PathLike) -> list[int]:
    """Every process (but this one) whose environment carries ``marker=value``."""
    needle = f"{marker}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, a zombie, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def terminate(pids: Sequence[int], grace: float = 2.0) -> None:
    """SIGTERM, wait up to ``grace`` s, then SIGKILL the given processes (by PID, nothing else)."""
    alive = list(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while True:
            alive = [pid for pid in alive if not gone(pid)]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not alive:
            return


def gone(pid: int) -> bool:
    """Exited, or a zombie (dead, waiting for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def command_name(pid: int) -> str | None:
    """The process's command name (``/proc/PID/comm``: ``prted``, ``slurmd``, ``python``; None when it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def start_watchdog(module: str, marker: str, scratch: str | os.PathLike) -> subprocess.Popen:
    """``python -m module --watchdog scratch``, in its own session, without the marker (it must outlive the sweep).

    The caller keeps the returned process's stdin open for as long as the
    fixture lives and closes it on a clean stop; ``module`` calls
    :func:`watch` from its ``--watchdog`` entry point.
    """
    env = {k: v for k, v in os.environ.items() if k != marker}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", module, "--watchdog", str(scratch)], stdin=subprocess.PIPE,
                            env=env, cwd=REPO_ROOT, start_new_session=True)  # fmt: skip


def watch(marker: str, scratch: str) -> None:
    """The watchdog: block until the test process closes our stdin (or dies), then sweep what is left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the session must not take the watchdog first
    sys.stdin.buffer.read()
    if marked_pids(marker, scratch):
        terminate(marked_pids(marker, scratch))
        terminate(marked_pids(marker, scratch), grace=0.5)  # what was forked while the first round ran
        shutil.rmtree(scratch, ignore_errors=True)
