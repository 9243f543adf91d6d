"""Data staging as a collective: once per node, every node's outcome known to every rank.

The copying itself is :func:`aiperf_mpi.data.staging.stage`; this is who
copies (the first rank of each node), who learns of a failure (every rank,
so the job ends with one line instead of a hang) and who logs the reports
(rank 0).
"""

from __future__ import annotations

import time
from dataclasses import replace

from mpi4py import MPI

from aiperf_mpi.config import RunConfig
from aiperf_mpi.data.sources import DataError
from aiperf_mpi.errors import UsageError


def stage_on_nodes(comm: MPI.Comm, layout, config: RunConfig) -> tuple[RunConfig, list[dict]]:
    """Collective: the first rank of each node copies the data to ``stage_dir``; all use the copy.

    Returns the configuration pointing at the staged data, and on rank 0 the
    report of every node.  A staging failure on any node ends the run on
    every rank with one line.
    """
    if not config.stage_dir:
        return config, []
    from aiperf_mpi.data.staging import stage

    outcome: tuple[str, object] | None = None
    if layout.node_comm.Get_rank() == 0:
        try:
            started = time.time()
            report = stage(config.dataset, config.data_path, config.stage_dir)
            outcome = ("ok", {**report.__dict__, "start": started, "host": layout.plan.hosts[layout.rank]})
        except DataError as exc:
            outcome = ("error", str(exc))
    outcome = layout.node_comm.bcast(outcome, root=0)
    reports = comm.gather(outcome if layout.node_comm.Get_rank() == 0 else None, root=0)
    failures = comm.bcast([r[1] for r in reports if r and r[0] == "error"] if comm.Get_rank() == 0 else None, root=0)
    if failures:
        raise UsageError(failures[0])
    staged = replace(config, data_path=outcome[1]["staged"])
    return staged, [r[1] for r in reports if r] if comm.Get_rank() == 0 else []
