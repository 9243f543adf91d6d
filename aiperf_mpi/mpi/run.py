"""The benchmark run: roles from the layout, the master's loop, the groups' loops, the score.

``run_benchmark`` is what every rank of ``python -m aiperf_mpi`` executes.
Rank 0 validates the configuration and the data first and shares the verdict,
so bad input stops every rank at once with one line; then the layout gives
each rank its role — master, group leader, or group member.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mpi4py import MPI

from aiperf_mpi import __version__
from aiperf_mpi.config import RunConfig, resolve_precision
from aiperf_mpi.data.sources import DataError, DataSource, open_source
from aiperf_mpi.errors import EXIT_GRACE_EXPIRED, EXIT_TERMINATED, UsageError
from aiperf_mpi.graph.model import GraphError
from aiperf_mpi.graph.seeds import seed_model
from aiperf_mpi.job.finish import export_best, print_score, write_report
from aiperf_mpi.job.leader import leader_loop
from aiperf_mpi.job.master import Master, master_loop
from aiperf_mpi.job.mllog import MLLogWriter
from aiperf_mpi.job.mllog import repair_tail as repair_mllog_tail
from aiperf_mpi.job.resume import Resumed, history_from_log
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.mpi.layout import build_layout
from aiperf_mpi.mpi.staging import stage_on_nodes
from aiperf_mpi.mpi.system import system_description
from aiperf_mpi.mpi.transport import MpiLeaderChannel, MpiMasterTransport
from aiperf_mpi.results import provenance, runlog
from aiperf_mpi.results.score import score_run
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import MasterHistory
from aiperf_mpi.signals import StopFlag
from aiperf_mpi.train.runner import GroupRunner


@dataclass(frozen=True)
class Prepared:
    """What rank 0 established before the run, shared with every rank.

    Deciding it has no side effect on a new run: the run directory is created
    only once every check has passed (:func:`_create_run_dir`), so a start
    that fails leaves nothing behind.
    """

    config: RunConfig
    run_dir: str
    segment: int
    resumed: bool
    data_sizes: dict[str, int]
    """samples per split, as rank 0 found them"""


def agree(comm: MPI.Comm, decide: Callable[[], object]) -> object:
    """Run ``decide`` on rank 0; every rank gets its value or raises its UsageError."""
    outcome: tuple[str, object] = ("ok", None)
    if comm.Get_rank() == 0:
        try:
            outcome = ("ok", decide())
        except (UsageError, DataError) as exc:
            outcome = ("error", str(exc))
    outcome = comm.bcast(outcome, root=0)
    if outcome[0] == "error":
        raise UsageError(outcome[1])
    return outcome[1]


def open_data(config: RunConfig, sizes: dict[str, int] | None = None) -> DataSource:
    """The run's data; ``sizes`` (rank 0's ``Prepared.data_sizes``) spare the other ranks recounting ImageNet."""
    return open_source(config.dataset, config.data_path or None, config.image_size or None, sizes)


def _prepare(comm: MPI.Comm, config: RunConfig, resume: str | None) -> Prepared:
    if comm.Get_size() < 2:
        raise UsageError(
            "a benchmark run needs at least 2 ranks (the master and one training rank); "
            "launch it with mpirun -n N or srun -n N (N ≥ 2)"
        )
    if resume:
        run_dir = Path(resume)
        try:
            contents = runlog.read_events(run_dir)
        except (FileNotFoundError, ValueError) as exc:
            raise UsageError(f"--resume {run_dir}: {exc}") from None
        starts = [e for e in contents.events if e[runlog.EVENT] == runlog.RUN_START]
        if not starts:
            raise UsageError(f"--resume {run_dir}: the log has no run_start")
        logged = RunConfig(**starts[0]["config"])
        config = replace(logged, time_limit=config.time_limit, run_dir=str(run_dir))
        segment = len(starts) + 1
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = Path(config.run_dir or f"runs/run-{stamp}")
        _check_new_run_dir(run_dir)
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
    return Prepared(config, str(run_dir), segment, bool(resume), dict(source.sizes))


def _check_new_run_dir(run_dir: Path) -> None:
    """A new run may not write into another run's directory; an empty or unstarted one is fine."""
    events = run_dir / runlog.EVENTS_FILE
    if events.is_file() and events.stat().st_size > 0:
        raise UsageError(f"{run_dir} already holds a run; use --resume {run_dir} or another --run-dir")
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"the run directory {run_dir} exists and is not a directory")
    parent = next((p for p in (run_dir.absolute(), *run_dir.absolute().parents) if p.exists()), None)
    if parent is not None and not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
        raise UsageError(f"cannot create the run directory {run_dir}: {parent} is not a writable directory")


