"""One line and exit status 2 for input the analysis tools cannot take, whatever in it broke the reading.

``verify``, ``bundle`` and ``report`` read files a forger or a crashed file
system may have written.  Each names what it expects to go wrong (a missing
run, a bad line); this catches the rest of what hostile bytes can raise
while reading — JSON nested deeper than the parser recurses, integers too
large for a float or a 64-bit column, a NUL byte in a path, a symlink loop,
a file that is not UTF-8 — and prints it as the one line the house rules
ask for, instead of a traceback.  Programming errors (``TypeError``,
``KeyError``, …) are not caught: they are bugs, and their traceback is
wanted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from aiperf_mpi.results.runlog import UnreadableLog

EXIT_BAD_INPUT = 2
INPUT_ERRORS = (UnreadableLog, RecursionError, OverflowError, MemoryError, OSError, ValueError, RuntimeError)
"""what reading bad input can raise: ``RuntimeError`` is ``Path.resolve`` on a symlink loop (Python 3.11),
``ValueError`` a NUL byte in a path, a number beyond ``int``'s string limit or bytes that are not UTF-8"""


def one_line(exc: BaseException) -> str:
    """An exception as one short line (a message may hold newlines or a 100,000-character excerpt)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or text}"
    elif isinstance(exc, RecursionError):
        text = f"input nested too deeply to read ({text})"
    elif isinstance(exc, OverflowError):
        text = f"a number too large to read ({text})"
    elif isinstance(exc, MemoryError):
        text = "out of memory while reading the input"
    return text if len(text) <= 300 else text[:297] + "…"


def guarded(prog: str, target: object, action: Callable[[], int]) -> int:
    """``action()``'s exit status, or 2 with one line on stderr when reading ``target`` raised an input error."""
    try:
        return action()
    except INPUT_ERRORS as exc:
        where = str(target).encode("unicode_escape").decode("ascii")  # a NUL or a newline in the name stays visible
        print(f"{prog}: error: {where}: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
