"""Every test here launches MPI; mark them so `-m "not mpi"` can leave them out."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/mpi/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.mpi)
