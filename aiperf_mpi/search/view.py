"""The search's view of the history: bounded on a leader, sent as a delta whose size does not grow.

What the search reads (:mod:`aiperf_mpi.search.bayesian`) is the *view*

    V(t) = top-K trained models by search accuracy  ∪  the R most recent trained models

(K = max(parents, working_set / 2), R = working_set / 2: :class:`ViewBounds`),
the members' records, the history's length (the anchors are re-chosen when
it doubles) and whether a graph was seen before.  Nothing else of the
history is read, so a leader keeps V and the length, not a replica, and the
master sends each group only the members of V it lacks.

Why the delta is "the members of V(now) with id ≥ what the group has seen".
Records are immutable and only appended, the ranking key (−score, id) and
the recency key (id) are strict total orders, and a failed model is in
neither ranking.  So membership is monotone: a record can enter V only when
it is appended, and once K better or R newer trained records exist it is
out for good — it never re-enters.

Claim: if a leader held L = V(t₀) after its previous update (at history
length n₀ = the group's ``seen``), then adding D = {r ∈ V(t) : r.id ≥ n₀}
and pruning to the top-K ∪ recent-R *of what it holds* leaves exactly V(t).
Proof.  Let S = L ∪ D.  (i) V(t) ⊆ S: a member of V(t) with id ≥ n₀ is in D;
one with id < n₀ existed at t₀ and, being in V at t and never re-entering,
was in V at t₀, so it is in L.  (ii) S ⊆ H(t), the whole history at t.  A
set that lies between the global top-K (⊆ V(t) ⊆ S) and H(t) has that same
top-K, because its K best elements under a total order are the global K
best; likewise its R newest trained records are the global R newest.  So
prune(S) = top-K(H(t)) ∪ recent-R(H(t)) = V(t).  By induction from the empty
view (seen = 0), every update leaves the leader's view equal to the master's.
Adding D one record at a time in id order with eviction gives the same
result as pruning once, since an evicted record only falls further behind.

Cost: the master finds D by walking V from its newest member down to
``seen`` — O(K + R) per message, never the O(G) records appended since the
group's last update — and a record's compressed form is made once, on its
first send.  The hash of every graph ever proposed stays only on the master,
which decides duplicates; a leader remembers a bounded set
(:attr:`SearchView.KNOWN_HASHES`) so that most are caught before asking.
"""

from __future__ import annotations

import bisect
import io
import math
import pickle
import struct
import zlib
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, TypeVar

from aiperf_mpi.search.history import FAILED, TRAINED, ModelRecord, graph_hash

T = TypeVar("T")
LEVEL = 6
"""zlib level of a wire record: made once per record; 6 costs ≈ 20 % more time than 1 for ≈ 20 % fewer bytes"""


@dataclass(frozen=True)
class ViewBounds:
    """How many best (``top``) and most recent (``recent``) trained models the view holds."""

    top: int
    recent: int

    def __post_init__(self) -> None:
        if self.top < 1 or self.recent < 0:
            raise ValueError(f"a view needs top ≥ 1 and recent ≥ 0, got {self.top} and {self.recent}")


@dataclass(frozen=True)
class ViewUpdate:
    """What a leader applies: the view members it lacks (compressed) and the history's length."""

    records: list[bytes] = field(default_factory=list)
    """wire records (:func:`wire_record`: the id, then :meth:`WireCodec.encode` of :func:`search_fields`), in
    id order"""
    length: int = 0
    """records in the whole history (the search re-chooses its anchors when this doubles)"""
    dictionary: bytes = b""
    """the compression dictionary, sent once per group (with its first update that needs it)"""


