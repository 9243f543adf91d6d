"""Bad run options by class, table-driven: every member gets one clear message, all of a file's at once.

The classes (issue 17): non-finite or overflowing numbers in every numeric
option, from the command line and from TOML; options that do not apply to
the chosen data set, mode or model; several bad values in one config file.
"""

from __future__ import annotations

import math

import pytest

from aiperf_mpi.cli import build_parser, check_mode
from aiperf_mpi.config import NUMERIC_RANGES, RunConfig, load_config
from aiperf_mpi.errors import UsageError

FLOAT_FIELDS = [name for name in NUMERIC_RANGES if isinstance(getattr(RunConfig(), name), float)]
INT_FIELDS = [name for name in NUMERIC_RANGES if name not in FLOAT_FIELDS]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _cli(argv: list[str]) -> RunConfig:
    """What rank 0 does with a command line: parse, refuse options of the wrong mode, load."""
    from aiperf_mpi.cli import run_overrides

    options = build_parser().parse_args(argv)
    check_mode(options)
    return load_config(options.config, run_overrides(options))


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e400", "-1e400", "Infinity"])
def test_every_float_option_refuses_non_finite_values_on_the_command_line(name: str, text: str) -> None:
    argv = [f"{_flag(name)}={text}"]  # '=' so that argparse takes "-inf" as a value
    with pytest.raises(UsageError, match=f"{name} must be a finite number"):
        _cli(argv)


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "+inf", "1e400"])
def test_every_float_option_refuses_non_finite_values_in_toml(tmp_path, name: str, text: str) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(f"{name} = {text}\n")
    with pytest.raises(UsageError, match=f"{name} must be a finite number"):
        load_config(str(toml), {})


@pytest.mark.parametrize("name", [*FLOAT_FIELDS, *INT_FIELDS])
def test_every_numeric_option_refuses_overflowing_values(tmp_path, name: str) -> None:
    huge = 10**30
    with pytest.raises(UsageError, match=f"{name} must be ≤"):
        _cli([_flag(name), str(huge)])
    toml = tmp_path / "run.toml"
    toml.write_text(f"{name} = {huge if name in INT_FIELDS else '1e30'}\n")
    with pytest.raises(UsageError, match=f"{name} must be ≤"):
        load_config(str(toml), {})


def test_a_toml_integer_beyond_a_double_is_a_message(tmp_path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(f"time_limit = {10**400}\n")
    with pytest.raises(UsageError, match="time_limit must be a finite number"):
        load_config(str(toml), {})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--image-size", "64"], "image_size does not apply to dataset 'digits'"),
        (["--dataset", "cifar10", "--data-path", "/d", "--image-size", "64"], "does not apply to dataset 'cifar10'"),
        (["--dataset", "hdf5", "--data-path", "/d.h5", "--image-size", "64"], "does not apply to dataset 'hdf5'"),
        (["--data-path", "/d"], "data_path does not apply to dataset 'digits'"),
        (["--dataset", "synthetic", "--data-path", "/d"], "data_path does not apply to dataset 'synthetic'"),
        (["--dataset", "synthetic", "--stage-dir", "/tmp/s"], "stage_dir applies to file-based data"),
        (["--no-peak-probe", "--peak-seconds", "2"], "peak_seconds does not apply"),
        (["--json"], "--json only applies to --layout"),
        (["--layout", "--time-limit", "60"], "--time-limit does not apply to --layout"),
        (["--layout", "--no-report"], "--no-report does not apply to --layout"),
        (["--layout", "--dataset", "synthetic", "--seed", "3"], "--dataset, --seed do not apply to --layout"),
        (["--resume", "runs/x", "--dataset", "synthetic"], "--dataset does not apply to --resume"),
        (["--resume", "runs/x", "--run-dir", "runs/y"], "--run-dir does not apply to --resume"),
        (["--resume", "runs/x", "--group-size", "2"], "--group-size does not apply to --resume"),
        (["--resume", "runs/x", "--no-xla"], "--xla does not apply to --resume"),
        (["--score-step", "0.001"], "score_step must be ≥ 1"),
        (["--time-limit", "2000000", "--score-step", "1"], "too fine"),
        (["--seed", "-1"], "seed must be ≥ 0"),
        (["--image-size", "5000", "--dataset", "synthetic"], "image_size must be ≤ 4096"),
    ],
)
def test_options_that_do_not_apply_or_make_no_sense_are_named(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("'", "'")) as caught:
        _cli(argv)
    assert "\n" not in str(caught.value)


