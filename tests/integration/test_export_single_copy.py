"""The best model stored once, on a small logged run (no benchmark run: tests/mpi/test_run.py has the real one).

The run's end exports with ``--single-copy``: the best task's ``.npz`` goes, and every reader — a resumed run's
training rank loading its parent, a re-export, ``--task N`` — finds the same arrays in ``best/model.keras``.
"""

import json

import numpy as np
import pytest

pytest.importorskip("keras")
from aiperf_mpi.export import export  # noqa: E402
from aiperf_mpi.graph.model import to_json  # noqa: E402
from aiperf_mpi.graph.seeds import tiny_resnet  # noqa: E402
from aiperf_mpi.results import runlog  # noqa: E402
from aiperf_mpi.results.graphs import append_graph, segment_graph_file  # noqa: E402
from aiperf_mpi.results.stored_weights import locate_weights  # noqa: E402
from aiperf_mpi.train.keras_model import build_keras_model  # noqa: E402
from aiperf_mpi.train.transfer import model_weights, read_weights, save_weights, transfer_weights  # noqa: E402
from analysis.after_run import export_best  # noqa: E402
from tests.support.event_logs import epoch, model_done, proposed, start, write_log  # noqa: E402

pytestmark = pytest.mark.tf


def trained_task(run_dir, task: int, accuracy: float) -> tuple[list[dict], dict]:
    """A task's log events, its graph file and its weights file (random arrays: any trained values will do)."""
    graph = tiny_resnet()
    model = build_keras_model(graph, dtype="float32")
    rng = np.random.default_rng(task)
    for layer in model.layers:
        if layer.weights:
            layer.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in layer.weights])
    weights = model_weights(model)
    placed = append_graph(run_dir, segment_graph_file(1), to_json(graph))  # line ``task``, as proposed() says
    (run_dir / "weights").mkdir(exist_ok=True)
    save_weights(run_dir / "weights" / f"task-{task}.npz", weights)
    seen = epoch(task, 0, 1, 10.0 * task, 10.0 * task + 5, 10, accuracy)
    assert proposed(task, 0, 0.0, 0.1)["graph_offset"] == placed["graph_offset"]
    return [proposed(task, 0, 10.0 * task, 0.1), seen, model_done(task, 0, 10.0 * task + 6, accuracy, [seen])], weights


def assert_same(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name, arrays in expected.items():
        assert len(got[name]) == len(arrays), name
        assert all(np.array_equal(a, b) for a, b in zip(got[name], arrays, strict=True)), name


def metadata(run_dir) -> dict:
    return json.loads((run_dir / "best" / "metadata.json").read_text())


def test_the_best_model_is_stored_once_and_every_reader_finds_it(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    events, weights = [start(0.0, dataset="digits", precision="fp32")], {}
    for task, accuracy in ((0, 0.5), (1, 0.8)):
        logged, weights[task] = trained_task(run_dir, task, accuracy)
        events += logged
    write_log(run_dir, events)

    export_best(run_dir, "digits")  # the run's end: python -m aiperf_mpi.export --single-copy, in a child
    printed = capsys.readouterr()
    assert printed.err == "" and printed.out.startswith(f"aiperf_mpi: best model: task 1 (validation accuracy "
                                                        f"0.8000) in {run_dir / 'best'}: model.keras ")  # fmt: skip
    assert printed.out.endswith(" s; weights/task-1.npz removed (model.keras is its only copy)\n"), printed.out
    assert not (run_dir / "weights" / "task-1.npz").exists() and (run_dir / "weights" / "task-0.npz").is_file()
    assert metadata(run_dir)["weights_file"] == "weights/task-1.npz" and metadata(run_dir)["weights_file_removed"]
    assert_same(read_weights(run_dir / "best" / "model.keras"), weights[1])

    # a resumed run's training rank, handed the logged name of its parent's weights, inherits the same arrays
    parent = locate_weights(run_dir, "weights/task-1.npz")
    assert parent == run_dir / "best" / "model.keras"
    child = build_keras_model(tiny_resnet(), dtype="float32")
    assert transfer_weights(read_weights(parent), child, []) == []
    assert_same(model_weights(child), weights[1])

    # a re-export by hand (both copies kept unless --single-copy) and --task N build from best/model.keras
    again = export(run_dir)
    assert (again.task, again.removed, again.only_copy) == (1, "", "weights/task-1.npz")  # still the only copy
    assert metadata(run_dir)["weights_file_removed"]
    assert_same(read_weights(run_dir / "best" / "model.keras"), weights[1])
    assert export(run_dir, task=1).only_copy == ""  # export/task-1/ is a copy elsewhere, not the store
    assert_same(read_weights(run_dir / "export" / "task-1" / "model.keras"), weights[1])

    # a resumed segment found a better model: replacing best/ first writes task 1's .npz back (the log never
    # said it was removed, so a later segment may still hand it to a child)
    logged, weights[2] = trained_task(run_dir, 2, 0.9)
    events += logged
    write_log(run_dir, events)
    better = export(run_dir, single_copy=True)
    assert (better.task, better.removed, better.restored) == (2, "weights/task-2.npz", "weights/task-1.npz")
    assert_same(read_weights(run_dir / "weights" / "task-1.npz"), weights[1])
    assert metadata(run_dir)["weights_file"] == "weights/task-2.npz" and not (run_dir / "weights/task-2.npz").exists()

    # the master's sweep removed task 2's (already gone) file and logged it: nothing to write back then
    logged, weights[3] = trained_task(run_dir, 3, 0.95)
    events += [{"event": runlog.WEIGHTS_REMOVED, "time": 40.0, "models": [2], "files": ["weights/task-2.npz"]},
               *logged]  # fmt: skip
    write_log(run_dir, events)
    last = export(run_dir, single_copy=True)
    assert (last.task, last.removed, last.restored) == (3, "weights/task-3.npz", "")
    assert sorted(p.name for p in (run_dir / "weights").iterdir()) == ["task-0.npz", "task-1.npz"]
    assert_same(read_weights(locate_weights(run_dir, "weights/task-3.npz")), weights[3])
    assert locate_weights(run_dir, "weights/task-2.npz") is None
