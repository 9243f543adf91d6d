"""The report's old names for the run's model (:mod:`aiperf_mpi.results.logmodel`), where the log is read once.

Kept while verify's modules (``analysis/side_files.py``, ``tests/unit/test_verify.py``) still import these names;
new code imports :mod:`aiperf_mpi.results.logmodel`.
"""

from __future__ import annotations

from aiperf_mpi.results.logmodel import RunModel as RunLog
from aiperf_mpi.results.logmodel import loads as loads
from aiperf_mpi.results.logmodel import read_model as load_run

__all__ = ["RunLog", "load_run", "loads"]
