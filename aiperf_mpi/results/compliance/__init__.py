"""This benchmark's ruleset for mlperf-logging's compliance checker, shipped with the package.

``mllog.log`` uses mlperf-logging's line format and key names, but the
checker's training and HPC rulesets require keys of their own benchmarks.
``aiperf_mpi_VERSION.yaml`` states this benchmark's keys, their order and
their constraints in the checker's own YAML, so a reviewer can run
mlcommons' checker on a run (docs/verify.md).  A change of what the log must
hold is a new version, a new file: a log is judged by the ruleset of its time.
"""

from __future__ import annotations

from pathlib import Path

RULESET_VERSION = "1.2.0"


def ruleset_path(version: str = RULESET_VERSION) -> Path:
    """The ruleset's absolute path: the checker joins ``--config`` to its own folder, so a relative one fails."""
    return (Path(__file__).resolve().parent / f"aiperf_mpi_{version}.yaml").resolve()
