"""The multi-host fixture: each host is a node of its own to Open MPI, and nothing of it outlives the tests.

The first test is the evidence that the hosts are separate nodes and not one
node with several names: the ranks of each host run under a daemon of that
host (mpirun on the first, a ``prted`` on each other), in that host's own
network, UTS and mount namespaces; ``COMM_TYPE_SHARED`` splits by host; the
ranks of different hosts talk over TCP across the bridge; node-local storage
and ``/dev/shm`` are each host's own.  The others start, stop and kill
clusters of their own — one in a test session that fails, one in a session
killed with SIGKILL — and look for any process or namespace left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.multihost import MARKER, SUBNET, live_namespaces, start_cluster
from tests.support.procs import command_name, gone, marked_pids

pytestmark = [pytest.mark.multinode, pytest.mark.mpi]

REPO_ROOT = Path(__file__).resolve().parents[2]
PROBE = str(Path(__file__).with_name("scripts") / "node_probe.py")


def probe(cluster, slots=2) -> list[dict]:
    run = cluster.mpirun([PROBE, str(cluster.node_local)], timeout=60, slots=slots)
    assert run.returncode == 0, run.output
    assert not run.leftovers, f"processes of the job outlived mpirun: {run.leftovers}"
    [line] = [text for text in run.lines_of_rank(0) if text.startswith("PROBE ")]
    return json.loads(line.removeprefix("PROBE "))


def test_each_host_is_a_node_of_its_own(multihost) -> None:
    rows = probe(multihost)
    node1, node2 = multihost.hosts
    assert [r["host"] for r in rows] == ["node1", "node1", "node2", "node2"]
    assert [r["processor"] for r in rows] == ["node1", "node1", "node2", "node2"]
    # MPI's own idea of a node: COMM_TYPE_SHARED splits by host
    assert [r["node"] for r in rows] == [0, 0, 2, 2] and all(r["node_size"] == 2 for r in rows)
    # each host's ranks live in that host's namespaces, and the hosts' namespaces are not the machine's
    mine = {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in ("net", "uts", "mnt")}
    for row in rows:
        host = multihost.host(row["host"])
        for kind in ("net", "uts", "mnt"):
            assert row["namespaces"][kind] == host.namespace(kind) != mine[kind], (row, kind)
        assert row["address"] == host.address
    # one daemon per host: node1's ranks are mpirun's children, node2's those of a prted on node2
    assert {r["parent"]["name"] for r in rows[:2]} == {"prterun"}
    assert {r["parent"]["name"] for r in rows[2:]} == {"prted"}
    assert len({r["parent"]["pid"] for r in rows[2:]}) == 1 and rows[2]["parent"]["uts"] == node2.namespace("uts")
    assert rows[0]["parent"]["uts"] == node1.namespace("uts")
    # every rank heard every other; across hosts over TCP on the bridge (no shared memory between hosts)
    assert all(r["heard"] == sorted(set(range(4)) - {r["rank"]}) for r in rows)
    for row in rows:
        other = node2 if row["host"] == "node1" else node1
        assert other.address in row["tcp_peers"], row
        assert all(peer.startswith((SUBNET + ".", "127.")) for peer in row["tcp_peers"]), row  # 127: the PMIx server
    # node-local storage and /dev/shm: each host sees only its own first rank's mark
    for row in rows:
        assert row["node_local"] == [f"probe-{row['host']}"] and row["shm"] == [f"aiperf-probe-{row['host']}"], row
    assert not any(multihost.node_local.iterdir()), "node-local files showed up on the machine itself"


def test_three_hosts_start_run_and_stop_leaving_nothing() -> None:
    cluster = start_cluster(3)
    namespaces = cluster.namespaces()
    try:
        assert cluster.timings["start"] < 10, cluster.timings
        assert len(namespaces) == 10  # 3 hosts × (net, uts, mnt) + the switch
        rows = probe(cluster, slots={"node1": 1, "node2": 1, "node3": 1})
        assert [(r["host"], r["node"], r["node_size"]) for r in rows] == [("node1", 0, 1), ("node2", 1, 1),
                                                                          ("node3", 2, 1)]  # fmt: skip
        assert cluster.on_host("node3", ["hostname"]).stdout.strip() == "node3"
    finally:
        left = cluster.stop()
    assert left == []
    assert not marked_pids(MARKER, cluster.scratch)
    assert not live_namespaces(namespaces)
    assert not cluster.scratch.exists()
    assert cluster.timings["stop"] < 10, cluster.timings


START_A_SLEEPING_JOB = """
    job = cluster.launch(["-c", "import time; time.sleep(300)"], Path(tmp) / "job.out")
    deadline = time.monotonic() + 30
    while len(cluster.rank_pids()) < 4:
        assert job.poll() is None and time.monotonic() < deadline, (Path(tmp) / "job.out").read_text()
        time.sleep(0.1)
    assert {cluster.host_of(pid) for pid in cluster.rank_pids().values()} == {"node1", "node2"}
