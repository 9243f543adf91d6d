"""Entry point: ``python -m aiperf_mpi`` (or the ``aiperf-mpi`` script).

The one place that wires the rooms together: it injects what trains
(``train/``: the group runner, the device, the peak probe) and what runs at
the end of a run (``analysis``: the report, the export) into the MPI run,
which imports neither (``tests/unit/test_architecture.py``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiperf_mpi.cli import check_mode, parse_on_root, run_overrides
from aiperf_mpi.errors import EXIT_DEADLINE
from aiperf_mpi.job.deadlines import STARTUP, Watchdog, startup_bound_from_argv
from aiperf_mpi.signals import StopFlag

if TYPE_CHECKING:
    from mpi4py import MPI

    from aiperf_mpi.config import RunConfig
    from aiperf_mpi.job.session import EndOfRunHooks
    from aiperf_mpi.mpi.run import TrainingBackend


def rank_main(comm: MPI.Comm, argv: Sequence[str] | None, stop_flag: StopFlag, watchdog: Watchdog) -> int:
    """What every rank runs, inside the abort guard."""
    from aiperf_mpi.mpi.launch import check_launch
    from aiperf_mpi.mpi.layout import build_layout
    from aiperf_mpi.mpi.limits import raise_open_files

    raise_open_files()  # before the first collective: over TCP rank 0 holds a socket per rank it talks to
    options = parse_on_root(comm, argv)
    check_launch(comm.Get_size(), os.environ)  # before anything is measured: N singletons measure nothing
    check_mode(options)
    if options.layout:
        layout = build_layout(comm, options.group_size, options.relays or 0)
        try:
            if layout.is_master:
                text = json.dumps(layout.plan.to_dict()) if options.json else layout.plan.describe()
                print(text, flush=True)
            return 0
        finally:
            layout.free()
    from aiperf_mpi.config import load_config
    from aiperf_mpi.mpi.run import agree, run_benchmark

    config = agree(comm, lambda: load_config(options.config, run_overrides(options)))
    end = end_of_run_hooks(options.serve_at_end) if options.report else no_report_hooks()
    return run_benchmark(comm, config, choose_backend, end, resume=options.resume, stop_flag=stop_flag,
                         watchdog=watchdog)  # fmt: skip


def choose_backend(config: RunConfig) -> TrainingBackend:
    """What trains, by the run's configuration (a resume's is the logged one): a rehearsal's stand-in or real."""
    return rehearsal_backend(config) if config.rehearse else training_backend()


def rehearsal_backend(config: RunConfig) -> TrainingBackend:
    """``--rehearse``: the stand-in for the training arithmetic (mpi/rehearsal.py); no device, no TensorFlow."""
    from aiperf_mpi.mpi.rehearsal import RehearsalRunner, rehearsal_peak
    from aiperf_mpi.mpi.run import TrainingBackend

    def peak(group_comm: MPI.Comm, precision: str, seconds: float) -> dict | None:
        return rehearsal_peak(group_comm, precision, config.rehearse_rate)

    return TrainingBackend(runner=RehearsalRunner, probe_peak=peak, preload=_preload, horovod=False)


def training_backend() -> TrainingBackend:
    """Real training: the group runner (Horovod, Keras), one accelerator per rank, the peak probe."""
    from aiperf_mpi.mpi.run import TrainingBackend
    from aiperf_mpi.train.runner import GroupRunner

    return TrainingBackend(runner=GroupRunner, claim_device=_claim_device, probe_peak=_probe_peak,
                           preload=_preload)  # fmt: skip


def _claim_device(plan, rank: int, node_pids: list[int]):
    """One accelerator per rank, before TensorFlow claims them all; on a CPU, TensorFlow's share of the cores."""
    from aiperf_mpi.train.devices import device_caps, pin_device
    from aiperf_mpi.train.threads import use_cpu_share

    use_cpu_share(pin_device(plan.device_index(rank)), plan, rank, node_pids)
    return device_caps()


def _preload(config: RunConfig, leader: bool = True) -> None:
    """What a training rank first imports inside the scored window, imported before it begins.

    On a group's leader, what its search and tuner load where used (sparing the master and a refused launch
    their ≈ 0.6 s of scipy), as the registry names them (:func:`~aiperf_mpi.search.registry.leader_libraries`);
    the group's other ranks run no search, and leave them out (≈ 47 MiB a rank: BENCHMARKS.md, "Memory
    per rank").  On every rank, scikit-learn where this run needs it: the embedded digits come from it, and the
    GP tuner's scikit-optimize builds on it (a training rank's TensorFlow no longer loads it:
    :mod:`aiperf_mpi.train.tfimport`).  Each costs its group a second or so of the window otherwise.
    """
    import importlib

    from aiperf_mpi.search.registry import leader_libraries

    names = [*leader_libraries(config.search, config.hpo)] if leader else []
    names += ["sklearn.datasets"] if config.dataset == "digits" else []
    for name in names:
        importlib.import_module(name)


