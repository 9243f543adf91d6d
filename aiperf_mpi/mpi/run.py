"""The benchmark over MPI: the collectives around the session, and the split of the ranks into their roles.

``run_benchmark`` is what every rank of ``python -m aiperf_mpi`` executes.
Rank 0 validates the configuration and the data first and shares the verdict
(:func:`agree`), so bad input stops every rank at once with one line; the
layout, staging, the precision and the start line are collectives every rank
joins; then :func:`rank_role` gives each rank its role, once — the master
runs the session (:mod:`aiperf_mpi.job.session`, where the run's life cycle
lives, without MPI), the relays (``--relays``) vet the leaders' messages for
it, the groups train.  What trains is injected
(:class:`TrainingBackend`), as are the end-of-run hooks, so this room
imports neither ``train/`` nor ``analysis``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mpi4py import MPI

from aiperf_mpi import __version__
from aiperf_mpi.config import RunConfig, resolve_precision
from aiperf_mpi.data.sources import DataError
from aiperf_mpi.errors import EXIT_DEADLINE, EXIT_TERMINATED, UsageError
from aiperf_mpi.graph.seeds import seed_model
from aiperf_mpi.job.deadlines import (
    DEFAULT_BOUNDS,
    EFFICIENCY_FLOOR,
    FIRST_MODEL_EPOCHS,
    FIRST_MODEL_FLOOR,
    FIRST_MODEL_UNMEASURED,
    NOT_READY,
    STARTUP,
    TEARDOWN,
    THE_END,
    PhaseBounds,
    Watchdog,
    bounds_of,
)
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.leader import Runner, leader_loop
from aiperf_mpi.job.session import (
    NO_HOOKS,
    EndOfRunHooks,
    Prepared,
    ServingAtEnd,
    create_run_dir,
    open_data,
    prepare,
    run_master,
)
from aiperf_mpi.job.transport import FirstWorkClock
from aiperf_mpi.mpi.deadline import abort_kind, end_the_job
from aiperf_mpi.mpi.heartbeat import RankZeroHeartbeat, RankZeroWatch
from aiperf_mpi.mpi.horovod import horovod_on
from aiperf_mpi.mpi.layout import RankLayout, build_layout
from aiperf_mpi.mpi.limits import say_limits, training_batches
from aiperf_mpi.mpi.plan import LayoutPlan, relay_hint, watcher_ranks
from aiperf_mpi.mpi.staging import stage_on_nodes
from aiperf_mpi.mpi.system import system_description
from aiperf_mpi.mpi.tolerance import job_fault_tolerance, job_start_line
from aiperf_mpi.mpi.transport import MpiLeaderChannel, MpiMasterTransport
from aiperf_mpi.signals import StopFlag


@dataclass(frozen=True)
class TrainingBackend:
    """What trains on the group ranks, injected by the entry point (``train/`` lives above ``mpi/``).

    ``runner(hvd, group_comm, source, config, run_dir)`` builds a group's
    runner.  ``claim_device(plan, rank, node_pids)`` takes the rank's
    accelerator (and on a CPU its share of cores) before TensorFlow claims
    them all, and returns the device's capabilities for ``--precision auto``;
    ``probe_peak(group_comm, precision, seconds)`` measures the group's peak
    (``--peak-probe``); ``preload(config, leader)`` imports, before the scored window
    begins, what the rank would otherwise first import inside it.  ``None``:
    the step is skipped (fake training in tests).
    """

    runner: Callable[..., Runner]
    claim_device: Callable[[LayoutPlan, int, list[int]], object] | None = None
    probe_peak: Callable[[MPI.Comm, str, float], dict | None] | None = None
    preload: Callable[[RunConfig, bool], None] | None = None
    horovod: bool = True
    """whether the group's ranks start Horovod on their communicator (a rehearsal's stand-in needs none)"""


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


def run_benchmark(
    comm: MPI.Comm,
    config: RunConfig,
    training: TrainingBackend | Callable[[RunConfig], TrainingBackend],
    end: EndOfRunHooks = NO_HOOKS,
    resume: str | None = None,
    horovod: bool = True,
    stop_flag: StopFlag | None = None,
    watchdog: Watchdog | None = None,
) -> int:
    """One rank of the benchmark; returns its exit status.

    ``training`` is what trains on the group ranks, or what chooses it from the run's configuration (a
    resume's is the logged one: a resumed rehearsal rehearses), and ``end`` what runs on the master after the
    score (both injected: see ``aiperf_mpi.__main__``).  ``stop_flag`` is the signal state ``main`` installed
    before anything else (one is installed here when the caller has none).  ``watchdog`` (``main``'s, started
    before anything collective: :mod:`aiperf_mpi.mpi.deadline`) bounds start-up and the end (None: no bounds).
    """
    stop_flag = stop_flag or StopFlag().install()
    marks = [time.monotonic()]  # the start-up phases' ends, for the line and the system event (STARTUP_PHASES)
    prepared: Prepared = agree(comm, lambda: prepare(config, resume, comm.Get_size()))
    bounds = bounds_of(prepared.config, comm.Get_size())
    if watchdog is not None:
        watchdog.after_meeting = bounds.end
    startup = _StartupClock(watchdog, bounds)  # the start-up bound as the run configures it, from the rank's start
    startup.passed(2)
    if not isinstance(training, TrainingBackend):
        training = training(prepared.config)
    horovod = horovod and training.horovod
    marks.append(time.monotonic())
    layout = build_layout(comm, prepared.config.group_size or None, prepared.config.relays)
    try:  # rank 0 states the job's memory and refuses what cannot fit, on every rank at once
        config = prepared.config
        say_limits(comm, layout.plan, config.seed_model, config.rehearse, config.ignore_limits, config.dataset,
                   lambda: training_batches(config.seed_model, config.batch_size, config.device_memory_gb,
                                            prepared.data_check, layout.plan))  # fmt: skip
    except UsageError:
        layout.free()
        raise
    marks.append(time.monotonic())
    startup.passed(3)
    try:
        local, staging = stage_on_nodes(comm, layout, prepared.config)  # ``local`` reads the staged copy
        agree(comm, lambda: create_run_dir(prepared, max(group.horovod_size for group in layout.plan.groups)))
    except UsageError:
        layout.free()
        raise
    marks.append(time.monotonic())
    startup.passed(4)
    system = system_description(comm)
    node_pids = layout.node_comm.allgather(os.getpid())  # the benchmark's processes on this node, for the monitor
    try:
        role = rank_role(comm, layout, prepared, training, end, stop_flag, node_pids, local, staging, horovod,
                         watchdog, bounds)  # fmt: skip
        config, system = _agree_precision(comm, prepared.config, role.claim_device(), system)
        role.preload(config)
        marks.append(time.monotonic())
        startup.passed(5)
        role.probe_peak(config)
        marks.append(time.monotonic())
        startup.passed(6)
        _start_line(comm, stop_flag)
        marks.append(time.monotonic())
        role.context.start_line = marks[-1]
        system = _energy_at_start(comm, layout.node_comm, system)
        system = _startup(comm, marks, system)
        startup.over()
        status = role.run(config, system)
        if end.serve is not None:  # --serve-at-end: every rank takes part, after its role's end
            end.serve(role.serving_at_end(config))
        return status
    finally:
        layout.free()


STARTUP_PHASES = ("launch and imports", "data check", "layout", "staging and run directory",
                  "system, devices and imports", "peak probe", "waiting at the start line")  # fmt: skip
"""what a rank does before the scored window, in order; the system event's ``startup`` gives each one's seconds
on the slowest rank (``--rehearse`` shows them at the size of the real job before its accelerator hours)"""


class _StartupClock:
    """Start-up's deadline on this rank: one bound from the rank's start to the start line, the phase named as it
    goes (STARTUP_PHASES), so that the one line says where the rank waited."""

    def __init__(self, watchdog: Watchdog | None, bounds: PhaseBounds) -> None:
        self.watchdog, self.bounds = watchdog, bounds
        if watchdog is not None:
            watchdog.enter(STARTUP, bounds.startup, _STARTUP_WHAT.format(STARTUP_PHASES[1]), EXIT_DEADLINE,
                           since=watchdog.started)  # fmt: skip

    def passed(self, phase: int) -> None:
        """The rank is now in start-up phase ``phase`` (an index of STARTUP_PHASES)."""
        if self.watchdog is not None:
            self.watchdog.rename(STARTUP, _STARTUP_WHAT.format(STARTUP_PHASES[phase]))

    def over(self) -> None:
        """Past the start line: the master's deadlines take over (job/faults.py)."""
        if self.watchdog is not None:
            self.watchdog.leave()


