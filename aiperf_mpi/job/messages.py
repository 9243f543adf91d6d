"""The typed messages between the master and the group leaders, and their MPI tags.

Leader → master: Ready, Proposed, EpochStarted, EpochDone, Result, Failed (and MonitorSample
from a node's monitor thread); master → leader: Work, Accepted or Duplicate
(the answer to each Proposed), Stop.  Each is a dataclass sent with mpi4py's
pickle-based ``isend``/``recv`` under its own tag, so the master can probe by
tag and a message is never parsed from a string.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from aiperf_mpi.results import runlog
from aiperf_mpi.search.view import ViewUpdate


@dataclass(frozen=True)
class Ready:
    """A leader is idle and asks for work (sent once at start)."""

    group: int
    ranks: int
    host: str
    peak: dict | None = None
    """the group's measured matrix-multiply throughput (``aiperf_mpi.train.peak``), or None if not probed"""


@dataclass(frozen=True)
class Work:
    """Train one model: the view members the leader lacks, and the round number."""

    task_id: int
    view: ViewUpdate
    """the search's view members the leader has not seen, and the history's length (``MasterHistory.update``)"""
    round: int
    seed_model: bool = False
    """no trained model exists yet: train the seed architecture"""
    seconds_left: float | None = None
    """seconds to the time limit when the master sent this (its clock): the leader starts no epoch of the
    task that it expects to end after the limit; None: no such limit"""


@dataclass(frozen=True)
class Proposed:
    """The leader chose the task's model; it trains it only once the master answers Accepted.

    The master holds the hash of every graph of the run and answers
    Duplicate for one it has seen (the seed, parent None, is always
    accepted); the leader then asks its search again.
    """

    task_id: int
    parent: int | None
    graph: str
    hparams: dict
    description: str
    search_info: dict = field(default_factory=dict)
    morphs: list[dict] | None = None
    """the morphisms that made the child from its parent's stored graph (``Morphed.steps``); None for the seed"""
    seed: dict | None = None
    """the seed's record (``aiperf_mpi.graph.lineage.seed_record``) when the model is the seed, else None:
    with ``morphs`` and the kernel size, what a verifier needs to rebuild the graph"""
    graph_sha256: str = ""
    """the sha256 (hex) of ``graph``'s UTF-8 bytes, computed by the leader (:func:`proposed`); '' : the master
    hashes the graph itself.  The log records it as the graph's, and verify checks it against the bytes the
    master appended to the graphs file: a wrong one fails the run's verification, it cannot pass a graph off"""
    members: str = ""
    """the leader's part of the ``model_proposed`` line (parent, hparams, description, search, morphs or seed) as
    the event log's JSON text, encoded and checked by the leader (:func:`proposed`), which then sends those
    fields empty but ``parent``; '' : the master encodes them"""


def proposed(task_id: int, parent: int | None, graph: str, hparams: dict, description: str, search_info: dict,
             morphs: list[dict] | None = None, seed: dict | None = None) -> Proposed:
    """A leader's proposal, its part of the log's line encoded here and not on rank 0 (as :func:`epoch_done`)."""
    lineage = {name: value for name, value in (("morphs", morphs), ("seed", seed)) if value is not None}
    members = runlog.event_members(runlog.MODEL_PROPOSED, {"parent": parent, "hparams": hparams,
                                   "description": description, "search": search_info, **lineage},
                                   {"task": task_id, "group": 0, "graph_file": "", "graph_sha256": "",
                                    "graph_offset": 0, "graph_bytes": 0})  # the master's fields  # fmt: skip
    digest = hashlib.sha256(graph.encode("utf-8")).hexdigest()  # 17 kB a model: hashed here, not on rank 0
    return Proposed(task_id, parent, graph, {}, "", {}, None, None, digest, members)


@dataclass(frozen=True)
class Accepted:
    """The master's answer to a Proposed: a new architecture, train it."""

    task_id: int


@dataclass(frozen=True)
class Duplicate:
    """The master's answer to a Proposed: this architecture was proposed before in the run."""

    task_id: int


@dataclass(frozen=True)
class EpochStarted:
    """A task's epoch has begun (sent as it begins), so MLLOG's ``epoch_start`` is written in time order.

    Without it the master learns of an epoch only at its end, and an
    ``epoch_start`` line written then goes back in time past the lines
    logged meanwhile.  Sent alone for a task's first epoch only; a later
    epoch's start rides on the :class:`EpochDone` of the epoch before it.
    """

    task_id: int
    epoch: int
    time: float
    """Unix seconds on the leader when the epoch began (the ``start`` of its :class:`EpochDone`)"""
    global_batch: int
    """samples per optimizer step over the whole group: the rank batch times the group's ranks"""


