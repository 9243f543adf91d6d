"""A deadline at every phase of a rank's life: named phases with bounds, and a watchdog thread that ends a hang.

The master's hang deadline (:mod:`aiperf_mpi.job.faults`) sees a group go silent mid-run; it cannot see a rank
that hangs where no message is awaited: in a collective before the start line (start-up), in the job's end (the
drain, the score, the report, ``MPI_Comm_agree``, which has no timeout, ``MPI_Finalize``), in Horovod's or
TensorFlow's teardown, or rank 0 itself in an ``fsync`` on a failed file system.  Each such hang would hold the
whole allocation until the batch system's limit.  So every rank runs a :class:`Watchdog`: the rank names the
phase it is in and the phase's bound, and a thread of its own (it runs while the main thread waits inside an
MPI call or a system call, which release the interpreter lock) notices when the phase outlives its bound,
prints ONE line, and runs an injected action — over MPI, ``MPI_Abort`` (:mod:`aiperf_mpi.mpi.deadline`).

Besides the one current phase, short *guards* bound a single call from any thread (:meth:`Watchdog.guard`):
rank 0's fsync of the run log, whose stall must end the job rather than freeze the master.

MPI-free (the action is injected); unit tests drive it with a real thread and real waits.
"""

from __future__ import annotations

import argparse
import faulthandler
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

from aiperf_mpi.config import RunConfig

PROGRAM = "aiperf_mpi"

STARTUP = "start-up"
"""every collective before the start line (the layout, staging, the precision, the peak probe, the start line)"""
THE_END = "the end"
"""after the run's stop: the drain, score, report, agreement and MPI_Finalize"""
TEARDOWN = "teardown"
"""a training rank's Horovod shutdown, TensorFlow's and MPI's ends (inside the end's bound)"""
LOG_FSYNC = "the run log's fsync"
"""rank 0's fsync of events.jsonl (and the score's file): stable storage of what the log claims"""


DERIVED = 0.0
"""``--startup-deadline`` or ``--first-model-deadline`` 0, their default: the bound is derived from the job"""
STARTUP_FLOOR = 300.0
STARTUP_PER_RANK = 0.3
"""the derived start-up bound: :data:`STARTUP_FLOOR` + this × ranks (:func:`startup_for`)"""
STARTUP_UNKNOWN = 1800.0
"""the start-up bound where the world's size is not known before MPI_Init (no launcher's variable)"""
FIRST_MODEL_FLOOR = 300.0
FIRST_MODEL_EPOCHS = 3.0
EFFICIENCY_FLOOR = 0.03
"""the derived first-model bound: :data:`FIRST_MODEL_FLOOR` + :data:`FIRST_MODEL_EPOCHS` × the seed's first
epoch at :data:`EFFICIENCY_FLOOR` of the group's probed peak (:func:`first_model_for`)"""
NOT_READY = 600.0
"""the first-model bound of a group whose leader has not said Ready since the start line (derived bounds): its
Horovod set-up, its data's opening and its runner's construction come first"""
FIRST_MODEL_UNMEASURED = 3600.0
"""a group's first-model bound when it reports no peak (``--no-peak-probe``): a ResNet-50 epoch of ImageNet on one
GPU is ≈ 20 minutes; an hour covers it three times over"""
WORLD_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
"""where a launcher tells a rank (or the batch shell) the job's size before MPI_Init: Open MPI's mpirun, MPICH's
Hydra and srun's PMI-2, srun, the allocation"""


def startup_for(ranks: int | None) -> float:
    """The derived start-up bound for a world of ``ranks``: 300 s + 0.3 s a rank (331 s at 128 ranks, 1,529 s at
    4,096), :data:`STARTUP_UNKNOWN` when the size is not known.

    From measurements (BENCHMARKS.md): the start-up of 128 rehearsing ranks took 32 s on this 2-core machine at
    load 50–140, its imports queued on two cores (0.25 s a rank), and at 4,096 ranks the imports from a parallel
    file system were projected at ≈ 22 minutes without the templates' local venv ("Projection to 4,096"); the
    collectives are O(log ranks).  Before, 1,800 s for every job: a 3-rank ``make run`` was held half an hour by
    a rank stopped in start-up (issue 50).
    """
    if not ranks or ranks < 1:
        return STARTUP_UNKNOWN
    return min(LONGEST_BOUND, STARTUP_FLOOR + STARTUP_PER_RANK * ranks)