_STARTUP_WHAT = ("a rank hangs before the start line (this rank was in: {}); nothing was measured, and a new "
                 "launch starts the run afresh")  # fmt: skip


def _process_age() -> float:
    """Seconds since this process started (Linux /proc; 0 where it cannot be read): its launch and imports."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            started = int(handle.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime", encoding="ascii") as handle:
            return max(0.0, float(handle.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


def _startup(comm: MPI.Comm, marks: list[float], system: dict | None) -> dict | None:
    """Collective (after the start line, so every rank is here): each start-up phase's seconds on the slowest
    rank, printed by rank 0 and kept in its system event.  One reduction of a few numbers: O(log ranks)."""
    import numpy as np

    phases = np.array([_process_age() - (time.monotonic() - marks[0]), *np.diff(marks)], dtype=np.float64)
    slowest = np.zeros_like(phases) if comm.Get_rank() == 0 else None
    comm.Reduce(phases, slowest, op=MPI.MAX, root=0)
    if comm.Get_rank() != 0 or system is None:
        return system
    startup = {name: round(float(seconds), 3) for name, seconds in zip(STARTUP_PHASES, slowest, strict=True)}
    shown = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in startup.items())
    print(f"aiperf_mpi: start-up on the slowest rank of {comm.Get_size()}: {shown}", flush=True)
    return {**system, "startup": startup}


def _serving_at_end(context: RankContext, role: str, config: RunConfig, outcome: str | None = None) -> ServingAtEnd:
    """What this rank takes into serving at the run's end (``--serve-at-end``)."""
    return ServingAtEnd(context.comm, role, Path(context.prepared.run_dir), context.prepared.segment,
                        len(context.layout.plan.groups), config, outcome, context.watchdog,
                        context.stop_flag, context.end.report)  # fmt: skip