def _check_batch_fits(prepared: Prepared, plan) -> None:
    """The warm-up batch must give every rank of the largest group at least one training step.

    Otherwise every trial would fail and the run would end with a score of
    nothing; better to say so before anything starts.  Validation may end in
    a short batch, but every rank needs one sample of it.
    """
    config, ranks = prepared.config, max(group.horovod_size for group in plan.groups)
    train, validation = prepared.data_sizes["train"], prepared.data_sizes["validation"]
    if train // ranks < config.batch_size:
        raise UsageError(
            f"batch_size {config.batch_size} is larger than the train split allows: {train} samples over "
            f"{ranks} ranks of a group are {train // ranks} per rank (lower --batch-size or --group-size)"
        )
    if validation < ranks:
        raise UsageError(f"the validation split ({validation} samples) is smaller than a group ({ranks} ranks): "
                         "every rank needs at least one (lower --group-size)")  # fmt: skip


def _create_run_dir(prepared: Prepared, plan) -> None:
    """Rank 0, after every check: create the run directory (a resumed run has one)."""
    _check_batch_fits(prepared, plan)
    if prepared.resumed:
        return
    try:
        Path(prepared.run_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the run directory {prepared.run_dir}: {exc.strerror or exc}") from None


def run_benchmark(
    comm: MPI.Comm,
    config: RunConfig,
    resume: str | None = None,
    runner_factory: Callable | None = None,
    horovod: bool = True,
    stop_flag: StopFlag | None = None,
) -> int:
    """One rank of the benchmark; returns its exit status.

    ``stop_flag`` is the signal state ``main`` installed before anything
    else (one is installed here when the caller has none).
    """
    stop_flag = stop_flag or StopFlag().install()
    prepared: Prepared = agree(comm, lambda: _prepare(comm, config, resume))
    config = prepared.config
    run_dir = Path(prepared.run_dir)
    layout = build_layout(comm, config.group_size or None)
    try:
        local, staging = stage_on_nodes(comm, layout, config)  # ``local`` reads the staged copy; the log: ``config``
        agree(comm, lambda: _create_run_dir(prepared, layout.plan))
    except UsageError:
        layout.free()
        raise
    system = system_description(comm)
    node_pids = layout.node_comm.allgather(os.getpid())  # the benchmark's processes on this node, for the monitor
    try:
        peak, caps = None, None
        if not layout.is_master:
            stop_flag.leave_after_term()
            if runner_factory is None:  # real training: one accelerator per rank, before TensorFlow claims them all
                from aiperf_mpi.train.devices import device_caps, pin_device
                from aiperf_mpi.train.threads import use_cpu_share  # on a CPU, TensorFlow's threads: its share of cores

                use_cpu_share(pin_device(layout.plan.device_index(layout.rank)), layout.plan, layout.rank, node_pids)
                caps = device_caps()
        config, system = _agree_precision(comm, config, caps, system)
        if not layout.is_master:
            if config.peak_probe:
                from aiperf_mpi.train.peak import group_peak

                peak = group_peak(layout.group_comm, config.precision, config.peak_seconds)
        _start_line(comm, stop_flag)
        if layout.is_master:
            return _run_master(comm, layout, config, prepared, run_dir, system, stop_flag, staging)
        source = open_data(local, prepared.data_sizes)
        graph = seed_model(config.seed_model, source.image_shape[0], source.image_shape[2], source.classes)
        factory = runner_factory or GroupRunner

        def serve(hvd) -> None:
            runner = factory(hvd, layout.group_comm, source, config, run_dir)
            if not layout.is_leader:
                runner.serve()
                return
            channel = MpiLeaderChannel(comm)
            monitor = _start_monitor(layout, config, channel, node_pids)
            try:
                leader_loop(channel, layout.group.index, layout.group.horovod_size, config, graph, runner,
                            stop_flag, peak=peak, rank=layout.rank,
                            max_batch=prepared.data_sizes["train"] // layout.group.horovod_size)  # fmt: skip
            finally:
                if monitor is not None:
                    monitor.stop()

        if horovod:
            with horovod_on(layout.group_comm) as hvd:
                serve(hvd)
        else:
            serve(None)
        return 0
    finally:
        layout.free()


def _agree_precision(comm: MPI.Comm, config: RunConfig, caps, system: dict | None) -> tuple[RunConfig, dict | None]:
    """Collective: every rank takes the one precision the run trains at (``--precision auto`` resolved).

    Each training rank's device is gathered to rank 0, which decides
    (:func:`~aiperf_mpi.config.resolve_precision`) and tells every rank; so the
    peak probe, the training and the logged configuration name the same
    precision.  Rank 0 says what ``auto`` chose, and why, and the ``system``
    event keeps it.
    """
    devices = comm.gather(caps, root=0)
    decided = None
    if comm.Get_rank() == 0:
        precision, why = resolve_precision(config.precision, [d for d in devices if d is not None])
        decided = (precision, why)
        if config.precision == "auto":
            print(f"aiperf_mpi: precision auto → {precision}: {why}", flush=True)
            system = {**system, "precision": {"setting": "auto", "chosen": precision, "reason": why}}
    precision, _ = comm.bcast(decided, root=0)
    return replace(config, precision=precision), system


def _start_line(comm: MPI.Comm, stop_flag: StopFlag) -> None:
    """Collective: every rank waits here until all have finished the peak probe.

    The probe is a measurement, not workload: the master writes ``run_start``
    (where the score's active time begins) and starts its clock only after
    this line, so the probe's seconds (and the TensorFlow start-up it needs)
    are not charged to the score.  The wait polls, so a SIGTERM during
    start-up ends the job at once instead of leaving rank 0 inside a barrier.
    """
    request = comm.Ibarrier()
    while not request.Test():
        if stop_flag.urgent:
            print("aiperf_mpi: terminated during start-up; nothing was measured", file=sys.stderr, flush=True)
            comm.Abort(EXIT_TERMINATED)
        time.sleep(0.01)


def _start_monitor(layout, config: RunConfig, channel: MpiLeaderChannel, node_pids: list[int]):
    """The node's utilisation monitor, on the node's first group leader (None elsewhere or when off)."""
    if config.monitor_interval <= 0 or not layout.plan.monitors_node(layout.rank):
        return None
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:  # the monitor thread talks MPI beside the main thread
        print(f"aiperf_mpi: warning: no utilisation monitor on {layout.group.host}: the MPI library gives "
              "thread level < MPI_THREAD_MULTIPLE", flush=True)  # fmt: skip
        return None
    from aiperf_mpi.job.monitor import MonitorThread, node_sampler

    sampler = node_sampler(node_pids)
    return MonitorThread(sampler, channel.send_monitor, config.monitor_interval, layout.group.index,
                         layout.group.host, layout.group.node).start()  # fmt: skip


def _run_master(comm, layout, config, prepared, run_dir, system, stop_flag, staging) -> int:
    # a resumed log may end in a cut line (killed mid-write): set it aside first, or the new segment's
    # first event would be glued onto it; here, after every check, so a start that fails touches nothing
    tail = runlog.repair_tail(run_dir, prepared.segment) if prepared.resumed else runlog.TailRepair()
    if tail.changed:
        print(tail.message(), flush=True)
    log = runlog.EventLog(run_dir)
    if prepared.resumed and (cut := repair_mllog_tail(run_dir, prepared.segment)):
        print(f"aiperf_mpi: warning: mllog.log ended in a cut line ({cut} bytes, kept in mllog.log.cut-"
              f"{prepared.segment}); resuming after the last complete line", flush=True)  # fmt: skip
    mllog = MLLogWriter(run_dir)
    bounds = SearchConfig().view_bounds()  # the leaders' search reads this view
    resumed = history_from_log(run_dir, bounds) if prepared.resumed else Resumed(MasterHistory(bounds), 0, {})
    origin = provenance.collect(__version__, system)  # before run_start: its git calls are not active time
    started = log.write(runlog.RUN_START, sync=True, segment=prepared.segment, resumed=prepared.resumed,
              config=config.to_dict(), provenance=origin,
              **({"cut_tail": tail.to_dict()} if tail.changed else {}))  # fmt: skip
    log.write(runlog.SYSTEM, **system)
    log.write(runlog.LAYOUT, **layout.plan.to_dict())
    for report in staging:
        log.write(runlog.STAGING, **report)
        mllog.staging(report)
    log.sync()
    mllog.run_start(config.to_dict(), system, prepared.segment, started[runlog.TIME])
    if staging:
        print(f"aiperf_mpi: data staged to {config.stage_dir} on {len(staging)} node(s): "
              f"{sum(r['bytes'] for r in staging) / 1e6:.1f} MB in {max(r['seconds'] for r in staging):.1f} s",
              flush=True)  # fmt: skip
    groups = layout.plan.groups
    master = Master(config, log, resumed.history, len(groups), run_dir, next_task=resumed.next_task, mllog=mllog,
                    weights=resumed.weights)  # fmt: skip
    transport = MpiMasterTransport(comm, {g.index: g.leader for g in groups})
    print(f"aiperf_mpi: run directory {run_dir} (segment {prepared.segment}); {comm.Get_size()} ranks, "
          f"{len(groups)} group(s); time limit {config.time_limit:.0f} s", flush=True)  # fmt: skip
    outcome = master_loop(master, transport, stop_flag, config.progress_interval, urgent=lambda: stop_flag.urgent)
    reason = master.stopping or "done"
    discarded = master.busy
    stopped = log.write(runlog.RUN_STOP, sync=True, reason=reason, discarded_tasks=discarded,
                        segment=prepared.segment, groups_stopped_early=master.early_stops)  # fmt: skip
    mllog.run_stop(reason, stopped[runlog.TIME])
    score = score_run(run_dir)
    log.write(runlog.SCORE, sync=True, **{k: v for k, v in score.to_dict().items() if k != "grid"})
    (run_dir / "score.json").write_text(json.dumps(score.to_dict(), indent=2))
    log.close()
    mllog.close()
    print_score(score, run_dir)
    write_report(run_dir)
    if outcome == "done":  # a run ending in Abort (SIGTERM, grace expired) has no time for it: analysis.export later
        export_best(run_dir, config.dataset)
    if outcome == "terminated":
        print(f"aiperf_mpi: terminated by SIGTERM with {len(discarded)} group(s) still training; their running "
              "epochs are not counted; ending the job", file=sys.stderr, flush=True)  # fmt: skip
        comm.Abort(EXIT_TERMINATED)
    if outcome == "grace expired":
        message = (f"aiperf_mpi: the grace period ({config.grace:.0f} s) expired with {len(discarded)} group(s) "
                   "still training; their running epochs are not counted; ending the job")  # fmt: skip
        print(message, file=sys.stderr, flush=True)
        comm.Abort(EXIT_GRACE_EXPIRED)
    transport.close()
    return 0