def first_model_for(epoch_ops: float, peak: float | None) -> float:
    """The derived first-model bound of a group whose probe measured ``peak`` operations per second, for a seed
    whose first epoch is ``epoch_ops`` operations: 300 s (the search, the build and the trace) + 3 × that epoch at
    3 % of the peak.  Measured here: ResNet-50's training steps reach 30–55 % of the matmul peak on this CPU
    (BENCHMARKS.md: a training step ÷ the fp32 matmul peak, 0.305 at 32², 0.552 at 224²); on an accelerator the
    probe measures its tensor units' peak, which an input-bound epoch may reach a few per cent of (not measured
    here), so the floor is 3 %: a ResNet-50 epoch of ImageNet (3.0e16 operations) on a group whose probe says
    1e15 ops/s gets 3,300 s, make run's ResNet-50 on the digits (7.4e11) at this CPU's 5e11 ops/s 450 s.  Without a
    peak, :data:`FIRST_MODEL_UNMEASURED`."""
    if not peak or peak <= 0 or not math.isfinite(peak) or epoch_ops <= 0:
        return FIRST_MODEL_UNMEASURED
    return min(LONGEST_BOUND, FIRST_MODEL_FLOOR + FIRST_MODEL_EPOCHS * epoch_ops / (peak * EFFICIENCY_FLOOR))


def world_size_from(environ: dict | os._Environ) -> int | None:
    """The job's size as the launcher gave it in the environment (:data:`WORLD_SIZE_VARIABLES`), or None."""
    for name in WORLD_SIZE_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


@dataclass(frozen=True)
class PhaseBounds:
    """The bound of each phase, in seconds (``RunConfig``'s ``*_deadline`` options; docs/cluster.md).

    The defaults are projections for a 4,096-rank job from what was measured here (BENCHMARKS.md;
    docs/cluster.md, "A deadline at every phase"): generous enough never to end a healthy job, short against
    an allocation of hours.
    """

    startup: float = STARTUP_UNKNOWN
    """from a rank's ``main`` to the start line; by default derived from the world's size (:func:`startup_for`)"""
    first_model: float = FIRST_MODEL_UNMEASURED
    """a group's first model (search, build, trace and first epoch, from its Work) before it has timed anything;
    by default derived per group from its probed peak (:func:`first_model_for`), this where it has none"""
    end: float = RunConfig.end_deadline
    """rank 0's end after the drain (score, report, export, agreement, MPI_Finalize): the report of a
    100,000-model day is ≈ 80 s (BENCHMARKS.md: ≈ 8 s at 10,000), the export a TensorFlow start-up more"""
    io: float = RunConfig.io_deadline
    """one fsync of rank 0's run log: milliseconds on a healthy file system, tens of seconds on a loaded one"""
    master: float = RunConfig.master_deadline
    """rank 0 silent mid-run (mpi/heartbeat.py): its loop passes every 0.2 s at most and beats every 2 s; a
    stall of seconds (a full collection, a descheduling) is far below it"""
    hang_margin: float = RunConfig.hang_margin
    """the seconds the master's mid-run bound adds to 3 × a group's longest epoch (job/faults.py's
    :class:`~aiperf_mpi.job.faults.HangPolicy`): a check-point write, a slow validation, a busy file system"""
    startup_from: str = "--startup-deadline"
    """where :attr:`startup` came from, for the start line"""
    first_model_derived: bool = False
    """the first model's bound is derived per group (``--first-model-deadline 0``, the default)"""

    def training_rank_end(self, grace: float) -> float:
        """A training (or relay) rank's bound on its end, from when its group is stopped.

        Longer than rank 0's, which ends the job itself (after its score is on disk) when its own end outlives
        :attr:`end`: a training rank stopped early waits out the drain of the others (``grace``) and then rank
        0's end, and its watchdog, which ends the job without a score, must never fire before rank 0's would.
        """
        return grace + self.end + END_MARGIN


