"""Bad run input by class, through the command line the way users launch it.

Each member: one line ``aiperf_mpi: error: …`` from rank 0 naming the option
and the reason, a non-zero exit on every rank within 30 s, no traceback, and
no run directory left behind (or one the same ``--run-dir`` accepts again).
The data-file classes (special files, corrupt shards, the converter) have
their own table in ``test_datasets_cli.py``; option-level members without MPI
are in ``tests/unit/test_config.py``.
"""

from __future__ import annotations

import pytest

from tests.support.mpirun import run_mpi

pytestmark = [pytest.mark.slow]

CASES = [
    # non-finite and overflowing numbers (CLI and TOML)
    (["--time-limit", "inf"], "time_limit must be a finite number"),
    (["--min-delta", "nan", "--grace", "1e999"], "min_delta must be a finite number"),
    (["--max-models", str(10**40)], "max_models must be ≤"),
    (["--hang-margin", "0"], "hang_margin must be > 0, got 0"),  # the mid-run bound's margin, a deadline's sibling
    (["--config", "{toml}"], "score_step must be a finite number"),
    # options that do not apply to the data set, the mode or the model
    (["--image-size", "7"], "image_size does not apply to dataset 'digits'"),
    (["--dataset", "synthetic", "--image-size", "7"], "seed model cannot take synthetic images of 7x7"),
    (["--dataset", "synthetic", "--image-size", "3", "--seed-model", "tiny"], "images of 3x3"),
    (["--resume", "{run_dir}", "--dataset", "synthetic"], "--dataset does not apply to --resume"),
    (["--serve-at-end", "0"], "argument --serve-at-end: must be at least 1, got 0"),  # 3 s (the refusals: unit tests)
    # a batch larger than a split
    (["--batch-size", "1000"], "batch_size 1000 is larger than the train split allows"),
    (["--dataset", "synthetic", "--image-size", "32", "--batch-size", "2048", "--seed-model", "tiny"],
     "larger than the train split"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), CASES, ids=[" ".join(c[0])[:40] for c in CASES])
def test_bad_input_is_one_line_on_rank_0_and_every_rank_exits(tmp_path, args: list[str], message: str) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("score_step = -inf\nseed_model = 'tiny'\n")
    run_dir = tmp_path / "run"
    argv = [a.format(toml=toml, run_dir=run_dir) for a in args]
    if "--resume" not in argv:
        argv += ["--run-dir", str(run_dir)]
    run = run_mpi(3, ["-m", "aiperf_mpi", *argv], timeout=60, cwd=tmp_path)
    assert run.returncode == 2, run.output
    assert run.elapsed < 30, run.elapsed
    errors = [line for line in run.output.splitlines() if "aiperf_mpi: error:" in line]
    assert len(errors) == 1 and message in errors[0], run.output
    assert run.lines_of_rank(0) and all("error" not in line for r in (1, 2) for line in run.lines_of_rank(r))
    assert "Traceback" not in run.output
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())
    assert not (tmp_path / "runs").exists()


def test_a_failed_start_leaves_a_run_dir_the_same_command_accepts(tmp_path) -> None:
    """An empty log left by a start that died before its first event (older versions did) is no run."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text("")
    (run_dir / "mllog.log").write_text("")
    run = run_mpi(2, ["-m", "aiperf_mpi", "--seed-model", "tiny", "--max-models", "1", "--max-epochs", "1",
                      "--no-peak-probe", "--monitor-interval", "0", "--no-xla", "--no-report",
                      "--run-dir", str(run_dir)], timeout=240)  # fmt: skip
    assert run.returncode == 0, run.output
    assert (run_dir / "score.json").exists()
    again = run_mpi(2, ["-m", "aiperf_mpi", "--run-dir", str(run_dir)], timeout=60)
    assert again.returncode == 2 and "already holds a run" in again.output
