"""The two kinds of failure the benchmark distinguishes, and every exit status it uses.

* :class:`UsageError` — bad input (options, configuration, data) that every
  rank learns about at the same point of the program, because it was decided
  once and shared.  Rank 0 prints one line; every rank exits with status 2
  through a normal ``MPI_Finalize``.
* anything else escaping ``main`` on any rank is fatal: the abort guard prints
  one line naming the rank and host and aborts the whole job, never a hang.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys

EXIT_OK = 0
EXIT_FATAL = 1
"""an unhandled error on some rank: the abort guard ended the job"""
EXIT_USAGE = 2
"""bad input (options, configuration, data, launch): nothing was measured"""
EXIT_GRACE_EXPIRED = 3
"""the grace period after the time limit ran out with groups still training; the score is written"""
EXIT_GROUPS_LOST = 4
"""fault tolerance on, groups were lost and the run went on to its end and its score; the job is then ended with
``MPI_Abort`` (``MPI_Finalize`` cannot complete after a failure), so this status says the score is written"""
EXIT_DEADLINE = 5
"""a phase passed its deadline (aiperf_mpi/job/deadlines.py): one line says which rank and phase; the log holds every
event fsync'd before it, and where the run had started, ``--resume`` continues it"""
EXIT_NOT_SCORED = 6
"""the job's status from the close (``python -m aiperf_mpi.job.close RUN_DIR --job-status``, which the templates
exit with): the launch measured nothing, or its run has no score"""
EXIT_ENDED_EARLY = 7
"""the job's status from the close: the run scored, but its last segment stopped before its time limit or model
budget (a signal, a hang, every group lost, the launch's end); ``--resume`` continues it"""
EXIT_TERMINATED = 128 + signal.SIGTERM
"""SIGTERM: the score is written at once, running epochs are not counted (143, as a shell reports it)"""


class UsageError(Exception):
    """Bad input, known to *every* rank at once; reported in one line by rank 0."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, whatever the message contains."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


# the command lines' number types: here, on the ground floor every room may import, so that an entry point of any
# room (python -m aiperf_mpi, python -m aiperf_mpi.graph) refuses a bad number with the same one line


def whole_number(text: str) -> int:
    """argparse type: an integer ≥ 0, with a message that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1, with a message that names the value."""
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose bad options are one line and an exit status, never argparse's usage and error.

    The one home of that behaviour for the package's and ``analysis``' commands: ``name`` starts the line
    (``NAME: error: MESSAGE``, the message's whitespace folded), ``hint`` follows it, ``status`` is the exit status
    (:data:`EXIT_USAGE` by default).  The benchmark's own command line raises instead (``cli.py``: rank 0 parses
    and every rank learns the verdict), and so overrides :meth:`error`.
    """

    def __init__(self, *args: object, name: str = "", hint: str = "", status: int = EXIT_USAGE,
                 **kwargs: object) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.one_line_name, self.one_line_hint, self.one_line_status = name or self.prog, hint, status

    def add_subparsers(self, **kwargs: object):  # type: ignore[override]
        """Subcommands' parsers are one-line too, under this parser's name and status (argparse makes them of
        this class but with their own ``prog`` alone)."""
        kwargs.setdefault("parser_class", functools.partial(type(self), name=self.one_line_name,
                                                            hint=self.one_line_hint, status=self.one_line_status))
        return super().add_subparsers(**kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.one_line_name}: error: {' '.join(message.split())}{self.one_line_hint}", file=sys.stderr)
        raise SystemExit(self.one_line_status)