@dataclass
class RankContext:
    """What a rank's role works with, gathered by the collectives before the split."""

    comm: MPI.Comm
    layout: RankLayout
    prepared: Prepared
    training: TrainingBackend
    end: EndOfRunHooks
    stop_flag: StopFlag
    node_pids: list[int]
    """the benchmark's processes on this rank's node (for the monitor and the thread share)"""
    local: RunConfig
    """the configuration reading the node's staged copy of the data (the log keeps the original)"""
    staging: list[dict]
    """every node's staging report (on the master)"""
    horovod: bool
    start_line: float = 0.0
    """when this rank crossed the start line (``time.monotonic()``; set by :func:`run_benchmark`): on rank 0, where
    the last start-up phase, the first ``Work`` to every group, is measured from"""
    watchdog: Watchdog | None = None
    """this rank's watchdog (None: no phase is bounded)"""
    bounds: PhaseBounds = DEFAULT_BOUNDS

    def end_begins(self, phase: str, what: str) -> None:
        """A training or relay rank's end begins: bounded by :meth:`PhaseBounds.training_rank_end`, longer than
        rank 0's own, so that rank 0 ends the job first with its score on disk."""
        if self.watchdog is not None:
            self.watchdog.enter(phase, self.bounds.training_rank_end(self.local.grace), what, EXIT_DEADLINE)