DEFAULT_BOUNDS = PhaseBounds()
"""the defaults (frozen, so one instance serves every default argument)"""


STARTUP_OPTION = "--startup-deadline"
"""the command-line option of the start-up bound (cli.py's ``DEADLINE_HELP``)"""
END_OPTION = "--end-deadline"
"""the command-line option of rank 0's end bound"""
LONGEST_BOUND = 31 * 86400.0
"""the largest bound the configuration accepts (config.py's ``NUMERIC_RANGES``)"""


def startup_bound_from_argv(argv: Sequence[str], default: float | None = None) -> float:
    """The start-up bound the command line gives (``--startup-deadline S`` or ``--startup-deadline=S``), read
    before MPI_Init, or ``default``.

    ``main`` needs it before MPI exists: mpi4py's import runs ``MPI_Init`` with the interpreter lock held, so no
    watchdog thread runs there and SIGALRM's default action is the only deadline; without this the alarm was the
    1,800 s default whatever the option said (a rank stopped inside MPI_Init on another node held a two-node job
    ≈ 500 s and more).  The templates' start-up watcher reads it too (:func:`launch_bounds`).  Not given (or 0):
    derived from the world's size the launcher put in the environment (:func:`startup_for`), or ``default``.
    """
    derived = startup_for(world_size_from(os.environ)) if default is None else default
    bound = bound_from_argv(argv, STARTUP_OPTION, DERIVED)
    return derived if bound == DERIVED else bound


class _ArgvError(Exception):
    """An option :func:`bound_from_argv` reads is given without its value: the parser's one line comes later."""


class _BoundParser(argparse.ArgumentParser):
    """argparse for one option before MPI_Init: raises instead of printing and exiting (every rank would)."""

    def error(self, message: str) -> NoReturn:
        raise _ArgvError(message)


def bound_from_argv(argv: Sequence[str], option: str, default: float) -> float:
    """The bound ``option`` S (or ``option=S``) gives on the command line, or ``default``.

    Read by argparse itself, the one parser of the command line (issue 51: this was a hand-written loop beside it),
    knowing only this option: the last one counts, nothing after ``--``, no abbreviation (a config file's, an
    abbreviation's or a resumed run's logged value take effect once the configuration is agreed, after MPI_Init).
    A value that is no number, not positive or out of range, or a missing one, gives ``default``: the full
    parser reports it, in its one line, once MPI is up.
    """
    parser = _BoundParser(add_help=False, allow_abbrev=False)
    parser.add_argument(option, dest="bound")
    try:
        found = parser.parse_known_args(list(argv))[0].bound
        bound = float(found) if found is not None else default
    except (_ArgvError, ValueError):
        return default
    return bound if 0 < bound <= LONGEST_BOUND or bound == DERIVED else default  # a NaN is neither: the default


LAUNCH_MARGIN = 60.0
"""seconds the templates' watcher allows past the run's own start-up or end bound before it ends the launcher: the
ranks start after the launcher does, and rank 0's abort takes its moment"""
CLOSE_BOUND = 120.0
"""seconds the templates give the close once the launcher has returned (``benchmarks/close.py``: 2.2 s for a log
of 100,000 models); past it, on a stalled file system, the close is left and the job's status is 6"""


