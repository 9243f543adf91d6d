"""The run's life cycle on the master, without MPI: preparation, the event log, the score, the end-of-run hooks.

One run segment (a start or a ``--resume``) is a *session*: its checks, its
``run_start`` … ``run_stop`` and its score, each in the order a reader of the
log relies on.  Why a room of its own, and why in ``job/``:

* the same sequence runs over MPI (:mod:`aiperf_mpi.mpi.run` wraps it in
  collectives and hands it an MPI transport) and in one process
  (:func:`aiperf_mpi.job.local.run_in_process`, which the unit tests drive),
  so a test exercises the sequence the benchmark runs instead of a copy;
* it imports neither MPI nor what trains nor what analyses: the report and
  the export are hooks (:class:`EndOfRunHooks`) the entry point injects, so the
  arrows of the house all point down.

Deciding :func:`prepare` has no side effect on a new run: the run directory
is created only once every check has passed (:func:`create_run_dir`), so a
start that fails leaves nothing behind.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path

from aiperf_mpi.config import RunConfig
from aiperf_mpi.data.sources import DataSource, open_source
from aiperf_mpi.errors import EXIT_DEADLINE, EXIT_GRACE_EXPIRED, EXIT_GROUPS_LOST, EXIT_TERMINATED, UsageError
from aiperf_mpi.graph.model import GraphError
from aiperf_mpi.graph.seeds import seed_model
from aiperf_mpi.job.clean import megabytes, tree_size
from aiperf_mpi.job.deadlines import DEFAULT_BOUNDS, LOG_FSYNC, THE_END, PhaseBounds, Watchdog
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.finish import print_score, record_score
from aiperf_mpi.job.master import Master, master_loop
from aiperf_mpi.job.mllog import MLLogWriter
from aiperf_mpi.job.mllog import repair_tail as repair_mllog_tail
from aiperf_mpi.job.resume import Resumed, history_from_log
from aiperf_mpi.job.runlock import RunLock
from aiperf_mpi.job.transport import Heartbeat, MasterTransport
from aiperf_mpi.results import provenance, runlog
from aiperf_mpi.results.epochs import rank_batches
from aiperf_mpi.results.graphs import GRAPHS_DIR
from aiperf_mpi.results.logmodel import read_model
from aiperf_mpi.results.resumable import RESUME_OPTIONS, current_names
from aiperf_mpi.results.score import Score, score_run
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import MasterHistory

EXIT_STATUS = {"done": 0, "terminated": EXIT_TERMINATED, "grace expired": EXIT_GRACE_EXPIRED}
"""the master loop's outcome → the job's exit status (non-zero: the groups still training are abandoned)"""


@dataclass(frozen=True)
class Prepared:
    """What the master established before the run (over MPI: rank 0, shared with every rank)."""

    config: RunConfig
    run_dir: str
    segment: int
    resumed: bool
    data_sizes: dict[str, int]
    """samples per split, as the master found them"""
    data_check: dict = field(default_factory=dict)
    """what the data check found (:func:`data_check`), logged in ``run_start`` as ``data``: the verifier holds
    every epoch's samples to these splits, and the configuration and the graphs to their images and classes"""


@dataclass(frozen=True)
class EndOfRunHooks:
    """What runs once the score is on disk, injected by the entry point (``analysis`` lives above ``job/``).

    ``report(run_dir)`` and ``export(run_dir, dataset)`` must never raise: a
    failure costs that file, never the score.  ``None`` skips the step (the
    in-process runs of the tests).
    """

    report: Callable[[Path], None] | None = None
    export: Callable[[Path, str], None] | None = None
    serve: Callable[[ServingAtEnd], None] | None = None
    """``--serve-at-end``: called on EVERY rank once its role has ended (rank 0's after the report and the export),
    collective over the world (:mod:`aiperf_mpi.serve.atend`); never raises on rank 0, whose score is on disk"""


@dataclass(frozen=True)
class ServingAtEnd:
    """What :attr:`EndOfRunHooks.serve` is given on each rank: its part in serving at the run's end."""

    comm: object
    """the job's world (an mpi4py communicator; this room imports no MPI)"""
    role: str
    """``master``, ``relay`` or ``training``: only the training ranks serve"""
    run_dir: Path
    segment: int
    groups: int
    config: RunConfig
    outcome: str | None = None
    """on rank 0, how the master loop ended (``done``: normally); None on the other ranks"""
    watchdog: Watchdog | None = None
    stop_flag: object = None
    report: Callable[[Path], None] | None = None
    """the run's report hook (:attr:`EndOfRunHooks.report`): made again once the serving's figures are on disk"""


