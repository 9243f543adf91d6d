"""A leader's message checked and put in the log's form: the half of rank 0's handling that needs no run state.

Rank 0 handles every message of every group; at 65,536 groups one rank
cannot do all of it (BENCHMARKS.md, the master).  What it does per message
splits in two.  *Vetting* reads only the message: parse the texts a leader
encoded, check them against the event schema and rank 0's own bounds,
hash a graph whose digest was not sent, encode what the leader left for rank
0 to encode — here, in :class:`Vetter`.  *Applying* needs the run: ids, the
duplicate check, the history, the log's order — in
:class:`~aiperf_mpi.job.master.Master`.

Rank 0 vets each message it receives itself; with ``--relays N`` the relay
ranks on rank 0's node (:mod:`aiperf_mpi.mpi.relay`) vet their leaders'
messages and hand rank 0 the vetted forms (:data:`~aiperf_mpi.job.messages.VETTED`),
so rank 0 only applies them.  Either way the same code checks the same
things and the log's lines are the same bytes (tests/unit/test_vetting.py).
A message that fails its check is not vetted: the relay passes it on as it
came, and rank 0's own vetting refuses it with the reason it would always
have given, so the group is lost in the same words whoever received it.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import re
from dataclasses import replace

from aiperf_mpi.job.messages import (
    TAGS,
    UNREADABLE,
    EpochDone,
    EpochStarted,
    GroupLost,
    Proposed,
    Result,
    VettedEpoch,
    VettedProposal,
    VettedResult,
)
from aiperf_mpi.job.mllog import epoch_stop_texts
from aiperf_mpi.job.wire import leader_message, to_wire
from aiperf_mpi.results import runlog
from aiperf_mpi.results.jsonline import object_text
from aiperf_mpi.search.history import FAILED, TRAINED

OPS_LIMIT = 2**63
"""operations one epoch may claim (int64, as every reader's arrays hold them; ≈ 300 × an ImageNet epoch of ResNet-50,
≈ 3 × 10¹⁶), and the largest integer taken as an epoch's start, end or accuracy"""

SHA256 = re.compile("[0-9a-f]{64}")
"""a sha256 as hashlib's hexdigest writes it: what a leader's ``graph_sha256`` must be for the master to log it"""

RANK_0_READS = ("epoch", "start", "end", "ops", "val_accuracy", "train_samples", "validation_samples")
"""what rank 0 reads of a vetted epoch besides its text: its counts, the hang deadline's times, MLLOG's numbers"""
_PLAIN = (int, float, bool, str, type(None))
EPOCH_WRITER = {"task": 0, "group": 0}
"""the master's own fields of an ``epoch`` line (placeholders of their types, for the check)"""
PROPOSED_WRITER = {"task": 0, "group": 0, "graph_file": "", "graph_sha256": "", "graph_offset": 0, "graph_bytes": 0}
"""the master's own fields of a ``model_proposed`` line"""


def numbers_rank_0_sums(epoch: dict) -> dict:
    """``epoch``, if rank 0 can do its own arithmetic on it (``ValueError`` before anything is written, if not).

    The schema says only "a number": a 400-digit ``ops`` passed it, and rank 0's progress line then failed to
    divide the run's sum by a float, outside any handler — one forged epoch ended the run.  So ``ops`` is an
    int in [0, 2⁶³), and each other number rank 0 reads is one a float can hold (whether it is plausible is
    the verifier's question, not rank 0's).
    """
    if type(epoch) is not dict:
        raise ValueError("an epoch is one JSON object")
    ops = epoch.get("ops")
    if not (type(ops) is int or (isinstance(ops, numbers.Integral) and not isinstance(ops, bool))) \
            or not 0 <= ops < OPS_LIMIT:  # fmt: skip
        raise ValueError(f"an epoch's ops must be an integer in [0, 2**63), got {str(ops)[:40]}")
    for name in ("start", "end", "val_accuracy"):
        value = epoch.get(name)
        if type(value) is int and abs(value) >= OPS_LIMIT:
            raise ValueError(f"an epoch's {name} is beyond what a float holds: {str(value)[:40]}…")
    return epoch


def check_start(start: EpochStarted) -> EpochStarted:
    """``start``, if MLLOG can write it: integers for the task, epoch and batch (a tuner's numpy integer is one),
    a finite number of seconds."""
    if type(start.task_id) is int and type(start.epoch) is int and type(start.global_batch) is int \
            and type(start.time) is float and -1e12 < start.time < 1e12:  # what a leader sends: 1 µs, not 6
        return start
    if not (all(isinstance(value, numbers.Integral) and not isinstance(value, bool)
                for value in (start.task_id, start.epoch, start.global_batch))
            and isinstance(start.time, numbers.Real) and not isinstance(start.time, bool)
            and math.isfinite(start.time) and abs(start.time) < 1e12):  # fmt: skip
        raise ValueError("an epoch's start is its task, epoch and batch as integers and its time in Unix seconds")
    return start


