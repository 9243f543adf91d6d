"""How often a fault-tolerant launch fails to start or to end, against the number of ranks (issue 38).

Each launch is ``mpirun -n N`` with the fault-tolerance settings of
:data:`aiperf_mpi.mpi.tolerance.OPEN_MPI_LAUNCH` (what ``make run FT=1`` and
the templates' ``AIPERF_FAULT_TOLERANCE=1`` add) of a minimal program:
``MPI_Init``, then the end the benchmark's ranks take under fault tolerance
(:func:`aiperf_mpi.mpi.faults.leave_together`).  A launch that does not end
with status 0 within its timeout failed, to start or at its exit; the table
counts the failures, which of them printed Open MPI's signal 11 report, and
which failed after every rank had started.

    python -m benchmarks.ft_start 4:30 32:15 128:10      # ranks:launches ...
    python -m benchmarks ft_start                         # the same, into BENCHMARKS.md

``AIPERF_FT_START_EXTRA`` adds launch options (e.g. an MCA setting under test) to every launch;
``AIPERF_FT_START_LOGS=DIR`` keeps each failed launch's output there;
``AIPERF_FT_START_EXIT=barrier`` ends each launch as the benchmark did before issue 38's fix (a barrier, then
``os._exit``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH

DEFAULT_PLAN = ((4, 30), (32, 15), (128, 10))
PROGRAM = ("import os\nfrom mpi4py import MPI\nprint('UP', flush=True)\n"
           "from aiperf_mpi.mpi.faults import leave_together\nfrom aiperf_mpi.mpi.tolerance import finalize_returns\n"
           "leave_together(MPI.COMM_WORLD, 0, finalize_returns(os.environ))\n")
"""``MPI_Init``, then the benchmark's own end of a fault-tolerant rank (:func:`aiperf_mpi.mpi.faults.leave_together`:
the agreement, then ``MPI_Finalize`` where it returns).  ``UP`` once ``MPI_Init`` returned: a launch in which every
rank said it started, but that did not end with status 0, failed at its exit, not at its start"""
BARRIER_EXIT = ("import os, sys\nfrom mpi4py import MPI\nprint('UP', flush=True)\nMPI.COMM_WORLD.Barrier()\n"
                "sys.stdout.flush()\nos._exit(0)\n")
"""the end before issue 38's fix (``AIPERF_FT_START_EXIT=barrier``): a barrier, then ``os._exit`` without
``MPI_Finalize``; a rank that left was reported failed to a slower one still completing the barrier"""
SIGNAL_11 = "Signal: Segmentation fault (11)"
TIMEOUT_PER_RANK = 1.5
"""a launch's timeout: 60 s and this many seconds per rank (oversubscribed starts queue for the cores)"""
CRASH_GRACE = 5.0
"""seconds a launch is given to end by itself after a signal 11 report (it did not, at 32 or 128 ranks)"""


def launch_once(ranks: int, extra: list[str]) -> tuple[str, float, str]:
    """One launch: ('ok' | 'signal 11' | 'started, exit race' | 'exit N' | 'timeout', seconds, its output).

    A rank that crashed inside ``MPI_Init`` leaves the others failing their barrier with ``MPI_ERR_PROC_FAILED``
    and, the launch being a recoverable one, the job does not end by itself (at 128 ranks mpirun never ended
    it): once Open MPI's signal 11 report is in the output, the launch is ended a few seconds later and counts
    as 'signal 11' (its timeout would only cost time)."""
    mpirun = str(Path(sys.executable).with_name("mpirun"))
    command = [mpirun, "-n", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1",
               "--mca", "btl", "self,sm", *launch_options(extra), sys.executable, "-c", program()]  # fmt: skip
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    started = time.monotonic()
    deadline = started + 60.0 + TIMEOUT_PER_RANK * ranks
    with tempfile.TemporaryFile(mode="w+") as sink:
        job = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               text=True, env=env, start_new_session=True)  # fmt: skip
        crashed_at = None
        while job.poll() is None and time.monotonic() < deadline and \
                (crashed_at is None or time.monotonic() < crashed_at + CRASH_GRACE):  # fmt: skip
            time.sleep(0.5)
            if crashed_at is None and SIGNAL_11 in Path(f"/proc/self/fd/{sink.fileno()}").read_text(errors="replace"):
                crashed_at = time.monotonic()
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.wait()  # -9: what a timeout (or a crash report) ended
        seconds = time.monotonic() - started
        sink.seek(0)
        output = sink.read()
    if job.returncode == 0:
        return "ok", seconds, output
    otherwise = "timeout" if job.returncode == -9 else f"exit {job.returncode}"
    return failure(output, ranks, otherwise), seconds, output