"""


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != MARKER and not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def assert_gone(scratch: str, namespaces: set[int], within: float) -> None:
    deadline = time.monotonic() + within
    while (marked_pids(MARKER, scratch) or live_namespaces(namespaces) or Path(scratch).exists()) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not marked_pids(MARKER, scratch), f"processes of the cluster left: {marked_pids(MARKER, scratch)}"
    assert not live_namespaces(namespaces), "namespaces of the cluster left"
    assert not Path(scratch).exists()


def test_a_failing_test_leaves_no_host_and_no_job(tmp_path: Path) -> None:
    probe_file = tmp_path / "cluster.json"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import json, os, time
        from pathlib import Path


        def test_fails_while_a_job_runs(multihost, tmp_path):
            cluster, tmp = multihost, tmp_path
            Path(os.environ["CLUSTER_PROBE"]).write_text(json.dumps(
                {"scratch": str(cluster.scratch), "namespaces": sorted(cluster.namespaces())}))
    """) + textwrap.indent(textwrap.dedent(START_A_SLEEPING_JOB), "    ") + """
    assert False, "deliberate failure while a job runs"
""")  # fmt: skip
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", os.devnull, "-p", "tests.multinode.conftest",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
        cwd=REPO_ROOT, env={**child_env(), "CLUSTER_PROBE": str(probe_file)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert inner.returncode == 1 and "deliberate failure while a job runs" in inner.stdout, inner.stdout + inner.stderr
    assert re.search(r"multihost fixture: .*start .*; swept \d+ leftover process", inner.stdout), inner.stdout
    made = json.loads(probe_file.read_text())
    assert_gone(made["scratch"], set(made["namespaces"]), within=0)  # the teardown already stopped everything


def test_a_killed_session_leaves_no_host_and_no_job(tmp_path: Path) -> None:
    """SIGKILL runs no teardown and no atexit: the watchdog, seeing its pipe closed, sweeps the hosts."""
    program = textwrap.dedent("""
        import json, sys, time
        from pathlib import Path
        from tests.support.multihost import start_cluster

        cluster = start_cluster(2)
        tmp = sys.argv[1]
    """) + textwrap.dedent(START_A_SLEEPING_JOB) + textwrap.dedent("""
        print(json.dumps({"scratch": str(cluster.scratch), "namespaces": sorted(cluster.namespaces())}), flush=True)
        time.sleep(600)
    """)  # fmt: skip
    session = subprocess.Popen([sys.executable, "-c", program, str(tmp_path)], cwd=REPO_ROOT, env=child_env(),
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        made = json.loads(session.stdout.readline() or "null")
        assert made and len(marked_pids(MARKER, made["scratch"])) > 6, "the hosts and the job are running"
    finally:
        session.send_signal(signal.SIGKILL)
        session.wait(timeout=10)
    assert_gone(made["scratch"], set(made["namespaces"]), within=20)


def test_a_lost_node_goes_silent_and_everything_on_it_dies(tmp_path: Path) -> None:
    """``lose_node`` (a real node loss, issue 43): the link down on both ends, the daemon and the ranks killed.

    Before: node1 reaches node2 (a connection to a closed port is refused: the stack answers).  After: node2 is
    silent (the connection times out, no refusal), ``eth0`` is down, no process is left on node2 — its
    ``prted`` among those killed — while node1's half of the job (mpirun, its ranks) lives on, for the launcher
    to notice (or not: tests/multinode/test_failures.py measures that), and the cluster's stop ends it all.
    """
    cluster = start_cluster(2)
    namespaces = cluster.namespaces()
    try:
        assert cluster.reachable("node1", "node2", port=9)
        job = cluster.launch(["-c", "from mpi4py import MPI; import time; MPI.COMM_WORLD.Barrier(); time.sleep(300)"],
                             tmp_path / "job.out")  # fmt: skip
        deadline = time.monotonic() + 60
        while len(cluster.rank_pids()) < 4 or "prted" not in map(command_name, cluster.processes_on("node2")):
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "job.out").read_text()
            time.sleep(0.1)
        node1_ranks = [pid for pid in cluster.rank_pids().values() if cluster.host_of(pid) == "node1"]
        loss = cluster.lose_node("node2")
        assert "prted" in loss.killed and len(loss.killed.get("python3", loss.killed.get("python", []))) == 2, loss
        assert cluster.processes_on("node2") == []
        assert "state DOWN" in cluster.on_host("node2", ["ip", "-o", "link", "show", "eth0"]).stdout
        assert not cluster.reachable("node1", "node2", port=9, timeout=2)
        assert job.poll() is None and not any(map(gone, node1_ranks)), "node1's half ended at once: not silent"
    finally:
        left = cluster.stop()
    assert len(left) >= 3, left  # mpirun and node1's two ranks, still waiting for node2
    assert not marked_pids(MARKER, cluster.scratch) and not live_namespaces(namespaces)