class WireCodec:
    """zlib with an optional preset dictionary: the run's first trained graph.

    Children are a few morphisms away from the models before them, so a
    ResNet-50 record (17 kB of graph JSON) compresses to ≈ 2 kB alone but to
    ≈ 0.5 kB against the seed's graph.  A stream made with the dictionary
    names it (zlib's FDICT flag), so decoding one without it fails loudly.
    """

    def __init__(self, dictionary: bytes = b"") -> None:
        self.dictionary = dictionary
        # loading a 17 kB dictionary costs more than compressing one record: load it once, copy the state
        self._primed = zlib.compressobj(LEVEL, zdict=dictionary) if dictionary else None
        self._dictionary_id = zlib.adler32(dictionary).to_bytes(4, "big")

    def encode(self, value: object) -> bytes:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        if self._primed is None:
            return zlib.compress(data, LEVEL)
        compressor = self._primed.copy()
        return compressor.compress(data) + compressor.flush()

    def decode(self, blob: bytes) -> object:
        """The value of a wire record's body, or ``ValueError``: a whole zlib stream (its checksum read) that
        inflates to at most :data:`MAX_RECORD` bytes, and a pickle of numbers, text and tuples only."""
        try:
            decompressor = zlib.decompressobj(zdict=self.dictionary) if self.dictionary else zlib.decompressobj()
            data = decompressor.decompress(blob, MAX_RECORD)
            if decompressor.unconsumed_tail or not decompressor.eof:
                raise ValueError("a wire record is cut short or inflates past its bound")
            return _FieldsOnly(io.BytesIO(data)).load()
        except zlib.error as exc:
            raise ValueError(f"a wire record does not decode ({exc}): was its dictionary sent?") from None
        except (pickle.UnpicklingError, EOFError, TypeError, IndexError, MemoryError) as exc:
            raise ValueError(f"a wire record does not unpickle ({type(exc).__name__}: {exc})") from None

    def decode_record(self, record: bytes) -> tuple[int, tuple]:
        """A wire record's model id and search fields (:func:`wire_record`)."""
        return _ID.unpack_from(record)[0], self.decode(record[_ID.size :])  # type: ignore[return-value]

    def accepts(self, body: bytes) -> bool:
        """Whether a leader's compressed record is a zlib stream that every holder of this codec can decode.

        Reads the stream's two-byte header and, when it names a preset
        dictionary (FDICT), the dictionary's Adler-32: a record made without
        a dictionary decodes with or without one, a record made with another
        dictionary than the run's would fail on every leader.  The body is
        not inflated here — that would cost rank 0 a fifth of compressing it;
        what a leader puts in its record only steers the search (the module
        docstring of :mod:`aiperf_mpi.job.messages`, ``Result.view_record``),
        and a record that passes and still does not decode is left out by
        each leader that receives it (:meth:`SearchView.apply`).
        """
        if type(body) is not bytes or len(body) < 2:
            return False
        method, flags = body[0], body[1]
        if method & 0x0F != 8 or method >> 4 > 7 or (method << 8 | flags) % 31:
            return False
        if flags & 0x20:
            return bool(self.dictionary) and body[2:6] == self._dictionary_id
        return True


class _FieldsOnly(pickle.Unpickler):
    """Unpickles numbers, text, None and tuples, and refuses anything that names a class or a function.

    A leader's record (``messages.Result.view_record``) goes to every other leader as its leader made it;
    search fields need no global, so a record that asks for one is refused instead of run.
    """

    def find_class(self, module: str, name: str) -> object:
        raise ValueError(f"a wire record holds only numbers and text, not {module}.{name}")


MAX_RECORD = 64 * 2**20
"""bytes a wire record may inflate to (a ResNet-50's is ≈ 17 kB): a record that claims more is refused"""

_ID = struct.Struct("<Q")
"""a wire record's first 8 bytes: the model's id, which only the master knows (it numbers models as they end)"""


def wire_record(model_id: int, body: bytes) -> bytes:
    """A view member as it travels: its id, then its search fields as :meth:`WireCodec.encode` made them.

    The id is apart so that a leader can compress its own model's record
    (``messages.Result.view_record``) before the master numbers the model:
    rank 0 then only prefixes eight bytes (BENCHMARKS.md, the master).
    """
    return _ID.pack(model_id) + body


def search_fields(record: ModelRecord, key: str | None = None) -> tuple:
    """What the search and the leader read of a record besides its id: parent, graph, outcome, weights file, hash.

    Epochs, timings, operation counts, hyper-parameters and the description
    stay in the event log: nothing on a leader reads them.
    """
    return (record.parent, record.graph, record.status, record.accuracy, record.predicted_accuracy, record.weights,
            key or record.graph_hash)  # fmt: skip


_FIELD_TYPES = ((int, type(None)), (str,), (str,), (float, int, type(None)), (float, int, type(None)), (str,), (str,))
"""what each of :func:`search_fields` must be, read back: anything else is refused before the search sees it"""


def from_search_fields(model_id: int, fields: tuple) -> tuple[ModelRecord, str]:
    """A record with the fields :func:`search_fields` kept (the rest empty), and its graph hash.

    ``ValueError`` unless ``fields`` is a tuple of the seven, each of its type (a leader relays the records
    other leaders made: ``messages.Result.view_record``).
    """
    if type(fields) is not tuple or len(fields) != len(_FIELD_TYPES) or not all(
            type(value) in types for value, types in zip(fields, _FIELD_TYPES, strict=True)):  # fmt: skip
        raise ValueError(f"model {model_id}: a view record's fields are not the seven of search_fields")
    parent, graph, status, accuracy, predicted, weights, key = fields
    record = ModelRecord(id=model_id, parent=parent, graph=graph, status=status, accuracy=accuracy,
                         predicted_accuracy=predicted, weights=weights)  # fmt: skip
    return record, key


