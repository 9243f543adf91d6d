"""Hostile input to verify, bundle and report: one line on stderr and exit 2, in bounded time — never a traceback.

Each class (deep nesting, huge integers, nulls where numbers belong, symlink
loops, a byte-order mark, NUL bytes, a tiny score step, a clock jump of
years) is written into a copy of a consistent run and given to each tool's
``main(argv)``; the unbounded ones run as a subprocess under a timeout.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from aiperf_mpi.results.score import MAX_GRID_SAMPLES
from analysis import bundle, report, verify
from analysis.verify import score as verify_score
from tests.support.event_logs import write_log
from tests.support.verify_runs import consistent_run, find, read_log, write_best

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    run = consistent_run(tmp_path_factory.mktemp("bad") / "run")
    (run / "report").mkdir()  # the bundle takes it as it is: no report (and no matplotlib) needed to bundle
    (run / "report" / "report.md").write_text("report\n")
    return run


@pytest.fixture
def run(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "run", symlinks=True))


def tools(run: Path, tmp_path: Path) -> dict[str, Callable[[], int]]:
    return {
        "verify": lambda: verify.main([str(run)]),
        "bundle": lambda: bundle.main([str(run), "--out", str(tmp_path / "bundle.tar.gz")]),
        "report": lambda: report.main([str(run), "--out", str(tmp_path / "report")]),
    }


def one_line_exit_2(action: Callable[[], int], capsys, *expected: str) -> str:
    status = action()
    err = capsys.readouterr().err
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(text in err for text in expected), err
    return err


def _edit(run: Path, change: Callable[[list[dict]], None]) -> None:
    events = read_log(run)
    change(events)
    write_log(run, events)


def deep_nesting(run: Path) -> None:
    lines = (run / runlog.EVENTS_FILE).read_text().splitlines()
    lines.insert(3, '{"event":"note","time":1000.5,"x":' + "[" * 100_000 + "]" * 100_000 + "}")
    (run / runlog.EVENTS_FILE).write_text("\n".join(lines) + "\n")


def huge_integer(run: Path) -> None:
    _edit(run, lambda events: find(events, runlog.EPOCH).update(ops=10**4000))  # under int's 4300-digit limit


def byte_order_mark(run: Path) -> None:
    path = run / runlog.EVENTS_FILE
    path.write_bytes(runlog.BOM + path.read_bytes())


def run_dir_loop(run: Path) -> None:
    shutil.rmtree(run)
    os.symlink(run, run)


def events_loop(run: Path) -> None:
    (run / runlog.EVENTS_FILE).unlink()
    os.symlink(run / runlog.EVENTS_FILE, run / runlog.EVENTS_FILE)


CLASSES = [(deep_nesting, "nested deeper than the parser can read"), (huge_integer, "int too"),
           (byte_order_mark, "byte-order mark"), (run_dir_loop, ""), (events_loop, "")]  # fmt: skip


TOOL_CLASSES = [(tool, spoil, text) for tool in ("verify", "bundle", "report") for spoil, text in CLASSES
                if (tool, spoil) != ("verify", huge_integer)]  # fmt: skip
"""verify judges an epoch's huge integer since rules version 2026.12-7: its log row names it (the test below)"""


@pytest.mark.parametrize(("tool", "spoil", "text"), TOOL_CLASSES,
                         ids=[f"{c[1].__name__}-{c[0]}" for c in TOOL_CLASSES])  # fmt: skip
def test_each_class_is_one_line_and_exit_2(run, tmp_path, capsys, tool, spoil, text) -> None:
    spoil(run)
    one_line_exit_2(tools(run, tmp_path)[tool], capsys, f"analysis.{tool}: error:", text)


def test_an_epoch_s_integer_beyond_the_floats_is_named_by_verify_s_log_row(run, capsys) -> None:
    """Rules version 2026.12-7: the log row refuses an integer no float can hold, as it refuses a NaN, so the epoch
    reaches no rule and the rest of the log is judged (before, the score's arithmetic stopped the whole verdict)."""
    huge_integer(run)
    assert verify.main([str(run)]) == 1
    out = capsys.readouterr().out
    assert "log: event" in out and "(epoch): ops: an integer beyond the float range" in out, out


