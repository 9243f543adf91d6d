"""What a ``--resume`` may change is one list (aiperf_mpi/results/resumable.py), and its three readers agree on it.

The command line refuses every other run option beside ``--resume``, the
session takes exactly these from the new segment (the rest from the log),
and verify accepts a later segment that differs in exactly these: a copy of
the list in any of them that drifts fails here.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from aiperf_mpi.cli import RUN_OPTIONS, build_parser, check_mode
from aiperf_mpi.config import RunConfig
from aiperf_mpi.errors import UsageError
from aiperf_mpi.job.session import prepare
from aiperf_mpi.results import runlog
from aiperf_mpi.results.resumable import RESUME_MAY_CHANGE, RESUME_OPTIONS, current_names
from analysis import verify
from tests.support.verify_runs import consistent_run, rewrite_log


def other_value(value: object) -> object:
    """A value of the same type that differs (validity does not matter: prepare takes the logged configuration)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    return f"{value}-other"


def test_the_command_line_takes_exactly_the_resume_options() -> None:
    for name in RUN_OPTIONS:
        options = build_parser().parse_args(["--resume", "runs/x"])
        setattr(options, name, other_value(getattr(RunConfig(), name)))
        if name in RESUME_OPTIONS:
            check_mode(options)
        else:
            with pytest.raises(UsageError, match=re.escape(f"--{name.replace('_', '-')} does not apply to --resume")):
                check_mode(options)


def test_the_session_changes_exactly_what_a_resume_may_change(tmp_path) -> None:
    run = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")
    moved = run.rename(tmp_path / "moved")  # a run resumed where it now is
    logged = RunConfig(**runlog.read_events(moved).events[0]["config"])
    given = RunConfig(**{f.name: other_value(getattr(logged, f.name)) for f in dataclasses.fields(RunConfig)})
    resumed = prepare(given, str(moved), ranks=2).config
    changed = {f.name for f in dataclasses.fields(RunConfig) if getattr(resumed, f.name) != getattr(logged, f.name)}
    assert changed == set(RESUME_MAY_CHANGE)
    assert all(getattr(resumed, name) == getattr(given, name) for name in RESUME_OPTIONS)
    assert resumed.run_dir == str(moved)


@pytest.mark.parametrize("allowed", [True, False])
def test_verify_accepts_a_segment_that_changed_exactly_what_a_resume_may_change(tmp_path, allowed: bool) -> None:
    run = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")
    first = runlog.read_events(run).events[0]["config"]
    others = sorted(set(first) - set(RESUME_MAY_CHANGE))
    changes = RESUME_MAY_CHANGE if allowed else others

    def resume(events: list[dict]) -> None:
        second = dict(events[0], time=2000.0, segment=2, resumed=True)
        second["config"] = {**first, **{name: other_value(first.get(name, getattr(RunConfig(), name)))
                                        for name in changes}}  # fmt: skip
        events.append(second)

    rewrite_log(run, resume)
    segments = next(c for c in verify.verify(run).checks if c.name == "segments").problems
    said = [p for p in segments if "runs another configuration" in p]
    assert said == ([] if allowed else [f"segment 2 runs another configuration: {', '.join(others)} changed"])


def test_a_hardware_change_is_said_only_by_a_resume_and_with_a_reason(tmp_path) -> None:
    """--hardware-changed REASON: with --resume it is the new segment's; a new run, or no reason, is refused."""
    with_reason = build_parser().parse_args(["--resume", "runs/x", "--hardware-changed", "moved to the GB200 nodes"])
    check_mode(with_reason)
    with pytest.raises(UsageError, match=re.escape("--hardware-changed applies only to --resume")):
        check_mode(build_parser().parse_args(["--hardware-changed", "faster"]))
    with pytest.raises(UsageError, match=re.escape("--hardware-changed needs a reason")):
        check_mode(build_parser().parse_args(["--resume", "runs/x", "--hardware-changed", " "]))
    run = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")
    resumed = prepare(RunConfig(hardware_changed="moved to the GB200 nodes"), str(run), ranks=2).config
    assert resumed.hardware_changed == "moved to the GB200 nodes"  # logged in the new segment's run_start config
    assert prepare(RunConfig(), str(run), ranks=2).config.hardware_changed == ""  # each resume says its own
    with pytest.raises(UsageError, match=re.escape("hardware_changed applies only to --resume")):
        prepare(RunConfig(hardware_changed="faster", run_dir=str(tmp_path / "new")), None, ranks=2)


def test_a_run_logged_before_the_search_warmup_was_renamed_resumes_and_verifies_as_one_configuration(tmp_path) -> None:
    """``warmup_epochs`` became ``search_warmup_epochs`` (results/resumable.py's RENAMED_OPTIONS): a run whose first
    segment logged the old name resumes with its value, and a resumed segment logging the new name is the same
    configuration to verify."""
    run = consistent_run(tmp_path / "run", dataset="digits", precision="fp32")

    def before_the_rename(events: list[dict]) -> None:
        config = events[0]["config"]
        config["warmup_epochs"] = 2
        config.pop("search_warmup_epochs", None)
        events.append(dict(events[0], time=2000.0, segment=2, resumed=True,
                           config={**current_names(config), "time_limit": config["time_limit"] + 60}))  # fmt: skip

    rewrite_log(run, before_the_rename)
    assert prepare(RunConfig(), str(run), ranks=2).config.search_warmup_epochs == 2
    segments = next(c for c in verify.verify(run).checks if c.name == "segments").problems
    assert not [p for p in segments if "runs another configuration" in p], segments
