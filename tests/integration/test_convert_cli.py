"""``python -m aiperf_mpi.data convert``: every error is one line naming the path, exit 2, nothing left behind."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.data_files import write_cifar
from tests.support.mpirun import REPO_ROOT, mpi_env


def convert(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "aiperf_mpi.data", "convert", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=mpi_env())


def unwritable_directory(tmp_path: Path) -> Path:
    """A directory this process may not create files in (root ignores modes; /sys refuses it)."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        return locked
    try:
        (Path("/sys") / "aiperf-probe").open("wb").close()
    except OSError:
        return Path("/sys")
    pytest.skip("no directory here refuses a new file to root")


def cifar(t: Path, damage=None) -> Path:
    write_cifar(t / "c")
    if damage:
        damage(t / "c")
    return t / "c"


def truncate_test_batch(directory: Path) -> None:
    (directory / "test_batch.bin").write_bytes(b"\0" * 100)


CASES = {
    # name: tmp_path -> (the converter's arguments, the words its error line must hold)
    "destination directory missing": lambda t: (
        ["--from", "digits", "--to", str(t / "no" / "such" / "d.h5")],
        [str(t / "no" / "such"), "does not exist"],
    ),
    "destination is a directory": lambda t: (["--from", "digits", "--to", str(t)], [str(t), "is a directory"]),
    "destination under a file": lambda t: (
        (t / "plain").write_text("x") and ["--from", "digits", "--to", str(t / "plain" / "d.h5")],
        [str(t / "plain"), "is not a directory"],
    ),
    "destination directory unwritable": lambda t: (
        ["--from", "digits", "--to", str(unwritable_directory(t) / "d.h5")],
        ["d.h5.partial", "Permission denied"],
    ),
    "source directory missing": lambda t: (
        ["--from", "cifar10", str(t / "nowhere"), "--to", str(t / "c.h5")],
        [str(t / "nowhere"), "is not a directory (it does not exist"],
    ),
    "source not given": lambda t: (
        ["--from", "cifar10", "--to", str(t / "c.h5")],
        ["--from cifar10 needs the source directory"],
    ),
    "source file is a named pipe": lambda t: (
        ["--from", "cifar10", str(cifar(t, lambda c: os.mkfifo(c / "data_batch_3.bin"))), "--to", str(t / "c.h5")],
        [str(t / "c" / "data_batch_3.bin"), "is a named pipe (FIFO), not a regular file"],
    ),
    "image size of zero": lambda t: (
        ["--from", "digits", "--to", str(t / "d.h5"), "--image-size", "0"],
        ["--image-size", "must be between 1 and 4096, got 0"],
    ),
    "unknown source format": lambda t: (
        ["--from", "mnist", "--to", str(t / "d.h5")],
        ["--from", "invalid choice: 'mnist'"],
    ),
    "source file truncated": lambda t: (
        ["--from", "cifar10", str(cifar(t, truncate_test_batch)), "--to", str(t / "c.h5")],
        [str(t / "c" / "test_batch.bin"), "is truncated or not CIFAR-10 binary"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_converter_error_is_one_line_with_the_path(tmp_path, case: str) -> None:
    args, words = CASES[case](tmp_path)
    run = convert(*args)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiperf_mpi.data: error: "), run.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not [p for p in tmp_path.rglob("*.partial")], "a .partial was left behind"


def test_a_good_conversion_leaves_only_the_file(tmp_path) -> None:
    write_cifar(tmp_path / "c")
    run = convert("--from", "cifar10", str(tmp_path / "c"), "--to", str(tmp_path / "c.h5"))
    assert run.returncode == 0 and run.stdout.strip() == f"wrote {tmp_path / 'c.h5'}", run.stderr
    assert (tmp_path / "c.h5").stat().st_size > 0 and not list(tmp_path.rglob("*.partial"))
