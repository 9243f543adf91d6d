"""What the tests of a lost group (issue 25) read: a log being written, and verify's one allowed objection.

Shared by ``tests/mpi/test_lost_group.py`` (one host), ``tests/multinode/test_lost_node.py`` (the multi-host
fixture) and ``tests/multinode/test_slurm.py`` (the two-node Slurm).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

from aiperf_mpi.results import runlog

START_CRASH = "Signal: Segmentation fault (11)"
"""what Open MPI 5.0.11 prints when, with ULFM on, a rank crashes while the job starts (about one launch in six,
before the benchmark logged anything: docs/cluster.md, "Known limits"); a test launches such a job again"""


def job_rank_pids(marker: str, value: str = "1") -> dict[int, int]:
    """World rank → pid of the benchmark's processes whose environment holds ``marker=value``, read from /proc once.

    The test's own job only when ``value`` is its own: two sessions that run the same test at once on one machine
    share the marker's name (seen: one session's kill of rank 0 ended the other's job at its start)."""
    pids: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"aiperf_mpi" not in command or f"{marker}={value}".encode() not in environ:
            continue
        rank = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if rank and rank[0].isdigit():
            pids[int(rank[0])] = int(entry.name)
    return pids


def events_so_far(run_dir: Path) -> list[dict]:
    """The complete lines of a log that is still being written (a half-written last line is left out)."""
    try:
        data = (run_dir / runlog.EVENTS_FILE).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.splitlines(keepends=True) if line.endswith("\n") and line.strip()]


def only_rates_of_freed_cores(result, survivors: Collection[int]) -> bool:
    """Whether verify's only objection is a surviving group training faster than its measured peak after a loss.

    On a CPU machine whose cores the ranks share, each group's peak is
    probed while they all run; once a group's ranks are gone, the groups
    that survive have the cores to themselves and their epochs run faster
    than the contended peak (seen: 2.8–4.4 × on one 2-core host).  On a
    cluster with a device per rank a lost rank frees nothing for the others;
    here it does, and verify's physics check says so.  Nothing else is
    excused: every objection must be that one, about one of ``survivors``.
    """
    objections = [(check.name, problem) for check in result.checks if check.verdict != "ok"
                  for problem in check.problems]  # fmt: skip
    survivor_peaks = tuple(f"× group {group}'s measured peak" for group in survivors)
    return bool(objections) and all(name == "physics" and "training rate" in problem
                                    and any(peak in problem for peak in survivor_peaks)
                                    for name, problem in objections)  # fmt: skip
