"""Old runs out of runs/: the newest kept, a live run never touched, nothing that is not a run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiperf_mpi.job import clean
from aiperf_mpi.job.runlock import LOCK_FILE, RunLock, is_running
from aiperf_mpi.results.runlog import EVENTS_FILE

REPO = Path(__file__).resolve().parents[2]


def make_run(root: Path, name: str, age: float, size: int = 1000) -> Path:
    run_dir = root / name
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "weights" / "task-0.npz").write_bytes(b"w" * size)
    events = run_dir / EVENTS_FILE
    events.write_text('{"event": "run_start", "time": 0}\n')
    stamp = time.time() - age
    os.utime(events, (stamp, stamp))
    return run_dir


def test_the_newest_runs_stay_and_the_rest_go(tmp_path, capsys) -> None:
    old, middle, new = (make_run(tmp_path, name, age) for name, age in (("a", 300), ("b", 200), ("c", 100)))
    (tmp_path / "notes").mkdir()  # not a run: no event log
    (tmp_path / "link").symlink_to(new)
    assert clean.main([str(tmp_path), "--keep", "2"]) == 0
    assert not old.exists() and middle.exists() and new.exists()
    assert (tmp_path / "notes").is_dir() and (tmp_path / "link").is_symlink()
    out = capsys.readouterr().out
    assert f"removed: {old} (0.0 MB)" in out and "freed 0.0 MB" in out


def test_a_dry_run_removes_nothing(tmp_path, capsys) -> None:
    run = make_run(tmp_path, "a", 100, size=2_000_000)
    assert clean.main([str(tmp_path), "--keep", "0", "--dry-run"]) == 0
    assert run.exists() and "would free 2.0 MB" in capsys.readouterr().out


def test_a_run_whose_lock_a_live_process_holds_is_never_removed(tmp_path) -> None:
    live, dead = make_run(tmp_path, "live", 300), make_run(tmp_path, "dead", 200)
    (dead / LOCK_FILE).write_text("host 12345\n")  # a killed run leaves the file, never the lock
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from aiperf_mpi.job.runlock import RunLock\n"
         "with RunLock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)", str(live)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert is_running(live) and not is_running(dead)
        assert clean.main([str(tmp_path), "--keep", "0"]) == 0
        assert live.exists() and not dead.exists()
    finally:
        holder.kill()
        holder.wait()
    assert not is_running(live)  # the lock went with its process


def test_a_second_holder_is_refused_and_the_lock_file_goes_with_the_run(tmp_path) -> None:
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).is_file()
        with pytest.raises(RuntimeError, match="in use by another run"), RunLock(tmp_path):
            pass
    assert not (tmp_path / LOCK_FILE).exists()


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("")
    assert clean.main([str(tmp_path / "file")]) == 2
    assert clean.main([str(tmp_path), "--keep", "-1"]) == 2
    assert all(line.startswith("aiperf_mpi.job.clean: error:") for line in capsys.readouterr().err.splitlines())
    assert clean.main([str(tmp_path / "missing")]) == 0
