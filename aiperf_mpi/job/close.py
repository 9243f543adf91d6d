"""The score of a run whose launch ended before rank 0 wrote it: ``python -m aiperf_mpi.job.close RUN_DIR``.

Across nodes under a direct ``srun`` without fault tolerance, a rank's death ends the job before rank 0 can
score: Open MPI's TCP transport makes the lost connection fatal on rank 0 within 0.1 s and Slurm SIGKILLs the
step (docs/cluster.md, "A direct srun across nodes").  A lost node under an ssh-launched ``mpirun`` ends the job
the same way.  The log is whole up to the death (every epoch is fsync'd before the next), and the score is a
function of the log alone (:mod:`aiperf_mpi.results.score`), so the job script computes it after the launcher
returns: one process, no MPI, on the node that runs the batch script.

What it writes, in the run's own files, so that the run reads as every other run does:

* a ``run_stop`` whose reason is :data:`~aiperf_mpi.results.runlog.CLOSED_REASON`, at the segment's last event's
  time (where a killed segment ends), with the tasks the segment left open as ``discarded_tasks`` and a
  ``closed`` record (host, PID, the launcher's exit status, and ``at``, when it was written): the segment is scored
  as a killed one is, on the axis as it ran to its last event (the close's own time is not the run's: a close a
  day later changes nothing, and mllog's time-limit rule holds), never over less than its time limit, and
  ``--resume`` continues it;
* the ``run_stop`` line of ``mllog.log`` (status ``aborted``), the ``score`` event and ``score.json``.

It closes nothing that is not ended: a run whose lock a live process holds, a log whose last segment has its
``run_stop``, a log that ends in a cut line (``--resume`` sets that aside and scores the run) are each said in
one line and left as they are.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from aiperf_mpi.errors import EXIT_ENDED_EARLY, EXIT_NOT_SCORED, EXIT_USAGE
from aiperf_mpi.job.finish import SCORE_FILE, print_score, record_score, write_score_file
from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter
from aiperf_mpi.job.runlock import LOCK_FILE, is_running
from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.score import Score, run_step, score_inputs


@dataclass
class OpenSegment:
    """The last segment of a log, as far as the close needs it."""

    number: int
    """its ``segment`` (the count of ``run_start`` events)"""
    stopped: bool
    """it has its ``run_stop``"""
    open_tasks: list[int]
    """tasks proposed in it and not ended (done, failed, lost with their group)"""
    rehearsal: bool
    cut: bool
    """the log ends in a cut line"""
    end: float
    """its last event's time: where it ended, as a killed segment ends"""
    scored: bool = False
    """a ``score`` event follows its ``run_stop``"""
    reason: str = ""
    """its ``run_stop``'s reason ('' without one)"""


def last_segment(run_dir: Path) -> tuple[OpenSegment, Score] | None:
    """The log's last segment and the run's score as the log stands (None: the log has no ``run_start``), from one
    pass of the run's model.  The close's ``run_stop`` changes neither: it ends the segment where its last event
    did, and its reason is not the run's own end (``logmodel.stopped_by_signal``), so the score is the killed
    segment's, computed before anything is written."""
    open_tasks: dict[int, None] = {}
    scored = [False]

    def follow(event: dict, _: RunModel) -> None:
        name, task = event.get(runlog.EVENT), event.get("task")
        if name == runlog.SCORE:
            scored[0] = True
        if name == runlog.RUN_START:
            open_tasks.clear()
            scored[0] = False
        elif name == runlog.MODEL_PROPOSED and isinstance(task, int):
            open_tasks[task] = None
        elif name in (runlog.MODEL_DONE, runlog.MODEL_FAILED, runlog.GROUP_LOST):
            open_tasks.pop(task, None)  # type: ignore[arg-type]

    model = read_model(run_dir, follow, require_start=False, keep_ended=False)
    if not model.segment_records:
        return None
    segment = model.segment_records[-1]
    reason = segment.stop.get("reason") if segment.stop is not None else ""
    found = OpenSegment(segment.number, segment.stop is not None, list(open_tasks),
                        bool(segment.config.get("rehearse")), model.truncated_tail, segment.end,
                        scored[0] and segment.stop is not None, reason if isinstance(reason, str) else "")  # fmt: skip
    return found, score_inputs(model, run_step(model.config), model.truncated_tail)


def close_run(run_dir: Path, launcher_status: int | None) -> int:
    """Close ``run_dir``'s open last segment with its score; the exit status (0: closed, or nothing to close)."""
    return close_and_read(run_dir, launcher_status)[0]


