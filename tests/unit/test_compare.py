"""analysis.compare over N runs: the spread against hand-computed values, and whether the runs are comparable."""

import math
from pathlib import Path

import pytest

from aiperf_mpi.results import runlog
from analysis import compare
from analysis.compare import Spread, comparability, comparable_verdict, load_compared, olympic_mean, spread
from tests.support.event_logs import epoch, start, write_log

PROVENANCE = {"aiperf_mpi": "0.1", "git_commit": "a" * 40, "git_dirty": False, "source_sha256": "b" * 64,
              "source_files": 80, "python": "3.11.9", "tensorflow": "2.18.1", "horovod": "0.28.1",
              "mpi4py": "4.0.1", "mpi": "Open MPI 5.0.6"}  # fmt: skip


def repeat(run_dir: Path, ops: int, seed: int | None, provenance: dict | None = PROVENANCE, **config) -> Path:
    """One group, one epoch of ``ops`` operations ending at 20 s, 100 s of active time: score ops / 100,
    regulated score ops / 100 × ln 2 (accuracy 0.5)."""
    first = start(0, **{"score_step": 100.0, "time_limit": 100.0, "run_dir": str(run_dir), **config})
    if seed is not None:
        first["config"]["seed"] = seed
    if provenance is not None:
        first["provenance"] = provenance
    events = [first, epoch(0, 0, 1, 10, 20, ops, 0.5), {"event": runlog.RUN_STOP, "time": 100, "reason": "time limit"}]
    return write_log(run_dir, events)


def five_runs(tmp_path: Path) -> list[Path]:
    # scores 10, 12, 14, 16 and 30 OPS
    return [repeat(tmp_path / f"r{k}", ops, seed=100 + k) for k, ops in enumerate((1000, 1200, 1400, 1600, 3000))]


def test_the_spread_of_five_runs_by_hand() -> None:
    s = spread([10.0, 12.0, 14.0, 16.0, 30.0])
    # olympic: 10 and 30 dropped → (12 + 14 + 16) / 3; mean of all 16.4, squares of the deviations
    # 40.96 + 19.36 + 5.76 + 0.16 + 184.96 = 251.2, sample variance 251.2 / 4 = 62.8
    assert s == Spread(5, 14.0, True, 14.0, 10.0, 30.0, pytest.approx(math.sqrt(62.8) / 16.4))
    assert spread([30.0, 10.0, 14.0, 12.0, 16.0]) == s  # order does not matter


def test_fewer_than_three_runs_and_undefined_values() -> None:
    assert olympic_mean([10.0, 20.0]) == (15.0, False)  # nothing to drop: the plain mean, and said so
    assert olympic_mean([5.0, 1.0, 9.0]) == (5.0, True)
    # only one best and one worst are dropped, ties or not
    assert olympic_mean([1.0, 1.0, 4.0, 4.0]) == (2.5, True)
    two = spread([10.0, 20.0])
    assert two.olympic_mean == 15.0 and not two.olympic_dropped and two.median == 15.0
    assert two.cv == pytest.approx(math.sqrt(50) / 15)
    # a run without a regulated score is left out of that figure
    assert spread([None, 10.0, 20.0]).count == 2 and spread([None, None]) == Spread(0, None, False, None, None, None,
                                                                                   None)  # fmt: skip


def test_repeats_with_different_seeds_are_comparable(tmp_path) -> None:
    runs = [load_compared(path) for path in five_runs(tmp_path)]
    checks = comparability(runs)
    assert [c.ok for c in checks] == [True] * 6, checks
    assert comparable_verdict(checks).startswith("**comparable**")


