"""The audit's timing: a few training and evaluation steps of given models, as the trainer runs them.

``python -m aiperf_mpi.export.audit`` reads one JSON request on stdin
(:data:`REQUEST`) and prints one JSON line (:data:`FORMAT`): for each model,
the fastest of its timed training steps and evaluation batches on this
machine.  ``python -m analysis.audit`` (which loads no TensorFlow) rebuilds
the sampled tasks' graphs from the run's lineage, runs this in a child
process under a timeout, and compares what the log claims with these times
(the comparison and why the fastest step is the bound: ``analysis/audit.py``
and ``docs/verify.md``, "The audit").

Each model is built and stepped by the trainer's own code — the graph by
:func:`aiperf_mpi.train.keras_model.build_keras_model` at the run's precision
(its Keras dtype policy), the optimizer, loss, training step (XLA where the
run used it) and evaluation function of :mod:`aiperf_mpi.train.steps` — on a
synthetic batch of the logged batch size and input shape (values in the
pipeline's −1..1, labels among the model's classes), already on the device,
so a timed step waits on no input: what it measures is the arithmetic and its
dispatch, the least time the run's step could have taken.  A training step
is timed as the trainer times it (the step and reading its loss back), an
evaluation batch as the trainer evaluates one (the forward pass, the top-1
count read back).  Before timing, a model takes :data:`WARM_UP` calls of each
(tracing and compiling: the trainer excludes a step that traced from its
``compute``).

On the CPU (``"device": "cpu"``) any GPU is hidden; the TensorFlow thread
counts are the request's (the run's rank's, from its ``peak`` event), so a
rank's share of its node is what is timed.  Bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass

from aiperf_mpi.graph.model import GraphError, from_json, infer_shapes, input_node, output_node
from aiperf_mpi.results.precisions import PRECISIONS

PROG = "aiperf_mpi.export.audit"
FORMAT = "aiperf_mpi.audit/1"
REQUEST = {
    "device": "cpu or gpu: where the run's ranks trained (gpu: the first GPU)",
    "threads": "null, or {'intra': N, 'inter': M}: TensorFlow's thread pools on the CPU",
    "seconds": "the time to spend timing each model (at least MIN_TIMED calls of each kind are timed)",
    "tasks": "[{'task': N, 'graph': the graph as trained (JSON text), 'batch': B, 'precision': P, 'xla': bool}]",
}
"""the request's fields"""
WARM_UP = 2
"""untimed calls of each function before the timed ones: the first traces (and compiles), the second settles"""
MIN_TIMED = 5
"""timed calls of each kind at least, however long they take"""
BATCHES = 16
"""batches in one pass of the synthetic training and validation splits"""
TRAIN_SHARE = 2 / 3
"""of each model's seconds, the share spent timing training steps (the rest: evaluation batches)"""


class AuditError(ValueError):
    """A request that cannot be timed; its message is the one line the user sees."""


@dataclass
class Timed:
    """One model's timings on this machine, in seconds."""

    task: int
    train_times: list[float]
    """each timed training step, in order"""
    eval_times: list[float]
    """each timed evaluation batch (all full batches), in order"""
    seconds: float
    """wall time spent on this model, building and warming up included"""


def _timed(batches, call, seconds: float) -> list[float]:
    """Times of ``call(x, y)`` over ``batches()`` (a new pass whenever one ends) for ``seconds``, at least
    :data:`MIN_TIMED` of them, after :data:`WARM_UP` untimed calls; fetching a batch is not timed (as the trainer
    leaves it out of ``compute``)."""
    times: list[float] = []
    calls = 0
    until = None
    while until is None or len(times) < MIN_TIMED or time.perf_counter() < until:
        for x, y in batches():
            if calls == WARM_UP:
                until = time.perf_counter() + seconds
            started = time.perf_counter()
            call(x, y)
            if calls >= WARM_UP:
                times.append(time.perf_counter() - started)
            calls += 1
            if until is not None and len(times) >= MIN_TIMED and time.perf_counter() >= until:
                break
    return times


