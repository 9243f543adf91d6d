"""mlcommons' compliance checker, run as a reviewer runs it (docs/verify.md): a subprocess, this package's ruleset."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from aiperf_mpi.results.compliance import ruleset_path


def run_checker(mllog: Path, config: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m mlperf_logging.compliance_checker --config RULESET mllog``; output in ``.stdout`` (both streams).

    The checker also writes its output to ``--log_output`` (by default into the working folder): here into a
    folder of its own, so that nothing lands in the run directory or the tests' folder.  ``config=None`` is this
    package's ruleset; pass another path to see how the checker's own rulesets judge the log.  The ruleset
    imports the package's tables: the checker gets this checkout's on its path (as an installed package would be).
    """
    checkout = str(Path(ruleset_path().parents[3]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (checkout, os.environ.get("PYTHONPATH"))))}
    with tempfile.TemporaryDirectory(prefix="compliance-") as scratch:
        output = Path(scratch) / "compliance_checker.log"
        command = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--config",
                   str(ruleset_path() if config is None else config), "--log_output", str(output),
                   str(Path(mllog).resolve())]  # fmt: skip
        return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              cwd=scratch, env=env)  # fmt: skip
