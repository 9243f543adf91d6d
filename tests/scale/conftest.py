"""Every test here is a rehearsal at 128 ranks (``make test-scale``): mark them ``scale`` and ``mpi``.

setup.cfg deselects ``scale`` from every other run, as it does ``long``: each case is minutes of this machine's
cores, and together they would double ``make test``.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/scale/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.scale)
            item.add_marker(pytest.mark.mpi)