def _hparams(hparams: object) -> tuple[int, int] | None:
    """A proposal's rank batch and kernel size, for MLLOG's ``global_batch_size``; None unless both are integers."""
    if not isinstance(hparams, dict):
        return None
    batch, kernel = hparams.get("batch_size"), hparams.get("kernel_size")
    return (batch, kernel) if type(batch) is int and type(kernel) is int else None


class Vetter:
    """Vets leaders' messages (see the module docstring); one per rank that vets, holding the log's encoder."""

    def __init__(self) -> None:
        # the event log's encoder, made once (runlog.EventLog: the same text)
        self._encode = runlog.log_encoder()

    def vet(self, group: int, message: object) -> VettedEpoch | VettedProposal | VettedResult | None:
        """A relay's step: the vetted form of ``message``; None when it is not one to vet, or fails its check.

        What is not vetted goes to rank 0 as the leader's own bytes (:func:`relay_item`), which rank 0 reads
        and vets as if the leader had sent it there: one place words a refusal, and a relay adds no way to be
        refused.
        """
        kind = type(message)
        try:
            if kind is EpochDone:
                vetted = self.epoch(message, group)
                # on the wire to rank 0, the numbers it reads (Master._epoch, MLLOG), not the epoch's 18
                slim = {name: vetted.epoch[name] for name in RANK_0_READS if name in vetted.epoch}
                if not all(type(value) in _PLAIN for value in slim.values()):
                    return None  # the schema says numbers: rank 0 refuses whatever else it is, in its words
                return replace(vetted, epoch=slim)
            if kind is Proposed:
                return self.proposal(message)
            if kind is Result:
                return self.result(group, message)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, RecursionError):
            return None
        return None

    def epoch(self, message: EpochDone, group: int) -> VettedEpoch:
        """An EpochDone's epoch, parsed and checked (the leader's text) or checked and encoded (its fields), and
        its line after the time: rank 0 writes four of these a model, and joining them there was ≈ 10 µs each."""
        if message.next_start is not None:
            check_start(message.next_start)
        if type(message.task_id) is not int or type(group) is not int:
            raise ValueError("an epoch's task is an integer")
        if message.members:
            epoch = numbers_rank_0_sums(runlog.parse_members(runlog.EPOCH, message.members))
            runlog.check_members(runlog.EPOCH, epoch, EPOCH_WRITER)
            members = message.members
        else:
            epoch = numbers_rank_0_sums(message.epoch)
            if not all(type(name) is str for name in epoch):  # a line's fields are named by text
                raise ValueError("an epoch's fields are named by text")
            runlog.check_members(runlog.EPOCH, epoch, EPOCH_WRITER)
            members = self._encode(epoch)
        # the line after its event and time (runlog.EventLog.write_tail)
        tail = f',"task":{message.task_id},"group":{group}' + (f",{members[1:]}" if epoch else "}")
        return VettedEpoch(message.task_id, tail, epoch, message.next_start, epoch_stop_texts(message.task_id, epoch))

    def proposal(self, message: Proposed) -> VettedProposal:
        """A proposal's graph as bytes with its sha256, and its members as checked JSON text.

        The graph's bytes are appended as one line by rank 0's I/O thread, and their sha256 is logged, so that
        a verifier can tell whether the graph it recounts is the one the run trained; the duplicate key is that
        digest's prefix.  The leader hashes (messages.proposed): 17 kB a model was ≈ 10 % of rank 0's loop at
        65,536 groups (BENCHMARKS.md).  A digest that is not the bytes' fails verify, whoever computed it.
        """
        if type(message.task_id) is not int or type(message.graph) is not str:
            raise ValueError("a proposal's task is an integer and its graph JSON text")
        data = message.graph.encode("utf-8")
        digest = message.graph_sha256
        if not (type(digest) is str and SHA256.fullmatch(digest)):  # none sent, or not a sha256: hash here
            digest = hashlib.sha256(data).hexdigest()
        if message.members:  # the leader's fields as it encoded them (messages.proposed): checked, then joined
            given = runlog.parse_members(runlog.MODEL_PROPOSED, message.members)
            runlog.check_members(runlog.MODEL_PROPOSED, given, PROPOSED_WRITER)
            return VettedProposal(message.task_id, given.get("parent"), data, len(message.graph), digest,
                                  message.members if given else "{}", _hparams(given.get("hparams")))  # fmt: skip
        lineage = {name: value for name, value in (("morphs", message.morphs), ("seed", message.seed))
                   if value is not None}  # fmt: skip
        members = {"parent": message.parent, "hparams": message.hparams, "description": message.description,
                   "search": message.search_info, **lineage}  # fmt: skip
        runlog.check_members(runlog.MODEL_PROPOSED, members, PROPOSED_WRITER)
        return VettedProposal(message.task_id, message.parent, data, len(message.graph), digest,
                              self._encode(members), _hparams(message.hparams))  # fmt: skip

    def result(self, group: int, message: Result) -> VettedResult:
        """A Result's checks that need no run state, and its ``model_done`` record encoded after the id.

        The record is logged without its graph: the graph is a line of the segment's graphs file, placed and
        hashed by the task's ``model_proposed`` (results/graphs.py, the one reader).  Logging it again cost
        rank 0 ≈ 70 µs of JSON escaping per model and made the event log 24 kB a model instead of 2 kB.
        """
        epochs = message.epochs
        if message.epochs_text:  # the leader's text (Result.epochs_text): one list of epochs, checked as it parses
            epochs = runlog.parse_sent(message.epochs_text)
            if type(epochs) is not list or not all(type(epoch) is dict for epoch in epochs):
                raise ValueError(f"task {message.task_id}: the epochs sent are not a list of objects")
        parent = message.parent
        if type(message.task_id) is not int or type(message.graph) is not str \
                or not (parent is None or (type(parent) is int and parent >= 0)) \
                or not all(type(value) in (float, int, type(None))
                           for value in (message.accuracy, message.predicted_accuracy)):  # fmt: skip
            raise ValueError(f"task {message.task_id}: parent {parent!r} is not an earlier model, or an accuracy is "
                             "not a number")  # checked here, before model_done is written  # fmt: skip
        if type(message.weights_file) is not str:
            raise ValueError(f"task {message.task_id}: the weights file is a name")
        digest = message.weights_sha256  # logged as it is, so never anything but a sha256 (else none is logged)
        digest = digest if type(digest) is str and SHA256.fullmatch(digest) else ""
        fields = {"parent": parent, "status": TRAINED if epochs else FAILED, "hparams": message.hparams,
                  "epochs": epochs, "accuracy": message.accuracy, "predicted_accuracy": message.predicted_accuracy,
                  "ops": message.ops,
                  "timings": {**message.timings, "task": message.task_id, "group": group, "stop": message.stop_reason},
                  "description": message.description, "weights": message.weights_file}  # fmt: skip
        # the record's fields after its id, in ModelRecord's order: rank 0 prefixes the id (Master._result)
        if message.epochs_text:  # ≈ 1.3 kB of the line's 1.5 kB, as the leader encoded it: joined, not encoded
            text = object_text(self._encode, fields, {"epochs": message.epochs_text})
        else:
            text = self._encode(fields)
        body = message.view_record if type(message.view_record) is bytes else b""  # rank 0 compresses what is not
        return VettedResult(message.task_id, parent, message.graph, bool(epochs), message.accuracy,
                            message.predicted_accuracy, message.weights_file, body, text, digest)  # fmt: skip


