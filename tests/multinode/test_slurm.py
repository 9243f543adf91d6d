"""Slurm across two nodes: the scale-out template run by a real Slurm whose two slurmd are two test hosts.

The hosts are those of tests/support/multihost.py, the Slurm that of
tests/support/slurm.py with one slurmd (and one munged) per host
(tests/support/multihost_slurm.py).  The template is submitted as it is, its
size lines shrunk to 2 nodes × 2 tasks; it launches with
``srun --mpi=pmix``, so Slurm's own step daemons on each node start the ranks
and PMIx wires them up across the bridge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from tests.support.multihost import MARKER, live_namespaces
from tests.support.multihost_slurm import HostsSlurm, start_slurm
from tests.support.procs import marked_pids

pytestmark = [pytest.mark.multinode, pytest.mark.slurm, pytest.mark.slow, pytest.mark.tf, pytest.mark.horovod]
JOBSCRIPTS = Path(__file__).resolve().parents[2] / "jobscripts"
FAST = ("--seed-model tiny --max-epochs 1 --score-step 10 --progress-interval 5 --monitor-interval 5 --peak-seconds 1 "
        "--no-xla")  # fmt: skip


@pytest.fixture(scope="module")
def slurm2() -> Iterator[HostsSlurm]:
    cluster = start_slurm(2)
    namespaces = cluster.hosts.namespaces()
    try:
        yield cluster
    finally:
        cluster.stop()
        assert not marked_pids(MARKER, cluster.scratch), "processes of the two-node Slurm outlived it"
        assert not live_namespaces(namespaces)


def test_two_slurmd_register_as_two_nodes(slurm2) -> None:
    nodes = slurm2.command(["scontrol", "show", "node", "-o"]).stdout.splitlines()
    seen = sorted((line.split("NodeName=")[1].split()[0], line.split("NodeAddr=")[1].split()[0]) for line in nodes)
    assert seen == [(h.name, h.address) for h in slurm2.hosts.hosts]
    assert all("State=IDLE" in line for line in nodes), nodes


def test_the_scale_out_template_runs_across_both_nodes(slurm2, tmp_path) -> None:
    run_dir = tmp_path / "run"
    job = slurm2.submit(
        JOBSCRIPTS / "scale-out.sbatch",
        ["--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1", "--time=10"],
        env={"AIPERF_RUN_DIR": str(run_dir), "AIPERF_TIME_LIMIT": "40", "AIPERF_GRACE": "60", "AIPERF_ARGS": FAST},
        output=tmp_path / "job.out",
    )
    end = slurm2.wait(job, timeout=300)
    assert end.state == "COMPLETED" and end.exit_code == 0, end.output[-4000:]
    assert f"aiperf_mpi job {job}: 4 tasks on 2 node(s)" in end.output, end.output[-4000:]
    assert "aiperf_mpi: score" in end.output, end.output[-4000:]
    events = runlog.read_events(run_dir).events
    [layout] = [e for e in events if e[runlog.EVENT] == runlog.LAYOUT]
    assert layout["node_count"] == 2
    assert [(g["host"], g["ranks"]) for g in layout["groups"]] == [("node1", [1]), ("node2", [2]), ("node2", [3])]
    [system] = [e for e in events if e[runlog.EVENT] == runlog.SYSTEM]
    assert [(n["host"], n["ranks"]) for n in system["hosts"]] == [("node1", [0, 1]), ("node2", [2, 3])]
    trained = {e["group"] for e in events if e[runlog.EVENT] == runlog.MODEL_DONE}
    assert trained & {1, 2}, f"no group of node2 finished a model: {trained}"
    assert json.loads((run_dir / "score.json").read_text())["score"] > 0