class MasterRole:
    """Rank 0: no device, no probe; runs the session (:func:`~aiperf_mpi.job.session.run_master`) over MPI."""

    def __init__(self, context: RankContext) -> None:
        self.context = context
        self.outcome: str | None = None

    def claim_device(self) -> None:
        return None

    def serving_at_end(self, config: RunConfig) -> ServingAtEnd:
        return _serving_at_end(self.context, "master", config, self.outcome)

    def preload(self, config: RunConfig) -> None:
        """The master imports nothing ahead: what it loads at the end (the report) is outside the window."""

    def probe_peak(self, config: RunConfig) -> None:
        pass

    def run(self, config: RunConfig, system: dict | None) -> int:
        """The session, then the end of the job: ``Abort`` when groups were left training mid-epoch."""
        context = self.context
        groups = context.layout.plan.groups
        tolerant, _ = job_fault_tolerance()
        bounds = context.bounds
        epoch_ops = seed_epoch_ops(context.prepared, config) if bounds.first_model_derived else None
        hang = HangPolicy.of(bounds, epoch_ops, tolerant)
        watchers = watcher_ranks(context.layout.plan) if _thread_multiple() else []
        heartbeat = RankZeroHeartbeat(context.comm, watchers) if watchers else None
        print(job_start_line(hang), flush=True)
        print(deadlines_line(context.bounds, context.local.grace, tolerant, watchers, epoch_ops), flush=True)
        relays = context.layout.plan.relay_ranks
        transport = MpiMasterTransport(context.comm, {g.index: g.leader for g in groups},
                                       {g.index: list(g.ranks) for g in groups}, fault_tolerant=tolerant,
                                       relays=relays)  # fmt: skip
        if relays:
            print(f"aiperf_mpi: {len(relays)} relay rank(s) take the {len(groups)} groups' messages for rank 0 "
                  "(--relays)", flush=True)  # fmt: skip
        hint = relay_hint(len(groups), len(relays))
        if hint:
            print(hint, flush=True)
        clocked = FirstWorkClock(transport, len(groups), context.start_line)
        ended = run_master(context.prepared, config, clocked, system=system, layout=context.layout.plan.to_dict(),
                           staging=context.staging, stop=context.stop_flag, urgent=lambda: context.stop_flag.urgent,
                           version=__version__, end=context.end, watchdog=context.watchdog, bounds=context.bounds,
                           hang=hang, heartbeat=heartbeat)  # fmt: skip
        self.outcome = ended.outcome
        if ended.exit_status:  # groups abandoned mid-epoch, or lost (MPI_Finalize would hang): end every rank
            context.comm.Abort(ended.exit_status)
        transport.stop_relays()
        transport.close()
        return 0


def seed_epoch_ops(prepared: Prepared, config: RunConfig) -> float:
    """The seed model's first epoch in operations, on the run's splits at the warm-up batch: what a group's derived
    first-model bound is measured against (:func:`~aiperf_mpi.job.deadlines.first_model_for`)."""
    from aiperf_mpi.graph.ops import count_ops, epoch_ops

    shape = prepared.data_check.get("image_shape") or [32, 32, 3]
    graph = seed_model(config.seed_model, shape[0], shape[2], prepared.data_check.get("classes", 10))
    sizes = prepared.data_sizes
    return float(epoch_ops(count_ops(graph), sizes["train"], sizes.get("validation", 0), config.batch_size).total)


def deadlines_line(bounds: PhaseBounds, grace: float, tolerant: bool, watchers: list[int] | None = None,
                   epoch_ops: float | None = None) -> str:  # fmt: skip
    """Rank 0's line at start: each phase's bound and where it came from, and what a phase past it costs; who
    watches rank 0."""
    lost = "its group is lost" if tolerant else "the run ends with its score"
    first = (f"a group's first model {FIRST_MODEL_FLOOR:.0f} s + {FIRST_MODEL_EPOCHS:g} × the seed's first epoch "
             f"({epoch_ops:.3g} operations) at {EFFICIENCY_FLOOR:.0%} of its probed peak, "
             f"{FIRST_MODEL_UNMEASURED:.0f} s without a probe, {NOT_READY:.0f} s before its Ready"
             if epoch_ops is not None
             else f"a group's first model {bounds.first_model:.0f} s (--first-model-deadline)")  # fmt: skip
    mid_run = f"mid-run 3 × its longest epoch + {bounds.hang_margin:g} s (--hang-margin)"
    watched = (f"rank 0 silent {bounds.master:.0f} s (watched by rank(s) {', '.join(map(str, watchers))})" if watchers
               else "rank 0 unwatched mid-run (the MPI library gives no MPI_THREAD_MULTIPLE for the watch)")
    return (f"aiperf_mpi: deadlines: start-up {bounds.startup:.0f} s ({bounds.startup_from}), {first}, {mid_run} "
            f"({lost}), the end {grace:.0f} s of drain + {bounds.end:.0f} s, a file write or fsync of rank 0 "
            f"{bounds.io:.0f} s, {watched}; past one, the job ends by {abort_kind()}")  # fmt: skip


