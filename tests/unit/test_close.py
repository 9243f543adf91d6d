"""The job script's close of a run whose launch ended before rank 0 scored (aiperf_mpi/job/close.py, issue 43):
one score from the log alone, a log that verifies, nothing written where the run is not ended."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

from aiperf_mpi.job.close import close_run
from aiperf_mpi.job.runlock import LOCK_FILE
from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import score_run
from analysis.verify import verify
from tests.support.event_logs import write_log
from tests.support.verify_runs import read_log, write_mllog


def killed(run_dir: Path, keep: int) -> list[dict]:
    """The run cut after its first ``keep`` events, as a kill leaves it (both logs end there)."""
    events = read_log(run_dir)[:keep]
    write_log(run_dir, events)
    write_mllog(run_dir, events)
    (run_dir / "score.json").unlink()
    return events


def test_a_killed_segment_is_closed_with_one_score_and_the_log_verifies(run, capsys) -> None:
    events = killed(run, keep=[e["event"] for e in read_log(run)].index(runlog.MODEL_DONE) + 2)  # task 1 open
    assert events[-1]["event"] == runlog.EPOCH and events[-1]["task"] == 1
    assert close_run(run, launcher_status=137) == 0
    closed = read_log(run)[len(events) :]
    assert [e["event"] for e in closed] == [runlog.RUN_STOP, runlog.SCORE]
    stop = closed[0]
    assert stop["reason"] == runlog.CLOSED_REASON and stop["discarded_tasks"] == [1] and stop["segment"] == 1
    assert stop["closed"]["launcher_status"] == 137
    # at the segment's end, as a killed segment ends (mllog's time-limit rule holds); when it was written beside
    assert stop["time"] == events[-1]["time"] and stop["closed"]["at"] > stop["time"]
    recorded = json.loads((run / "score.json").read_text())
    again = score_run(run)
    assert recorded["score"] == again.score == closed[1]["score"]
    # a killed segment's window: to its last event before the close, never less than its time limit
    assert again.active_time == 100.0 and again.total_ops == sum(e["ops"] for e in events if e["event"] == "epoch")
    result = verify(run)
    assert result.ok, result.text()
    assert "closed after its launch ended" in result.text()
    assert "closed from its log, 1 unfinished task(s) discarded" in capsys.readouterr().out


def test_the_close_time_is_not_the_runs(run) -> None:
    """The close writes at its own time (here decades after the hand-made run): the scored window is the same as
    the killed log's, so a close late, or a resume after it, loses nothing and gains nothing."""
    killed(run, keep=len(read_log(run)) - 2)  # the run_stop and score gone: a kill after the last epoch
    before = score_run(run)
    assert close_run(run, launcher_status=None) == 0
    after = score_run(run)
    assert (after.score, after.active_time) == (before.score, before.active_time)


def test_an_ended_run_is_left_as_it_is(run, capsys) -> None:
    before = (run / runlog.EVENTS_FILE).read_bytes()
    assert close_run(run, launcher_status=0) == 0
    assert (run / runlog.EVENTS_FILE).read_bytes() == before
    assert capsys.readouterr().out == ""


