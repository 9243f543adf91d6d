"""The append-only record of every model the benchmark trained (or failed to).

A record is immutable and appended once its outcome is known.  The run's
complete history lives in the event log (``model_done`` / ``model_failed``);
in memory, the master keeps only what it still needs of each record and a
group leader only the records its search reads (:mod:`aiperf_mpi.search.view`).
:class:`History` is the complete in-memory form: what tests and the
benchmarks drive the search with, and what :mod:`~aiperf_mpi.search.view`
is checked against.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from dataclasses import fields as dataclass_fields

TRAINED = "trained"
FAILED = "failed"
STATUSES = (TRAINED, FAILED)


@dataclass(frozen=True)
class ModelRecord:
    """One model: where it came from, what it was, how it did, what it cost."""

    id: int
    parent: int | None
    graph: str
    """canonical graph JSON (:func:`aiperf_mpi.graph.model.to_json`)"""
    status: str = TRAINED
    hparams: dict = field(default_factory=dict)
    epochs: list[dict] = field(default_factory=list)
    accuracy: float | None = None
    """best observed validation accuracy (the score uses only this)"""
    predicted_accuracy: float | None = None
    """extrapolated final accuracy during warm-up rounds (fed to the search only)"""
    ops: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    description: str = ""
    weights: str = ""
    """file of the trained weights, relative to the run directory ('' when not kept)"""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def search_accuracy(self) -> float | None:
        """What the search learns from: the prediction when there is one, else the observation.

        None for a failed model and for a non-finite value (a NaN loss can
        give a NaN accuracy): such a model is never ranked, since one NaN
        would break the order every ranking here relies on.
        """
        if self.status != TRAINED:
            return None
        value = self.predicted_accuracy if self.predicted_accuracy is not None else self.accuracy
        return value if value is not None and math.isfinite(value) else None

    @property
    def graph_hash(self) -> str:
        return graph_hash(self.graph)

    def to_dict(self) -> dict:
        return asdict(self)

    def fields(self) -> dict:
        """The fields as a dict without copying them (``to_dict`` deep-copies): to serialise at once, not to keep."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, data: dict) -> ModelRecord:
        return cls(**data)


_FIELDS = tuple(f.name for f in dataclass_fields(ModelRecord))


HASH_CHARS = 20
"""hex digits of a graph's sha256 kept as its identity for duplicate detection (80 bits)"""


def graph_hash(graph_json: str) -> str:
    """A short stable identity of an architecture (for duplicate detection): its sha256's first hex digits.

    The prefix of the digest the event log records for each graph (``model_proposed``'s ``graph_sha256``), so
    the master hashes a proposed graph once, not twice (:func:`key_of_digest`).  Runs logged before this held
    a sha1 prefix in ``model_failed``'s ``graph_hash``; only the duplicate check on a resume of one reads it.
    """
    return key_of_digest(hashlib.sha256(graph_json.encode()).hexdigest())


def key_of_digest(sha256_hex: str) -> str:
    """The :func:`graph_hash` of the graph whose UTF-8 text has this sha256 (hex)."""
    return sha256_hex[:HASH_CHARS]


class History:
    """Append-only list of :class:`ModelRecord`, with a ranking kept incrementally."""

    def __init__(self, records: Iterable[ModelRecord] = ()) -> None:
        self._records: list[ModelRecord] = []
        self._dicts: list[dict] = []  # records are immutable: their dict form is made once
        self._ranked: list[tuple[float, int]] = []  # (-accuracy, id), sorted
        self._hashes: set[str] = set()
        for record in records:
            self.append(record)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, model_id: int) -> ModelRecord:
        return self._records[model_id]

    def __iter__(self) -> Iterator[ModelRecord]:
        return iter(self._records)

    @property
    def next_id(self) -> int:
        return len(self._records)

    def append(self, record: ModelRecord) -> ModelRecord:
        """Add the next record; its id must be :attr:`next_id` and its parent an earlier id."""
        if record.id != self.next_id:
            raise ValueError(f"history is append-only: expected id {self.next_id}, got {record.id}")
        if record.parent is not None and not 0 <= record.parent < record.id:
            raise ValueError(f"model {record.id}: parent {record.parent} is not an earlier model")
        self._records.append(record)
        self._dicts.append(record.to_dict())
        self._hashes.add(record.graph_hash)
        score = record.search_accuracy
        if score is not None:
            bisect.insort(self._ranked, (-score, record.id))
        return record

    def contains_graph(self, graph_json: str) -> bool:
        return graph_hash(graph_json) in self._hashes

    def best(self, count: int = 1) -> list[ModelRecord]:
        """The ``count`` trained models with the highest search accuracy."""
        return [self._records[i] for _, i in self._ranked[:count]]

    def recent(self, count: int) -> list[ModelRecord]:
        """The ``count`` most recent trained models, oldest first."""
        found: list[ModelRecord] = []
        index = len(self._records) - 1
        while index >= 0 and len(found) < count:
            record = self._records[index]
            if record.search_accuracy is not None:
                found.append(record)
            index -= 1
        return found[::-1]

    def since(self, index: int) -> list[dict]:
        """Entries ``index…`` as plain dicts: the delta a replica has not seen (do not modify them)."""
        if not 0 <= index <= len(self._records):
            raise ValueError(f"no entries since {index}: the history has {len(self._records)}")
        return self._dicts[index:]

    def extend(self, delta: Iterable[dict]) -> int:
        """Apply a delta from :meth:`since`; entries already held are checked, not duplicated."""
        added = 0
        for data in delta:
            record = ModelRecord.from_dict(data)
            if record.id < len(self._records):
                if self._records[record.id] != record:
                    raise ValueError(f"replica diverged at model {record.id}")
                continue
            self.append(record)
            added += 1
        return added

    def to_list(self) -> list[dict]:
        return self.since(0)
