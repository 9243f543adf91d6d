"""A log whose last line was cut off (a kill mid-write), read and then resumed.

A killed run is cut at every byte offset of its last three lines — inside
multi-byte UTF-8 characters, exactly at newlines, just before a newline —
and with NUL or whitespace tails; each cut log is read (events, score,
report data), repaired as ``--resume`` repairs it, continued by a new
segment written with :class:`aiperf_mpi.results.runlog.EventLog` as the master
writes it, and read again: nothing complete before the cut is lost, the cut
bytes are kept in the side file, and every reader takes the whole log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.logmodel import read_model as load_run
from aiperf_mpi.results.score import score_run
from tests.support.event_logs import epoch, model_done, proposed, start

HOST = "nœud-1"
"""multi-byte UTF-8 ('œ' is two bytes), so that cuts fall inside a character"""


def killed_run_lines() -> list[bytes]:
    """The lines of a killed one-group run (no run_stop), UTF-8 written raw, non-ASCII in its last lines.

    :class:`~aiperf_mpi.results.runlog.EventLog` escapes non-ASCII (``json.dumps``'
    default), but a log may come from elsewhere, and the readers must not
    depend on it.
    """
    e1 = epoch(0, 0, 1, 1005, 1030, 600, 0.5, compute=20)
    e2 = epoch(1, 0, 1, 1040, 1070, 900, 0.75, compute=25)
    monitor = {"event": runlog.MONITOR, "time": 1075, "group": 0, "host": HOST, "node": 0, "source": "cpu",
               "devices": [{"index": 0, "name": "cpu « é »", "utilization": 50.0, "memory_used": 2**30,
                            "memory_total": 8 * 2**30}]}  # fmt: skip
    events = [
        start(1000, score_step=10.0),
        {"event": runlog.SYSTEM, "time": 1000.1, "ranks": 3, "nodes": 1, "hosts": [HOST]},
        {"event": runlog.LAYOUT, "time": 1000.2, "world_size": 3,
         "groups": [{"index": 0, "node": 0, "host": HOST, "ranks": [1, 2], "leader": 1}]},
        proposed(0, 0, 1001, 1.0), e1, model_done(0, 0, 1031, 0.5, [e1]), proposed(1, 0, 1032, 1.0),
        {"event": runlog.MODEL_FAILED, "time": 1035, "task": 1, "group": 0, "model": 1, "rank": 1, "host": HOST,
         "reason": "ResourceExhaustedError: mémoire épuisée sur nœud-1", "traceback": "…"},
        e2,
        monitor,
    ]  # fmt: skip
    return [json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n" for e in events]


LINES = killed_run_lines()
DATA = b"".join(LINES)
ENDS = [sum(len(line) for line in LINES[: i + 1]) - 1 for i in range(len(LINES))]
"""offset of each line's newline: the event's JSON text is complete at that offset"""
TAIL_START = ENDS[-4] + 1
"""the last three lines begin here"""
OFFSETS = range(TAIL_START, len(DATA) + 1)


def complete_before(length: int) -> int:
    """How many events a log cut to ``length`` bytes still holds whole (newline or not)."""
    return sum(1 for end in ENDS if end <= length)


def write(run_dir: Path, data: bytes) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / runlog.EVENTS_FILE).write_bytes(data)
    return run_dir


def resume_segment(run_dir: Path) -> runlog.TailRepair:
    """What the master does on --resume: repair, then append a new segment with the EventLog."""
    segment = 1 + sum(1 for e in runlog.read_events(run_dir).events if e["event"] == runlog.RUN_START)
    tail = runlog.repair_tail(run_dir, segment)
    log = runlog.EventLog(run_dir)
    config = start(0, score_step=10.0)["config"]
    cut = {"cut_tail": tail.to_dict()} if tail.changed else {}
    log.write(runlog.RUN_START, sync=True, time=2000.0, segment=segment, resumed=True, config=config, **cut)
    new_epoch = {k: v for k, v in epoch(2, 0, 1, 2005, 2010, 300, 0.8).items() if k != "event"}
    log.write(runlog.EPOCH, sync=True, **new_epoch)
    log.write(runlog.RUN_STOP, sync=True, time=2020.0, reason="time limit", discarded_tasks=[], segment=segment)
    log.close()
    return tail


def check_cut_and_resume(run_dir: Path, original: bytes, kept: int, cut: bool) -> runlog.TailRepair:
    """Read the cut log, resume it, read it again; ``kept`` complete events must survive, ``cut``: something cut."""
    before = runlog.read_events(run_dir)
    assert len(before.events) == kept
    assert before.truncated_tail == cut
    assert score_run(run_dir).truncated_log == cut
    run = load_run(run_dir)
    assert run.truncated_tail == cut and len(run.epochs) == sum(1 for e in before.events if e["event"] == runlog.EPOCH)
    tail = resume_segment(run_dir)

    repaired = (run_dir / runlog.EVENTS_FILE).read_bytes()
    new_segment = repaired[tail.log_bytes :]
    assert new_segment.startswith(b'{"event":"run_start"')
    side = (run_dir / tail.side_file).read_bytes() if tail.side_file else b""
    assert tail.cut_bytes == len(side)
    assert (tail.cut_bytes > 0) == cut, tail
    restored = repaired[: tail.log_bytes - tail.newline_added] + side
    assert restored == original  # nothing lost: the log before the new segment and the side file are the bytes

    after = runlog.read_events(run_dir)
    assert not after.truncated_tail
    assert after.events[:kept] == before.events  # every complete event before the cut, unchanged
    names = [e["event"] for e in after.events[kept:]]
    assert names == [runlog.RUN_START, runlog.EPOCH, runlog.RUN_STOP]
    resumed = after.events[kept]
    assert ("cut_tail" in resumed) == tail.changed
    score = score_run(run_dir)
    assert score.segments == 2 and not score.truncated_log
    epochs = [e for e in after.events if e["event"] == runlog.EPOCH]
    assert score.epochs == len(epochs) and score.total_ops == sum(e["ops"] for e in epochs)
    run = load_run(run_dir)
    assert not run.truncated_tail and len(run.epochs) == len(epochs)
    assert [c["cut_bytes"] for c in run.cut_tails] == ([tail.cut_bytes] if tail.changed else [])
    return tail


@pytest.mark.parametrize("part", range(4))
def test_a_cut_at_every_byte_of_the_last_three_lines_resumes_without_loss(tmp_path, part) -> None:
    mid_character = 0
    for offset in OFFSETS[part::4]:  # four tests share the offsets, to run in parallel and fail apart
        original = DATA[:offset]
        try:
            original[TAIL_START:].decode("utf-8")
        except UnicodeDecodeError:
            mid_character += 1
        at_newline = offset == TAIL_START or original.endswith(b"\n")
        complete_no_newline = offset in ENDS  # the event's text is whole, its newline is not
        run_dir = write(tmp_path / f"cut-{offset}", original)
        cut = not (at_newline or complete_no_newline)
        tail = check_cut_and_resume(run_dir, original, complete_before(offset), cut=cut)
        assert tail.newline_added == complete_no_newline, offset
        assert tail.changed == (not at_newline), offset
    assert mid_character > 0  # some cuts fell inside a multi-byte character


def test_a_nul_or_whitespace_tail_is_a_cut_and_kept(tmp_path) -> None:
    """A crashed file system's NULs after a cut, a complete event or a newline; a stray blank tail."""
    offsets = sorted({*OFFSETS[::23], *(end for end in ENDS[-4:]), *(end + 1 for end in ENDS[-4:])})
    for offset in offsets:
        for junk in (b"\x00" * 4096, b"\x00", b" \t ", b"\x00\x00 "):
            original = DATA[:offset] + junk
            run_dir = write(tmp_path / f"junk-{offset}-{len(junk)}-{junk[:1].hex()}", original)
            nuls = b"\x00" in junk
            cut = nuls or offset not in ENDS  # whitespace after a whole event: JSON allows it, nothing to cut
            tail = check_cut_and_resume(run_dir, original, complete_before(offset), cut=cut)
            assert tail.newline_added == (offset in ENDS), offset
            if nuls and offset in ENDS:  # a complete event, then NULs: the event is kept, the NULs set aside
                assert (run_dir / tail.side_file).read_bytes() == junk
    run_dir = write(tmp_path / "nul-line", DATA + b"\x00" * 10)
    contents = runlog.read_events(run_dir)
    assert contents.truncated_tail and contents.truncated_bytes == 10
    assert len(contents.events) == len(LINES)
    assert load_run(run_dir).truncated_line == "\\x00" * 10  # printable in a report