@dataclass(frozen=True)
class EpochDone:
    """One completed epoch of a task, sent when the task's next epoch begins (carrying its start) or the task ends.

    Rank 0 handles every message of every group: sent alone, the start of
    epochs 2, 3, … would cost it one message each.  The leader holds the
    epoch from its end until the next begins — the group's agreement and a
    copy of the weights, well under a second — or until the task ends, and
    sends both in one message; only the first epoch's start goes alone.  So a
    model of E epochs costs the master 3 + E messages (Proposed, one
    EpochStarted, E EpochDone, Result) instead of 2 + 2E: 6 instead of 8 at
    three epochs (BENCHMARKS.md, the master).  The times inside are the
    leader's, so the logs do not change.
    """

    task_id: int
    epoch: dict
    """the epoch's fields when ``members`` is '' (the master encodes them); empty when the leader sent them
    encoded"""
    next_start: EpochStarted | None = None
    """the start of the task's next epoch, which began as this one's report left; None when no next epoch began
    (the task ended, or it was the last epoch)"""
    members: str = ""
    """the whole epoch as the event log's JSON text, encoded by the leader (:func:`epoch_done`): rank 0 parses
    it (the values it reads, and its check), and joins it to its own fields instead of encoding 17 numbers
    ('' : the master encodes ``epoch``)"""


def epoch_done(task_id: int, epoch: dict, next_start: EpochStarted | None = None) -> EpochDone:
    """A leader's report of one epoch, as the log's text, checked against the schema here first.

    At 65,536 groups rank 0 writes ≈ 15 log lines per model and handles every message of every group; its
    loop is the run's bottleneck, a leader's is not.  So the leader encodes the epoch's line once, and rank
    0 unpickles one string instead of seventeen numbers and parses it (with orjson, several times faster than
    encoding: BENCHMARKS.md, the master) instead of encoding it.  The log's line is the same text either way.
    """
    members = runlog.event_members(runlog.EPOCH, epoch, {"task": task_id, "group": 0})
    return EpochDone(task_id, {}, next_start, members)


@dataclass(frozen=True)
class Result:
    """A task finished: the model, how it trained, and what it cost."""

    task_id: int
    parent: int | None
    graph: str
    hparams: dict
    epochs: list[dict]
    accuracy: float | None
    predicted_accuracy: float | None
    ops: dict
    timings: dict
    description: str
    stop_reason: str
    weights_file: str = ""
    search_info: dict = field(default_factory=dict)
    epochs_text: str = ""
    """``epochs`` as the event log's JSON text (:func:`~aiperf_mpi.results.runlog.value_text`), encoded by the
    leader, which then sends ``epochs`` empty: rank 0 logs the text as ``model_done``'s epochs and unpickles
    no epoch twice ('' : the master encodes ``epochs``)"""
    view_record: bytes = b""
    """the model's search fields compressed by the leader (``SearchView.own_record``), which rank 0 sends to
    every group as the model's view record after prefixing its id (``search.view.wire_record``), compressing
    nothing; b"" : rank 0 compresses them.  Rank 0 checks only the stream's header and dictionary
    (``WireCodec.accepts``) and compresses a record that fails; a leader leaves out one that does not decode
    into the seven search fields (numbers and text only: ``SearchView.apply``).  A view record steers the other
    groups' searches and is never scored — the score, the verifier and the report read the event log, whose
    ``model_done`` rank 0 writes from this message's other fields"""
    weights_sha256: str = ""
    """the sha256 of ``weights_file`` as its rank wrote it ('' : no file), logged in ``model_done``"""

    @property
    def trained(self) -> bool:
        """Whether any epoch was trained (a model with none is logged as failed)."""
        return bool(self.epochs) or self.epochs_text not in ("", "[]")


@dataclass(frozen=True)
class Failed:
    """A task's trial failed (the group carries on)."""

    task_id: int
    rank: int
    host: str
    reason: str
    traceback: str
    parent: int | None = None
    graph: str = ""
    hparams: dict = field(default_factory=dict)
    epochs: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Stop:
    """No more work: the group finishes and leaves the loop.

    The master sends no view members with it (``view`` stays empty: a stopping leader never searches again,
    and the end's Stops to every group go out together, :meth:`aiperf_mpi.job.master.Master._stop`); a leader
    still applies whatever one carries."""

    reason: str
    view: ViewUpdate = field(default_factory=ViewUpdate)