def test_a_run_whose_lock_is_held_is_not_closed(run, capsys) -> None:
    killed(run, keep=len(read_log(run)) - 2)
    before = (run / runlog.EVENTS_FILE).read_bytes()
    with open(run / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        assert close_run(run, launcher_status=137) == 1
    assert (run / runlog.EVENTS_FILE).read_bytes() == before
    assert "the run is not ended" in capsys.readouterr().err


def test_a_cut_last_line_is_left_to_resume(run, capsys) -> None:
    killed(run, keep=len(read_log(run)) - 2)
    with open(run / runlog.EVENTS_FILE, "a") as handle:
        handle.write('{"event":"epoch","ti')
    before = (run / runlog.EVENTS_FILE).read_bytes()
    assert close_run(run, launcher_status=137) == 1
    assert (run / runlog.EVENTS_FILE).read_bytes() == before
    assert "--resume sets the line aside" in capsys.readouterr().err


def test_a_launch_that_wrote_nothing_has_nothing_to_close(tmp_path, capsys) -> None:
    assert close_run(tmp_path, launcher_status=1) == 0
    assert "the launch measured nothing" in capsys.readouterr().out


def test_the_job_status_is_0_only_for_a_run_that_scored_at_its_time_limit(run, tmp_path, capsys) -> None:
    """Issue 50: the job said COMPLETED 0 when nothing was measured (srun exits 0 for a step that never launched,
    prterun after losing a daemon, and the close returned 0 for 'the launch measured nothing')."""
    from aiperf_mpi.errors import EXIT_ENDED_EARLY, EXIT_NOT_SCORED
    from aiperf_mpi.job.close import job_status, main

    [stop] = [e for e in read_log(run) if e["event"] == runlog.RUN_STOP]
    status, line = job_status(run, launcher_status=4)
    assert (status, stop["reason"]) == (0, "time limit") and "launcher's status was 4" in line, line
    nothing = tmp_path / "never-launched"
    nothing.mkdir()
    assert job_status(nothing, 0)[0] == EXIT_NOT_SCORED and "measured nothing" in job_status(nothing, 0)[1]
    assert main([str(nothing), "--launcher-status", "0", "--job-status"]) == EXIT_NOT_SCORED
    assert "aiperf_mpi: job status 6: the launch measured nothing" in capsys.readouterr().err
    killed(run, keep=len(read_log(run)) - 2)  # the run_stop and score gone: the launch ended before rank 0 scored
    assert job_status(run, 137)[0] == EXIT_NOT_SCORED  # not closed yet: no score
    assert main([str(run), "--launcher-status", "137", "--job-status"]) == EXIT_ENDED_EARLY  # closed: scored, early
    assert "stopped early (launch ended): --resume" in capsys.readouterr().err
    assert main([str(run), "--launcher-status", "137"]) == 0  # the close alone: nothing left to do


def _fifo(path: Path) -> None:
    import os

    path.unlink(missing_ok=True)
    os.mkfifo(path)


def test_bad_input_is_one_line_and_a_non_zero_exit_within_seconds(run, tmp_path, capsys) -> None:
    """Issue 52's round against the close: a directory that does not exist and a log that is a FIFO exited 0, a
    lock or an open run's mllog.log that is a FIFO hung it, a proposal's group {} or a time of 10^400 was a
    traceback.  Each is now one line and a non-zero status; with --job-status the job's status is the
    not-scored one."""
    import time

    from aiperf_mpi.errors import EXIT_NOT_SCORED, EXIT_USAGE
    from aiperf_mpi.job.close import main

    started = time.monotonic()
    missing = tmp_path / "no-such-run"
    assert main([str(missing)]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"aiperf_mpi: close: {missing} is not a directory"
    assert main([str(missing), "--job-status"]) == EXIT_NOT_SCORED  # the templates' call: a launch that never ran
    assert "job status 6: the launch measured nothing (no run directory" in capsys.readouterr().err
    cases = {}
    for name in (runlog.EVENTS_FILE, "mllog.log", LOCK_FILE):
        case = tmp_path / f"fifo-{name}"
        case.mkdir()
        for real in (runlog.EVENTS_FILE, "mllog.log", "score.json"):
            (case / real).write_bytes((run / real).read_bytes())
        killed(case, keep=len(read_log(case)) - 2)  # open: the close would write its run_stop and score
        _fifo(case / name)
        cases[name] = case
    for name, case in cases.items():
        assert main([str(case)]) == 1, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{case / name} is not a regular file" in err, err
        assert main([str(case), "--job-status"]) == EXIT_NOT_SCORED, name
        assert "is not a regular file: no score read" in capsys.readouterr().err
    for bad in ({"group": {}}, {runlog.TIME: "1e400"}):
        case = tmp_path / f"bad-{len(list(tmp_path.iterdir()))}"
        case.mkdir()
        events = read_log(run)[: len(read_log(run)) - 2]
        proposal = next(e for e in events if e["event"] == runlog.MODEL_PROPOSED)
        proposal.update({k: v for k, v in bad.items() if k != runlog.TIME})
        text = "".join(json.dumps(e) + "\n" for e in events)
        if runlog.TIME in bad:
            text = text.replace(json.dumps(proposal)[:-1], json.dumps(proposal)[:-1].replace(
                f'"{runlog.TIME}": {json.dumps(proposal[runlog.TIME])}', f'"{runlog.TIME}": 1e400'), 1)  # fmt: skip
        (case / runlog.EVENTS_FILE).write_text(text)
        status = main([str(case)])
        err = capsys.readouterr().err
        assert status == 1 and err.count("\n") == 1 and "Traceback" not in err, (bad, status, err)
    assert time.monotonic() - started < 30


def test_a_fifo_where_the_score_is_written_is_refused_before_anything_is_written(run, capsys) -> None:
    """The score goes to score.json.partial first (runlog.write_whole): a FIFO there held the close after its
    run_stop and score were appended (the review of issue 52's close), so the log said scored with no score.json."""
    import os

    from aiperf_mpi.job.close import main

    before = read_log(run)
    killed(run, keep=len(before) - 2)
    os.mkfifo(run / "score.json.partial")
    assert main([str(run)]) == 1 and "score.json.partial is not a regular file" in capsys.readouterr().err
    assert len(read_log(run)) == len(before) - 2  # nothing appended


def test_a_rank_0_ended_between_its_score_writes_leaves_a_run_the_close_completes(run, capsys) -> None:
    """Rank 0 writes run_stop, the score event, then score.json; killed between them (CI of f0b7577: prterun's
    abort ended a stopped rank 0 that was continued, and the log said scored with no score.json) the close took the
    run for whole.  It now writes what is missing from the log, and the run verifies."""
    original = json.loads((run / "score.json").read_text())
    (run / "score.json").unlink()  # the score event is in the log, its file is not
    assert close_run(run, launcher_status=5) == 0
    assert json.loads((run / "score.json").read_text())["score"] == original["score"]
    assert "score.json was missing (rank 0 ended between the two): written from the log" in capsys.readouterr().out
    events = read_log(run)
    write_log(run, events[:-1])  # now the score event too: run_stop is the log's last event
    (run / "score.json").unlink()
    assert close_run(run, launcher_status=5) == 0
    after = read_log(run)
    assert [e["event"] for e in after[-2:]] == [runlog.RUN_STOP, runlog.SCORE] and len(after) == len(events)
    assert after[-1]["score"] == original["score"] == json.loads((run / "score.json").read_text())["score"]
    assert "without its score (rank 0 ended between the two): scored from its log" in capsys.readouterr().out
    result = verify(run)
    assert result.ok, result.text()
