"""The two kinds of failure the benchmark distinguishes (DESIGN.md §7).

* :class:`UsageError` — bad input (options, configuration, data) that every
  rank learns about at the same point of the program, because it was decided
  once and shared.  Rank 0 prints one line; every rank exits with status 2
  through a normal ``MPI_Finalize``.
* anything else escaping ``main`` on any rank is fatal: the abort guard prints
  one line naming the rank and host and aborts the whole job, never a hang.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input, known to *every* rank at once; reported in one line by rank 0."""


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, whatever the message contains."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