NO_HOOKS = EndOfRunHooks()
"""no report, no export (frozen, so one instance serves as every default)"""


@dataclass
class Ended:
    """How a session ended: the loop's outcome, the master's final state, the score and the exit status."""

    outcome: str
    master: Master
    score: Score
    exit_status: int


def open_data(config: RunConfig, sizes: dict[str, int] | None = None) -> DataSource:
    """The run's data; ``sizes`` (the master's ``Prepared.data_sizes``) spare the other ranks recounting ImageNet."""
    return open_source(config.dataset, config.data_path or None, config.image_size or None, sizes)


def prepare(config: RunConfig, resume: str | None, ranks: int) -> Prepared:
    """Every check that needs no layout: ranks, the run directory or the log to resume, the data, the seed model."""
    if ranks < 2:
        raise UsageError(
            "a benchmark run needs at least 2 ranks (the master and one training rank); "
            "launch it with mpirun -n N or srun -n N (N ≥ 2)"
        )
    if resume:
        run_dir = Path(resume)
        try:
            model = read_model(run_dir, require_start=False, keep_ended=False)
        except (FileNotFoundError, ValueError) as exc:
            raise UsageError(f"--resume {run_dir}: {exc}") from None
        if not model.segment_records:
            raise UsageError(f"--resume {run_dir}: the log has no run_start")
        logged = RunConfig(**current_names(model.segment_records[0].config))
        ended = model.events[runlog.MODEL_DONE] + model.events[runlog.MODEL_FAILED]
        if logged.max_models and ended >= logged.max_models:  # its segment would stop at once, having done nothing
            raise UsageError(f"--resume {run_dir}: the run already has its {ended} models (--max-models "
                             f"{logged.max_models}, which a resumed run keeps): nothing is left to run")  # fmt: skip
        config = replace(logged, **{name: getattr(config, name) for name in RESUME_OPTIONS}, run_dir=str(run_dir))
        segment = len(model.segment_records) + 1
    else:
        if config.hardware_changed:  # from a TOML file: the command line refuses it without --resume
            raise UsageError("hardware_changed applies only to --resume: a new run has no first segment's "
                             "hardware to differ from")  # fmt: skip
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(config.run_dir or f"runs/run-{stamp}")
        check_new_run_dir(run_dir)
        config = replace(config, run_dir=str(run_dir))
        segment = 1
    source = open_data(config)
    source.check()
    try:
        seed_model(config.seed_model, source.image_shape[0], source.image_shape[2], source.classes)
    except GraphError as exc:
        size = "x".join(str(d) for d in source.image_shape[:2])
        raise UsageError(f"the {config.seed_model} seed model cannot take {source.name} images of {size}: {exc}"
                         " (choose --image-size, the data or --seed-model accordingly)") from None  # fmt: skip
    return Prepared(config, str(run_dir), segment, bool(resume), dict(source.sizes), data_check(source))


def data_check(source: DataSource) -> dict:
    """The data as the check counted it: ``run_start``'s ``data`` (docs/events.md), which no epoch may exceed."""
    return {"dataset": source.name, "train": int(source.sizes["train"]),
            "validation": int(source.sizes.get("validation", 0)), "classes": int(source.classes),
            "image_shape": [int(d) for d in source.image_shape]}  # fmt: skip


def check_new_run_dir(run_dir: Path) -> None:
    """A new run may not write into another run's directory; an empty or unstarted one is fine."""
    events = run_dir / runlog.EVENTS_FILE
    if events.is_file() and events.stat().st_size > 0:
        raise UsageError(f"{run_dir} already holds a run; use --resume {run_dir} or another --run-dir")
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"the run directory {run_dir} exists and is not a directory")
    parent = next((p for p in (run_dir.absolute(), *run_dir.absolute().parents) if p.exists()), None)
    if parent is not None and not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        raise UsageError(f"cannot create the run directory {run_dir}: {parent} is not a writable directory")


def check_batch_fits(prepared: Prepared, largest_group: int) -> None:
    """The warm-up batch must give every rank of the largest group (its rank count) at least one training step.

    Otherwise every trial would fail and the run would end with a score of
    nothing; better to say so before anything starts.  Validation may end in
    a short batch, but every rank needs one sample of it.
    """
    config, ranks = prepared.config, largest_group
    train, validation = prepared.data_sizes["train"], prepared.data_sizes["validation"]
    if rank_batches(train, ranks, config.batch_size) < 1:  # an epoch of no step: the trainer's steps per epoch
        raise UsageError(
            f"batch_size {config.batch_size} is larger than the train split allows: {train} samples over "
            f"{ranks} ranks of a group are {train // ranks} per rank (lower --batch-size or --group-size)"
        )
    if validation < ranks:
        raise UsageError(f"the validation split ({validation} samples) is smaller than a group ({ranks} ranks): "
                         "every rank needs at least one (lower --group-size)")  # fmt: skip


