"""A lost rank, leader or node across two hosts costs its group, not the run (issue 25), with fault tolerance on.

The session's cluster (tests/support/multihost.py): rank 0 (the master) and
group 0 (rank 1) on node1, group 1 (ranks 2-3, Horovod size 2, leader 2) on
node2; mpirun on node1 with Open MPI's ULFM settings
(:data:`aiperf_mpi.mpi.tolerance.OPEN_MPI_LAUNCH`), node2's daemon started
through the launch agent, the ranks' traffic between the hosts over TCP on
the bridge.  Once both groups have logged an epoch, node2's ranks are killed
or stopped; the run must log ``group_lost`` for group 1, train on with group 0
to its time limit, write one score and pass verify.  One undisturbed run of
the same shape (module-scoped) is the reference for the score lost, and shows
that nothing is reported lost across the hosts by mistake.

Each case prints one ``lost-node:`` line with its costs (run with ``-s`` to
see them; BENCHMARKS.md, "Failure detection", records them).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiperf_mpi.errors import EXIT_GROUPS_LOST
from aiperf_mpi.mpi.tolerance import OPEN_MPI_LAUNCH
from aiperf_mpi.results import runlog
from tests.support.lost_groups import events_so_far, only_rates_of_freed_cores
from tests.support.mpirun import mpi_vendor

pytestmark = [pytest.mark.multinode, pytest.mark.mpi, pytest.mark.slow, pytest.mark.tf, pytest.mark.horovod,
              pytest.mark.skipif(mpi_vendor() != "openmpi", reason="ULFM is Open MPI's")]  # fmt: skip
TIME_LIMIT = 90
"""seconds of the run: both groups' first epochs (about 30 s under load), the loss, then training on (a stopped
rank's group is lost by the master's deadline, 3 × its longest epoch + 60 s: possibly in the drain after the time
limit)"""
OUTER_TIMEOUT = 420
"""the most one job may take, start to end, before the test kills it and fails"""
ARGS = ["-m", "aiperf_mpi", "--seed-model", "tiny", "--max-epochs", "2", "--score-step", "10",
        "--progress-interval", "10", "--monitor-interval", "5", "--peak-seconds", "1", "--no-xla",
        "--time-limit", str(TIME_LIMIT)]  # fmt: skip
STOPPED_GRACE = 300
"""the drain a run with a stopped rank gets (``--grace``): its group's deadline falls inside it"""
FINALIZE_GRACE = 30
"""seconds a job may take to end once rank 0 has printed its last line; then it counts as hung in MPI_Finalize"""
LAST_LINE = "removes old runs"
"""in rank 0's last line of a run that ends without MPI_Abort (the run directory's size)"""
LOST, SURVIVOR = 1, 0
"""the group on node2 (the one the failures hit) and the group on node1 (the one that must train on)"""


@dataclass
class Finished:
    """One job of this module, ended: what it printed, its exit status, its log, and when its signal went."""

    run_dir: Path
    output: str
    returncode: int
    events: list[dict]
    signalled: float | None
    """wall-clock time the signal was sent (the log's clock); None for the undisturbed run"""
    victims: list[int]
    leftovers: list[int]
    hung_in_finalize: bool
    """rank 0 had printed everything, and the job still ran ``FINALIZE_GRACE`` s later (killed then)"""

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e[runlog.EVENT] == kind]

    @property
    def score(self) -> float:
        return json.loads((self.run_dir / "score.json").read_text())["score"]