def relay_item(vetter: Vetter, source: int, group: int, tag: int, data: bytes | bytearray) -> tuple[int, int, object]:
    """One leader message as a relay hands it to rank 0: ``(group, tag, payload)`` (mpi/relay.py).

    Vetted: the vetted form's tag and wire tuple (only numbers, text and bytes, so its pickle is small and
    flat).  Not vetted — a Ready, Failed, MonitorSample or EpochStarted, or a message that fails its check —
    the leader's tag and ``(source, its bytes)``, for rank 0 to read as if sent to it
    (:func:`~aiperf_mpi.job.wire.leader_message`): the relay never pickles what a leader built, so nothing a
    leader nests can break the relay's batch.  Unreadable, or anything the relay's own reading raises:
    :data:`~aiperf_mpi.job.messages.UNREADABLE` and why, and rank 0 loses the group.
    """
    try:
        message = leader_message(source, tag, data)
        if type(message) is GroupLost:
            return group, UNREADABLE, message.reason
        vetted = vetter.vet(group, message)
        if vetted is None:
            return group, tag, (source, bytes(data))
        return group, TAGS[type(vetted)], to_wire(vetted)
    except Exception as exc:  # noqa: BLE001 — whatever a leader's bytes make this raise is its group's, not the run's
        return group, UNREADABLE, f"rank {source}'s message (tag {tag}) could not be read: {type(exc).__name__}: " \
                                  f"{str(exc)[:500]}"  # fmt: skip
