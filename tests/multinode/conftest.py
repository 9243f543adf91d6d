"""Tests across several hosts made on this machine (tests/support/multihost.py): one cluster per test session.

These tests run only when asked for — ``make test-multinode`` or
``pytest -m multinode`` — because they add minutes the default run (CI) cannot
spare: ``setup.cfg`` deselects them with ``-m "not multinode"``, and when a
``-m`` of one's own replaces that, the hook below still leaves them out unless
the expression names ``multinode``.  Starting the cluster takes well under a
second (plus, once per machine, installing its Debian packages when missing);
the timings are printed at the end of the session.  ``AIPERF_MULTIHOST_KEEP=1``
keeps the scratch directory (launch agent, hosts file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from tests.support.multihost import VirtualCluster, live_namespaces, start_cluster

_TIMINGS: dict[str, float] = {}
_LEFT: list[int] = []


def _ours(item: pytest.Item) -> bool:
    return "tests/multinode/" in str(item.fspath).replace("\\", "/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests ``multinode``; leave them out unless the ``-m`` expression names it."""
    for item in items:
        if _ours(item):
            item.add_marker(pytest.mark.multinode)
    if re.search(r"\bmultinode\b", config.option.markexpr or ""):
        return  # "-m multinode" runs them, "-m 'not multinode'" leaves them to pytest's own deselection
    skipped = [item for item in items if _ours(item)]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = [item for item in items if not _ours(item)]


@pytest.fixture(scope="session")
def multihost() -> Iterator[VirtualCluster]:
    """Two hosts, node1 and node2, each with its own network stack, host name and node-local storage."""
    cluster = start_cluster(2)
    namespaces = cluster.namespaces()
    try:
        yield cluster
    finally:
        _LEFT.extend(cluster.stop(keep=bool(os.environ.get("AIPERF_MULTIHOST_KEEP"))))
        _TIMINGS.update(cluster.timings)
        still = cluster.marked()
        if os.environ.get("AIPERF_MULTIHOST_KEEP"):
            print(f"multihost fixture: scratch kept in {cluster.scratch}")
        assert not still, f"processes of the test hosts outlived them: {still}"
        assert not live_namespaces(namespaces), "namespaces of the test hosts outlived them"


def pytest_terminal_summary(terminalreporter) -> None:
    """One line with what the multi-host fixture cost, when it ran."""
    if not _TIMINGS:
        return
    parts = [f"{name} {seconds:.1f} s" for name, seconds in _TIMINGS.items()]
    swept = f"; swept {len(_LEFT)} leftover process(es) of jobs" if _LEFT else ""
    terminalreporter.write_line(f"multihost fixture: {', '.join(parts)}{swept}")