def _thread_multiple() -> bool:
    """Whether a second thread may call MPI (the watch of rank 0, the utilisation monitor)."""
    return MPI.Query_thread() >= MPI.THREAD_MULTIPLE


class RelayRole:
    """A relay rank (``--relays``): no device, no probe; vets its leaders' messages for rank 0 (mpi/relay.py)."""

    def __init__(self, context: RankContext) -> None:
        self.context = context

    def claim_device(self) -> None:
        """Leave on SIGTERM as a training rank does (rank 0 ends the run; this is the backstop)."""
        self.context.stop_flag.leave_after_term()
        return None

    def preload(self, config: RunConfig) -> None:
        """The vetting's imports are the job's own, loaded at start-up."""

    def probe_peak(self, config: RunConfig) -> None:
        pass

    def serving_at_end(self, config: RunConfig) -> ServingAtEnd:
        return _serving_at_end(self.context, "relay", config)

    def run(self, config: RunConfig, system: dict | None) -> int:
        from aiperf_mpi.mpi.relay import Relay

        plan = self.context.layout.plan
        leaders = {g.leader: g.index for g in plan.groups}  # its own are plan.relay_of's; it knows them all
        tolerant, _ = job_fault_tolerance()
        Relay(self.context.comm, leaders, fault_tolerant=tolerant).run()
        self.context.end_begins(THE_END, _END_WHAT)
        return 0


