"""The messages' wire form (job.wire): each survives the trip as mpi4py makes it; only its own shape rebuilds."""

import pickle
import pickletools

import pytest

from aiperf_mpi.job.messages import (
    TAGS,
    Accepted,
    Duplicate,
    EpochDone,
    EpochStarted,
    Failed,
    MonitorSample,
    Ready,
    Result,
    Stop,
    Work,
    epoch_done,
    proposed,
)
from aiperf_mpi.job.vetting import Vetter
from aiperf_mpi.job.wire import SHAPES, WireFormatError, from_wire, plain_loads, to_wire
from aiperf_mpi.search.view import ViewUpdate

EPOCH = {"epoch": 1, "train_loss": 1.5, "val_accuracy": 0.5, "start": 1.7e9, "end": 1.7e9 + 60, "ops": 10**15,
         "ops_train": 9 * 10**14, "ops_update": 10**12, "ops_validation": 99 * 10**12, "steps": 100,
         "train_samples": 6400, "validation_samples": 1000, "data_wait": 0.1, "compute": 50.0, "evaluation": 2.0,
         "compile": 0.0, "xla": False, "learning_rate": 0.1}  # fmt: skip

MESSAGES = [
    Ready(3, 4, "node7", {"tflops": 12.5}),
    Ready(0, 1, "n", None),
    Work(9, ViewUpdate([b"\x00" * 8 + b"x", b"y"], 12, b"dictionary"), 2, True, 3600.0),
    Work(10, ViewUpdate(), 1),
    proposed(9, 4, '{"graph":{}}', {"batch_size": 64}, "wider", {"search": "bayesian"}, [{"morph": "wider"}]),
    proposed(0, None, '{"graph":{}}', {"batch_size": 64}, "seed", {}, None, {"seed": "resnet50"}),
    Accepted(9),
    Duplicate(9),
    EpochStarted(9, 1, 1.7e9, 256),
    epoch_done(9, EPOCH, EpochStarted(9, 2, 1.7e9 + 60, 256)),
    epoch_done(9, EPOCH),
    EpochDone(9, dict(EPOCH)),
    Result(9, 4, "{}", {"batch_size": 64}, [], 0.61, None, {"total": 3 * 10**15}, {"train": 60.0}, "wider",
           "epoch limit", "weights/task-9.npz", {}, "[]", b"x\x9c"),  # fmt: skip
    Failed(9, 2, "node7", "out of memory", "Traceback ...", 4, "{}", {}, [EPOCH]),
    Stop("time limit", ViewUpdate([b"r"], 5)),
    Stop("max models"),
    MonitorSample(1.7e9, 3, "node7", 1, "cpu", [{"index": 0, "utilization": 97.0}]),
]
MESSAGES += [Vetter().vet(5, message) for message in MESSAGES[4:6] + MESSAGES[9:13]]
"""what a relay rank hands rank 0 (job/vetting.py): the vetted forms of a proposal, an epoch and a result"""


def test_every_message_kind_is_covered_here_and_has_a_shape() -> None:
    assert {type(message) for message in MESSAGES} == set(TAGS) == set(SHAPES) - {ViewUpdate}


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_survives_its_wire_form_pickled_as_mpi4py_does(message) -> None:
    data = pickle.loads(pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL))
    back = from_wire(type(message), data)
    assert back == message and type(back) is type(message)
    if isinstance(message, EpochDone) and message.next_start is not None:
        assert type(back.next_start) is EpochStarted
    if hasattr(message, "view"):
        assert type(back.view) is ViewUpdate


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_the_wire_form_names_no_class(message) -> None:
    """What saves rank 0 the import lookups: no GLOBAL opcode in what it unpickles."""
    opcodes = {op.name for op, _, _ in pickletools.genops(pickle.dumps(to_wire(message), pickle.HIGHEST_PROTOCOL))}
    assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "NEWOBJ", "INST", "OBJ"}


def test_what_is_not_the_tags_message_is_refused_with_a_reason() -> None:
    started = to_wire(EpochStarted(9, 1, 1.7e9, 256))
    with pytest.raises(WireFormatError, match="tuple of its 4 fields, not a tuple of 3"):
        from_wire(EpochStarted, started[:3])
    with pytest.raises(WireFormatError, match="not a list"):
        from_wire(EpochStarted, list(started))
    with pytest.raises(WireFormatError, match="not a pickled EpochStarted"):
        from_wire(EpochStarted, EpochStarted(9, 1, 1.7e9, 256))  # a pickled dataclass, as before: not this wire
    with pytest.raises(WireFormatError, match="EpochStarted is a tuple"):  # a nested message, checked as deep
        from_wire(EpochDone, (9, {}, (9, 2), ""))
    with pytest.raises(WireFormatError, match="not a message"):
        from_wire(dict, ())


class Payload:
    def __reduce__(self):
        return (print, ("rank 0 ran a leader's code",))


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_rank_0s_unpickler_reads_every_message_as_sent(message) -> None:
    data = bytearray(pickle.dumps(to_wire(message), protocol=pickle.HIGHEST_PROTOCOL))  # as the transport receives it
    assert from_wire(type(message), plain_loads(data)) == message


def test_rank_0s_unpickler_runs_nothing_and_reads_no_object(capsys) -> None:
    """mpi4py's recv would unpickle anything: a forged leader's payload would run on rank 0, a class be built."""
    for forged in (Payload(), (9, Payload()), EpochStarted(9, 1, 1.7e9, 256), pytest):
        try:
            data = pickle.dumps(forged, protocol=pickle.HIGHEST_PROTOCOL)
        except TypeError:  # a module does not pickle: its name does, as a global
            data = b"\x80\x04\x95\x12\x00\x00\x00\x00\x00\x00\x00\x8c\x06pytest\x94\x8c\x04main\x94\x93\x94."
        with pytest.raises(WireFormatError, match="it names|not a pickle"):
            plain_loads(data)
    assert capsys.readouterr().out == ""
    for junk in (b"", b"\x80\x05", b"not a pickle", bytes(range(256))):
        with pytest.raises(WireFormatError, match="not a pickle of plain values"):
            plain_loads(junk)