def test_the_report_reads_a_cut_log_and_its_resumed_continuation(tmp_path) -> None:
    from analysis.report import write_report

    inside_epoch = ENDS[-3] + 40  # the cut line is an epoch: its operations are not counted
    inside_host = DATA.index("œ".encode(), ENDS[-4]) + 1  # inside the 'œ' of the failure's host
    for offset, line_start in ((inside_host, ENDS[-4] + 1), (inside_epoch, ENDS[-3] + 1)):
        run_dir = write(tmp_path / f"report-{offset}", DATA[:offset])
        text = write_report(run_dir).read_text()
        assert "**The log's last line was cut off**" in text
        tail = resume_segment(run_dir)
        assert tail.cut_bytes == offset - line_start and tail.head.startswith('{"event":"')
        text = write_report(run_dir).read_text()
        assert "last line was cut off" not in text
        assert "2 segment(s)" in text


def test_a_repair_is_idempotent_and_its_file_never_overwritten(tmp_path) -> None:
    cut = DATA[: ENDS[-1] - 5]
    run_dir = write(tmp_path / "run", cut)
    side = run_dir / runlog.CUT_FILE.format(segment=2)
    side.write_bytes(cut[ENDS[-2] + 1 :])  # a repair killed after its copy, before its truncation
    first = runlog.repair_tail(run_dir, 2)
    assert first.side_file == side.name and first.earlier == ()
    assert runlog.repair_tail(run_dir, 2) == runlog.TailRepair(log_bytes=ENDS[-2] + 1, earlier=(side.name,))
    # an attempt that repaired but stopped before its run_start is reported by the next one
    assert "an earlier --resume set a cut line aside in events.jsonl.cut-2" in runlog.repair_tail(run_dir, 2).message()
    # other bytes for the same segment go to a new file; a later segment's file is not confused with it
    (run_dir / runlog.EVENTS_FILE).write_bytes(cut[: ENDS[-2] + 1] + b'{"event":"run_st')
    (run_dir / runlog.CUT_FILE.format(segment=22)).write_bytes(b"other")
    second = runlog.repair_tail(run_dir, 2)
    assert second.side_file == side.name + "-2" and second.earlier == (side.name,)
    assert side.read_bytes() == cut[ENDS[-2] + 1 :] and (run_dir / second.side_file).read_bytes() == b'{"event":"run_st'
    assert second.message().startswith(
        "aiperf_mpi: warning: events.jsonl ended in a cut line (16 bytes, kept in events.jsonl.cut-2-2); "
        "resuming after the last complete line"
    )


