"""A master driven by hand with a fake clock, for the tests of its deadlines (tests/unit/test_faults.py,
tests/unit/test_deadlines.py): groups handed their first task, epochs with every field the schema asks for."""

from __future__ import annotations

from aiperf_mpi.config import RunConfig
from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.job.faults import HangPolicy
from aiperf_mpi.job.master import Master
from aiperf_mpi.job.messages import Proposed, Ready
from aiperf_mpi.results import runlog
from aiperf_mpi.search.bayesian import SearchConfig
from aiperf_mpi.search.view import MasterHistory

POLICY = HangPolicy(epochs=3.0, margin=10.0, check_interval=1.0)


def epoch(number: int, start: float, end: float) -> dict:
    """An epoch with every field the log's schema asks for."""
    return {"epoch": number, "train_loss": 1.0, "val_accuracy": 0.5, "start": start, "end": end, "ops": 1000,
            "ops_train": 1000, "ops_update": 0, "ops_validation": 0, "steps": 1, "train_samples": 1,
            "validation_samples": 1, "data_wait": 0.0, "compute": end - start, "evaluation": 0.0,
            "learning_rate": 0.1}  # fmt: skip


def started_master(tmp_path, groups: int, now: list[float], hang: HangPolicy | None = POLICY) -> tuple[Master, list]:
    """A master with ``groups`` groups, each handed its first task and its seed accepted."""
    config = RunConfig(time_limit=1000, seed_model="tiny", run_dir=str(tmp_path))
    master = Master(config, runlog.EventLog(tmp_path), MasterHistory(SearchConfig().view_bounds()), groups,
                    tmp_path, clock=lambda: now[0], hang=hang)  # fmt: skip
    works = []
    for group in range(groups):
        [(_, work)] = master.handle(group, Ready(group, 2, f"host{group}"))
        master.handle(group, Proposed(work.task_id, None, to_json(tiny_resnet(width=8 + 2 * group)), {}, "seed"))
        works.append(work)
    return master, works


def lost_events(tmp_path) -> list[dict]:
    return [e for e in runlog.read_events(tmp_path).events if e["event"] == runlog.GROUP_LOST]
