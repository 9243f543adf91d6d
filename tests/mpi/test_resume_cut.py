"""The real benchmark resumed from a log whose last line was cut off (a kill mid-write).

A clean log resumed is tests/mpi/test_run.py's second segment; this one's third run (a clean resume after the
cut one) was left out to keep the CI under 30 minutes.
"""

import json

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import score_run
from tests.support.mpirun import run_mpi

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.tf]
FAST = ["--seed-model", "tiny", "--max-epochs", "1", "--score-step", "10", "--progress-interval", "5",
        "--monitor-interval", "5", "--peak-seconds", "1"]  # fmt: skip


def test_a_log_cut_mid_line_is_resumed_without_loss(tmp_path) -> None:
    run_dir = tmp_path / "run"
    log = run_dir / runlog.EVENTS_FILE
    first = run_mpi(3, ["-m", "aiperf_mpi", *FAST, "--no-report", "--time-limit", "20", "--run-dir", str(run_dir)],
                    timeout=240)  # the report is checked after the resume, which makes it from the cut log
    assert first.returncode == 0, first.output

    # killed while writing its last epoch: that line half written, nothing after it
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.startswith(b'{"event":"epoch"'))
    assert last > 0, "the first run completed no epoch"
    whole = b"".join(lines[:last])
    cut = lines[last][: len(lines[last]) // 2]
    log.write_bytes(whole + cut)
    (run_dir / "score.json").unlink()
    before = runlog.read_events(run_dir)
    assert before.truncated_tail and before.truncated_bytes == len(cut)
    epochs_before = [e for e in before.events if e["event"] == runlog.EPOCH]

    second = run_mpi(3, ["-m", "aiperf_mpi", "--resume", str(run_dir), "--time-limit", "12"], timeout=180)
    assert second.returncode == 0, second.output
    warning = (f"aiperf_mpi: warning: events.jsonl ended in a cut line ({len(cut)} bytes, kept in "
               "events.jsonl.cut-2); resuming after the last complete line")  # fmt: skip
    assert second.output.count(warning) == 1, second.output[-3000:]
    assert (run_dir / "events.jsonl.cut-2").read_bytes() == cut
    assert log.read_bytes().startswith(whole)
    after = runlog.read_events(run_dir)
    assert not after.truncated_tail
    assert after.events[: len(before.events)] == before.events  # every complete event before the cut
    starts = [e for e in after.events if e["event"] == runlog.RUN_START]
    assert [s["segment"] for s in starts] == [1, 2]
    assert starts[1]["cut_tail"]["cut_bytes"] == len(cut) and starts[1]["cut_tail"]["side_file"] == "events.jsonl.cut-2"
    written = json.loads((run_dir / "score.json").read_text())
    score = score_run(run_dir)
    assert written["score"] == pytest.approx(score.score, rel=1e-12) and score.segments == 2
    assert score.epochs >= len(epochs_before)
    assert (run_dir / "report" / "report.md").is_file()
