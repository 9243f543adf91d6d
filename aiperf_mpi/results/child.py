"""Run a child process of this package, bounded in time: the one runner of the analysis, the export and serving.

``analysis/`` loads no TensorFlow, and rank 0 keeps none in its memory at the
run's end, so what needs it runs in a child ``python -m aiperf_mpi.…``: the
re-evaluation of the best model and the audit's timing (which print one JSON
line last: :func:`json_answer`), the best model's export after the score
(``aiperf_mpi.export``) and the publishing of a bundle for ``--serve-at-end``
(``aiperf_mpi.serve publish``).  Every caller wants the same contract, so it
is here once (issue 51: the export's and serving's runners were copies of
each other beside this one):

- the child's output goes to files, never pipes: after a timeout nothing (a
  grandchild that holds a pipe) can keep the caller waiting;
- it finds this package however the caller was started (``PYTHONPATH``), and
  TensorFlow's start-up chatter stays out of its stderr, whose last line is
  its reason;
- ``no_accelerator``: no GPU is visible to it (``CUDA_VISIBLE_DEVICES`` empty),
  so it cannot take the device a training rank on this node holds;
- the answer is its status and its lines, or, for :func:`json_answer`, the
  JSON object of its last line or one line saying why there is none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE_HOME = str(Path(__file__).resolve().parents[2])
"""the folder that holds ``aiperf_mpi`` and ``analysis``: on the child's path, however the caller was started"""


@dataclass(frozen=True)
class ChildRun:
    """A finished child: its exit status (None: stopped at its timeout) and its non-blank output lines."""

    returncode: int | None
    stdout: list[str]
    stderr: list[str]

    def reason(self, module: str) -> str:
        """Why it failed, in one line: its last stderr line without its ``MODULE: error:`` prefix, or its status."""
        last = self.stderr[-1] if self.stderr else f"exit status {self.returncode}"
        return last.removeprefix(f"{module}: error: ").strip()


def run_child(module: str, args: Sequence[str] = (), *, timeout: float, stdin: str | None = None,
              no_accelerator: bool = False) -> ChildRun:  # fmt: skip
    """``python -m module args`` with ``stdin`` on its input, stopped after ``timeout`` seconds."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_HOME, env.get("PYTHONPATH", "")) if p)
    if no_accelerator:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", module, *args]
    with tempfile.TemporaryFile("w+") as given, tempfile.TemporaryFile("w+") as out, \
            tempfile.TemporaryFile("w+") as err:  # fmt: skip
        given.write(stdin or "")
        given.seek(0)
        try:
            done = subprocess.run(command, stdin=given, stdout=out, stderr=err, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return ChildRun(None, [], [])
        out.seek(0), err.seek(0)
        printed = [line for line in out.read().splitlines() if line.strip()]
        errors = [line for line in err.read().splitlines() if line.strip()]
    return ChildRun(done.returncode, printed, errors)


class ChildFailed(Exception):
    """The child gave no answer; the text is its one line.  ``returncode``: the child's exit status, None when it
    ran out of time or exited 0 without a JSON line."""

    def __init__(self, line: str, returncode: int | None) -> None:
        super().__init__(line)
        self.returncode = returncode


def json_answer(module: str, args: Sequence[str] = (), *, timeout: float, what: str, timeout_option: str,
                stdin: str | None = None) -> dict:  # fmt: skip
    """Run ``python -m module args`` (``stdin`` on its input) and return the JSON object its last stdout line holds.

    :class:`ChildFailed` otherwise: ``"{what} did not finish within T s ({timeout_option} SECONDS)"`` after
    ``timeout`` seconds, its last stderr line when it exits non-zero, or that it printed no JSON line.
    """
    done = run_child(module, args, timeout=timeout, stdin=stdin)
    if done.returncode is None:
        raise ChildFailed(f"{what} did not finish within {timeout:g} s ({timeout_option} SECONDS)", None)
    if done.returncode != 0:
        raise ChildFailed(done.reason(module), done.returncode)
    try:
        return json.loads(done.stdout[-1])
    except (IndexError, ValueError):
        printed = "\n".join(done.stdout)
        raise ChildFailed(f"python -m {module} printed no JSON line: {printed[-200:]!r}", None) from None
