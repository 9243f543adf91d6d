"""The option parser and the error helpers, without MPI."""

import argparse

import pytest

from aiperf_mpi.cli import build_parser, positive_int
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
