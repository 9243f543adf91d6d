"""Run a child process and take its one JSON answer: how the analysis asks TensorFlow's questions.

``analysis/`` loads no TensorFlow, so what needs it (the re-evaluation of
the best model, the audit's timing) runs in a child of the export room
(``python -m aiperf_mpi.export.reevaluate``, ``… .audit``) that prints one
JSON line last.  Every caller wants the same contract: the answer, or one
line saying why there is none — it ran past its time, it refused or failed
(its last line on stderr, without its ``MODULE: error:`` prefix), or it
printed no JSON — so the contract is here once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence


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
    # TensorFlow's start-up chatter stays out of the child's stderr, whose last line is its reason (unless asked for)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    try:
        done = subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True,
                              timeout=timeout, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ChildFailed(f"{what} did not finish within {timeout:g} s ({timeout_option} SECONDS)", None) from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        last = lines[-1] if lines else f"exit status {done.returncode}"
        raise ChildFailed(last.removeprefix(f"{module}: error: ").strip(), done.returncode)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ChildFailed(f"python -m {module} printed no JSON line: {done.stdout[-200:]!r}", None) from None