@pytest.mark.parametrize("tool", ["verify", "bundle", "report"])
def test_a_nul_byte_in_the_path(tmp_path, capsys, tool) -> None:
    bad = tmp_path / "run\x00x"
    one_line_exit_2(tools(bad, tmp_path)[tool], capsys, f"analysis.{tool}: error:")


def test_a_time_limit_past_the_floats_range_is_a_number_too_large_to_read(run, capsys) -> None:
    """The judged model reads past the run_start (it takes no segment of it); the score family stops there, as the
    run's own scorer stops, rather than the verdict saying the log has no run_start."""
    _edit(run, lambda events: events[0]["config"].update(time_limit=10**400))
    one_line_exit_2(lambda: verify.main([str(run)]), capsys, "a number too large to read", "int too large")


def test_a_deeply_nested_score_file(run, capsys) -> None:
    (run / verify_score.SCORE_FILE).write_text("[" * 100_000 + "]" * 100_000)
    one_line_exit_2(lambda: verify.main([str(run)]), capsys, "nested too deeply")


def test_nulls_where_numbers_belong(run, tmp_path, capsys) -> None:
    def nulls(events: list[dict]) -> None:
        events[0]["config"]["score_step"] = None
        for event in events:
            if event["event"] == runlog.EPOCH:
                event["ops"] = None

    _edit(run, nulls)
    one_line_exit_2(tools(run, tmp_path)["report"], capsys, "not")
    assert verify.main([str(run)]) == 1  # the verifier reads on and names each field
    out = capsys.readouterr().out
    assert "epoch: ops must be integer, got NoneType" in out and "score_step 'None' is not a number" in out


def test_a_symlink_loop_for_a_graph_file_or_a_folder_is_named_not_followed(run, tmp_path, capsys) -> None:
    graph = run / "graphs" / "segment-1.jsonl"
    graph.unlink()
    os.symlink(graph, graph)
    os.symlink(run, run / "graphs" / "again")  # a folder that contains itself: rglob must not walk it for ever
    assert verify.main([str(run)]) == 1
    assert "task 0: graphs/segment-1.jsonl cannot be resolved" in capsys.readouterr().out
    assert bundle.main([str(run), "--out", str(tmp_path / "b.tar.gz")]) == 1


def _spoil_time(run: Path, how: str) -> None:
    def change(events: list[dict]) -> None:
        if how == "step":
            events[0]["config"]["score_step"] = 1e-9
        else:  # the clock jumped 30 years before the run stopped
            for event in events:
                if event["event"] in (runlog.RUN_STOP, runlog.SCORE):
                    event["time"] += 1e9

    _edit(run, change)


@pytest.mark.parametrize("how", ["step", "clock"])
def test_a_tiny_step_or_a_clock_jump_runs_in_bounded_time_and_says_grid_capped(run, tmp_path, how) -> None:
    _spoil_time(run, how)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for tool in ("verify", "report"):
        done = subprocess.run([sys.executable, "-m", f"analysis.{tool}", str(run), *(["--out", str(tmp_path / "r")]
                               if tool == "report" else [])], capture_output=True, text=True, timeout=120,
                              env=env, cwd=ROOT)  # fmt: skip
        assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
        if tool == "verify":
            assert "grid capped" in done.stdout, done.stdout
    assert "grid capped" in (tmp_path / "r" / "report.md").read_text()
    score = json.loads((run / verify_score.SCORE_FILE).read_text())  # the run's own file: not rewritten by the tools
    assert len(score["grid"]) < MAX_GRID_SAMPLES


# --------------------------------------------------------------------------- hostile values a rule must name


def _layout_group(field: str, value: object) -> Callable[[list[dict]], None]:
    return lambda events: find(events, runlog.LAYOUT)["groups"][0].update({field: value})


def _config(field: str, value: object) -> Callable[[list[dict]], None]:
    return lambda events: events[0]["config"].update({field: value})


HOSTILE = [[0], {"a": 1}, 10**30, "0", None, 1e308, -1]