def create_run_dir(prepared: Prepared, largest_group: int) -> None:
    """After every check (the layout's too): create the run directory (a resumed run has one)."""
    check_batch_fits(prepared, largest_group)
    if prepared.resumed:
        return
    try:
        Path(prepared.run_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory {prepared.run_dir}: {exc.strerror or exc}") from None


END_PHASES = ("score", "report", "export")
"""what rank 0 does after the run's stop, in order (the drain before it: the groups' last epochs)"""


def print_end_phases(after_clock: float, marks: list[float], busy: float | None = None) -> None:
    """One line: how long the end took on rank 0 (and so the whole allocation), rank 0's peak memory and, given
    ``busy`` (its CPU seconds over the master loop's wall seconds), how much of a core rank 0 kept busy: what a
    rehearsal shows of the master's headroom before the real job's size."""
    import resource

    phases = ", ".join(f"{name} {later - earlier:.1f} s" for name, earlier, later in
                       zip(END_PHASES, marks[:-1], marks[1:], strict=True))  # fmt: skip
    drain = (f"the stop came {after_clock:.1f} s after the clock's end (the drain)" if after_clock >= 0 else
             f"the run stopped {-after_clock:.1f} s before its clock's end")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    share = f"; rank 0 busy {busy:.0%} of the run (CPU over wall time)" if busy is not None else ""
    print(f"aiperf_mpi: end on rank 0: {drain}; {phases}; rank 0's peak memory {peak:.0f} MiB{share}", flush=True)


def run_master(
    prepared: Prepared,
    config: RunConfig,
    transport: MasterTransport,
    *,
    system: dict,
    layout: dict,
    staging: list[dict],
    stop: Callable[[], str],
    urgent: Callable[[], bool],
    version: str,
    end: EndOfRunHooks = NO_HOOKS,
    search_config: SearchConfig | None = None,
    hang: HangPolicy | None = None,
    watchdog: Watchdog | None = None,
    bounds: PhaseBounds | None = None,
    heartbeat: Heartbeat | None = None,
) -> Ended:
    """The master's session, from the log's repair to the end-of-run hooks; the groups talk through ``transport``.

    ``config`` is ``prepared.config`` as the ranks agreed it (the precision
    resolved); ``layout`` is the plan as the log keeps it (``groups`` lists
    the groups ``transport`` reaches by index); ``stop()`` names a reason to
    stop (a signal) and ``urgent()`` says the kill is under way.  The exit
    status is non-zero when groups were abandoned mid-epoch: the caller ends
    the job (over MPI, ``Abort``).  ``hang`` (fault tolerance on) loses a
    group silent past its deadline; a run that lost groups ends with
    :data:`~aiperf_mpi.errors.EXIT_GROUPS_LOST` (``MPI_Finalize`` cannot
    complete after a failure: the job is ended once the score is written).
    ``watchdog`` (over MPI: :mod:`aiperf_mpi.mpi.deadline`) bounds each fsync of the log by ``bounds.io`` and,
    from the drain's end, the session's end and whatever follows it on this rank by ``bounds.end``.
    ``heartbeat`` (over MPI: :class:`~aiperf_mpi.mpi.heartbeat.RankZeroHeartbeat`) beats at every pass of the
    master loop and is told when the loop is over, before rank 0's end.
    """
    run_dir = Path(prepared.run_dir)
    # a second job on the same run directory (a --resume of a live run) raises here, on rank 0 alone: the
    # abort guard ends the whole job with that one line, and the live run's log stays whole
    with RunLock(run_dir):
        return _run_master_locked(prepared, config, transport, system=system, layout=layout, staging=staging,
                                  stop=stop, urgent=urgent, version=version, end=end,
                                  search_config=search_config, hang=hang, watchdog=watchdog,
                                  bounds=bounds or DEFAULT_BOUNDS, heartbeat=heartbeat)  # fmt: skip


def _stall_guard(watchdog: Watchdog | None, bounds: PhaseBounds) -> Callable[..., object]:
    """What bounds each call of rank 0's that can block on its file system (the log's fsync by default; the
    graphs file's write and sync, a weights file's removal and the I/O thread's end by their phase names:
    job/batchio.py): the watchdog's guard at ``--io-deadline`` (none without a watchdog)."""
    from contextlib import nullcontext

    if watchdog is None:
        return nullcontext
    what = ("the file system holding the run directory hangs; the log holds every event fsync'd before it "
            "(rank 0 claims nothing after it; once the file system answers, python -m aiperf_mpi.job.close scores "
            "what reached the log, as the templates do) and --resume continues the run")  # fmt: skip
    return lambda phase=LOG_FSYNC: watchdog.guard(phase, bounds.io, what, EXIT_DEADLINE)


def _run_master_locked(prepared: Prepared, config: RunConfig, transport: MasterTransport, *, system: dict,
                       layout: dict, staging: list[dict], stop: Callable[[], str], urgent: Callable[[], bool],
                       version: str, end: EndOfRunHooks, search_config: SearchConfig | None,
                       hang: HangPolicy | None = None, watchdog: Watchdog | None = None,
                       bounds: PhaseBounds = DEFAULT_BOUNDS, heartbeat: Heartbeat | None = None) -> Ended:  # fmt: skip
    """:func:`run_master`'s body, while the run directory's lock is held (:mod:`aiperf_mpi.job.runlock`)."""
    run_dir = Path(prepared.run_dir)
    if heartbeat is not None:
        heartbeat.beat()  # the watchers' first, before a resumed history's load and the log's first fsyncs
    search = search_config or SearchConfig()
    view_bounds = search.view_bounds()  # the leaders' search reads this view
    # the history first: its reader skips a cut last line as the repair below sets it aside, and a resume it
    # refuses (a graph that is not the one logged, say) must leave the run directory as it found it
    resumed = (history_from_log(run_dir, view_bounds) if prepared.resumed
               else Resumed(MasterHistory(view_bounds), 0, {}))  # fmt: skip
    # a resumed log may end in a cut line (killed mid-write): set it aside first, or the new segment's
    # first event would be glued onto it; here, after every check, so a start that fails touches nothing
    tail = runlog.repair_tail(run_dir, prepared.segment) if prepared.resumed else runlog.TailRepair()
    if tail.changed:
        print(tail.message(), flush=True)
    stall_guard = _stall_guard(watchdog, bounds)
    log = runlog.EventLog(run_dir, stall_guard)
    if prepared.resumed and (cut := repair_mllog_tail(run_dir, prepared.segment)):
        print(f"aiperf_mpi: warning: mllog.log ended in a cut line ({cut} bytes, kept in mllog.log.cut-"
              f"{prepared.segment}); resuming after the last complete line", flush=True)  # fmt: skip
    mllog = MLLogWriter(run_dir)
    origin = provenance.collect(version, system)  # before run_start: its git calls are not active time
    started = log.write(runlog.RUN_START, sync=True, segment=prepared.segment, resumed=prepared.resumed,
              config=config.to_dict(), provenance=origin,
              **({"data": prepared.data_check} if prepared.data_check else {}),
              **({"cut_tail": tail.to_dict()} if tail.changed else {}))  # fmt: skip
    system_event = log.write(runlog.SYSTEM, **system)
    log.write(runlog.LAYOUT, **layout)
    for report in staging:
        log.write(runlog.STAGING, **report)
        mllog.staging(report)
    log.sync()
    mllog.run_start(config.to_dict(), system, prepared.segment, started[runlog.TIME])
    mllog.description(config.to_dict(), system, layout, prepared.data_check, started[runlog.TIME])
    for event in (started, system_event):  # the power lines' start, where a node has meters (issue 53)
        mllog.energy(event)
    if staging:
        print(f"aiperf_mpi: data staged to {config.stage_dir} on {len(staging)} node(s): "
              f"{sum(r['bytes'] for r in staging) / 1e6:.1f} MB in {max(r['seconds'] for r in staging):.1f} s",
              flush=True)  # fmt: skip
    groups = len(layout["groups"])
    master = Master(config, log, resumed.history, groups, run_dir, next_task=resumed.next_task, mllog=mllog,
                    weights=resumed.weights, search_config=search, hang=hang, segment=prepared.segment)  # fmt: skip
    print(f"aiperf_mpi: run directory {run_dir} (segment {prepared.segment}); {layout['world_size']} ranks, "
          f"{groups} group(s); time limit {config.time_limit:.0f} s", flush=True)  # fmt: skip
    loop_began = (time.process_time(), time.monotonic())  # rank 0's busy share of the run
    outcome = master_loop(master, transport, stop, config.progress_interval, urgent=urgent,
                          beat=heartbeat.beat if heartbeat is not None else lambda: None)  # fmt: skip
    if heartbeat is not None:  # the watch is over: rank 0's end is bounded by its own deadline from here
        heartbeat.over()
    busy = (time.process_time() - loop_began[0]) / max(1e-9, time.monotonic() - loop_began[1])
    if watchdog is not None:  # the drain is over (bounded by --grace): the rest of the job's end is bounded too
        watchdog.enter(THE_END, bounds.end, "no score was written (--resume continues the run)", EXIT_DEADLINE)
    reason = master.stopping or "done"
    discarded = master.tasks_in_flight
    stopped = log.write(runlog.RUN_STOP, sync=True, reason=reason, discarded_tasks=discarded,
                        segment=prepared.segment, groups_stopped_early=master.early_stops,
                        **({"groups_lost": master.lost_groups} if master.lost_groups else {}),
                        **({"rank0_stalls": stalls} if (stalls := master.stall_summary()) else {}))  # fmt: skip
    mllog.run_stop(reason, stopped[runlog.TIME], rehearsal=config.rehearse)
    ending = [time.monotonic()]  # the end's phases (END_PHASES)
    score = score_run(run_dir)
    record_score(log, run_dir, score, stall_guard)
    log.close()
    if watchdog is not None:
        watchdog.rename(THE_END, "the score is on disk (score.json); ending the job")
    mllog.close()
    print_score(score, run_dir)
    ending.append(time.monotonic())
    if end.report is not None:
        end.report(run_dir)
    ending.append(time.monotonic())
    if config.rehearse:
        print("aiperf_mpi: a rehearsal: its operations and accuracies are a stand-in's (--rehearse), never a result; "
              "no model to export", flush=True)  # fmt: skip
    elif outcome == "done" and end.export is not None:  # ending in Abort leaves no time: aiperf_mpi.export later
        end.export(run_dir, config.dataset)
    ending.append(time.monotonic())
    print_end_phases(stopped[runlog.TIME] - (started[runlog.TIME] + config.time_limit), ending, busy)
    _say_how_much_disk(run_dir)
    _say_what_was_abandoned(outcome, len(discarded), config.grace)
    status = EXIT_STATUS[outcome] or (EXIT_GROUPS_LOST if master.lost_groups else 0)
    if master.lost_groups:
        print(f"aiperf_mpi: {master.lost_groups} group(s) were lost during the run (group_lost in the log); "
              "the score above is final", flush=True)  # fmt: skip
    return Ended(outcome, master, score, status)


GRAPH_FILES_COUNTED = 1_000
"""a graphs/ folder with more files than this is one file a model (an old run's): not stat-ed at the end"""


def _say_how_much_disk(run_dir: Path) -> None:
    """The size of the run directory's bulky parts: a few demo runs can fill a small disk unnoticed.

    ``graphs/`` is one appended file per run segment (:mod:`aiperf_mpi.results.graphs`), so it is counted
    too: a few stats. A run from before that change holds one file a model there, and stat-ing 100,000 of
    them on a shared file system is work on rank 0 that grows with the models: such a folder (more than
    :data:`GRAPH_FILES_COUNTED` files) is left out and said to be.
    """
    parts = {name: tree_size(run_dir / name) for name in ("weights", "best", "report")}
    graphs = run_dir / GRAPHS_DIR
    files = sum(1 for _ in islice(graphs.iterdir(), GRAPH_FILES_COUNTED + 1)) if graphs.is_dir() else 0
    besides = ""
    if files <= GRAPH_FILES_COUNTED:
        parts = {GRAPHS_DIR: tree_size(graphs), **parts}
    else:  # a name listing stops early: the files are not stat-ed
        besides = f" besides {GRAPHS_DIR}/ (one file a model: a run from before the appended graphs file)"
    top = sum(entry.stat().st_size for entry in run_dir.iterdir() if entry.is_file() and not entry.is_symlink())
    named = ", ".join(f"{name}/ {megabytes(size)}" for name, size in parts.items() if size)
    print(f"aiperf_mpi: {run_dir} holds {megabytes(top + sum(parts.values()))}{besides} ({named}); "
          "python -m aiperf_mpi.job.clean (make clean-runs) removes old runs", flush=True)  # fmt: skip


def _say_what_was_abandoned(outcome: str, running: int, grace: float) -> None:
    """One line on stderr when the run ends with groups still training (SIGTERM, or the grace period over)."""
    if outcome == "terminated":
        print(f"aiperf_mpi: terminated by SIGTERM with {running} group(s) still training; their running "
              "epochs are not counted; ending the job", file=sys.stderr, flush=True)  # fmt: skip
    elif outcome == "grace expired":
        print(f"aiperf_mpi: the grace period ({grace:.0f} s) expired with {running} group(s) "
              "still training; their running epochs are not counted; ending the job", file=sys.stderr, flush=True)
