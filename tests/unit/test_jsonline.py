"""The writers' cached JSON encoder gives the text the json module gives, and fails as it does."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aiperf_mpi.results.jsonline import line_encoder, object_text

RECORDS = [
    {"event": "epoch", "time": 1764633600.123456, "task": 3, "ops": 10**15, "xla": False, "lr": 0.1, "none": None},
    {"nested": {"list": [1, 2.5, "three", [], {}], "é": "ünïcode ☃", "quote": 'a "b" \\ c\n'}},
    [1, 2, 3],
    12,
    2.5,
    None,
    "a bare string",
    {"big": 2**70, "small": -1e-300, "tuple": (1, 2)},
]


@pytest.mark.parametrize("record", RECORDS)
def test_same_text_as_json_dumps(record: object) -> None:
    assert line_encoder()(record) == json.dumps(record)
    compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    assert line_encoder(",", ":", allow_nan=False)(record) == compact.encode(record)


def test_default_is_called_for_unknown_types() -> None:
    def jsonable(value: object) -> object:
        return value.item() if hasattr(value, "item") else repr(value)

    encode = line_encoder(",", ":", default=jsonable)
    record = {"x": np.float32(0.5), "n": np.int64(7)}
    assert encode(record) == json.dumps(record, separators=(",", ":"), default=jsonable)


def test_nan_refused_when_asked_and_unknown_types_refused() -> None:
    with pytest.raises(ValueError):
        line_encoder(allow_nan=False)({"x": math.nan})
    assert line_encoder()({"x": math.inf}) == json.dumps({"x": math.inf})
    with pytest.raises(TypeError):
        line_encoder()({"x": object()})


def test_reusable_after_a_failure() -> None:
    encode = line_encoder(allow_nan=False)
    with pytest.raises(ValueError):
        encode({"a": [1, {"b": math.nan}]})
    assert encode({"a": [1, {"b": 2}]}) == json.dumps({"a": [1, {"b": 2}]})


@pytest.mark.parametrize("names", [(), ("a",), ("c",), ("a", "c"), ("b",), ("a", "b", "c")])
def test_an_object_with_members_given_as_text_is_the_object_encoded(names) -> None:
    """object_text joins texts where the encoder would have written their values: the same text, in order."""
    encode = line_encoder(",", ":")
    fields = {"a": [1, {"x": "é"}], "b": None, "c": {"d": 2.5}}
    texts = {name: encode(fields[name]) for name in names}
    assert object_text(encode, fields, texts) == encode(fields)
