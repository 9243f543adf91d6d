"""The in-process run (master and leaders over the local hub, training faked) and readers of what it logged.

Shared by the scheduler and retention tests (tests/unit) and the protocol test
over real MPI (tests/mpi), which checks the same contract, so none of them
imports another test module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi import __version__
from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.local import run_in_process
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.resume import model_records
from aiperf_mpi.results.logmodel import read_model
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.history import ModelRecord
from aiperf_mpi.search.view import SearchView, ViewBounds, ViewIndex
from tests.support.fake_runner import FakeRunner


@dataclass
class LocalRun:
    master: Master
    views: dict[int, SearchView]
    runners: dict[int, FakeRunner]
    outcome: str


def run_local(tmp_path: Path, groups: int, time_limit: float, slow=(), fail=(), max_models=0,
              search_config: SearchConfig | None = None, epoch_seconds: float = 0.02, hang: HangPolicy | None = None,
              **options) -> LocalRun:  # fmt: skip
    """The benchmark's own session in this process (job.local.run_in_process), with fake training."""
    config = RunConfig(time_limit=time_limit, seed_model="tiny", score_step=0.5, run_dir=str(tmp_path),
                       max_models=max_models, grace=30, **options)  # fmt: skip
    search = search_config or SearchConfig()
    views = {group: SearchView(search.view_bounds()) for group in range(groups)}
    runners = {group: FakeRunner(group, epoch_seconds=epoch_seconds, slow_groups=slow, fail_tasks=fail,
                                 run_dir=tmp_path)
               for group in range(groups)}  # fmt: skip
    ended = run_in_process(config, runners, tiny_resnet(), version=__version__, views=views, search_config=search,
                           hang=hang)  # fmt: skip
    return LocalRun(ended.master, views, runners, ended.outcome)


def logged_records(run_dir: Path) -> list[ModelRecord]:
    """Every model of the log, in id order (failed ones as placeholders), as ``--resume`` reads them."""
    return [record for record, _ in model_records(run_dir, read_model(run_dir))]


def view_of(records: list[ModelRecord], bounds: ViewBounds) -> list[int]:
    """The view of the first records, computed from scratch: the top by search accuracy and the most recent."""
    index: ViewIndex[None] = ViewIndex(bounds)
    for record in records:
        index.add(record.id, record.search_accuracy, None)
    return index.ids()