def _probe_peak(group_comm: MPI.Comm, precision: str, seconds: float) -> dict | None:
    """The group's peak throughput (imported here: TensorFlow loads only on the ranks that probe)."""
    from aiperf_mpi.train.peak import group_peak

    return group_peak(group_comm, precision, seconds)


def end_of_run_hooks(serve_top: int | None = None) -> EndOfRunHooks:
    """After the score: the report, and (after a run that ended normally) the best model's export; with
    ``--serve-at-end K`` (``serve_top``), the K best served on every training rank
    (:func:`aiperf_mpi.serve.serve_at_end`)."""
    from aiperf_mpi.job.session import EndOfRunHooks
    from aiperf_mpi.serve import serve_at_end
    from analysis.after_run import export_best, write_report

    return EndOfRunHooks(report=write_report, export=export_best, serve=serve_at_end(serve_top) if serve_top else None)


def no_report_hooks() -> EndOfRunHooks:
    """``--no-report``: the job ends once the score is written; a line says how to make each thing skipped.

    The report of a 10,000-model log takes ≈ 8 s on rank 0 (BENCHMARKS.md), a 100,000-model day's about ten
    times that, and the export a TensorFlow start-up more, while every node of the allocation waits for the job
    to end: a site may rather make them afterwards, on one node.
    """
    from aiperf_mpi.job.session import EndOfRunHooks

    def no_report(run_dir) -> None:
        stale = " (the report/ there is an earlier segment's)" if (run_dir / "report").exists() else ""
        print(f"aiperf_mpi: no report (--no-report){stale}: python -m analysis.report {run_dir} makes it",
              flush=True)  # fmt: skip

    def no_export(run_dir, dataset: str) -> None:  # after a run that ended normally, as the export would run
        if dataset == "synthetic":
            return  # nothing to choose the best model by: the export would not run either
        stale = " (the best/ there is an earlier segment's, which verify holds to this one's best model)" \
            if (run_dir / "best").exists() else ""  # fmt: skip
        print(f"aiperf_mpi: no model export (--no-report){stale}: python -m aiperf_mpi.export --single-copy "
              f"{run_dir} makes it", flush=True)  # fmt: skip

    return EndOfRunHooks(report=no_report, export=no_export)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one rank of the job and return its exit status."""
    stop_flag = StopFlag().install()  # first: a signal during start-up must not kill the rank unscored
    # MPI_Init (mpi4py's import) holds the interpreter lock, so no watchdog thread runs in it: a peer that
    # hangs there (its fence waits for every rank) ends this rank by SIGALRM's default action instead, after the
    # start-up bound the command line gives (read before MPI exists); the launcher then ends the job as for any
    # rank that died (under srun --kill-on-bad-exit=1: the step, the stopped rank by SIGKILL at KillWait)
    startup_bound = startup_bound_from_argv(sys.argv[1:] if argv is None else argv)
    signal.alarm(max(1, math.ceil(startup_bound)))
    from mpi4py import MPI

    from aiperf_mpi.mpi.deadline import after_the_deadline, meet_then_finalize, rank_watchdog
    from aiperf_mpi.mpi.faults import leave_together
    from aiperf_mpi.mpi.guard import fault_tolerant, run_guarded
    from aiperf_mpi.mpi.tolerance import finalize_returns

    signal.alarm(0)
    watchdog = rank_watchdog()  # then the deadlines: a hang in any collective of start-up ends the job
    watchdog.enter(STARTUP, startup_bound, "a rank hangs before the run's configuration is agreed",
                   EXIT_DEADLINE)  # the configured bound replaces it once the configuration is known  # fmt: skip
    comm = MPI.COMM_WORLD
    status = run_guarded(comm, lambda: rank_main(comm, argv, stop_flag, watchdog))
    if watchdog.phase == STARTUP:  # a usage error, --layout, --help: a short end, bounded as start-up was
        watchdog.rename(STARTUP, "a rank hangs in MPI's end after start-up")
    if fault_tolerant():  # under ULFM a barrier is no safe last meeting: every live rank agrees, then leaves
        # (MPI_Finalize with the interpreter lock released: the watchdog's MPI_Abort ends a peer stopped in it)
        leave_together(comm, status, finalize_returns(os.environ), lambda: after_the_deadline(watchdog))
    # MPI's end here, bounded, not at the interpreter's exit, where MPI_Finalize waits for a stopped peer with
    # the interpreter lock held and no deadline can fire (mpi/deadline.py)
    meet_then_finalize(comm, watchdog)
    return status


if __name__ == "__main__":
    sys.exit(main())
