"""The installed stack: the entry point, and Horovod on mpi4py's MPI library."""

import subprocess
import sys

import pytest

from tests.support.mpirun import REPO_ROOT, mpi_env


def run_python(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=REPO_ROOT
    )


def test_help_lists_options_and_exits_zero() -> None:
    done = run_python("-m", "aiperf_mpi", "--help")
    assert done.returncode == 0, done.stderr
    for flag in (
        "--layout",
        "--group-size",
        "--json",
        "--version",
        "--time-limit",
        "--resume",
        "--config",
        "--stage-dir",
        "--precision",
        "--hpo",
    ):
        assert flag in done.stdout


def test_singleton_layout_says_a_run_needs_two_ranks() -> None:
    done = run_python("-m", "aiperf_mpi", "--layout")
    assert done.returncode == 0, done.stderr
    assert "world size:   1 ranks" in done.stdout
    assert "at least 2 ranks" in done.stdout


def test_a_singleton_run_is_refused_in_one_line(tmp_path) -> None:
    done = run_python("-m", "aiperf_mpi", "--run-dir", str(tmp_path / "r"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "at least 2 ranks" in done.stderr


def test_console_script_installed() -> None:
    script = REPO_ROOT / ".venv" / "bin" / "aiperf-mpi"
    if not script.exists():
        pytest.skip("not installed through the Makefile's venv")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, env=mpi_env())
    assert done.returncode == 0 and "aiperf_mpi" in done.stdout


@pytest.mark.horovod
@pytest.mark.tf
def test_horovod_built_with_mpi_and_same_libmpi_as_mpi4py() -> None:
    probe = """
import horovod.tensorflow as hvd
from mpi4py import MPI
assert hvd.mpi_built(), "Horovod built without MPI"
libs = sorted({line.split()[-1] for line in open('/proc/self/maps') if 'libmpi.so' in line})
print('LIBS', libs)
assert len(libs) == 1, libs
"""
    done = run_python("-c", probe)
    assert done.returncode == 0, done.stdout + done.stderr


LIGHT_IMPORT = """
import sys
from aiperf_mpi.train.devices import pin_device
device = pin_device(0)  # a training rank's first TensorFlow import
skipped = sorted(name for name in ("matplotlib", "sklearn") if name in sys.modules)
print("TENSORFLOW", device, len(sys.modules), "modules", flush=True)
import numpy as np
import keras
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
loss = model.fit(np.ones((8, 4)), np.zeros((8, 2)), verbose=0).history["loss"][0]
from aiperf_mpi.__main__ import _preload
from aiperf_mpi.config import RunConfig
_preload(RunConfig(hpo="gp", dataset="digits"))  # before the scored window: what the leader then needs
loaded = [name in sys.modules for name in ("scipy.optimize", "scipy.linalg", "skopt", "sklearn.datasets")]
import matplotlib.pyplot  # what rank 0's report loads, as usual
print("RESULT", skipped, loss > 0, loaded, flush=True)
"""


@pytest.mark.tf
def test_a_training_ranks_tensorflow_loads_without_keras_plots_and_sklearn_and_its_preload_loads_them() -> None:
    """aiperf_mpi.train.tfimport: Keras' matplotlib and scikit-learn imports are skipped, nothing else is; the
    training rank's preload (before the scored window) then brings in what its data and tuner use."""
    done = run_python("-c", LIGHT_IMPORT, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert result == "RESULT [] True [True, True, True, True]", done.stdout
