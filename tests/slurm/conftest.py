"""The real local Slurm the tests in this directory submit to: one per test session.

Starting it costs about 0.2 s and stopping it about as little (plus, once per
machine, the apt-get install of the packages: ~15 s with the download, ~8 s
from apt's cache); the first job after the start waits ~4 s for the
controller's first scheduling pass.  The timings are printed at the end of
the session so a slow fixture is noticed.  ``AIPERF_SLURM_KEEP=1`` keeps the
scratch directory (daemon logs, job outputs) and ``AIPERF_SLURMCTLD_DEBUG=debug2``
makes slurmctld log its time-limit ticks and signals.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster, marked_pids, start_cluster

REPO_ROOT = Path(__file__).resolve().parents[2]
_TIMINGS: dict[str, float] = {}
_LEFT: list[int] = []


def job_environment() -> dict[str, str]:
    """What every job sees besides the caller's environment (sbatch exports it): this venv, root MPI, quiet TF."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
        "AIPERF_VENV": sys.prefix,  # the templates activate it, as a user's job would
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts the real Slurm is in ``make test-long`` (CI runs it after ``make test``): each
    waits on Slurm's 30 s tick or runs a job to its end, ≈ 4 minutes together; the templates' static checks
    (test_templates.py) need no Slurm and stay in ``make test``."""
    for item in items:
        if "slurm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.long)
            # make test-long runs on two workers (--dist loadgroup): the Slurm tests on one of them, so one cluster
            # serves them all (the fixture is per worker) and no two Slurm jobs share this machine's 4 slots
            item.add_marker(pytest.mark.xdist_group("slurm"))


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """A running single-node Slurm (munge, slurmctld, slurmd) for the whole session, stopped by PID."""
    cluster = start_cluster(job_environment())
    try:
        yield cluster
    finally:
        _LEFT.extend(cluster.stop())
        _TIMINGS.update(cluster.timings)
        still = marked_pids(cluster.scratch)
        if os.environ.get("AIPERF_SLURM_KEEP"):  # debugging: keep the daemons' logs and job outputs
            print(f"slurm fixture: scratch kept in {cluster.scratch}")
        else:
            shutil.rmtree(cluster.scratch, ignore_errors=True)
        assert not still, f"processes of the test Slurm outlived it: {still}"


def pytest_terminal_summary(terminalreporter) -> None:
    """One line with what the Slurm fixture cost, when it ran."""
    if not _TIMINGS:
        return
    parts = [f"{name} {seconds:.1f} s" for name, seconds in _TIMINGS.items()]
    swept = f"; swept {len(_LEFT)} leftover process(es) of finished jobs" if _LEFT else ""
    terminalreporter.write_line(f"slurm fixture: {', '.join(parts)}{swept}")