def run_job(multihost, run_dir: Path, choose_victims=None, signum: int = signal.SIGKILL) -> Finished:
    """The benchmark across both hosts with fault tolerance on; once both groups have logged an epoch,
    ``signum`` to the world ranks ``choose_victims(layout)`` names (none: undisturbed); wait for the end.

    A stopped rank's group is lost only at the master's deadline (3 × its longest epoch or first-epoch cost, +
    60 s), which can fall after the time limit: its run gets a drain (``--grace``) that outlasts it, else the
    grace expires first and the run ends with status 3 and its task discarded, no group lost (seen, 2026-12-03).
    """
    output = run_dir.parent / f"{run_dir.name}.out"
    grace = ["--grace", str(STOPPED_GRACE)] if signum == signal.SIGSTOP else []
    job = multihost.launch([*ARGS, *grace, "--run-dir", str(run_dir)], output, options=OPEN_MPI_LAUNCH.split())
    signalled, victims, hung_in_finalize = None, [], False
    deadline = time.monotonic() + OUTER_TIMEOUT
    try:
        while choose_victims is not None and signalled is None:
            assert job.poll() is None and time.monotonic() < deadline, output.read_text()[-4000:]
            events = events_so_far(run_dir)
            if {SURVIVOR, LOST} <= {e["group"] for e in events if e[runlog.EVENT] == runlog.EPOCH}:
                [layout] = [e for e in events if e[runlog.EVENT] == runlog.LAYOUT]
                victims = choose_victims(layout)
                pids = multihost.rank_pids()
                assert all(multihost.host_of(pids[rank]) == "node2" for rank in victims), (victims, pids)
                signalled = time.time()
                for rank in victims:
                    os.kill(pids[rank], signum)
            time.sleep(0.25)
        said_all = None  # when rank 0 printed the last line of a clean ending
        while job.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"the job outlived {OUTER_TIMEOUT} s (signal at {signalled})\n{output.read_text()[-4000:]}")
            if said_all is None and LAST_LINE in output.read_text():
                said_all = time.monotonic()
            if said_all is not None and time.monotonic() - said_all > FINALIZE_GRACE:
                hung_in_finalize = True
                break
            time.sleep(0.5)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    leftovers = multihost.settle()
    return Finished(run_dir, output.read_text(), job.returncode, runlog.read_events(run_dir).events, signalled,
                    victims, leftovers, hung_in_finalize)  # fmt: skip


@pytest.fixture(scope="module")
def undisturbed(multihost, tmp_path_factory) -> Iterator[Finished]:
    """One run of the same shape with fault tolerance on and no failure: the reference for the score lost."""
    yield run_job(multihost, tmp_path_factory.mktemp("undisturbed") / "run")


def test_an_undisturbed_run_across_hosts_with_fault_tolerance_loses_no_group(undisturbed) -> None:
    """No false alarm over TCP between the hosts: nothing lost, a clean end, verify ok."""
    run = undisturbed
    assert "fault tolerance on" in run.output, run.output[-4000:]
    assert not run.of(runlog.GROUP_LOST), run.of(runlog.GROUP_LOST)
    assert [e["reason"] for e in run.of(runlog.RUN_STOP)] == ["time limit"]
    assert {e["group"] for e in run.of(runlog.EPOCH)} == {SURVIVOR, LOST}
    from analysis.verify import verify

    result = verify(run.run_dir)
    assert result.ok, result.text()
    print(f"lost-node: undisturbed: score {run.score:.4g}, epochs {len(run.of(runlog.EPOCH))}, "
          f"models {len(run.of(runlog.MODEL_DONE))}")  # fmt: skip


def test_an_undisturbed_run_with_fault_tolerance_ends_by_itself(undisturbed) -> None:
    """A run that lost nothing ends with status 0, as it does without fault tolerance (every rank agrees that none
    failed, then leaves through MPI_Finalize: aiperf_mpi.mpi.faults.leave_together)."""
    assert not undisturbed.hung_in_finalize, "every rank still in MPI_Finalize 30 s after rank 0's last line"
    assert undisturbed.returncode == 0 and not undisturbed.leftovers, undisturbed.output[-4000:]


def training_rank(layout: dict) -> list[int]:
    """A rank of node2's group that is not its leader."""
    [group] = [g for g in layout["groups"] if g["index"] == LOST]
    return [next(r for r in group["ranks"] if r != group["leader"])]


def leader(layout: dict) -> list[int]:
    [group] = [g for g in layout["groups"] if g["index"] == LOST]
    return [group["leader"]]


