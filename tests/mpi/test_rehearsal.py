"""A rehearsal (``--rehearse``) at the size ``make test`` affords: 32 ranks on this machine's 2 cores.

Everything but the training arithmetic is the real job (the layout, a relay, 15 groups' leaders talking to
rank 0 at once, the search, the tuner, the log, the score), and it must load no TensorFlow: here a package named
``tensorflow`` that refuses to import is first on every rank's path, so a rank that imported it would fail the
run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from aiperf_mpi.results import runlog
from tests.support.mpirun import REPO_ROOT, run_mpi

RANKS = 32


def shadowed_tensorflow(directory: Path) -> dict[str, str]:
    """An environment in which ``import tensorflow`` (or horovod) fails loudly."""
    for name in ("tensorflow", "horovod"):
        package = directory / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('a rehearsal imported {name}')\n")
    return {"PYTHONPATH": os.pathsep.join([str(directory), str(REPO_ROOT)])}


def test_a_rehearsal_of_32_ranks_scores_verifies_as_one_and_loads_no_tensorflow(tmp_path) -> None:
    run_dir = tmp_path / "run"
    done = run_mpi(RANKS, ["-m", "aiperf_mpi", "--rehearse", "--rehearse-rate", "2e10", "--group-size", "2",
                           "--relays", "1", "--seed-model", "tiny", "--time-limit", "30", "--score-step", "10",
                           "--no-report", "--run-dir", str(run_dir)],
                   timeout=300, env=shadowed_tensorflow(tmp_path / "shadow"))  # fmt: skip
    assert done.returncode == 0, done.output[-4000:]
    assert "a rehearsal imported" not in done.output
    assert "training a rehearsal (stand-in arithmetic)" in done.output  # the unofficial line names it
    assert f"start-up on the slowest rank of {RANKS}: launch and imports" in done.output  # the phases, once
    assert "end on rank 0:" in done.output and "rank 0's peak memory" in done.output
    assert "rank 0 busy" in done.output  # the master's busy share of the run
    events = runlog.read_events(run_dir).events
    [system] = [e for e in events if e[runlog.EVENT] == runlog.SYSTEM]
    assert next(iter(system["startup"])) == "launch and imports" and all(v >= 0 for v in system["startup"].values())
    [layout] = [e for e in events if e[runlog.EVENT] == runlog.LAYOUT]
    assert len(layout["groups"]) == (RANKS - 2) // 2 and layout["relay_ranks"] == [1]
    [start] = [e for e in events if e[runlog.EVENT] == runlog.RUN_START]
    assert start["config"]["rehearse"] is True  # the log says it
    peaks = [e for e in events if e[runlog.EVENT] == runlog.PEAK]
    assert len(peaks) == len(layout["groups"]) and {p["device"] for p in peaks} == {"rehearsal stand-in"}
    trained = {e["group"] for e in events if e[runlog.EVENT] == runlog.EPOCH}
    assert len(trained) == len(layout["groups"]), trained  # every group got work and rehearsed an epoch
    score = json.loads((run_dir / "score.json").read_text())
    assert score["valid"] is False and score["rules"]["training"]["ok"] is False  # never a result
    from analysis.verify import verify

    result = verify(run_dir)
    assert result.ok, result.text()  # the log holds together: it verifies, as the rehearsal it is
    assert "rule training" in result.text() and "rehearsal" in result.text()
