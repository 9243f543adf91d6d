"""The one child-process runner (results/child.py): the JSON answer, or one line saying why there is none."""

from __future__ import annotations

import pytest

from aiperf_mpi.results.child import ChildFailed, json_answer

ASK = {"timeout": 60.0, "what": "the answer", "timeout_option": "--wait"}


def test_the_answer_is_the_last_json_line() -> None:
    assert json_answer("json.tool", ["--compact"], stdin='{"a": [1, 2]}', **ASK) == {"a": [1, 2]}


def test_a_failed_child_gives_its_last_error_line_and_status() -> None:
    with pytest.raises(ChildFailed) as failed:
        json_answer("json.tool", stdin="{not json", **ASK)
    assert failed.value.returncode == 1 and "Expecting property name" in str(failed.value)


def test_a_child_that_prints_no_json_or_runs_too_long_is_named() -> None:
    with pytest.raises(ChildFailed, match="^python -m code printed no JSON line: '.*hello") as failed:
        json_answer("code", stdin="print('hello')\n", **ASK)
    assert failed.value.returncode is None
    with pytest.raises(ChildFailed, match=r"^the answer did not finish within 1 s \(--wait SECONDS\)$"):
        json_answer("code", stdin="import time\ntime.sleep(30)\n", **{**ASK, "timeout": 1.0})