class ViewIndex(Generic[T]):
    """Membership of the view over records added in id order, with a payload per member.

    ``add`` returns the ids that left the view; by the monotonicity argued
    in the module docstring they never come back.  Members iterate in id
    order (a dict keeps insertion order, and ids arrive ascending).
    """

    def __init__(self, bounds: ViewBounds) -> None:
        self.bounds = bounds
        self._top: list[tuple[float, int]] = []  # (-score, id), sorted, at most bounds.top
        self._top_ids: set[int] = set()
        self._recent: deque[int] = deque()  # ids, ascending, at most bounds.recent
        self._members: dict[int, T] = {}
        self._last = -1

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, model_id: int) -> bool:
        return model_id in self._members

    def __getitem__(self, model_id: int) -> T:
        return self._members[model_id]

    def ids(self) -> list[int]:
        """Member ids, ascending."""
        return list(self._members)

    def add(self, model_id: int, score: float | None, payload: T) -> list[int]:
        """Add the next record (ids ascending); an unranked one (score None) never enters."""
        if model_id <= self._last:
            raise ValueError(f"view records arrive in id order: {model_id} after {self._last}")
        self._last = model_id
        if score is None:
            return []
        self._members[model_id] = payload
        out: list[int] = []
        self._recent.append(model_id)
        if len(self._recent) > self.bounds.recent:
            out.append(self._recent.popleft())
        bisect.insort(self._top, (-score, model_id))
        self._top_ids.add(model_id)
        if len(self._top) > self.bounds.top:
            out.append(self._top.pop()[1])
            self._top_ids.discard(out[-1])
        # recent holds the newest trained ids, so a trained id is in it exactly when it is ≥ its first
        oldest = self._recent[0] if self._recent else model_id + 1
        leaving = [i for i in dict.fromkeys(out) if i not in self._top_ids and i < oldest]
        for dropped in leaving:
            del self._members[dropped]
        return leaving

    def best(self, count: int) -> list[int]:
        """The ``count`` best member ids, best first (``count`` ≤ ``bounds.top``)."""
        return [model_id for _, model_id in self._top[:count]]

    def recent(self, count: int) -> list[int]:
        """The ``count`` newest member ids, oldest first (``count`` ≤ ``bounds.recent``)."""
        return list(self._recent)[-count:] if count > 0 else []

    def payloads_since(self, seen: int) -> list[T]:
        """The payloads of :meth:`since`, ascending; all of them at once when every member is that new.

        At 65,536 groups a group's previous update is older than every member
        (a view's worth of models finishes in well under its time between
        two Works): the common case is a copy of the members, not a walk.
        """
        members = self._members
        if not members or next(iter(members)) >= seen:
            return list(members.values())
        return [payload for _, payload in self.since(seen)]

    def since(self, seen: int) -> Iterator[tuple[int, T]]:
        """Members with id ≥ ``seen``, ascending: walks down from the newest, stops at ``seen``."""
        found = []
        for model_id in reversed(self._members):
            if model_id < seen:
                break
            found.append((model_id, self._members[model_id]))
        return reversed(found)


class _Entry:
    """A view member on the master: its id, its search fields and, once compressed, its wire record."""

    __slots__ = ("blob", "fields", "model_id")

    def __init__(self, model_id: int, fields: tuple) -> None:
        self.model_id = model_id
        self.fields = fields
        self.blob: bytes | None = None


