"""A rehearsal is said to be one in every output (issue 45): score.json's top level, mllog.log's run_stop, the
report's title and every plot, and verify's verdict; a run that trained says none of it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.image import imread

from aiperf_mpi.job.mllog import MLLogWriter
from aiperf_mpi.results.mllog_format import MLLOG_FILE
from aiperf_mpi.results.score import compute_score
from analysis import verify
from analysis.report import write_report
from tests.support.verify_runs import as_rehearsal, consistent_run, forge


@pytest.fixture
def rehearsal(tmp_path):
    run_dir = consistent_run(tmp_path / "rehearsal", dataset="digits")
    forge(run_dir, as_rehearsal)
    return run_dir


def _events(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def test_score_json_says_rehearsal_at_its_top(rehearsal, tmp_path) -> None:
    assert json.loads((rehearsal / "score.json").read_text())["rehearsal"] is True
    honest = consistent_run(tmp_path / "honest", dataset="digits")
    assert compute_score(_events(honest)).to_dict()["rehearsal"] is False


def test_the_report_and_every_plot_say_rehearsal(rehearsal, tmp_path) -> None:
    report = write_report(rehearsal, tmp_path / "marked")
    assert report.read_text().startswith("# aiperf_mpi REHEARSAL report (a stand-in's figures, never a result)")
    honest = consistent_run(tmp_path / "honest", dataset="digits")
    plain = write_report(honest, tmp_path / "plain")
    assert "REHEARSAL" not in plain.read_text()
    marked = sorted((tmp_path / "marked").glob("*.png"))
    assert marked, "the report drew no plot"
    for path in marked:  # the same plot with its mark differs from the one without: red ink across it
        other = tmp_path / "plain" / path.name
        if other.exists():
            assert not np.array_equal(imread(path), imread(other)), path.name


def test_mllog_run_stop_says_rehearsal(tmp_path) -> None:
    for rehearsal in (True, False):
        folder = tmp_path / str(rehearsal)
        folder.mkdir()
        writer = MLLogWriter(folder)
        writer.run_stop("time limit", 1000.0, rehearsal=rehearsal)
        writer.close()
        line = (folder / MLLOG_FILE).read_text().splitlines()[-1]
        meta = json.loads(line.split(":::MLLOG ", 1)[1])["metadata"]
        assert meta["status"] == "success" and meta.get("rehearsal", False) is rehearsal


def test_verify_says_rehearsal_in_its_verdict(rehearsal) -> None:
    result = verify.verify(rehearsal)
    assert result.ok, [c.problems for c in result.checks if c.problems]
    assert "a REHEARSAL: a stand-in's operations and accuracies, never a result" in result.verdict_line()