class GroupRole:
    """A training rank: its device, the group's peak, then Horovod training (the leader also runs the search)."""

    def __init__(self, context: RankContext) -> None:
        self.context = context
        self.peak: dict | None = None

    def claim_device(self) -> object:
        """Leave on SIGTERM; take this rank's accelerator before TensorFlow claims them all; its capabilities."""
        context = self.context
        context.stop_flag.leave_after_term()
        if context.training.claim_device is None:
            return None
        return context.training.claim_device(context.layout.plan, context.layout.rank, context.node_pids)

    def preload(self, config: RunConfig) -> None:
        """Before the scored window: the modules this rank would first import inside it (the backend's; the
        search's only on the group's leader, which alone runs it)."""
        if self.context.training.preload is not None:
            self.context.training.preload(config, self.context.layout.is_leader)

    def serving_at_end(self, config: RunConfig) -> ServingAtEnd:
        return _serving_at_end(self.context, "training", config)

    def probe_peak(self, config: RunConfig) -> None:
        """Collective over the group: its peak throughput at the agreed precision (``--peak-probe``)."""
        if config.peak_probe and self.context.training.probe_peak is not None:
            self.peak = self.context.training.probe_peak(self.context.layout.group_comm, config.precision,
                                                         config.peak_seconds)  # fmt: skip

    def run(self, config: RunConfig, system: dict | None) -> int:
        context = self.context
        layout, prepared = context.layout, context.prepared
        run_dir = Path(prepared.run_dir)
        source = open_data(context.local, prepared.data_sizes)
        graph = seed_model(config.seed_model, source.image_shape[0], source.image_shape[2], source.classes)

        def serve(hvd) -> None:
            runner = context.training.runner(hvd, layout.group_comm, source, config, run_dir)
            if not layout.is_leader:
                runner.serve()
                return
            channel = MpiLeaderChannel(context.comm, layout.plan.relay_of(layout.group.index))
            monitor = _start_monitor(layout, config, channel, context.node_pids)
            watch = _start_watch(context, config, channel)
            try:
                leader_loop(channel, layout.group.index, layout.group.horovod_size, config, graph, runner,
                            context.stop_flag, peak=self.peak, rank=layout.rank,
                            max_batch=prepared.data_sizes["train"] // layout.group.horovod_size)  # fmt: skip
                if watch is not None:  # until rank 0's loop is over (the drain): it may still stall there
                    watch.finish()
            finally:
                if watch is not None:  # an error on the way: the watch ends with the leader, before MPI's end
                    watch.ended.set()
                    watch.finish(timeout=5.0)
                if monitor is not None:
                    monitor.stop()

        def serve_then_end(hvd) -> None:
            serve(hvd)
            context.end_begins(TEARDOWN, "a rank hangs in Horovod's or TensorFlow's teardown; " + _END_WHAT)

        if context.horovod:
            with horovod_on(layout.group_comm) as hvd:
                serve_then_end(hvd)
        else:
            serve_then_end(None)
        if context.watchdog is not None:  # the same bound: what is left is MPI's end (main: agreement, Finalize)
            context.watchdog.rename(THE_END, _END_WHAT)
        return 0


_END_WHAT = ("a rank hangs in the job's end (the drain, rank 0's score and report, the agreement, MPI_Finalize); "
             "rank 0's own deadline, shorter, ends the job first once the score is on disk")  # fmt: skip


def rank_role(comm: MPI.Comm, layout: RankLayout, prepared: Prepared, training: TrainingBackend, end: EndOfRunHooks,
              stop_flag: StopFlag, node_pids: list[int], local: RunConfig, staging: list[dict],
              horovod: bool, watchdog: Watchdog | None = None,
              bounds: PhaseBounds = DEFAULT_BOUNDS) -> MasterRole | RelayRole | GroupRole:  # fmt: skip
    """The role split, once (as mpi4py's ``MPICommExecutor(comm, root)`` splits root from workers).

    The three roles — :class:`MasterRole` (rank 0), :class:`RelayRole`
    (``--relays``) and :class:`GroupRole` (every training rank) — answer the
    same phases, ``claim_device``, ``preload``, ``probe_peak`` and ``run``,
    so :func:`run_benchmark` calls the collectives between them on every
    rank without asking again which role it holds.
    """
    context = RankContext(comm, layout, prepared, training, end, stop_flag, node_pids, local, staging, horovod,
                          watchdog=watchdog, bounds=bounds)  # fmt: skip
    if layout.is_master:
        return MasterRole(context)
    return RelayRole(context) if layout.is_relay else GroupRole(context)


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


def _energy_at_start(comm: MPI.Comm, node_comm: MPI.Comm, system: dict | None) -> dict | None:
    """Collective, at the start line: the first rank of each node reads its node's energy meters (issue 53,
    :func:`~aiperf_mpi.results.energy.node_sources_here`: sysfs files and NVML, milliseconds); rank 0 keeps every
    node's readings, or why it has none, in its ``system`` event and says what was found.  One gather of a small
    record a node (None from the other ranks), as :func:`system_description`'s."""
    from aiperf_mpi.results.energy import node_sources_here, start_lines, to_record

    mine = None
    if node_comm.Get_rank() == 0:
        readings, problems = node_sources_here()
        mine = {"host": socket.gethostname(), "readings": [to_record(r) for r in readings], "problems": problems}
    nodes = comm.gather(mine, root=0)
    if comm.Get_rank() != 0 or system is None:
        return system
    nodes = [node for node in nodes if node is not None]
    for line in start_lines(nodes):
        print(line, flush=True)
    return {**system, "energy": nodes}


def _start_watch(context: RankContext, config: RunConfig, channel: MpiLeaderChannel) -> RankZeroWatch | None:
    """The watch of rank 0 (mpi/heartbeat.py), on a leader that :func:`watcher_ranks` names (None elsewhere)."""
    layout = context.layout
    if layout.rank not in watcher_ranks(layout.plan) or not _thread_multiple():
        return None
    watch = RankZeroWatch(context.comm, config.master_deadline, lambda status: end_the_job(status, True),
                          EXIT_DEADLINE, layout.rank, layout.group.host)  # fmt: skip
    channel.on_heartbeat = watch.heard
    return watch


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


