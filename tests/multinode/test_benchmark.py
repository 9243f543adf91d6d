"""The benchmark across two nodes: layout, a run with node-local staging, inheritance, kill -9 and resume.

The session's cluster has node1 and node2, two ranks each: rank 0 (the
master) and group 0 (rank 1) on node1, group 1 (ranks 2-3, Horovod size 2)
on node2.  mpirun runs on node1 and starts node2's ranks through a daemon
there, as on a cluster; the run directory is on the machine's file system,
which every host shares (the cluster's shared file system), and
``--stage-dir`` points at storage each node has to itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import score_run
from tests.support.lost_groups import events_so_far
from tests.support.mpirun import REPO_ROOT, mpi_env

pytestmark = [pytest.mark.multinode, pytest.mark.mpi, pytest.mark.slow, pytest.mark.tf, pytest.mark.horovod]
FAST = ["--seed-model", "tiny", "--max-epochs", "1", "--score-step", "10", "--progress-interval", "5",
        "--monitor-interval", "5", "--peak-seconds", "1", "--no-xla"]  # fmt: skip


@pytest.fixture(scope="module")
def digits_h5(tmp_path_factory) -> Path:
    """The embedded digits as an HDF5 file on the shared file system: a data set that can be staged."""
    path = tmp_path_factory.mktemp("data") / "digits.h5"
    command = [sys.executable, "-m", "aiperf_mpi.data", "convert", "--from", "digits", "--to", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=mpi_env())
    assert done.returncode == 0, done.stderr
    return path


def test_layout_shows_both_nodes_the_master_and_a_group_per_node(multihost) -> None:
    run = multihost.mpirun(["-m", "aiperf_mpi", "--layout"], timeout=60)
    assert run.returncode == 0 and not run.leftovers, run.output
    text = "\n".join(run.lines_of_rank(0))
    assert "world size:   4 ranks on 2 node(s)" in text, text
    assert "master:       rank 0 on node1" in text, text
    assert "groups:       2" in text, text
    # node1 holds the master and one group; node2 one group of two
    assert "group    0: host node1, node 0, leader 1, horovod size 1, ranks 1" in text, text
    assert "group    1: host node2, node 2, leader 2, horovod size 2, ranks 2-3" in text, text

    run = multihost.mpirun(["-m", "aiperf_mpi", "--layout", "--json", "--group-size", "1"], timeout=60)
    assert run.returncode == 0, run.output
    plan = json.loads("".join(run.lines_of_rank(0)))
    assert plan["node_count"] == 2 and plan["hosts"] == ["node1", "node1", "node2", "node2"]
    assert [(g["host"], g["ranks"]) for g in plan["groups"]] == [("node1", [1]), ("node2", [2]), ("node2", [3])]


def test_a_run_with_a_group_on_each_node_stages_trains_inherits_and_reports(multihost, tmp_path, digits_h5) -> None:
    run_dir, stage_dir = tmp_path / "run", multihost.node_local / "stage"
    run = multihost.mpirun(["-m", "aiperf_mpi", *FAST, "--time-limit", "60", "--run-dir", str(run_dir),
                            "--dataset", "hdf5", "--data-path", str(digits_h5), "--stage-dir", str(stage_dir)],
                           timeout=300)  # fmt: skip
    assert run.returncode == 0, run.output
    assert not run.leftovers, f"processes of the job outlived mpirun: {run.leftovers}"
    assert "aiperf_mpi: score" in run.output and "aiperf_mpi: regulated score" in run.output, run.output[-3000:]
    assert f"aiperf_mpi: data staged to {stage_dir} on 2 node(s)" in run.output, run.output[-3000:]
    events = runlog.read_events(run_dir).events
    of = lambda kind: [e for e in events if e[runlog.EVENT] == kind]  # noqa: E731

    [layout] = of(runlog.LAYOUT)
    assert layout["node_count"] == 2 and [g["host"] for g in layout["groups"]] == ["node1", "node2"]
    [system] = of(runlog.SYSTEM)
    assert system["nodes"] == 2
    assert [(n["host"], n["ranks"]) for n in system["hosts"]] == [("node1", [0, 1]), ("node2", [2, 3])]

    # staged once per node, to storage each node has to itself
    staging = of(runlog.STAGING)
    assert sorted(s["host"] for s in staging) == ["node1", "node2"], staging
    assert all(s["staged"] == str(stage_dir / "digits.h5") and s["copied"] == s["files"] == 1 for s in staging)
    copies = {h.name: multihost.on_host(h.name, ["stat", "-c", "%s %d", str(stage_dir / "digits.h5")]).stdout.split()
              for h in multihost.hosts}  # fmt: skip
    assert {size for size, _ in copies.values()} == {str(digits_h5.stat().st_size)}
    assert copies["node1"][1] != copies["node2"][1], "both nodes' copies on one file system"
    assert not stage_dir.exists(), "the staged data showed up outside the nodes"

    # both groups trained: node1's group of one, node2's Horovod group of two
    done = {e["model"]["id"]: e for e in of(runlog.MODEL_DONE)}
    assert {e["group"] for e in done.values()} == {0, 1}, [(i, e["group"]) for i, e in done.items()]
    assert {e["group"] for e in of(runlog.EPOCH)} == {0, 1}
    assert sorted((p["group"], p["ranks"]) for p in of(runlog.PEAK)) == [(0, 1), (1, 2)]
    # inheritance across nodes: a child trained on one node from a parent trained on the other, its weights
    # read from the run directory (the shared file system); none fell back to training from scratch
    assert not [m for m in done.values() if "not readable" in m["model"]["timings"].get("note", "")]
    across = [i for i, e in done.items()
              if e["model"]["parent"] is not None and done[e["model"]["parent"]]["group"] != e["group"]]  # fmt: skip
    pairs = [(i, e["model"]["parent"], e["group"]) for i, e in done.items()]
    assert across, f"no model inherited across nodes (id, parent, group): {pairs}"

    # the utilisation monitor: one per node, samples from each
    monitor = of(runlog.MONITOR)
    per_host = {host: sum(1 for m in monitor if m["host"] == host) for host in ("node1", "node2")}
    assert min(per_host.values()) >= 3 and {m["node"] for m in monitor} == {0, 2}, per_host

    report = (run_dir / "report" / "report.md").read_text()
    assert f"aiperf_mpi: report in {run_dir / 'report' / 'report.md'}" in run.output
    for section in ("Data staging", "Utilisation and memory", "Timeline per group"):
        body = report.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
        assert "node1" in body and "node2" in body, (section, body)
    # a model given up at the time limit (its first epoch would end after it) is a model_done with no epoch
    trained = sum(e["model"].get("status", "trained") == "trained" for e in done.values())
    assert json.loads((run_dir / "score.json").read_text())["models_trained"] == trained


def test_kill_9_of_a_rank_on_the_second_node_ends_the_job_and_the_run_resumes(multihost, tmp_path) -> None:
    run_dir, output = tmp_path / "run", tmp_path / "first.out"
    job = multihost.launch(["-m", "aiperf_mpi", *FAST, "--time-limit", "600", "--run-dir", str(run_dir)], output)
    try:
        # once node1's group has logged an epoch and node2's group is training its first model
        deadline = time.monotonic() + 240
        while not ({(e[runlog.EVENT], e.get("group")) for e in events_so_far(run_dir)}
                   >= {(runlog.EPOCH, 0), (runlog.MODEL_PROPOSED, 1)}):  # fmt: skip
            assert job.poll() is None and time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(2)
        ranks = multihost.rank_pids()
        victim = ranks[3]
        assert sorted(ranks) == [0, 1, 2, 3] and multihost.host_of(victim) == "node2"
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        job.wait(timeout=60)
        ended = time.monotonic() - killed
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    text = output.read_text()
    print(f"kill -9 of rank 3 on node2: the whole job ended {ended:.1f} s later, exit status {job.returncode}")
    assert job.returncode != 0 and ended < 60, (job.returncode, ended, text[-3000:])
    # who reports it first varies: prterun, seeing rank 3 die, or a rank whose TCP connection to rank 3 closed
    # (MPI_ERRORS_ARE_FATAL: it aborts the job)
    died = r"process rank 3 with PID \d+ on node node2 exited on\s+signal 9"
    assert re.search(died, text) or "An error occurred in Socket closed" in text, text[-3000:]
    assert multihost.settle() == [], "processes of the killed job outlived it"

    before = runlog.read_events(run_dir)
    assert not before.truncated_tail
    kinds = [e[runlog.EVENT] for e in before.events]
    assert kinds[:3] == [runlog.RUN_START, runlog.SYSTEM, runlog.LAYOUT] and runlog.RUN_STOP not in kinds
    trained = [e["model"]["id"] for e in before.events if e[runlog.EVENT] == runlog.MODEL_DONE]

    second = multihost.mpirun(["-m", "aiperf_mpi", "--resume", str(run_dir), "--time-limit", "20"], timeout=240)
    assert second.returncode == 0 and not second.leftovers, second.output[-3000:]
    after = runlog.read_events(run_dir).events
    assert after[: len(before.events)] == before.events
    assert [e["segment"] for e in after if e[runlog.EVENT] == runlog.RUN_START] == [1, 2]
    ids = [e["model"]["id"] for e in after if e[runlog.EVENT] == runlog.MODEL_DONE]
    assert ids[: len(trained)] == trained and len(ids) > len(trained) and ids == sorted(set(ids))  # numbering goes on
    [layout] = [e for e in after if e[runlog.EVENT] == runlog.LAYOUT][1:]
    assert layout["node_count"] == 2
    assert score_run(run_dir).segments == 2
    assert (run_dir / "report" / "report.md").is_file()
