"""The job's messages on the MPI wire: a tuple of each dataclass's fields, not the pickled dataclass.

mpi4py pickles what it sends.  A pickled dataclass names its class, and
unpickling it looks the class up through the import machinery
(``find_class``: ``__import__`` of its module, then the attribute) and sets
its state field by field; in the master bench at 65,536 groups that was most
of what receiving a message cost rank 0 (BENCHMARKS.md, the master).  A tuple
of numbers, text, bytes, lists and dicts unpickles with no lookup, and the
MPI tag already says which message it is (:data:`~aiperf_mpi.job.messages.TAGS`).
So each side sends :func:`to_wire` of a message and rebuilds it with
:func:`from_wire` and the tag.  A field holding another message (an
EpochDone's ``next_start``, a Work's or Stop's ``view``) travels as a nested
tuple.  The local transport (threads of one process) passes the objects
themselves and uses neither.

Rank 0 unpickles what a leader sent with :func:`plain_loads`, which refuses
any stream that names a class or a function: a leader that is broken or
forged cannot make rank 0 build an object, let alone run code (mpi4py's own
``recv`` would unpickle anything).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import fields, is_dataclass
from operator import attrgetter

from aiperf_mpi.job.messages import (
    TAGS,
    TO_MASTER,
    UNREADABLE,
    VETTED,
    EpochDone,
    EpochStarted,
    GroupLost,
    Stop,
    VettedEpoch,
    Work,
)
from aiperf_mpi.search.view import ViewUpdate


class WireFormatError(ValueError):
    """What arrived is not the message its tag names (a tuple of that many fields)."""


class _PlainOnly(pickle.Unpickler):
    """Numbers, text, bytes, None, lists, tuples and dicts; a stream that names any global is refused."""

    def find_class(self, module: str, name: str) -> object:
        raise WireFormatError(f"it names {module}.{name}: a message holds numbers, text, bytes, lists, tuples and "
                              "dicts only")  # fmt: skip


def plain_loads(data: bytes | bytearray) -> object:
    """What a leader sent, unpickled without building any object but plain values; :class:`WireFormatError` if not.

    ≈ 2 µs more a message than ``pickle.loads`` (the unpickler object): the price of rank 0 not running what a
    leader's bytes ask for.
    """
    try:
        return _PlainOnly(io.BytesIO(data)).load()
    except WireFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 — whatever a damaged stream raises: it is that leader's, not the run's
        raise WireFormatError(f"not a pickle of plain values ({type(exc).__name__}: {exc})"[:500]) from None


class _Shape:
    """One message class's fields in order, and which of them hold a nested message."""

    def __init__(self, kind: type, nested: dict[str, type]) -> None:
        self.names = tuple(f.name for f in fields(kind))
        self.nested = tuple((self.names.index(name), inner) for name, inner in nested.items())
        getter = attrgetter(*self.names)
        # attrgetter of one name returns the value, not a 1-tuple
        self.values = getter if len(self.names) > 1 else lambda message: (getter(message),)


def _shapes() -> dict[type, _Shape]:
    nested: dict[type, dict[str, type]] = {EpochDone: {"next_start": EpochStarted}, Work: {"view": ViewUpdate},
                                           Stop: {"view": ViewUpdate},
                                           VettedEpoch: {"next_start": EpochStarted}}  # fmt: skip
    shapes = {kind: _Shape(kind, nested.get(kind, {})) for kind in [*TAGS, ViewUpdate]}
    for shape in shapes.values():  # every message field that is a dataclass must be declared nested above
        assert all(inner in shapes for _, inner in shape.nested)
    return shapes


SHAPES = _shapes()
"""Per message class (and the nested ViewUpdate): built once at import, never changed"""


def to_wire(message: object) -> tuple:
    """The message's fields in their declared order; a nested message as its own tuple, None as None."""
    shape = SHAPES[type(message)]
    values = shape.values(message)
    if not shape.nested:
        return values
    values = list(values)
    for index, _ in shape.nested:
        inner = values[index]
        if inner is not None:
            values[index] = to_wire(inner)
    return tuple(values)


def from_wire(kind: type, data: object) -> object:
    """The ``kind`` message whose :func:`to_wire` is ``data``; :class:`WireFormatError` if it cannot be.

    The fields are set without calling the dataclass's ``__init__`` (a frozen one sets each through
    ``object.__setattr__``: 2 µs a message), after the count is checked, so a message is built from exactly its
    fields.  Their values are not checked here: the master checks what it reads, as it did of a pickled message.
    """
    shape = SHAPES.get(kind)
    if shape is None:
        raise WireFormatError(f"{getattr(kind, '__name__', kind)!r} is not a message")
    if type(data) is not tuple or len(data) != len(shape.names):
        raise WireFormatError(f"{kind.__name__} is a tuple of its {len(shape.names)} fields, not "
                              f"{_describe(data)}")  # fmt: skip
    if shape.nested:
        values = list(data)
        for index, inner in shape.nested:
            if values[index] is not None:
                values[index] = from_wire(inner, values[index])
        data = tuple(values)
    message = object.__new__(kind)
    message.__dict__.update(zip(shape.names, data, strict=True))
    return message


LEADER_KINDS = {tag: kind for kind, tag in TAGS.items() if kind in TO_MASTER}
"""the tags a leader sends, and their messages (rank 0 and the relays take no other from a leader)"""


def leader_message(source: int, tag: int, data: bytes | bytearray) -> object:
    """What leader rank ``source`` sent under ``tag``, rebuilt; a :class:`GroupLost` saying why, if it cannot be.

    The one reading of a leader's bytes, on rank 0 and on a relay: a message that is not its tag's, or does not
    unpickle to plain values (:func:`plain_loads`), costs its group (``master.refuse``), not the run.
    """
    kind = LEADER_KINDS.get(tag)
    try:
        if kind is None:
            raise WireFormatError(f"tag {tag} is no message a leader sends")
        return from_wire(kind, plain_loads(data))
    except WireFormatError as exc:
        return GroupLost([], f"rank {source} sent an unreadable {getattr(kind, '__name__', 'message')}: {exc}")


VETTED_KINDS = {TAGS[kind]: kind for kind in VETTED}
"""the tags of the vetted forms, which rank 0 takes only in a relay's batch"""


def relayed_message(tag: int, payload: object) -> object:
    """Rank 0's reading of one item of a relay's batch (its tag and payload: ``vetting.relay_item``).

    A vetted form, rebuilt; a leader's message passed on as its bytes, read as :func:`leader_message` reads one
    sent to rank 0 (a :class:`GroupLost` if it cannot be); a relay's report that it could not read one, as a
    :class:`GroupLost`.  A payload that is none of these is a broken relay: ``WireFormatError``.
    """
    if tag == UNREADABLE:
        return GroupLost([], str(payload))
    kind = VETTED_KINDS.get(tag)
    if kind is not None:
        return from_wire(kind, payload)
    if type(payload) is not tuple or len(payload) != 2 or type(payload[0]) is not int \
            or type(payload[1]) is not bytes:  # fmt: skip
        raise WireFormatError(f"a relayed leader message is (its rank, its bytes), not {_describe(payload)}")
    return leader_message(payload[0], tag, payload[1])


def _describe(data: object) -> str:
    if type(data) is tuple:
        return f"a tuple of {len(data)}"
    if is_dataclass(data):
        return f"a pickled {type(data).__name__}"
    return f"a {type(data).__name__}"
