"""The option parser and the error helpers, without MPI."""

import argparse

import pytest

from aiperf_mpi.cli import build_parser, check_mode, positive_int, run_overrides
from aiperf_mpi.errors import UsageError, one_line


def test_help_documents_every_option() -> None:
    parser = build_parser()
    text = parser.format_help()
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in text
        assert action.help, f"{action.option_strings} has no help text"


def test_defaults() -> None:
    options = build_parser().parse_args([])
    assert options.layout is False
    assert options.group_size is None


def test_bad_option_raises_usage_error_instead_of_exiting() -> None:
    with pytest.raises(UsageError, match="--group-size"):
        build_parser().parse_args(["--group-size", "two"])
    with pytest.raises(UsageError, match="unrecognized"):
        build_parser().parse_args(["--no-such-option"])


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "x"])
def test_positive_int_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)


def test_one_line_flattens_messages() -> None:
    assert one_line(ValueError("a\n  b")) == "ValueError: a b"
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"


def test_relays_shape_the_layout_and_the_run_but_not_a_resume() -> None:
    """``--relays N`` (0 allowed) is a run option, accepted with --layout like --group-size, refused by --resume."""
    parser = build_parser()
    assert parser.parse_args([]).relays is None and "relays" not in run_overrides(parser.parse_args([]))
    assert run_overrides(parser.parse_args(["--relays", "0"]))["relays"] == 0
    assert run_overrides(parser.parse_args(["--relays", "4"]))["relays"] == 4
    check_mode(parser.parse_args(["--layout", "--relays", "2"]))
    with pytest.raises(UsageError, match="--relays"):
        parser.parse_args(["--relays", "-1"])
    with pytest.raises(UsageError, match="--relays do"):
        check_mode(parser.parse_args(["--resume", "runs/x", "--relays", "2"]))