@pytest.mark.parametrize("value", HOSTILE, ids=[type(v).__name__ + str(i) for i, v in enumerate(HOSTILE)])
@pytest.mark.parametrize(("where", "field", "named"), [(_layout_group, "index", "layout"),
                                                       (_layout_group, "ranks", "layout"),
                                                       (_layout_group, "horovod_size", "horovod"),
                                                       (_config, "dataset", "dataset"),
                                                       (_config, "precision", "precision"),
                                                       (_config, "search", "search")])  # fmt: skip
def test_a_hostile_value_in_a_layout_group_or_the_configuration_is_named(run, capsys, where, field, named,
                                                                         value) -> None:  # fmt: skip
    _edit(run, where(field, value))
    status = verify.main([str(run)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and status in (1, 2), err
    if status == 1:
        assert "verdict: NOT VERIFIED" in out and named in out.rsplit("verdict: ", 1)[0].lower(), out
    else:
        assert len(err.strip().splitlines()) == 1, err


# --------------------------------------------------------------------------- a FIFO, a device: refused unopened


def as_a_user(*args: str, timeout: float = 60, limit_file_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python -m analysis.verify ARGS`` as a user runs it (a hang is a TimeoutExpired: the test fails)."""

    def limit() -> None:
        if limit_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    return subprocess.run([sys.executable, "-m", "analysis.verify", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                          preexec_fn=limit)  # fmt: skip


def one_line_and_2(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("analysis.verify: error: ") and all(t in done.stderr for t in expected), done.stderr


def test_a_fifo_through_the_command_line(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no one writes it: opening it to read would wait for ever
    one_line_and_2(as_a_user(str(fifo), timeout=30), "not a regular file")


SPECIAL = {"fifo": lambda path: os.mkfifo(path), "device": lambda path: os.symlink("/dev/zero", path)}
INSIDE = [runlog.EVENTS_FILE, verify_score.SCORE_FILE, "mllog.log", "graphs/segment-1.jsonl", "best/metadata.json",
          "best/ops.json"]  # fmt: skip


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("name", INSIDE)
def test_a_fifo_or_a_device_inside_the_run_is_refused_unopened(run, tmp_path, capsys, kind, name) -> None:
    if name.startswith("best/"):
        write_best(run)  # an honest export, so that each of its files is read
    (run / name).unlink(missing_ok=True)
    SPECIAL[kind](run / name)
    for tool in ("verify", "bundle"):
        one_line_exit_2(tools(run, tmp_path)[tool], capsys, f"analysis.{tool}: error:", name, "not a regular file")


def test_a_fifo_the_verifier_does_not_read_is_left_out_of_the_bundle_unopened(run, tmp_path, capsys) -> None:
    os.mkfifo(run / "report" / "pipe")
    assert bundle.main([str(run), "--out", str(tmp_path / "b.tar.gz")]) == 0
    assert "left out: report/pipe (not a regular file)" in capsys.readouterr().out


# --------------------------------------------------------------------------- a bundle: read within stated bounds


@pytest.fixture(scope="module")
def archive(pristine, tmp_path_factory) -> Path:
    return bundle.make_bundle(pristine, tmp_path_factory.mktemp("bundle") / "b.tar.gz").path


def _write_tar(out: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return out


def _bundle_members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(archive) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.98])
def test_a_bundle_cut_mid_gzip_is_one_line_and_exit_2(archive, tmp_path, capsys, keep) -> None:
    data = archive.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: int(len(data) * keep)])
    one_line_exit_2(lambda: verify.main([str(cut)]), capsys, "analysis.verify: error:", "not a readable bundle")


def test_a_cut_bundle_through_the_command_line(archive, tmp_path) -> None:
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    one_line_and_2(as_a_user(str(cut)), "not a readable bundle")


def test_a_member_past_the_cap_is_refused_before_anything_is_unpacked(tmp_path, capsys) -> None:
    big = tarfile.TarInfo("run/zeros")
    big.size = verify.MAX_BUNDLE_BYTES + 1  # declared only: the archive holds a few bytes of it
    path = _write_tar(tmp_path / "big.tar.gz", [(tarfile.TarInfo("run/MANIFEST"), b"")])
    header = big.tobuf(tarfile.GNU_FORMAT)
    with tarfile.open(path) as tar:  # a member whose header states more than the cap, then the archive's end
        first = [m for m in tar.getmembers()]
    with gzip.open(tmp_path / "bomb.tar.gz", "wb") as out:
        out.write(first[0].tobuf(tarfile.GNU_FORMAT) + header + b"\0" * 512 * 4)
    one_line_exit_2(lambda: verify.main([str(tmp_path / "bomb.tar.gz")]), capsys, "bytes unpacked: refused")


def test_a_huge_tar_header_or_a_pax_global_header_is_refused_not_read(tmp_path, capsys) -> None:
    info = tarfile.TarInfo("run/MANIFEST")
    pax = tarfile.TarInfo("run/././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, verify.MAX_READ_BYTES + 512  # tarfile would read it whole
    with gzip.open(tmp_path / "pax.tar.gz", "wb") as out:
        out.write(pax.tobuf(tarfile.USTAR_FORMAT) + b"\0" * pax.size + info.tobuf(tarfile.USTAR_FORMAT)
                  + b"\0" * 512 * 2)  # fmt: skip
    one_line_exit_2(lambda: verify.main([str(tmp_path / "pax.tar.gz")]), capsys, "a tar header of")
    with tarfile.open(tmp_path / "global.tar.gz", "w:gz", pax_headers={"comment": "x" * 1000}) as tar:
        tar.addfile(info, io.BytesIO(b""))
    one_line_exit_2(lambda: verify.main([str(tmp_path / "global.tar.gz")]), capsys, "a pax global header: refused")


def test_a_file_the_manifest_does_not_list_is_named_and_never_unpacked(archive, tmp_path) -> None:
    members = _bundle_members(archive)
    manifest = next(i for i, (m, _) in enumerate(members) if m.name.endswith("/MANIFEST"))
    zeros = tarfile.TarInfo(members[0][0].name.split("/")[0] + "/zeros")
    zeros.size = 64 << 20  # a few tens of kB of gzip; 64 MiB on disk if it were unpacked
    members.insert(manifest, (zeros, bytes(zeros.size)))
    added = _write_tar(tmp_path / "added.tar.gz", members)
    assert added.stat().st_size < 1 << 20
    done = as_a_user(str(added), limit_file_bytes=32 << 20)  # unpacking it would fail: it is never unpacked
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "zeros: in the bundle, not in MANIFEST (added after the bundle was made)" in done.stdout, done.stdout


def test_a_bundle_without_a_manifest_or_with_two_of_a_file_is_refused(archive, tmp_path, capsys) -> None:
    members = _bundle_members(archive)
    without = _write_tar(tmp_path / "without.tar.gz", [m for m in members if not m[0].name.endswith("/MANIFEST")])
    one_line_exit_2(lambda: verify.main([str(without)]), capsys, "has no MANIFEST")
    twice = _write_tar(tmp_path / "twice.tar.gz", [*members, members[0]])
    one_line_exit_2(lambda: verify.main([str(twice)]), capsys, "in the bundle twice")


@pytest.mark.parametrize("checks", [5, [{"name": [0], "verdict": "ok"}]], ids=["int", "unhashable-name"])
def test_a_bundle_whose_verify_json_rows_are_not_rows_is_named(archive, tmp_path, capsys, checks) -> None:
    members = dict((m.name, (m, data)) for m, data in _bundle_members(archive))
    top = next(iter(members)).split("/")[0]
    info, data = members[f"{top}/verify.json"]
    members[f"{top}/verify.json"] = (info, json.dumps({**json.loads(data), "checks": checks}).encode())
    del members[f"{top}/MANIFEST"]
    manifest = "".join(f"{hashlib.sha256(data).hexdigest()}  {name[len(top) + 1:]}\n"
                       for name, (_, data) in sorted(members.items())).encode()  # fmt: skip
    members[f"{top}/MANIFEST"] = (tarfile.TarInfo(f"{top}/MANIFEST"), manifest)
    for info, data in members.values():
        info.size = len(data)
    forged = _write_tar(tmp_path / "forged.tar.gz", list(members.values()))
    assert verify.main([str(forged)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "MISMATCH      bundle verify.txt/json: verify.json: " in out, out