def test_the_writer_refuses_to_glue_onto_a_cut_line(tmp_path) -> None:
    run_dir = write(tmp_path / "run", DATA[:-7])
    with pytest.raises(ValueError, match="does not end with a newline"):
        runlog.EventLog(run_dir)
    assert (run_dir / runlog.EVENTS_FILE).read_bytes() == DATA[:-7]


def test_bad_bytes_before_the_last_line_are_still_an_error(tmp_path) -> None:
    """Only the last line may be cut: a bad line, bad UTF-8 or NULs before it is corruption."""
    for bad in (b'{"event":"ep\n', b'{"event":"epoch","host":"n\xc5"}\n', b"\x00\x00\n"):
        run_dir = write(tmp_path / f"bad-{bad[:3].hex()}-{len(bad)}", DATA + bad + LINES[-1])
        with pytest.raises(ValueError, match=f"events.jsonl:{len(LINES) + 1}: not a JSON line"):
            runlog.read_events(run_dir)
        with pytest.raises(ValueError, match="not a JSON line"):
            score_run(run_dir)
        with pytest.raises(ValueError, match="not a JSON line"):
            load_run(run_dir)


def test_a_cut_mllog_line_is_set_aside_before_a_resumed_segment_appends(tmp_path) -> None:
    """mllog.log gets the same care as the event log: no new line glued onto a cut one."""
    from aiperf_mpi.job.mllog import MLLOG_FILE, MLLogWriter, repair_tail

    writer = MLLogWriter(tmp_path)
    writer.run_start({"dataset": "digits", "seed": 0, "base_lr": 0.1, "search_warmup_epochs": 2},
                     {"nodes": 1, "accelerators_per_node": 0}, 1, 1_796_000_000.0)  # fmt: skip
    writer.run_stop("time limit", 1_796_000_060.0)
    writer.close()
    whole = (tmp_path / MLLOG_FILE).read_bytes()
    assert whole.endswith(b"\n") and repair_tail(tmp_path, 2) == 0  # a whole file is left alone
    last_start = whole.rstrip(b"\n").rfind(b"\n") + 1
    for cut in (last_start + 1, last_start + 10, len(whole) - 2):
        (tmp_path / MLLOG_FILE).write_bytes(whole[:cut])
        assert repair_tail(tmp_path, 2) == cut - last_start
        assert (tmp_path / MLLOG_FILE).read_bytes() == whole[:last_start]
        assert (tmp_path / "mllog.log.cut-2").read_bytes() == whole[last_start:cut]
    with open(tmp_path / MLLOG_FILE, "a") as handle:  # the next segment's first line, as its writer appends it
        handle.write(whole[last_start:].decode())
    lines = (tmp_path / MLLOG_FILE).read_text().splitlines()
    assert all(line.startswith(":::MLLOG ") and json.loads(line[len(":::MLLOG "):]) for line in lines)


def test_a_file_written_whole_is_the_old_or_the_new_never_a_part(tmp_path, monkeypatch) -> None:
    """score.json (and the GPU check's outputs) go through ``write_whole``: a death before its rename, here a
    failing fsync, leaves the previous file as it was (``Path.write_text`` had truncated it first)."""
    score = tmp_path / "score.json"
    score.write_text('{"segment": 1}')

    def dies(_: int) -> None:
        raise OSError("killed")

    with monkeypatch.context() as patched:
        patched.setattr(runlog.os, "fsync", dies)
        with pytest.raises(OSError):
            runlog.write_whole(score, '{"segment": 2}')
    assert score.read_text() == '{"segment": 1}'
    runlog.write_whole(score, '{"segment": 2}')
    assert score.read_text() == '{"segment": 2}' and sorted(p.name for p in tmp_path.iterdir()) == ["score.json"]