def test_what_does_apply_is_accepted() -> None:
    assert _cli(["--dataset", "synthetic", "--image-size", "64"]).image_size == 64
    assert _cli(["--dataset", "imagenet", "--data-path", "/d", "--image-size", "128"]).image_size == 128
    assert _cli(["--resume", "runs/x", "--time-limit", "60"]).time_limit == 60
    options = build_parser().parse_args(["--layout", "--group-size", "2", "--json"])
    check_mode(options)
    assert not _cli(["--no-peak-probe"]).peak_probe
    for argv in (["--no-report"], ["--resume", "runs/x", "--no-report"]):  # what the process does after the run
        options = build_parser().parse_args(argv)
        check_mode(options)
        assert options.report is False
    assert build_parser().parse_args([]).report is True


def test_a_config_file_reports_all_its_bad_values_at_once(tmp_path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(
        'time_limit = inf\nbatch_size = "big"\nprecision = "int8"\nseed = 99999999999999999999\n'
        'min_delta = nan\nimage_size = 7\ndata_path = "x"\nbogus = 1\nhpo = 3\n'
    )
    with pytest.raises(UsageError) as caught:
        load_config(str(toml), {})
    message = str(caught.value)
    for part in ("time_limit must be a finite number", "batch_size must be a whole number", "precision must be one of",
                 "seed must be ≤", "min_delta must be a finite number", "image_size does not apply",
                 "data_path does not apply", "unknown key 'bogus'", "hpo must be a string"):  # fmt: skip
        assert part in message, part
    assert "\n" not in message
    # the command line's good value replaces a bad one from the file: that one is no longer named
    with pytest.raises(UsageError) as caught:
        load_config(str(toml), {"batch_size": 8, "precision": "fp16"})
    assert "batch_size" not in str(caught.value) and "precision" not in str(caught.value)


def test_the_defaults_are_valid_and_finite() -> None:
    config = load_config(None, {})
    assert all(math.isfinite(getattr(config, name)) for name in NUMERIC_RANGES)


@pytest.mark.parametrize(
    ("argv", "setting", "on_cpu", "on_gpu"),
    [
        ([], "auto", False, True),
        (["--xla", "on"], "on", True, True),
        (["--xla", "off"], "off", False, False),
        (["--no-xla"], "off", False, False),
    ],
)
def test_xla_is_on_for_gpus_and_off_for_cpus_by_default(argv, setting, on_cpu, on_gpu) -> None:
    from aiperf_mpi.config import xla_enabled

    config = _cli(argv)
    assert config.xla == setting
    assert (xla_enabled(config.xla, accelerator=False), xla_enabled(config.xla, accelerator=True)) == (on_cpu, on_gpu)


def test_xla_from_toml_and_from_an_older_log(tmp_path) -> None:
    from aiperf_mpi.config import xla_enabled

    toml = tmp_path / "run.toml"
    toml.write_text("xla = false\n")
    assert load_config(str(toml), {}).xla == "off"
    toml.write_text("xla = 'sometimes'\n")
    with pytest.raises(UsageError, match="xla must be one of auto, on, off"):
        load_config(str(toml), {})
    assert xla_enabled(True, accelerator=False) and not xla_enabled(False, accelerator=True)  # logged bools
