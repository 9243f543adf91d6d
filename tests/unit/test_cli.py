"""The option parser and the error helpers, without MPI."""

import argparse
import re

import pytest

from aiperf_mpi.cli import build_parser, check_mode, run_overrides
from aiperf_mpi.errors import UsageError, one_line, positive_int


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


TOLD_IN_WORDS = ("max_models", "group_size", "relays", "run_dir", "seed")
"""run options whose help says what their default means ('default: no limit'), not a value"""


def defaults_in_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's default as its help names it: the choice before '(default', the number after 'default'."""
    from aiperf_mpi.config import CHOICES

    shown = {}
    for action in parser._actions:
        text = " ".join((action.help or "").split())
        if "default" not in text:
            continue
        marked = re.search(r"(\S+) \(default\b", text) if action.dest in CHOICES else None
        told = re.search(r"\bdefault (\d[^\s:;,)]*)", text)
        shown[action.dest] = marked.group(1) if marked else told.group(1) if told else "in words"
    return shown


def test_every_default_the_help_names_is_run_configs() -> None:
    """--help takes each run option's default from RunConfig: a literal default in cli.py fails here when they part."""
    from aiperf_mpi.config import RunConfig

    defaults, shown = RunConfig(), defaults_in_help(build_parser())
    assert len(shown) >= 25, shown  # every run option with a default says so
    for name, text in shown.items():
        value = getattr(defaults, name)
        if name in TOLD_IN_WORDS:
            assert text == "in words" and not value, f"--{name}: RunConfig's default {value!r}, help {text!r}"
        elif isinstance(value, str):
            assert text == value, f"--{name}: RunConfig's default {value!r}, help {text!r}"
        else:
            assert float(text) == value, f"--{name}: RunConfig's default {value!r}, help {text!r}"


def test_the_help_follows_a_changed_default(monkeypatch) -> None:
    """Every default changed in RunConfig changes --help with it: none of them is restated in cli.py."""
    import dataclasses

    from aiperf_mpi import config

    shown = defaults_in_help(build_parser())
    changed = {}
    for field in dataclasses.fields(config.RunConfig):
        if field.name in shown and field.name not in TOLD_IN_WORDS:
            if field.name in config.CHOICES:
                changed[field.name] = next(c for c in config.CHOICES[field.name] if c != field.default)
            else:
                changed[field.name] = field.default + 7
    fields = [(name, type(value), dataclasses.field(default=value)) for name, value in changed.items()]
    other = dataclasses.make_dataclass("OtherDefaults", fields, bases=(config.RunConfig,), frozen=True)
    monkeypatch.setattr(config, "RunConfig", other)
    now = defaults_in_help(build_parser())
    for name, value in changed.items():
        assert now[name] == value if isinstance(value, str) else float(now[name]) == value, (name, now[name], value)
