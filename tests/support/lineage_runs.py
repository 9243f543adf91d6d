"""A hand-made run with a morphed child, and a forger who rewrites everything a graph change touches.

:func:`lineage_run` extends :func:`~tests.support.verify_runs.consistent_run`
by a third model: a child of model 0 made by two logged morphisms.
:func:`forge` is the careful forger of issue 23: it replaces one task's graph
file and hyper-parameters, and then makes everything else agree with them —
the logged sha256, the epochs' op counts, the model record, the score event
and ``score.json`` — so that only a check of where the graph came from can
catch it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import networkx as nx

from aiperf_mpi.graph.model import from_json, to_json, with_kernel_size
from aiperf_mpi.graph.morph import compose, deeper, replay, wider
from aiperf_mpi.graph.ops import count_ops, epoch_ops
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import append_graph, read_graph, segment_graph_file
from aiperf_mpi.results.score import compute_score
from tests.support.event_logs import write_log
from tests.support.verify_runs import RANKS, _done, _epoch, consistent_run, find, read_log, write_mllog

CHILD = 2
"""the child's task (and model id), on group 0, of parent model 0"""


def child_steps(parent: nx.DiGraph) -> tuple[dict, ...]:
    """The child's morphisms, made by the package's morph functions (as the search makes them)."""
    first = deeper(parent, "b1_relu1", 3)
    return compose(first, wider(first.graph, "b2_conv1", 16, random.Random(7))).steps


def rescore(run_dir: Path, events: list[dict]) -> None:
    """Replace the score event and score.json by the score of ``events`` (as a forger with the package would)."""
    events[:] = [e for e in events if e["event"] != runlog.SCORE]
    score = compute_score(events, step=50.0)
    stop = max(i for i, e in enumerate(events) if e["event"] == runlog.RUN_STOP)
    events.insert(stop + 1, {"event": runlog.SCORE, "time": events[stop]["time"] + 0.1,
                             **{k: v for k, v in score.to_dict().items() if k != "grid"}})  # fmt: skip
    write_log(run_dir, events)
    write_mllog(run_dir, events)  # as the master would have written it for these events
    (run_dir / "score.json").write_text(json.dumps(score.to_dict(), indent=2))


def lineage_run(run_dir: Path) -> Path:
    """consistent_run plus task 2 on group 0: model 0's graph, deeper after b1_relu1 and b2_conv1 widened."""
    consistent_run(run_dir)
    events = read_log(run_dir)
    parent = from_json(read_graph(run_dir, find(events, runlog.MODEL_PROPOSED, task=0)))
    steps = child_steps(parent)
    graph_json = to_json(with_kernel_size(replay(parent, steps), 3))
    hparams = {"batch_size": 32, "kernel_size": 3}
    proposal = {"event": runlog.MODEL_PROPOSED, "time": 1072.0, "task": CHILD, "group": 0, "parent": 0,
                "hparams": hparams, "description": "deeper; wider",
                "search": {"strategy": "gp-ucb", "search": "bayesian", "tuner": "tpe"}, "morphs": list(steps),
                **append_graph(run_dir, segment_graph_file(1), graph_json)}  # fmt: skip
    epochs = [_epoch(CHILD, 0, 1, 1085, graph_json, 32, 0.6, "imagenet"),
              _epoch(CHILD, 0, 2, 1095, graph_json, 32, 0.65, "imagenet")]
    done = _done(CHILD, 0, 1096, graph_json, hparams, epochs)
    done["model"].update(parent=0, description="deeper; wider")
    events += [proposal, *epochs, done]
    events.sort(key=lambda event: event["time"])  # logged in time order, between task 1's events (stable)
    rescore(run_dir, events)
    return run_dir


def forge(run_dir: Path, task: int, graph: nx.DiGraph, kernel_size: int | None = None) -> None:
    """Store ``graph`` as task ``task``'s (``kernel_size``: its hparams' too), and make the log agree with it.

    The sha256, the epochs' op counts (as the verifier recounts them: the
    graph tuned to the hparams' kernel size), the model record, the score
    event and score.json are all rewritten.
    """
    events = read_log(run_dir)
    proposal = find(events, runlog.MODEL_PROPOSED, task=task)
    hparams = {**proposal["hparams"], **({} if kernel_size is None else {"kernel_size": kernel_size})}
    graph_json = to_json(graph)
    # appended as a new line of the graphs file, the event pointed at it: what a forger with the package does
    proposal.update(hparams=hparams, **append_graph(run_dir, proposal["graph_file"], graph_json))
    counted = to_json(with_kernel_size(graph, hparams["kernel_size"]))
    batch = hparams["batch_size"] * RANKS
    epochs = [e for e in events if e["event"] == runlog.EPOCH and e["task"] == task]
    for epoch in epochs:
        ops = epoch_ops(count_ops(from_json(counted)), epoch["train_samples"], epoch["validation_samples"], batch)
        epoch.update(ops=ops.total, ops_train=ops.train, ops_update=ops.update, ops_validation=ops.validation,
                     steps=ops.steps)  # fmt: skip
    record = find(events, runlog.MODEL_DONE, task=task)["model"]
    fresh = _done(task, 0, 0.0, counted, hparams, epochs)["model"]
    record.update(graph=graph_json, hparams=hparams, epochs=fresh["epochs"], ops=fresh["ops"])
    rescore(run_dir, events)