class MasterHistory:
    """The master's history: O(1) state per record, the view in full, and every graph hash.

    Per record the master keeps only its graph hash (duplicates are decided
    here, for the whole run); the records themselves are in the event log.
    The view's members keep their search fields until they leave it.
    """

    def __init__(self, bounds: ViewBounds) -> None:
        self.view: ViewIndex[_Entry] = ViewIndex(bounds)
        self.length = 0
        self.trained = 0
        self.failed = 0
        self.best_observed: tuple[float, int] | None = None
        """(accuracy, id) of the model with the best observed validation accuracy"""
        self.codec = WireCodec()
        self._hashes: set[str] = set()
        self._blobs: dict[int, bytes | None] = {}
        """the view's members in id order → their wire record, None until compressed (:meth:`update`'s copy):
        at 65,536 groups every Work carries the whole view, and one copy of this dict's values costs a tenth of
        a walk over the members' entries.  Only the loop's thread changes it (the I/O thread fills entries)"""

    def __len__(self) -> int:
        return self.length

    @property
    def next_id(self) -> int:
        return self.length

    def append(self, record: ModelRecord, key: str | None = None, body: bytes = b"") -> list[int]:
        """Add the next record; returns the ids that left the view.

        ``key``: its graph hash, if known.  ``body``: its search fields as its
        leader compressed them (``messages.Result.view_record``, checked by
        :meth:`WireCodec.accepts`); then rank 0 compresses nothing for it.
        """
        if record.id != self.length:
            raise ValueError(f"history is append-only: expected id {self.length}, got {record.id}")
        if record.parent is not None and not 0 <= record.parent < record.id:
            raise ValueError(f"model {record.id}: parent {record.parent} is not an earlier model")
        self.length += 1
        key = key or record.graph_hash
        self._hashes.add(key)
        if record.status == TRAINED:
            self.trained += 1
            observed = record.accuracy
            if observed is not None and math.isfinite(observed):
                if self.best_observed is None or observed > self.best_observed[0]:
                    self.best_observed = (observed, record.id)
        elif record.status == FAILED:
            self.failed += 1
        score = record.search_accuracy
        if score is not None and not self.codec.dictionary:
            self.codec = WireCodec(record.graph.encode())  # the run's first trained graph, fixed from now on
        entry = _Entry(record.id, search_fields(record, key))
        left = self.view.add(record.id, score, entry)
        for model_id in left:
            self._blobs.pop(model_id, None)
        if record.id in self.view:
            if body:
                entry.blob = wire_record(record.id, body)
            self._blobs[record.id] = entry.blob
        return left

    def add_hash(self, key: str) -> None:
        self._hashes.add(key)

    def has_hash(self, key: str) -> bool:
        return key in self._hashes

    @property
    def hashes(self) -> int:
        return len(self._hashes)

    def update(self, seen: int, with_dictionary: bool, later: list[Callable[[], None]] | None = None) -> ViewUpdate:
        """The view members with id ≥ ``seen``, compressed, and the length (see the module docstring).

        A member is compressed once, by its leader (``messages.Result.view_record``)
        or else on its first send (≈ 0.1 ms for a ResNet-50 record: a resumed
        run's history, a leader that sent none).  Given ``later``, the members not yet compressed
        are left empty in the update and a call that fills them in is
        appended to ``later``: the master's I/O thread runs it before the
        reply leaves (zlib lets go of the GIL, so it runs beside the loop).
        """
        if not 0 <= seen <= self.length:
            raise ValueError(f"no update since {seen}: the history has {self.length}")
        blobs = self._blobs
        if not blobs or next(iter(blobs)) >= seen:  # every member is new to the group: the common case
            records = list(blobs.values())
            missing = []
            if None in records:  # the newest, mostly: found by the list's own search, not a walk
                ids = list(blobs)
                start = 0
                while True:
                    try:
                        index = records.index(None, start)
                    except ValueError:
                        break
                    start = index + 1
                    entry = self.view[ids[index]]
                    if entry.blob is None:
                        missing.append((index, entry))
                    else:  # compressed by the I/O thread since: kept here from now on
                        records[index] = blobs[ids[index]] = entry.blob
        else:
            entries = self.view.payloads_since(seen)
            records = [entry.blob for entry in entries]
            missing = [(index, entries[index]) for index, blob in enumerate(records) if blob is None]
        if missing:
            if later is None:
                self._fill(records, missing)
            else:
                for index, _ in missing:
                    records[index] = b""
                later.append(partial(self._fill, records, missing))
        dictionary = self.codec.dictionary if with_dictionary else b""
        return ViewUpdate(records, self.length, dictionary)

    def _blob(self, entry: _Entry) -> bytes:
        """The member's wire record, compressed now if it was never sent (from either thread: same bytes)."""
        blob = entry.blob
        if blob is None:
            blob = entry.blob = wire_record(entry.model_id, self.codec.encode(entry.fields))
        return blob

    def _fill(self, records: list[bytes], missing: list[tuple[int, _Entry]]) -> None:
        for index, entry in missing:
            records[index] = self._blob(entry)

    def best_ids(self, count: int) -> list[int]:
        return self.view.best(count)

    def record(self, model_id: int) -> ModelRecord:
        """A view member's search fields as a record (for tests and the resume check)."""
        return from_search_fields(model_id, self.view[model_id].fields)[0]


