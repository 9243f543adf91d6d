"""The servable bundle under a real ``srun --mpi=pmix``: the same predictions as one process (issue 46).

Marked ``long`` too: it publishes a bundle and runs TensorFlow on three tasks; the one-process against
``mpirun -n 4`` comparison is tests/integration/test_serve.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.published_model import logged_run
from tests.support.slurm import SlurmCluster, assert_no_process_left

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.long, pytest.mark.tf]
REPO = Path(__file__).resolve().parents[2]


def test_srun_serves_the_same_predictions_as_one_process(slurm: SlurmCluster, tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    serve = [sys.executable, "-m", "aiperf_mpi.serve"]
    bundle = tmp_path / "bundle"
    done = subprocess.run([*serve, "publish", str(logged_run(tmp_path / "run")), str(bundle), "--top", "2"],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    args = ["run", str(bundle), "--data", "digits", "--scenarios", "offline", "--peak-seconds", "0"]
    one = subprocess.run([*serve, *args, "--out", str(tmp_path / "one.npz")], capture_output=True, text=True,
                         timeout=300, env=env)  # fmt: skip
    assert one.returncode == 0, one.stderr[-3000:]
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/bash\n"
                      f"exec srun --mpi=pmix {' '.join(serve + args)} --out {tmp_path / 'srun.npz'}\n")  # fmt: skip
    job = slurm.submit(script, ["--ntasks=3", "--time=5"], output=tmp_path / "job-%j.out")
    end = slurm.wait(job, timeout=400)
    assert end.exit_code == 0, end.output[-3000:]
    assert "on 3 rank(s)" in end.output, end.output[-3000:]
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "srun.npz")
    for name in a.files:
        assert np.array_equal(a[name], b[name]), name
    checked = subprocess.run([*serve, "check", str(tmp_path / "srun.serve"), str(bundle)], capture_output=True,
                             text=True, timeout=120, env=env)  # fmt: skip
    assert checked.returncode == 0, checked.stdout
    assert_no_process_left(slurm, job)