def test_what_makes_runs_not_comparable(tmp_path) -> None:
    base = repeat(tmp_path / "base", 1000, seed=1)
    same_seed = repeat(tmp_path / "same-seed", 1100, seed=1)
    longer = repeat(tmp_path / "longer", 1100, seed=2, time_limit=200.0, progress_interval=99.0)
    other_code = repeat(tmp_path / "other-code", 1100, seed=3, provenance={**PROVENANCE, "source_sha256": "c" * 64})
    other_data = repeat(tmp_path / "other-data", 1100, seed=4, dataset="cifar10", data_path="/data/cifar")
    old = repeat(tmp_path / "old", 1100, seed=5, provenance=None)
    by_name = {c.name: c for c in comparability([load_compared(p) for p in (base, same_seed)])}
    assert by_name["different seeds"].ok is False and "seed 1 in base, same-seed" in by_name["different seeds"].detail
    assert by_name["same configuration"].ok is True  # run_dir differs, and is not compared
    by_name = {c.name: c for c in comparability([load_compared(p) for p in (base, longer)])}
    assert by_name["same configuration"].ok is False
    assert "time_limit: base=100.0, longer=200.0" in by_name["same configuration"].detail
    assert "progress_interval" not in by_name["same configuration"].detail  # not compared: printing only
    by_name = {c.name: c for c in comparability([load_compared(p) for p in (base, other_code)])}
    assert by_name["same code"].ok is False and by_name["same software stack"].ok is True
    # a commit between two repeats that changed only files outside the package (docs, tests): the same code
    docs_commit = repeat(tmp_path / "docs-commit", 1100, seed=6, provenance={**PROVENANCE, "git_commit": "d" * 40})
    by_name = {c.name: c for c in comparability([load_compared(p) for p in (base, docs_commit)])}
    assert by_name["same code"].ok is True and "2 git commits that differ only outside" in by_name["same code"].detail
    other_both = repeat(tmp_path / "other-both", 1100, seed=7,
                        provenance={**PROVENANCE, "git_commit": "d" * 40, "source_sha256": "c" * 64})  # fmt: skip
    assert {c.name: c.ok for c in comparability([load_compared(p) for p in (base, other_both)])}["same code"] is False
    by_name = {c.name: c for c in comparability([load_compared(p) for p in (base, other_data)])}
    assert by_name["same data"].ok is False
    assert "dataset: base='imagenet', other-data='cifar10'" in by_name["same data"].detail
    assert by_name["same configuration"].ok is True  # the data's fields are judged once, under data
    checks = comparability([load_compared(p) for p in (base, old)])
    assert {c.name: c.ok for c in checks}["same code"] is None
    verdict = comparable_verdict(checks)
    assert verdict == "**comparable as far as the logs tell**; unknown: same code, same software stack"
    checks = comparability([load_compared(p) for p in (base, same_seed, other_code)])
    assert comparable_verdict(checks) == "**not comparable as repeats**; fails: same code, different seeds"


def test_the_cli_over_five_runs_and_over_two(tmp_path, capsys) -> None:
    paths = five_runs(tmp_path)
    assert compare.main([str(p) for p in paths] + ["--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "| score | 5 of 5 | 14 OPS | 14 OPS | 10 OPS | 30 OPS | 48.3 % |" in text
    # regulated = score × ln 2: the same CV
    assert f"| regulated score | 5 of 5 | {14 * math.log(2):.4g} OPS |" in text and text.count("48.3 %") == 2
    assert "| r0 | 100 | 10 OPS |" in text
    assert "Verdict: **comparable**" in text and "Side by side" not in text
    assert (tmp_path / "out" / "compare.md").read_text() == "# 5 runs\n\n" + text
    assert compare.main([str(paths[0]), str(paths[4])]) == 0
    text = capsys.readouterr().out
    assert "| score | 2 of 2 | 20 OPS (plain mean: < 3 runs, none dropped) | 20 OPS | 10 OPS | 30 OPS |" in text
    assert "## Side by side" in text and "| score | 10 OPS | 30 OPS | 3× |" in text


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    run = five_runs(tmp_path)[0]
    assert compare.main([str(run)]) == 2
    assert capsys.readouterr().err == "analysis.compare: error: give at least two runs to compare\n"
    assert compare.main([str(run), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analysis.compare: error: ") and err.count("\n") == 1


def _rewrite_first(path: Path, change) -> Path:
    """The run's log with its run_start changed by ``change`` (a dict → dict), written back whole."""
    import json

    log = path / runlog.EVENTS_FILE if path.is_dir() else path
    lines = log.read_text().splitlines()
    lines[0] = json.dumps(change(json.loads(lines[0])))
    log.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("damage", ["string time", "list config", "null ops", "byte-order mark"])
def test_a_malformed_log_is_one_line_and_exit_2(tmp_path, capsys, damage) -> None:
    """Issue 45: each of these printed a traceback; a reviewer's tool gives one line on any bad log."""
    import json

    good, bad = five_runs(tmp_path)[:2]
    log = bad / runlog.EVENTS_FILE if bad.is_dir() else bad
    if damage == "string time":
        _rewrite_first(bad, lambda e: {**e, "time": "soon"})
    elif damage == "list config":
        _rewrite_first(bad, lambda e: {**e, "config": [1, 2]})
    elif damage == "null ops":
        lines = log.read_text().splitlines()
        lines[1] = json.dumps({**json.loads(lines[1]), "ops": None})
        log.write_text("\n".join(lines) + "\n")
    else:
        log.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())
    status = compare.main([str(good), str(bad)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("analysis.compare: error: ") and err.count("\n") == 1, err


def test_an_out_that_names_a_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    runs = five_runs(tmp_path)[:2]
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    assert compare.main([str(runs[0]), str(runs[1]), "--out", str(taken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analysis.compare: error: ") and err.count("\n") == 1, err
    assert taken.read_text() == "not a directory"