def time_model(task: dict, seconds: float, device: str) -> Timed:
    """Build one requested model as the trainer builds it and time its training steps and evaluation batches."""
    import keras
    import tensorflow as tf

    from aiperf_mpi.data.sources import synthetic_source
    from aiperf_mpi.train.keras_model import build_keras_model
    from aiperf_mpi.train.pipeline import Shard
    from aiperf_mpi.train.steps import loss_function, make_evaluate, make_optimizer, make_train_step, precision_policy

    started = time.perf_counter()
    graph = from_json(task["graph"])
    batch, precision = task["batch"], task["precision"]
    node = graph.nodes[input_node(graph)]
    if node["h"] != node["w"]:
        raise AuditError(f"task {task['task']}: a {node['h']}×{node['w']} input: the audit feeds square images")
    classes = int(infer_shapes(graph)[output_node(graph)][-1])
    # the trainer's pipeline over random images of the model's input: its tf.data threads share the machine with
    # the steps, as the run's did
    source = synthetic_source(image_size=node["h"], channels=node["c"], classes=classes, train=batch * BATCHES,
                              validation=batch * BATCHES)  # fmt: skip
    shard = Shard(source, 0, 1, device=device if device != "/CPU:0" else None)
    passes = iter(range(1, 1_000_000))
    keras.utils.set_random_seed(0)
    with tf.device(device):
        model = build_keras_model(graph, dtype=precision_policy(precision))
        optimizer = make_optimizer(precision, 0.01, 0.9)
        optimizer.build(model.trainable_variables)  # as the trainer does: its slots made before the first step
        step = make_train_step(model, optimizer, loss_function(graph), precision == "fp16", bool(task["xla"]))
        evaluate = make_evaluate(model)

        def train(x, y) -> None:
            float(step(x, y))  # the trainer reads each step's loss back, which waits for the step

        def validate(x, y) -> None:
            guesses = tf.argmax(evaluate(x), axis=-1, output_type=tf.int32)
            int(tf.reduce_sum(tf.cast(tf.equal(guesses, y), tf.int32)))

        train_times = _timed(lambda: shard.train(batch, 0, next(passes)), train, seconds * TRAIN_SHARE)
        eval_times = _timed(lambda: shard.validation(batch), validate, seconds * (1 - TRAIN_SHARE))
    keras.backend.clear_session()
    return Timed(task["task"], [round(t, 7) for t in train_times], [round(t, 7) for t in eval_times],
                 round(time.perf_counter() - started, 3))  # fmt: skip


def _checked(request: object) -> dict:
    """The request, or AuditError naming what in it is not one."""
    if not isinstance(request, dict) or not isinstance(request.get("tasks"), list) or not request["tasks"]:
        raise AuditError("the request is not a JSON object with a non-empty list of tasks")
    if request.get("device") not in ("cpu", "gpu"):
        raise AuditError(f"the request's device {str(request.get('device'))[:40]!r} is neither cpu nor gpu")
    seconds = request.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < 1e6:
        raise AuditError(f"the request's seconds {str(seconds)[:40]!r} is not a positive number")
    for task in request["tasks"]:
        if not isinstance(task, dict) or not isinstance(task.get("graph"), str):
            raise AuditError("a requested task has no graph")
        batch = task.get("batch")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise AuditError(f"task {task.get('task')}: batch {str(batch)[:40]!r} is not a positive integer")
        if task.get("precision") not in PRECISIONS:
            raise AuditError(f"task {task.get('task')}: precision {str(task.get('precision'))[:40]!r} is none of "
                             f"{', '.join(PRECISIONS)}")  # fmt: skip
    return request


def _set_up(request: dict) -> str:
    """TensorFlow on the requested device and threads, before its first operation; the device's name."""
    import tensorflow as tf

    if request["device"] == "cpu":
        tf.config.set_visible_devices([], "GPU")
    threads = request.get("threads") or {}
    if isinstance(threads.get("intra"), int) and threads["intra"] > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads["intra"])
    if isinstance(threads.get("inter"), int) and threads["inter"] > 0:
        tf.config.threading.set_inter_op_parallelism_threads(threads["inter"])
    if request["device"] == "cpu":
        return "/CPU:0"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise AuditError("the run trained on GPUs and TensorFlow sees none on this machine")
    tf.config.set_visible_devices(gpus[0], "GPU")
    return "/GPU:0"


def audit(request: object) -> dict:
    """Time every requested model (see the module); AuditError for a request that cannot be timed."""
    request = _checked(request)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    device = _set_up(request)
    import tensorflow as tf

    name = device.strip("/")
    if device != "/CPU:0":
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        name = f"{name} ({details.get('device_name', 'a GPU')})"
    timed = []
    for task in request["tasks"]:
        try:
            timed.append(time_model(task, float(request["seconds"]), device))
        except (GraphError, KeyError, TypeError) as exc:
            why = " ".join(str(exc).split())[:200]
            raise AuditError(f"task {task.get('task')}: its graph cannot be built ({why})") from None
    return {"format": FORMAT, "device": name, "tensorflow": tf.__version__,
            "threads": {"intra": tf.config.threading.get_intra_op_parallelism_threads(),
                        "inter": tf.config.threading.get_inter_op_parallelism_threads()},
            "tasks": [asdict(t) for t in timed]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Read the request on stdin, print the timings as one JSON line; bad input: one line and exit 2."""
    if argv if argv is not None else sys.argv[1:]:
        print(f"{PROG}: error: no arguments: the request is read on stdin ({', '.join(REQUEST)})", file=sys.stderr)
        return 2
    try:
        answer = audit(json.loads(sys.stdin.read()))
    except (AuditError, ValueError) as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
        return 2
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
