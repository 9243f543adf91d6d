"""Lineage: a logged child is rebuilt from its parent's graph, its morphisms and its kernel size; forgeries are caught.

The replay is compared with what the search itself produced (random morph
chains and the searches' ``ask()``), through a JSON round trip as in the
log.  The verifier's tests forge a graph file *and everything that depends
on it* (sha256, op counts, model record, score): before the lineage check,
``analysis.verify`` passed such a run.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from aiperf_mpi.graph.lineage import rebuild, seed_from_record, seed_record, structure_difference
from aiperf_mpi.graph.model import GraphError, from_json, to_json, with_kernel_size
from aiperf_mpi.graph.morph import MorphError, compose, random_morph, replay, wider
from aiperf_mpi.graph.seeds import seed_model, tiny_resnet
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import append_graph, read_graph
from aiperf_mpi.search.bayesian import BayesianSearch, RandomSearch, SearchConfig
from aiperf_mpi.search.history import History, ModelRecord
from analysis import checks, verify
from tests.support.lineage_runs import CHILD, forge, lineage_run
from tests.support.random_graphs import random_graph
from tests.support.verify_runs import find, read_log, rewrite_log, write_best


def _logged(steps) -> list[dict]:
    """The steps as the verifier reads them back from the log."""
    return json.loads(json.dumps(list(steps)))


@pytest.mark.parametrize("seed", range(40))
def test_replaying_a_random_morph_chain_rebuilds_the_searchs_graph(seed: int) -> None:
    rng = random.Random(seed)
    if seed % 2:
        parent = random_graph(seed)
    else:
        parent = seed_model(rng.choice(["tiny", "resnet50"]), rng.choice([32, 40]), rng.choice([1, 3]), 10)
    parent = from_json(to_json(with_kernel_size(parent, rng.choice([1, 3, 5])) if seed % 2 == 0 else parent))
    kernel = rng.choice([3, 5, 7])
    try:
        morphed = random_morph(parent, rng, kernel)
        for _ in range(rng.randrange(3)):
            morphed = compose(morphed, random_morph(morphed.graph, rng, kernel, analysis=morphed.analysis))
    except MorphError:
        pytest.skip("no morphism applies to this random graph")
    assert len(morphed.steps) == morphed.morphs
    assert to_json(replay(parent, _logged(morphed.steps))) == to_json(morphed.graph)
    if seed % 2 == 0:  # a seed has tunable convolutions: the leader stores the child tuned
        stored = to_json(with_kernel_size(morphed.graph, kernel))
        rebuilt = rebuild(None, from_json(to_json(parent)), _logged(morphed.steps), kernel)
        assert to_json(rebuilt) == stored
        assert structure_difference(from_json(stored), rebuilt) == ""


@pytest.mark.parametrize("search_class", [BayesianSearch, RandomSearch])
def test_the_searchs_proposals_carry_the_steps_that_rebuild_them(search_class) -> None:
    """Through ask(): the parent is the history's stored graph (tuned with its own kernel size)."""
    seed = with_kernel_size(tiny_resnet(8, 1, 10), 5)
    history = History([ModelRecord(0, None, to_json(seed), accuracy=0.5)])
    search = search_class(history, 3, SearchConfig(candidates=6, anchors=3))
    for model_id in range(1, 7):
        kernel = (3, 5, 7)[model_id % 3]
        proposal = search.ask(kernel=kernel)
        stored = to_json(with_kernel_size(proposal.graph, kernel))  # what the leader sends and the master writes
        parent = from_json(history[proposal.parent].graph)
        assert 1 <= len(proposal.steps) <= SearchConfig().max_morphs
        assert to_json(rebuild(None, parent, _logged(proposal.steps), kernel)) == stored
        search.tell(ModelRecord(model_id, proposal.parent, stored, accuracy=0.5 + model_id / 100))


def test_a_seed_record_rebuilds_the_seed() -> None:
    for name, size, channels, classes in (("tiny", 8, 1, 10), ("resnet50", 64, 3, 100)):
        graph = seed_model(name, size, channels, classes)
        record = seed_record(name, graph)
        assert record == {"model": name, "image_size": size, "channels": channels, "classes": classes}
        assert to_json(rebuild(seed_from_record(record), None, [], 5)) == to_json(with_kernel_size(graph, 5))
    for bad in ({"model": "tiny"}, {"model": "vgg", "image_size": 8, "channels": 1, "classes": 10}, [1],
                {"model": "tiny", "image_size": "8", "channels": 1, "classes": 10}):  # fmt: skip
        with pytest.raises(GraphError):
            seed_from_record(bad)