UNREAD = "unread"
"""what :func:`close_and_read` gives for a log it did not read (no log, a live lock, a run file that is none)"""
UNREADABLE = "unreadable: "
"""the start of what :func:`close_and_read` gives for a log it read and could not take, the reason after it (the
job's status says it without a second pass over the log)"""
RUN_FILES = (runlog.EVENTS_FILE, MLLOG_FILE, LOCK_FILE, SCORE_FILE, SCORE_FILE + runlog.PARTIAL_SUFFIX)
"""the run's files the close opens: each absent or a regular file (a FIFO hung it, a FIFO log exited 0)"""


def not_a_file(run_dir: Path) -> str:
    """Why the close must not open ``run_dir``'s files ('' when it may): the directory is missing, or one of
    :data:`RUN_FILES` exists and is not a regular file (a FIFO or a device would block the open or feed it without
    end; issue 52's round: the close hung on a FIFO lock or ``mllog.log``, and took a FIFO log for none)."""
    if not run_dir.is_dir():
        return f"{run_dir} is not a directory"
    for name in RUN_FILES:
        try:
            mode = os.stat(run_dir / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{run_dir / name} cannot be read ({exc.strerror or exc})"
        if not stat.S_ISREG(mode):
            return f"{run_dir / name} is not a regular file"
    return ""


def close_and_read(run_dir: Path, launcher_status: int | None) -> tuple[int, tuple[OpenSegment, Score] | None | str]:
    """:func:`close_run`, and the last segment and score as they stand on disk after it (None: no ``run_start``;
    :data:`UNREAD`), from its one pass over the log: the job's status needs no second (a day's log is 100,000
    models: ``benchmarks/close.py``)."""
    if why := not_a_file(run_dir):
        print(f"aiperf_mpi: close: {why}", file=sys.stderr, flush=True)
        return (EXIT_USAGE if not run_dir.is_dir() else 1), UNREAD
    if not (run_dir / runlog.EVENTS_FILE).is_file():
        print(f"aiperf_mpi: close: {run_dir} has no {runlog.EVENTS_FILE}: the launch measured nothing", flush=True)
        return 0, UNREAD
    if is_running(run_dir):
        print(f"aiperf_mpi: close: a live process holds {run_dir}'s lock: the run is not ended; nothing written",
              file=sys.stderr, flush=True)  # fmt: skip
        return 1, UNREAD
    try:
        found = last_segment(run_dir)
    except Exception as exc:  # noqa: BLE001 - the log is the launch's, not trusted: whatever it holds is one line
        why = f"{run_dir}'s log cannot be read or scored ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
        print(f"aiperf_mpi: close: {why}; nothing written", file=sys.stderr, flush=True)
        return 1, UNREADABLE + why
    if found is None:
        print(f"aiperf_mpi: close: {run_dir}'s log has no run_start: nothing to score", flush=True)
        return 0, None
    segment, score = found
    if segment.stopped:
        return 0, _completed(run_dir, segment, score)
    if segment.cut or runlog.ends_mid_line(run_dir / MLLOG_FILE):
        print(f"aiperf_mpi: close: {run_dir}'s log or mllog.log ends in a cut line (a write the death cut "
              "short): not closed here; --resume sets the line aside and scores the run", file=sys.stderr,
              flush=True)  # fmt: skip
        return 1, found
    log = runlog.EventLog(run_dir)
    closed = {"host": socket.gethostname(), "pid": os.getpid(), "launcher_status": launcher_status, "at": time.time()}
    # at the segment's end (its last event), as a killed segment ends: the time limit's checks hold the end of the
    # run, and a close the day after is not the run's time; when it was written is the record's "at"
    stopped = log.write(runlog.RUN_STOP, sync=True, reason=runlog.CLOSED_REASON, discarded_tasks=segment.open_tasks,
                        segment=segment.number, closed=closed, **{runlog.TIME: segment.end})  # fmt: skip
    log.sync()
    mllog = MLLogWriter(run_dir)
    mllog.run_stop(runlog.CLOSED_REASON, stopped[runlog.TIME], rehearsal=segment.rehearsal, status="aborted")
    mllog.close()
    record_score(log, run_dir, score)
    log.close()
    status = "" if launcher_status is None else f" (its status {launcher_status})"
    print(f"aiperf_mpi: close: the launch ended{status} before rank 0 wrote the score; segment {segment.number} "
          f"closed from its log, {len(segment.open_tasks)} unfinished task(s) discarded", flush=True)  # fmt: skip
    print_score(score, run_dir)
    return 0, (replace(segment, stopped=True, scored=True, reason=runlog.CLOSED_REASON), score)


def _completed(run_dir: Path, segment: OpenSegment, score: Score) -> tuple[OpenSegment, Score]:
    """A segment rank 0 stopped: its score as the log has it, and the parts of it a death between two writes left
    out written from the log (the score is the log's function).  Rank 0 writes ``run_stop``, then the ``score``
    event, then ``score.json``; a rank 0 killed between them (prterun's abort ends a stopped rank 0 that was
    continued: seen in CI, the log scored and no score.json) left a run the close took for whole."""
    if not segment.scored:
        log = runlog.EventLog(run_dir)
        record_score(log, run_dir, score)
        log.close()
        print(f"aiperf_mpi: close: segment {segment.number} stopped ({segment.reason}) without its score (rank 0 "
              "ended between the two): scored from its log", flush=True)  # fmt: skip
        print_score(score, run_dir)
        return replace(segment, scored=True), score
    if not (run_dir / SCORE_FILE).is_file():
        write_score_file(run_dir, score)
        print(f"aiperf_mpi: close: segment {segment.number}'s score is in the log but {SCORE_FILE} was missing "
              "(rank 0 ended between the two): written from the log", flush=True)  # fmt: skip
    return segment, score


COMPLETED_REASONS = ("time limit", "max models")
"""the ``run_stop`` reasons of a run that ended itself where it was meant to: its time limit, its model budget"""


def job_status(run_dir: Path, launcher_status: int | None,
               found: tuple[OpenSegment, Score] | None | str = UNREAD) -> tuple[int, str]:  # fmt: skip
    """The job's exit status, from the run's log after the close, and one line that says why (issue 50).

    0 only for a run that scored and whose last segment stopped at its time limit or its model budget, whatever
    the launcher said (a run that lost groups ends with ``MPI_Abort`` after its score: the launcher's non-zero
    status is then named in the line).  Otherwise :data:`~aiperf_mpi.errors.EXIT_NOT_SCORED` (no log, no
    ``run_start``, no score: with Slurm 22.05 ``srun`` exits 0 for a step that never launched, and ``prterun``
    exits 0 after losing a daemon) or :data:`~aiperf_mpi.errors.EXIT_ENDED_EARLY` (scored, but stopped by a
    signal, a hang, the loss of every group or of the launch: ``--resume`` continues it).  ``found``: the last
    segment and score as :func:`close_and_read` left them (read here when :data:`UNREAD`).
    """
    launcher = "" if launcher_status is None else f"; the launcher's status was {launcher_status}"
    if not run_dir.is_dir():
        return EXIT_NOT_SCORED, f"the launch measured nothing (no run directory {run_dir}){launcher}"
    if why := not_a_file(run_dir):
        return EXIT_NOT_SCORED, f"{why}: no score read{launcher}"
    if not (run_dir / runlog.EVENTS_FILE).is_file():
        return EXIT_NOT_SCORED, f"the launch measured nothing (no {runlog.EVENTS_FILE} in {run_dir}){launcher}"
    if isinstance(found, str) and found.startswith(UNREADABLE):
        return EXIT_NOT_SCORED, f"{found.removeprefix(UNREADABLE)}{launcher}"
    try:
        found = last_segment(run_dir) if found == UNREAD else found
    except Exception as exc:  # noqa: BLE001 - as in close_and_read: the log is not trusted
        return EXIT_NOT_SCORED, (f"{run_dir}'s log cannot be read ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:300]}){launcher}")  # fmt: skip
    if found is None or isinstance(found, str):
        return EXIT_NOT_SCORED, f"the launch measured nothing ({run_dir}'s log has no run_start){launcher}"
    segment, score = found
    if not segment.scored:
        return EXIT_NOT_SCORED, (f"segment {segment.number} of {run_dir} has no score (python -m aiperf_mpi.job."
                                 f"close {run_dir} writes it once the run is ended){launcher}")
    if not score.score > 0:
        return EXIT_NOT_SCORED, (f"the run's score is {score.score:g}: nothing was measured (no epoch completed "
                                 f"in its window){launcher}")  # fmt: skip
    if segment.reason not in COMPLETED_REASONS:
        return EXIT_ENDED_EARLY, (f"the run scored {score.score / 1e9:.4f} GOPS but its segment "
                                  f"{segment.number} stopped early ({segment.reason}): --resume {run_dir} "
                                  f"continues it{launcher}")
    return 0, f"the run scored {score.score / 1e9:.4f} GOPS and stopped at its {segment.reason}{launcher}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_mpi.job.close", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run directory the launch wrote")
    parser.add_argument("--launcher-status", type=int, default=None, help="the launcher's exit status, recorded")
    parser.add_argument("--job-status", action="store_true",
                        help="then exit with the job's status: 0 only for a run that scored and stopped at its "
                        f"time limit or model budget; {EXIT_NOT_SCORED} for no score, {EXIT_ENDED_EARLY} for a "
                        "run that stopped early (one line says which)")  # fmt: skip
    args = parser.parse_args(argv)
    closed, found = close_and_read(args.run_dir, args.launcher_status)
    if not args.job_status:
        return closed
    status, why = job_status(args.run_dir, args.launcher_status, found)
    print(f"aiperf_mpi: job status {status}: {why}", file=sys.stderr if status else sys.stdout, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
