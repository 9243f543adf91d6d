"""Every test here launches MPI; mark them so `-m "not mpi"` can leave them out.

One real run of the benchmark serves both ``test_run.py`` and ``test_verify.py``
(:func:`digits_run`): a real run with its report and export costs about two
minutes of CI's 2 cores, and what each module checks of it is the same run.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.mpirun import run_mpi

DIGITS_RUN_ARGS = ["--seed-model", "tiny", "--max-epochs", "2", "--score-step", "10", "--progress-interval", "5",
                   "--monitor-interval", "5", "--peak-seconds", "1", "--time-limit", "70"]  # fmt: skip
"""a real run on the embedded digits long enough for ≥ 3 models, children among them, and ≥ 5 monitor samples;
two epochs a model, so that the best model's saved epoch, exported and re-evaluated, need not be its last"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/mpi/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.mpi)


@dataclass(frozen=True)
class DigitsRun:
    """``mpirun -n 4 python -m aiperf_mpi --relays 1`` run once: its directory, what it printed, an untouched copy."""

    run_dir: Path
    """the run; test_run.py resumes it in place (a resume must find the directory it logged)"""
    output: str
    pristine: Path
    """a copy taken as the run ended, before any test changed anything: what test_verify.py reads"""


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> DigitsRun:
    base = tmp_path_factory.mktemp("digits")
    run_dir = base / "run"
    # with a relay rank (rank 1): the real run's messages reach rank 0 vetted (mpi/relay.py); every other run of
    # the tests has none, so both ways are run with TensorFlow, and this one is verified and checked for MLLOG
    done = run_mpi(4, ["-m", "aiperf_mpi", *DIGITS_RUN_ARGS, "--relays", "1", "--run-dir", str(run_dir)], timeout=420)
    assert done.returncode == 0, done.output[-4000:]
    pristine = Path(shutil.copytree(run_dir, base / "pristine" / "run"))
    return DigitsRun(run_dir, done.output, pristine)