def launch_bounds(argv: Sequence[str]) -> str:
    """``STARTUP END MARGIN CLOSE`` in whole seconds, as the templates' launch reads them from the benchmark's
    options (``python -m aiperf_mpi.job.deadlines OPTIONS...``): the start-up watcher's bound, srun's ``--wait``,
    the watcher's margin past either (:data:`LAUNCH_MARGIN`) and the close's bound (:data:`CLOSE_BOUND`): every
    bound of the batch shell has its one home here.

    srun's ``--wait=S`` ends the step's other tasks S seconds after its first task ends.  The ranks leave
    together, after the end's meeting (``mpi/deadline.py``), so in a healthy run the first task's end is the
    job's; what it bounds is a rank stopped after its part of the last meeting while no rank waits for it in
    ``MPI_Finalize`` (no rank's deadline is left to end it), at the end's own bound.
    """
    startup = startup_bound_from_argv(argv)
    end = bound_from_argv(argv, END_OPTION, DEFAULT_BOUNDS.end)
    return f"{math.ceil(startup)} {math.ceil(end)} {math.ceil(LAUNCH_MARGIN)} {math.ceil(CLOSE_BOUND)}"


def bounds_of(config: object, ranks: int | None = None) -> PhaseBounds:
    """The run configuration's bounds (``startup_deadline``, ``first_model_deadline``, ``end_deadline``,
    ``io_deadline``, ``master_deadline`` and the mid-run bound's ``hang_margin``:
    :class:`~aiperf_mpi.config.RunConfig`), each deadline of 0 derived: the start-up from ``ranks``
    (:func:`startup_for`), the first model per group later, on rank 0 (:func:`first_model_for`:
    :attr:`PhaseBounds.first_model` is then the bound of a group with no peak)."""
    startup, source = config.startup_deadline, "--startup-deadline"
    if startup == DERIVED:
        startup = startup_for(ranks)
        source = (f"{STARTUP_FLOOR:g} + {STARTUP_PER_RANK:g} s × {ranks} ranks" if ranks
                  else "the world's size unknown")  # fmt: skip
    derived = config.first_model_deadline == DERIVED
    first_model = FIRST_MODEL_UNMEASURED if derived else config.first_model_deadline
    return PhaseBounds(startup, first_model, config.end_deadline, config.io_deadline, config.master_deadline,
                       hang_margin=config.hang_margin, startup_from=source, first_model_derived=derived)  # fmt: skip


BACKSTOP = 30.0
"""seconds past a phase's bound at which a rank whose watchdog thread could not run ends itself
(:meth:`Watchdog._arm`): the watchdog's own ``MPI_Abort`` has had that long to end the job"""
END_MARGIN = 120.0
"""seconds by which a training rank's end outlasts rank 0's: rank 0's deadline ends the job first, score written"""


def deadline_line(rank: int, host: str, phase: str, bound: float, what: str) -> str:
    """The one line a rank prints when a phase passed its deadline."""
    return f"{PROGRAM}: rank {rank} on {host}: {phase} passed its deadline of {bound:.0f} s: {what}"


@dataclass
class _Deadline:
    phase: str
    bound: float
    due: float
    what: str
    status: int


