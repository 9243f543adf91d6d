"""The servable bundle with TensorFlow: published from a small logged run, copied, loaded, served.

Marked ``long`` (make test-long): each test builds and saves Keras models and SavedModels (tens of seconds on
the shared 2-core machine), and make test is nearly full.  The pure parts (manifest, hashing, scenario
arithmetic) are tests/unit/test_serve_*.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from tests.support.published_model import logged_run

pytestmark = [pytest.mark.tf, pytest.mark.long]
REPO = Path(__file__).resolve().parents[2]

ELSEWHERE = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]  # only the venv's site-packages and the package's folder
import numpy as np
from aiperf_mpi.serve.servable import Servable
import tensorflow as tf
servable = Servable(sys.argv[3])
data = np.load(sys.argv[4])
probabilities = servable.predict(data["images"], 32)
saved = [tf.saved_model.load(sys.argv[3] + "/" + m["savedmodel"]) for m in servable.manifest["members"]]
x = (data["images"].astype("float32") / 127.5 - 1.0)
by_savedmodel = sum(np.asarray(s.serve(x)) for s in saved) / len(saved)
print(json.dumps({"modules": sorted(m.split(".")[0] for m in sys.modules if m.startswith(("horovod", "mpi4py"))),
                  "max_difference": float(np.abs(by_savedmodel - probabilities).max())}))
np.save(sys.argv[5], probabilities)
"""


def serve_cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "aiperf_mpi.serve", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """An ensemble of a logged run's two best tiny ResNets (tasks 1 and 2 of accuracies 0.5, 0.8, 0.7)."""
    work = tmp_path_factory.mktemp("serve")
    run_dir = logged_run(work / "run")
    done = serve_cli("publish", str(run_dir), str(work / "bundle"), "--top", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"aiperf_mpi.serve: ensemble of 2 in {work / 'bundle'}: task 1 (0.8000), "
                                  "task 2 (0.7000); ")  # fmt: skip
    return work / "bundle"


def test_the_manifest_says_how_to_call_the_ensemble(bundle) -> None:
    from aiperf_mpi.graph.model import from_json
    from aiperf_mpi.graph.ops import count_ops

    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["servable"]["type"] == "ensemble" and [m["task"] for m in manifest["members"]] == [1, 2]
    assert manifest["signature"]["inputs"][0]["shape"] == [-1, 32, 32, 3]
    assert manifest["signature"]["outputs"][0]["classes"] == 10
    for member in manifest["members"]:  # the score's counter, recounted from the bundle's own graph
        graph = from_json((bundle / member["graph"]).read_text())
        assert member["forward_ops_per_sample"] == count_ops(graph).forward_eval
        assert (bundle / member["savedmodel"] / "saved_model.pb").is_file()
    assert manifest["forward_ops_per_sample"] == sum(m["forward_ops_per_sample"] for m in manifest["members"])


def test_a_copied_bundle_loads_in_a_bare_interpreter_with_only_tensorflow_and_the_package(bundle, tmp_path) -> None:
    from aiperf_mpi.data.sources import digits_arrays
    from aiperf_mpi.serve.servable import Servable

    copy = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(bundle, copy)
    images = digits_arrays()["validation"][0][:100]
    np.savez(tmp_path / "images.npz", images=images)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", ELSEWHERE, sysconfig.get_paths()["purelib"], str(REPO),
                           str(copy), str(tmp_path / "images.npz"), str(tmp_path / "p.npy")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["modules"] == []  # no Horovod, no mpi4py on a laptop
    assert found["max_difference"] < 1e-5  # the SavedModel serves what model.keras does
    here = Servable(bundle).predict(images, 32)
    assert np.array_equal(np.load(tmp_path / "p.npy"), here)  # the same bits in the copy