def every_rank_of_node2(layout: dict) -> list[int]:
    return [rank for rank, host in enumerate(layout["hosts"]) if host == "node2"]


CASES = {
    "kill-9-training-rank": (training_rank, signal.SIGKILL),
    "kill-9-leader": (leader, signal.SIGKILL),
    "kill-9-whole-node": (every_rank_of_node2, signal.SIGKILL),
    "sigstop-training-rank": (training_rank, signal.SIGSTOP),
}


@pytest.mark.timeout(OUTER_TIMEOUT + 120)
@pytest.mark.parametrize("case", list(CASES))
def test_a_failure_on_node2_costs_its_group_and_the_run_goes_on(multihost, tmp_path, undisturbed, case) -> None:
    choose, signum = CASES[case]
    run = run_job(multihost, tmp_path / "run", choose, signum)
    assert run.signalled is not None, run.output[-4000:]
    text = run.output
    assert "fault tolerance on" in text, text[-4000:]
    # rank 0 ends the job with MPI_Abort(EXIT_GROUPS_LOST) once the score is written; mpirun reports the first
    # non-zero status it saw (the dead rank's, or the Abort's)
    assert run.returncode != 0 and "the score above is final" in text, (run.returncode, text[-4000:])
    assert "MPI_ABORT was invoked on rank 0" in text and f"Errorcode: {EXIT_GROUPS_LOST}" in text, text[-4000:]
    assert not run.hung_in_finalize and not run.leftovers, f"processes of the job outlived mpirun: {run.leftovers}"

    [lost] = run.of(runlog.GROUP_LOST)
    assert lost["group"] == LOST and lost["host"] == "node2", lost
    detected = lost[runlog.TIME] - run.signalled
    if signum == signal.SIGKILL:  # the launcher reports the death (OPEN_MPI_LAUNCH has no heartbeat detector)
        assert lost["ranks"] and set(lost["ranks"]) <= set(run.victims), (lost, run.victims)
        assert detected < 30, lost
    else:  # a stopped rank is not dead: nothing reports it, and the master's deadline loses its group
        assert "past its deadline" in lost["reason"], lost
    assert [e["reason"] for e in run.of(runlog.RUN_STOP)] == ["time limit"]
    assert len(run.of(runlog.SCORE)) == 1 and (run.run_dir / "score.json").exists()
    assert (run.run_dir / "report" / "report.md").is_file()

    # the group on node1 trained on; nothing of node2's group is logged after its loss
    survivor = [e for e in run.of(runlog.EPOCH) if e["group"] == SURVIVOR]
    after = [e for e in survivor if e["start"] > run.signalled]
    assert after, text[-4000:]
    assert not [e for e in run.of(runlog.EPOCH) if e["group"] == LOST and e[runlog.TIME] > lost[runlog.TIME]]
    from analysis.verify import verify

    result = verify(run.run_dir)
    assert result.ok or only_rates_of_freed_cores(result, {SURVIVOR}), result.text()
    assert f"group {LOST} lost" in result.text(), result.text()

    # the costs: the failure to the survivor's next epoch, the epoch it was in, the score against the reference
    next_step = min(e["start"] for e in after) - run.signalled
    spanning = [e["end"] - e["start"] for e in survivor if e["start"] <= run.signalled <= e["end"]]
    usual = statistics.median(e["end"] - e["start"] for e in survivor)
    lost_share = 1 - run.score / undisturbed.score
    print(f"lost-node: {case}: victims {run.victims}, group_lost {detected:.1f} s after the signal "
          f"(ranks {lost['ranks']}, {lost['reason'][:60]!r}); survivor's next epoch began {next_step:.1f} s after; "
          f"its epoch across the failure {spanning[0] if spanning else 0:.1f} s (median {usual:.1f} s); "
          f"score {run.score:.4g} vs undisturbed {undisturbed.score:.4g} ({lost_share:+.1%} lost); "
          f"mpirun status {run.returncode}")  # fmt: skip