class Watchdog:
    """One rank's watchdog: the current phase, any guards, and the thread that ends a phase past its bound.

    ``action(status)`` is what ends the rank (over MPI: ``MPI_Abort(status)``, which ends every rank of the job);
    it is called at most once, after the line, from the watchdog's thread.  ``clock`` is a monotonic clock.
    """

    def __init__(self, rank: int, host: str, action: Callable[[int], None],
                 clock: Callable[[], float] = time.monotonic, tick: float = 0.5,
                 backstop: float | None = None) -> None:  # fmt: skip
        self.rank, self.host = rank, host
        self._backstop = backstop
        """seconds past a phase's due time at which :mod:`faulthandler`'s C thread ends the process (None: no
        backstop; ``clock`` must then be the real monotonic clock): see :meth:`_arm`"""
        self._action, self._clock, self._tick = action, clock, tick
        self._phase: _Deadline | None = None
        self._guards: dict[int, _Deadline] = {}
        self._next_guard = 0
        self._lock = threading.Condition()
        self.fired: _Deadline | None = None
        self.started = clock()
        """when the watchdog began (a rank's start, for its start-up bound)"""
        self.after_meeting: float | None = None
        """seconds MPI's own end may take once every rank has met at the job's end (the end's bound, set once the
        configuration is known; None: what is left of the current phase): the meeting means rank 0's end is done,
        so a training rank's longer margin no longer applies (:func:`aiperf_mpi.mpi.deadline.meet_then_finalize`)"""
        self._thread = threading.Thread(target=self._watch, name="aiperf-deadlines", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the rank's side

    def enter(self, phase: str, bound: float, what: str, status: int, since: float | None = None) -> None:
        """From now (or ``since``, a time of ``clock``), ``phase`` must end within ``bound`` seconds."""
        start = self._clock() if since is None else since
        with self._lock:
            self._phase = _Deadline(phase, bound, start + bound, what, status)
            self._lock.notify()
        self._arm(start + bound)

    def rename(self, phase: str, what: str) -> None:
        """Name the part of the current phase the rank is in; its deadline stays (the line says where it hung)."""
        with self._lock:
            if self._phase is not None:
                self._phase = _Deadline(phase, self._phase.bound, self._phase.due, what, self._phase.status)

    def leave(self) -> None:
        """The current phase ended in time: no deadline until the next :meth:`enter`."""
        with self._lock:
            self._phase = None
        if self._backstop is not None:
            faulthandler.cancel_dump_traceback_later()

    def _arm(self, due: float) -> None:
        """The backstop for a phase due at ``due``: :func:`faulthandler.dump_traceback_later` with ``exit=True``.

        The watchdog is a Python thread: while the rank's main thread is inside a C call that holds the
        interpreter lock (mpi4py's ``MPI_Init`` and ``MPI_Finalize``, a library's teardown) it cannot run, and a
        hang there would outlive every bound (issue 50).  :mod:`faulthandler`'s timer is a C thread that needs no
        lock: ``backstop`` seconds after the phase's due time, if the process is still there (the watchdog's
        own action had no chance), it writes every thread's stack to stderr — where the rank hung — and ends the
        process with status 1; the launcher sees a rank die.  One timer per process: phases only (a guard bounds
        an ``fsync``, which releases the lock)."""
        if self._backstop is not None:
            faulthandler.dump_traceback_later(max(1.0, due - self._clock() + self._backstop), exit=True)

    def remaining(self) -> float | None:
        """Seconds left in the current phase (None: no phase is bounded)."""
        current = self._phase
        return None if current is None else current.due - self._clock()

    def finalize_bound(self, default: float) -> float:
        """Seconds MPI's own end may take once the ranks met: what is left of the phase, at most
        :attr:`after_meeting`; ``default`` when neither is set."""
        bounds = [b for b in (self.remaining(), self.after_meeting) if b is not None]
        return min(bounds) if bounds else default

    @property
    def phase(self) -> str:
        """The current phase's name ('' when none)."""
        current = self._phase
        return current.phase if current is not None else ""

    @contextmanager
    def guard(self, phase: str, bound: float, what: str, status: int) -> Iterator[None]:
        """Bound one call (from any thread): past ``bound`` seconds inside the block, the job ends."""
        with self._lock:
            token = self._next_guard
            self._next_guard += 1
            self._guards[token] = _Deadline(phase, bound, self._clock() + bound, what, status)
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                del self._guards[token]

    # ------------------------------------------------------------------ the thread

    def _overdue(self) -> _Deadline | None:
        now = self._clock()
        pending = [d for d in (self._phase, *self._guards.values()) if d is not None]
        late = [d for d in pending if now >= d.due]
        return min(late, key=lambda d: d.due) if late else None

    def _watch(self) -> None:
        while True:
            with self._lock:
                overdue = self._overdue()
                while overdue is None:
                    self._lock.wait(self._tick)  # a tick, not the due time: the clock may be a test's
                    overdue = self._overdue()
                self.fired = overdue
            print(deadline_line(self.rank, self.host, overdue.phase, overdue.bound, overdue.what),
                  file=sys.stderr, flush=True)  # fmt: skip
            sys.stdout.flush()
            self._action(overdue.status)
            return  # the action ends the process; a test's returns, and the watchdog has done its one thing


def bounds_markdown() -> str:
    """docs/cluster.md's table of the bounds, generated from the constants here (their one home), so that the page
    cannot state another default (``tests/unit/test_deadlines.py`` holds it to this)."""
    rows = [
        ("`MPI_Init` (mpi4py's import)",
         f"`--startup-deadline` as the command line gives it, else derived as below from the launcher's variables "
         f"({', '.join(f'`{name}`' for name in WORLD_SIZE_VARIABLES)}; {STARTUP_UNKNOWN:.0f} s where none is set), "
         "from the rank's start, by SIGALRM's default action",
         "every rank waiting in the launcher's fence",
         "mpi4py holds the interpreter lock in `MPI_Init`: no thread runs there and no line is printed (under `srun` "
         "a site sees `Alarm clock` for each waiting rank); the option is read before MPI exists"),
        ("start-up: every collective before the start line",
         f"`--startup-deadline`; 0 (the default): {STARTUP_FLOOR:.0f} s + {STARTUP_PER_RANK:g} s a rank "
         f"({startup_for(3):.0f} s at 3 ranks, {startup_for(4096):.0f} s at 4,096), from the rank's start",
         "each waiting rank",
         "32 s measured at 128 ranks here (load 50–140); the imports from a parallel file system projected at ≈ 22 "
         "min at 4,096 without the templates' local venv (BENCHMARKS.md); a `faulthandler` backstop "
         f"{BACKSTOP:.0f} s past it where the interpreter lock is held"),
        ("a group's first model",
         f"`--first-model-deadline`; 0 (the default): per group, {FIRST_MODEL_FLOOR:.0f} s + "
         f"{FIRST_MODEL_EPOCHS:g} × the seed's first epoch at {EFFICIENCY_FLOOR:.0%} of the peak its Ready reports "
         f"(a rehearsal: its stand-in's rate), {FIRST_MODEL_UNMEASURED:.0f} s without a probe, "
         f"{NOT_READY:.0f} s before the group is Ready",
         "the master",
         "ResNet-50's steps reach 30–55 % of the matmul peak on this CPU, an input-bound accelerator far less: 3 % "
         f"is a floor; a ResNet-50 epoch of ImageNet on a group probed at 1e15 ops/s gets "
         f"{first_model_for(3.0e16, 1e15):.0f} s"),
        ("mid-run",
         f"3 × the group's longest epoch (or first-epoch cost) + `--hang-margin`, {DEFAULT_BOUNDS.hang_margin:.0f} s, "
         "on rank 0's own clock",
         "the master",
         "its own scale; a stall of rank 0's own moves it (issue 50); the margin covers a check-point write, a slow "
         "validation, a busy file system"),
        ("rank 0 silent mid-run", f"`--master-deadline`, {DEFAULT_BOUNDS.master:.0f} s since its last heartbeat",
         "the two watching leaders", "rank 0's loop passes every 0.2 s and beats every 2 s"),
        ("the end after the drain",
         f"`--end-deadline`, {DEFAULT_BOUNDS.end:.0f} s on rank 0; grace + end + {END_MARGIN:.0f} s on the others, "
         "and at most the end's bound in `MPI_Finalize` once every rank has met",
         "rank 0 first",
         "the report of a 100,000-model day ≈ 80 s, the export a TensorFlow start-up; `--serve-at-end` inside it"),
        ("rank 0's file writes (the log's fsync, the graphs file, weights removals, the I/O thread's end)",
         f"`--io-deadline`, {DEFAULT_BOUNDS.io:.0f} s a call", "rank 0", "milliseconds when healthy"),
    ]  # fmt: skip
    lines = ["| phase | bound (option, default) | who detects | why the default |", "|---|---|---|---|"]
    lines += [f"| {phase} | {bound} | {who} | {why} |" for phase, bound, who, why in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the templates' launch: python -m aiperf_mpi.job.deadlines OPTIONS...
    print(launch_bounds(sys.argv[1:]))