@pytest.mark.parametrize("steps, says", [
    ([{"kind": "deeper", "args": ["b1_relu1"]}], "deeper takes (str, int)"),
    ([{"kind": "taller", "args": []}], "unknown morphism"),
    ([{"kind": "wider", "args": ["b2_conv1", 1000000000]}], "widens 'b2_conv1' by 16 filters"),
    ([{"kind": "wider", "args": ["b2_conv1", 16], "seed": 3}], "is not {kind, args}"),
    ([{"kind": "add_skip", "args": ["b2_out", "stem_relu"]}], "a skip goes forward"),
    ([{"kind": "deeper", "args": ["no_such_layer", 3]}], "is not one"),
    (["deeper"], "is not {kind, args}"),
])  # fmt: skip
def test_a_step_the_search_cannot_make_is_refused(steps, says) -> None:
    with pytest.raises(MorphError, match=re.escape(says)):
        replay(tiny_resnet(8, 1, 10), steps)


def test_structure_difference_names_the_first_difference() -> None:
    graph = tiny_resnet(8, 1, 10)
    assert structure_difference(graph, graph.copy()) == ""
    assert "kernel 5 stored, 3 rebuilt" in structure_difference(with_kernel_size(graph, 5), graph)
    widened = wider(graph, "b2_conv1", 16, random.Random(1)).graph
    assert structure_difference(widened, graph) == "layer b2_conv1: filters 48 stored, 32 rebuilt"
    renamed = graph.copy()
    renamed.graph["name"] = "another"  # the model's name is not its structure
    assert structure_difference(renamed, graph) == ""


# --------------------------------------------------------------------------- the verifier


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The lineage run, made once; each test forges a copy (``run``)."""
    return lineage_run(tmp_path_factory.mktemp("lineage") / "run")


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "forged"
    shutil.copytree(pristine, copy)
    return copy


def _verdicts(run_dir: Path) -> dict[str, str]:
    return {c.name: c.verdict for c in verify.verify(run_dir).checks}


def _lineage_problems(run_dir: Path) -> list[str]:
    return next(c for c in verify.verify(run_dir).checks if c.name == "lineage").problems


def test_a_run_with_a_morphed_child_is_verified(pristine, tmp_path, capsys) -> None:
    run = Path(shutil.copytree(pristine, tmp_path / "run"))
    write_best(run)  # a valid run is one with its best model
    assert verify.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 graph files rebuilt from the seed model" in out
    assert "verdict: VERIFIED, consistent with a valid run, NOT YET VALID" in out  # re-evaluation and audit to come


def _tuned(run_dir: Path, task: int) -> object:
    return from_json(read_graph(run_dir, find(read_log(run_dir), runlog.MODEL_PROPOSED, task=task)))


@pytest.mark.parametrize("task", [0, CHILD])
def test_a_graph_file_with_another_kernel_size_and_its_sha256_is_caught(run, task, capsys) -> None:
    """The issue's forgery: one graph file's tunable kernels changed, its logged sha256 updated to match."""
    forge(run, task, with_kernel_size(_tuned(run, task), 7))
    assert _verdicts(run)["lineage"] == checks.MISMATCH
    assert verify.main([str(run)]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("MISMATCH") and "lineage:" in line)
    assert f"model_proposed of task {task}: its graph is not" in line and "at kernel 3" in line
    assert "kernel 7 stored, 3 rebuilt" in line


def _fixed_kernel(graph):
    graph.nodes["b2_proj"]["kernel"] = 3
    return graph


def _widened(graph):
    return wider(graph, "b1_conv1", 16, random.Random(2)).graph


FORGERIES = {
    "a fixed kernel": (_fixed_kernel, "layer b2_proj: kernel 3 stored, 1 rebuilt",
                       "layer b2_proj: kernel 1 stored, 3 rebuilt"),
    "a widened layer": (_widened, "layer b1_conv1: filters 32 stored, 16 rebuilt",
                        "layer b1_conv1: filters 16 stored, 32 rebuilt"),
}  # fmt: skip
"""forgery → (the change, the forged task's difference, its child's difference when the parent was forged)"""


@pytest.mark.parametrize("task", [0, CHILD])
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_graph_forged_everywhere_is_caught_by_the_lineage_alone(run, forgery, task) -> None:
    """A 1×1 convolution the tuner does not touch made 3×3, or a layer widened: graph, sha256, ops, record and
    score all agree with it, so every other check passes (today's verifier passed both: exit 0)."""
    change, difference, child_difference = FORGERIES[forgery]
    forge(run, task, change(_tuned(run, task)))
    verdicts = _verdicts(run)
    assert [name for name, verdict in verdicts.items() if verdict != checks.OK] == ["lineage"]
    line, *child = _lineage_problems(run)
    assert line.startswith(f"model_proposed of task {task}: its graph is not") and difference in line
    if task == CHILD:
        assert "its parent model 0 (task 0)'s graph with the logged morphisms deeper(b1_relu1, 3); " \
               "wider(b2_conv1, 16) at kernel 3" in line
        assert child == []
    else:  # a forged parent is caught twice: the child's morphisms, replayed on the forged graph, miss its file
        [line] = child
        assert line.startswith(f"model_proposed of task {CHILD}: its graph is not its parent model 0") and \
            child_difference in line


def test_a_forged_morphism_that_the_search_would_not_make_is_caught(run) -> None:
    """The forger widens a layer and logs the widening too, by more than the search widens."""
    forge(run, CHILD, wider(_tuned(run, CHILD), "b1_conv1", 48, random.Random(2)).graph)
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"].append(
        {"kind": "wider", "args": ["b1_conv1", 48]}))  # fmt: skip
    [line] = _lineage_problems(run)
    assert "they do not apply" in line and "widens 'b1_conv1' by 8 filters, not 48" in line