@dataclass(frozen=True)
class MonitorSample:
    """One utilisation sample of a node (sent by its monitor thread, at any time)."""

    time: float
    group: int
    host: str
    node: int
    source: str
    """'nvml' (NVIDIA GPUs) or 'cpu'"""
    devices: list[dict]
    """per device: index, name, utilization (percent), memory_used, memory_total (bytes)"""
    energy: list[dict] = field(default_factory=list)
    """the node's energy meters read at the sample (issue 53: :func:`aiperf_mpi.results.energy.to_record` each;
    empty where the node has none)"""


@dataclass(frozen=True)
class GroupLost:
    """A group is out of the run: one of its ranks died or hangs.  Never on the wire.

    The MPI transport makes one when ULFM reports a failed rank of the group
    (``MPI_ERR_PROC_FAILED``); the master makes one itself when the group has
    been silent past its deadline (:mod:`aiperf_mpi.job.faults`).
    """

    ranks: list[int]
    """the world ranks known dead (empty when the group was silent: which rank hangs is not known)"""
    reason: str


@dataclass(frozen=True)
class VettedEpoch:
    """An :class:`EpochDone` checked and put in the log's form (:meth:`aiperf_mpi.job.vetting.Vetter.epoch`).

    Rank 0 makes one from each EpochDone it takes itself; a relay rank makes it from the EpochDones of the
    leaders it serves and hands it to rank 0, which then only writes and counts it (``--relays``).
    """

    task_id: int
    tail: str
    """the epoch's line after its time — the master's task and group, then the epoch's members, checked against
    the schema — as the event log's JSON text: ``,"task":T,"group":G,…}`` (rank 0 prefixes the event and time)"""
    epoch: dict
    """that text, parsed: the numbers rank 0 sums and MLLOG writes (``ops`` an int in [0, 2⁶³))"""
    next_start: EpochStarted | None = None
    mllog: tuple[str, str, str] = ("", "", "")
    """MLLOG's text of the epoch's stop and accuracy lines (``job.mllog.epoch_stop_texts``)"""


@dataclass(frozen=True)
class VettedProposal:
    """A :class:`Proposed` checked and put in the log's form (:meth:`aiperf_mpi.job.vetting.Vetter.proposal`)."""

    task_id: int
    parent: int | None
    """the parent as the logged members say (what the duplicate rule reads)"""
    data: bytes
    """the graph's UTF-8 bytes: the line rank 0 appends to the segment's graphs file"""
    length: int
    """the graph's length in characters (its Result must send a graph of this length)"""
    digest: str
    """the sha256 of ``data`` (the leader's, when it is one; else computed by whoever vetted)"""
    members: str
    """the leader's part of ``model_proposed`` as JSON object text, checked against the schema"""
    hparams: tuple[int, int] | None = None
    """its rank batch and kernel size, read when vetted (None: not integers): MLLOG's ``global_batch_size``"""


@dataclass(frozen=True)
class VettedResult:
    """A :class:`Result` checked and its ``model_done`` record encoded but for the id (``Vetter.result``).

    Only rank 0 knows the model's id; everything else of the record is in ``model_text``, the JSON object
    of the record's fields after its id (the graph left out, as rank 0 logs it), which rank 0 completes by
    prefixing the id.
    """

    task_id: int
    parent: int | None
    graph: str
    trained: bool
    accuracy: float | int | None
    predicted_accuracy: float | int | None
    weights_file: str
    view_record: bytes
    model_text: str
    weights_sha256: str = ""
    """64 lowercase hex digits or '' (vetted): ``model_done``'s ``weights_sha256``"""


TAGS: dict[type, int] = {
    Ready: 11, Work: 12, Proposed: 17, EpochDone: 13, Result: 14, Failed: 15, Stop: 16, MonitorSample: 18,
    Accepted: 19, Duplicate: 20, EpochStarted: 21, VettedEpoch: 24, VettedProposal: 25, VettedResult: 26,
}  # fmt: skip
TO_MASTER = (Ready, Proposed, EpochStarted, EpochDone, Result, Failed, MonitorSample)
TO_LEADER = (Work, Accepted, Duplicate, Stop)
VETTED = (VettedEpoch, VettedProposal, VettedResult)
"""what a relay rank hands rank 0 in its batches, beside the leaders' other messages; never from a leader"""
RELAYED = 22
"""the tag of a relay rank's batch to rank 0: a list of (group, tag, payload), one per leader message
(:func:`aiperf_mpi.job.vetting.relay_item`)"""
RELAY_STOP = 23
"""the tag of rank 0's word to a relay rank that the run's messages are over"""
UNREADABLE = 0
"""the tag of a batch item that says a leader's message could not be read (its payload: why)"""
