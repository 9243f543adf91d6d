"""Command-line options, parsed once on rank 0 and shared with every rank.

Parsing on every rank would print a usage error or the help text N times.
Here rank 0 parses; the outcome — options, help/version already printed, or
an error message — is broadcast, so every rank takes the same branch at the
same time and bad input ends the job on all ranks within one collective.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiperf_mpi import __version__
from aiperf_mpi.errors import EXIT_OK, UsageError

if TYPE_CHECKING:  # the parser itself is MPI-free so unit tests need no MPI
    from mpi4py import MPI

DESCRIPTION = """\
aiperf_mpi — an AutoML benchmark for AI supercomputers, run as one MPI job.

Rank 0 is the master; the other ranks form training groups (one per node, or
cut to --group-size ranks). Launch it with your MPI or Slurm, e.g.
  mpirun -n 4 python -m aiperf_mpi --layout
  srun --mpi=pmix -n 4096 python -m aiperf_mpi --layout
"""

EPILOG = """\
status: this build provides the process layout (--layout). The benchmark run
itself (search, training, score) is not implemented yet and is refused.
Set AIPERF_MPI_DEBUG=1 to print the full traceback of a fatal error.
"""


class _ParserExit(Exception):
    """argparse wanted to exit (after --help or --version): carry the status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of calling ``sys.exit``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        if message:
            self._print_message(message)
        raise _ParserExit(status)


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1, with a message that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The full option set; ``--help`` documents every option."""
    parser = _Parser(
        prog="python -m aiperf_mpi",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aiperf_mpi {__version__}")
    parser.add_argument(
        "--layout",
        action="store_true",
        help="print, from rank 0, the layout this job would use (world size, hosts, "
        "master, groups and their Horovod sizes) and exit",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --layout: print the layout as one JSON object instead of text",
    )
    parser.add_argument(
        "--group-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="cut each node's worker ranks into training groups of N ranks "
        "(default: one group per node; the last group of a node may be smaller)",
    )
    return parser


@dataclass(frozen=True)
class ParseOutcome:
    """What rank 0 decided, broadcast to all ranks."""

    options: dict | None = None
    exit_status: int | None = None
    error: str | None = None


def parse_on_root(comm: MPI.Comm, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` on rank 0 and return the same options on every rank.

    Raises :class:`UsageError` on every rank for bad options, and
    ``SystemExit(0)`` on every rank after ``--help``/``--version``.
    Collective over ``comm``.
    """
    outcome = None
    if comm.Get_rank() == 0:
        try:
            outcome = ParseOutcome(options=vars(build_parser().parse_args(argv)))
        except _ParserExit as done:
            outcome = ParseOutcome(exit_status=done.status)
        except UsageError as bad:
            outcome = ParseOutcome(error=str(bad))
    outcome = comm.bcast(outcome, root=0)
    if outcome.error is not None:
        raise UsageError(outcome.error)
    if outcome.exit_status is not None:
        raise SystemExit(outcome.exit_status or EXIT_OK)
    return argparse.Namespace(**outcome.options)