def test_a_parent_after_its_child_and_an_unknown_parent_are_caught(run) -> None:
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD).update(parent=2))
    [line] = _lineage_problems(run)
    assert "its parent model 2 is not a model logged before it" in line


def test_a_seed_that_is_not_the_configurations_is_caught(run) -> None:
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=0)["seed"].update(model="resnet50"))
    assert "is not the configuration's seed_model 'tiny'" in _lineage_problems(run)[0]


def test_too_many_morphisms_are_caught(run) -> None:
    def more(events):
        find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"] *= 2

    rewrite_log(run, more)
    assert "4 morphisms logged, the search chains 1 to 3" in _lineage_problems(run)[0]


def test_a_log_without_the_lineage_fields_is_not_recorded(run, capsys) -> None:
    def strip(events):
        for event in events:
            event.pop("morphs", None)
            event.pop("seed", None)

    rewrite_log(run, strip)
    assert _verdicts(run)["lineage"] == checks.NOT_RECORDED
    assert verify.main([str(run)]) == 1
    assert "3 of 3 model_proposed events record neither a seed nor morphisms" in capsys.readouterr().out


def test_a_malformed_lineage_record_is_one_line_not_a_traceback(run) -> None:
    def spoil(events):
        find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"] = [{"kind": "deeper", "args": [None, 3]}, 7]
        find(events, runlog.MODEL_PROPOSED, task=0)["seed"] = {"model": "tiny", "image_size": -1}

    rewrite_log(run, spoil)
    lines = _lineage_problems(run)
    assert len(lines) == 2 and all(line.startswith("model_proposed of task") for line in lines)
    events = read_log(run)
    assert find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"][1] == 7


def test_a_graph_file_written_otherwise_with_the_same_structure_passes_the_lineage(run) -> None:
    """The rebuild compares structure, not bytes: the same graph spaced otherwise (its sha256 updated) is the same
    model."""
    proposal = find(read_log(run), runlog.MODEL_PROPOSED, task=CHILD)
    spaced = json.dumps(json.loads(read_graph(run, proposal)), separators=(" , ", " : "))
    placed = append_graph(run, proposal["graph_file"], spaced)  # a new line, the event pointed at it
    rewrite_log(run, lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD).update(placed))
    assert _verdicts(run)["lineage"] == checks.OK