class SearchView:
    """A leader's bounded view of the history: what the search reads, nothing more.

    The search uses it like a :class:`~aiperf_mpi.search.history.History`:
    ``best``, ``recent``, ``[id]`` (members only), ``len`` (the whole
    history's length, from the master) and ``contains_graph``.  What a
    leader does not see: models outside the view (the search never reads
    them), the records' epochs, timings and op counts (never read either) and
    the hashes of every graph ever proposed — the master decides duplicates
    and answers Duplicate; :meth:`remember` keeps the leader's own proposals
    and the master's refusals, so the search skips them next time.
    """

    KNOWN_HASHES = 4096
    """graph hashes a leader remembers beyond its view's (its proposals, the master's refusals)"""

    def __init__(self, bounds: ViewBounds) -> None:
        self.bounds = bounds
        self._index: ViewIndex[ModelRecord] = ViewIndex(bounds)
        self._length = 0
        self._hash_of: dict[int, str] = {}
        self._member_hashes: Counter[str] = Counter()
        self._known: OrderedDict[str, None] = OrderedDict()
        self.codec = WireCodec()
        self.unreadable = 0
        """records of the updates applied that did not decode, left out (:meth:`apply`)"""
        self.last_unreadable = ""

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, model_id: int) -> ModelRecord:
        try:
            return self._index[model_id]
        except KeyError:
            raise KeyError(f"model {model_id} is not in this leader's view") from None

    def __iter__(self) -> Iterator[ModelRecord]:
        """The members, in id order."""
        return (self._index[i] for i in self._index.ids())

    @property
    def next_id(self) -> int:
        return self._length

    def ids(self) -> list[int]:
        return self._index.ids()

    def apply(self, update: ViewUpdate) -> int:
        """Add the records of an update and prune; returns how many were new.

        A record that does not decode (made by another group's leader and relayed as it was:
        ``messages.Result.view_record``) is left out and counted in :attr:`unreadable`, with its error in
        :attr:`last_unreadable`: the search sees one model fewer, the group goes on.
        """
        if update.dictionary:
            self.codec = WireCodec(update.dictionary)
        added = 0
        for blob in update.records:
            try:
                record, key = from_search_fields(*self.codec.decode_record(blob))
            except (ValueError, struct.error) as exc:
                self.unreadable += 1
                self.last_unreadable = str(exc)
                continue
            if record.id in self._index:
                continue
            self._add(record, key)
            added += 1
        self._length = max(self._length, update.length)
        return added

    def own_record(self, record: ModelRecord) -> bytes:
        """This group's finished model's search fields, compressed with the view's codec (its id is not read).

        Sent in the model's Result (``messages.Result.view_record``): rank 0
        prefixes the id it gives the model and sends the record to every
        group as it is, so the compression — ≈ 0.1 ms of CPU a model, which
        rank 0's I/O thread did for 65,536 groups' models while waiting for
        the interpreter lock — is done once per model by the group that made
        it.  Before this leader has the run's dictionary the record is
        compressed without it (≈ 4× larger), which every leader decodes.
        """
        return self.codec.encode(search_fields(record))

    def append(self, record: ModelRecord) -> ModelRecord:
        """Add one complete record directly (``tell()`` in tests and benchmarks)."""
        if record.id < self._length:
            raise ValueError(f"view is append-only: expected id ≥ {self._length}, got {record.id}")
        self._add(record, record.graph_hash)
        self._length = record.id + 1
        return record

    def _add(self, record: ModelRecord, key: str) -> None:
        for dropped in self._index.add(record.id, record.search_accuracy, record):
            if dropped != record.id:
                self._forget(dropped)
        if record.id in self._index:
            self._hash_of[record.id] = key
            self._member_hashes[key] += 1
        else:  # never entered (a failed model): its graph is still known
            self.remember(key)

    def _forget(self, model_id: int) -> None:
        key = self._hash_of.pop(model_id)
        self._member_hashes[key] -= 1
        if self._member_hashes[key] <= 0:
            del self._member_hashes[key]

    def remember(self, key: str) -> None:
        """Remember a graph hash (a proposal of ours, a Duplicate answer), the oldest forgotten first."""
        self._known[key] = None
        self._known.move_to_end(key)
        while len(self._known) > self.KNOWN_HASHES:
            self._known.popitem(last=False)

    def contains_graph(self, graph_json: str) -> bool:
        key = graph_hash(graph_json)
        return key in self._member_hashes or key in self._known

    def best(self, count: int = 1) -> list[ModelRecord]:
        return [self._index[i] for i in self._index.best(count)]

    def recent(self, count: int) -> list[ModelRecord]:
        return [self._index[i] for i in self._index.recent(count)]
