"""One JSON encoder per log writer, made once: the master writes thousands of lines a second at 65,536 groups.

``json.dumps`` and ``JSONEncoder.encode`` build a new C encoder object for
every call (``JSONEncoder.iterencode`` calls ``c_make_encoder``), ≈ 2 µs of
the ≈ 5 µs an event line costs here; the master writes ≈ 15 lines per model
(BENCHMARKS.md, the master).  :func:`line_encoder` builds that C encoder once
and returns a function giving the same text as ``JSONEncoder(...).encode``
(a unit test compares them).  ``c_make_encoder`` is the ``json`` module's own
accelerator, not a public name: where it is missing or takes other
arguments, the plain encoder is used, slower and identical.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable

try:
    import orjson
except ImportError:  # optional at run time: the standard library gives the same values, slower
    orjson = None


def loads(line: str) -> object:
    """``json.loads``, faster: orjson first, the standard library where orjson refuses (and for the error).

    What the log's and ``mllog.log``'s readers parse a line with (``results/logmodel.py``,
    ``results/mllog_format.py``)."""
    if orjson is not None:
        try:
            return orjson.loads(line)
        except ValueError:  # orjson.JSONDecodeError is one; json decides what the line really is
            pass
    return json.loads(line)


def line_encoder(
    item_separator: str = ", ",
    key_separator: str = ": ",
    default: Callable[[object], object] | None = None,
    allow_nan: bool = True,
) -> Callable[[object], str]:
    """A function ``obj -> str`` equal to ``json.JSONEncoder(separators=..., default=..., allow_nan=...).encode``.

    ASCII output (``ensure_ascii``), keys in their order, no indent.  No
    check for circular references: the writers' records are trees (a cycle
    would end in ``RecursionError`` instead of ``ValueError``).
    """
    plain = json.JSONEncoder(separators=(item_separator, key_separator), default=default, allow_nan=allow_nan)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    try:
        encoder = make(None, plain.default, json.encoder.encode_basestring_ascii, None, key_separator,
                       item_separator, False, False, allow_nan)  # fmt: skip
    except TypeError:  # another Python's accelerator with another signature
        return plain.encode

    def encode(obj: object) -> str:
        if isinstance(obj, str):  # the C encoder takes containers and numbers; a bare string as encode does
            return plain.encode(obj)
        return "".join(encoder(obj, 0))

    return encode


def object_text(encode: Callable[[object], str], fields: dict, encoded: dict[str, str]) -> str:
    """The JSON object of ``fields`` in their order, the members named in ``encoded`` taken as the JSON text given.

    For a writer that gets part of a line already encoded by its sender (a leader encodes its epochs, so that
    rank 0 only joins texts): the text equals ``encode(fields)`` with each such member's value replaced by its
    text (a unit test checks it).  ``encode`` is a :func:`line_encoder` with ``","`` and ``":"`` separators;
    the texts are not parsed here: whoever made them answers for them.
    """
    parts: list[str] = []
    run: dict = {}
    for name, value in fields.items():
        text = encoded.get(name)
        if text is None:
            run[name] = value
            continue
        if run:
            parts.append(encode(run)[1:-1])
            run = {}
        parts.append(f"{encode(name)}:{text}")
    if run:
        parts.append(encode(run)[1:-1])
    return "{" + ",".join(parts) + "}"