def program() -> str:
    """:data:`PROGRAM`, or :data:`BARRIER_EXIT` with ``AIPERF_FT_START_EXIT=barrier`` (the end measured before)."""
    return BARRIER_EXIT if os.environ.get("AIPERF_FT_START_EXIT") == "barrier" else PROGRAM


def failure(output: str, ranks: int, otherwise: str) -> str:
    """What went wrong: 'signal 11', 'started, exit race' (every rank passed MPI_Init), or ``otherwise``."""
    if SIGNAL_11 in output:
        return "signal 11"
    started = sum(line.rstrip().endswith("UP") for line in output.splitlines())
    return "started, exit race" if started == ranks else otherwise


def launch_options(extra: list[str]) -> list[str]:
    """:data:`OPEN_MPI_LAUNCH` with ``extra`` added; an ``--mca NAME VALUE`` of ``extra`` replaces the same
    setting there (Open MPI refuses one given twice)."""
    base, replaced = OPEN_MPI_LAUNCH.split(), set()
    for index, word in enumerate(extra[:-2]):
        if word == "--mca" and extra[index + 1] in base:
            at = base.index(extra[index + 1])
            base[at + 1] = extra[index + 2]
            replaced.add(index)
    kept = [w for i, w in enumerate(extra) if not any(i - r in (0, 1, 2) for r in replaced)]
    return base + kept


def measure(plan: tuple[tuple[int, int], ...], extra: list[str]) -> str:
    """The table: per rank count, the launches, the failures (and their kinds), the median launch time."""
    rows = ["| ranks | launches | failed to start | of which signal 11 | other failures to start | started, failed at "
            "exit | median launch (s) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for ranks, launches in plan:
        outcomes = []
        for number in range(launches):
            outcome, seconds, tail = launch_once(ranks, extra)
            outcomes.append((outcome, seconds))
            print(f"{ranks} ranks, launch {number + 1}/{launches}: {outcome} in {seconds:.1f} s", flush=True)
            if outcome != "ok" and (keep := os.environ.get("AIPERF_FT_START_LOGS")):
                Path(keep).mkdir(parents=True, exist_ok=True)
                (Path(keep) / f"{ranks}-{number + 1}.out").write_text(tail)
            if outcome not in ("ok", "signal 11", "started, exit race"):
                print(tail[-2000:], flush=True)
        failed = [o for o, _ in outcomes if o not in ("ok", "started, exit race")]
        raced = sum(o == "started, exit race" for o, _ in outcomes)
        kinds = sorted({o for o in failed if o != "signal 11"})
        median = sorted(s for _, s in outcomes)[len(outcomes) // 2]
        rows.append(f"| {ranks} | {launches} | {len(failed)} | {failed.count('signal 11')} | "
                    f"{', '.join(kinds) or '–'} | {raced} | {median:.1f} |")  # fmt: skip
    return "\n".join(rows) + (f"\n\nExtra launch options: `{' '.join(extra)}`." if extra else "") + "\n"


def plan_of(args: list[str]) -> tuple[tuple[int, int], ...]:
    """``["4:30", "32:15"]`` → ((4, 30), (32, 15)); none: :data:`DEFAULT_PLAN`."""
    return tuple((int(r), int(n)) for r, n in (a.split(":") for a in args)) if args else DEFAULT_PLAN


def run() -> str:
    """``python -m benchmarks ft_start``: the default plan (about 15 minutes on 2 cores)."""
    return measure(DEFAULT_PLAN, os.environ.get("AIPERF_FT_START_EXTRA", "").split())


if __name__ == "__main__":
    print(measure(plan_of(sys.argv[1:]), os.environ.get("AIPERF_FT_START_EXTRA", "").split()))
