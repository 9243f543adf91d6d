"""What the data and the search allow (analysis/verify/data.py, analysis/verify/search.py): each forgery is named.

Every forgery here is made consistent as a careful forger would make it — the epochs' op counts recounted,
the model records, the score event and ``score.json`` rescored with the package's own code — so the rows
that read the log against itself pass it.  Before the ``data`` and ``search`` families verify passed each of
them with exit 0: the splits were the log's own, the kernel and batch sizes and the morphisms whatever the
proposal logged, and a seed could come any number of times.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from aiperf_mpi.data.sources import digits_source, synthetic_source
from aiperf_mpi.graph.model import KERNEL_SIZES, analyse, from_json, with_kernel_size
from aiperf_mpi.graph.morph import add_skip, candidates, is_candidate, replay
from aiperf_mpi.results import runlog
from aiperf_mpi.results.datasets import CIFAR10, DIGITS, DOCUMENTED_SPLITS, ILSVRC_2012, SYNTHETIC, documented_split
from aiperf_mpi.results.graphs import append_graph, read_graph
from analysis import checks, verify
from analysis.verify.registry import FAMILIES
from analysis.verify.search import STRATEGY_CHAINS
from analysis.verify.units import RowFindings, UnitStream, takes_counts, unit_of
from tests.support import lineage_runs
from tests.support.lineage_runs import CHILD, lineage_run, rescore
from tests.support.verify_runs import RANKS, _done, _epoch, consistent_run, find, forge, read_log, recount, sync_record

NEW_ROWS = {"data splits", "search space", "repeated graphs"}


def failing(run_dir: Path) -> dict[str, list[str]]:
    return {c.name: [*c.problems, *c.missing] for c in verify.verify(run_dir).checks if c.verdict != checks.OK}


def assert_only(run_dir: Path, row: str, *fragments: str) -> list[str]:
    """Only ``row`` fails, a line of it holds every fragment, and the verdict is exit 1."""
    bad = failing(run_dir)
    assert set(bad) == {row}, bad
    assert any(all(f in line for f in fragments) for line in bad[row]), bad[row]
    assert verify.main([str(run_dir)]) == 1
    return bad[row]


def _epochs(events: list[dict], task: int | None = None) -> list[dict]:
    return [e for e in events if e["event"] == runlog.EPOCH and task in (None, e["task"])]


def _score(run_dir: Path) -> float:
    return json.loads((run_dir / "score.json").read_text())["score"]


@pytest.fixture(scope="module")
def digits_pristine(tmp_path_factory) -> Path:
    return consistent_run(tmp_path_factory.mktemp("digits") / "run", dataset="digits")


@pytest.fixture
def digits(digits_pristine, tmp_path) -> Path:
    return Path(shutil.copytree(digits_pristine, tmp_path / "digits"))


@pytest.fixture(scope="module")
def child_pristine(tmp_path_factory) -> Path:
    return lineage_run(tmp_path_factory.mktemp("lineage") / "run")


@pytest.fixture
def child(child_pristine, tmp_path) -> Path:
    return Path(shutil.copytree(child_pristine, tmp_path / "child"))


def test_untouched_runs_pass_the_new_rows(digits, child) -> None:
    for run_dir in (digits, child):
        rows = {c.name: c for c in verify.verify(run_dir).checks}
        assert all(rows[name].verdict == checks.OK for name in NEW_ROWS), [rows[n] for n in NEW_ROWS]
    rows = {c.name: c for c in verify.verify(child).checks}
    assert "held to the documented splits" in rows["data splits"].summary
    assert "1 children's morphisms" in rows["search space"].summary


# --------------------------------------------------------------------------- the table


def test_the_built_in_sources_are_cut_by_the_table() -> None:
    """One home: the sources the run opens count what the verifier holds their runs to."""
    for source, split in ((digits_source(), DIGITS), (synthetic_source(), SYNTHETIC)):
        assert source.sizes == {"train": split.train, "validation": split.validation}
        assert (source.classes, source.image_shape) == (split.classes, (split.image_size,) * 2 + (split.channels,))


def test_which_split_a_run_is_held_to() -> None:
    assert documented_split("digits", {"train": 99, "validation": 1, "classes": 10}) is DIGITS  # whatever it logged
    assert documented_split("imagenet", ILSVRC_2012.counts()) is ILSVRC_2012
    assert documented_split("imagenet", {"train": 40, "validation": 20, "classes": 1000}) is None  # the user's own
    assert documented_split("imagenet", None) is None and documented_split("hdf5", {"train": 5}) is None
    assert set(DOCUMENTED_SPLITS) == {"digits", "synthetic", "cifar10", "imagenet"}


def judged(row: str, events: list[dict]) -> checks.Check:
    """``row`` of a few events alone (numbered 1, 2, …; no run directory): the units the stream makes of them, read
    before a run's model has any segment, each given to the row's functions in the registry (the run last)."""
    rules = [rule.rule for family in FAMILIES for rule in family.rules if rule.row == row]
    stream, found = UnitStream(Path(".")), RowFindings(row)
    model = SimpleNamespace(segment_records=[], config=None)
    units = [unit for number, event in enumerate(events, start=1)
             for unit in stream.see(event, number, model)]  # type: ignore[arg-type]  # fmt: skip
    for unit in [*units, *stream.end(None, False)]:
        for rule in (rule for rule in rules if unit_of(rule) is type(unit)):
            for finding in rule(unit, found.counts) if takes_counts(rule) else rule(unit):
                found.add(finding)
    return found.check()


def _cifar_rules(train: int, validation: int) -> checks.Check:
    """The data row of a CIFAR-10 run whose data check counted ``train`` and ``validation`` images."""
    data = {"dataset": "cifar10", "train": train, "validation": validation, "classes": 10, "image_shape": [32, 32, 3]}
    return judged("data splits", [{"event": runlog.RUN_START, "segment": 1, "config": {"dataset": "cifar10"},
                                   "data": data}])  # fmt: skip


def test_a_cifar10_subset_is_the_users_own_and_a_larger_set_is_not_cifar10() -> None:
    """CIFAR-10 is read from the files a run is given: some of its batches (the tests' small sets) are a user's
    subset, its counts the log's; more images than CIFAR-10 has are not CIFAR-10."""
    assert documented_split("cifar10", CIFAR10.counts()) is CIFAR10
    subset = _cifar_rules(64, 32)
    assert subset.verdict == checks.OK and "its split sizes are taken from the log" in subset.summary
    assert _cifar_rules(50_000, 10_000).verdict == checks.OK
    larger = _cifar_rules(50_000, 20_000)
    assert larger.verdict == checks.MISMATCH and "more than CIFAR-10" in larger.problems[0], larger.problems


# --------------------------------------------------------------------------- a. the data sets


def test_an_inflated_validation_split_is_held_to_the_table(digits) -> None:
    """The ×84 forgery: digits' 360 validation images logged as 30,240 in the data check and every epoch, each
    epoch's correct count and ops recounted — evaluation work that no rate bound limits by itself."""
    before = _score(digits)

    def inflate(events: list[dict]) -> None:
        find(events, runlog.RUN_START)["data"]["validation"] = 360 * 84
        for epoch in _epochs(events):
            correct = epoch["correct"] * 84
            epoch.update(validation_samples=360 * 84, correct=correct, val_accuracy=correct / (360 * 84))
            recount(events, epoch)
        for task in (0, 1):
            sync_record(events, task)

    forge(digits, inflate)
    assert _score(digits) > 5 * before  # the forgery's aim
    assert_only(digits, "data splits", "event 1 (run_start of segment 1): data check: digits is scikit-learn's",
                "validation 30240 (the table: 360)")
    lines = failing(digits)["data splits"]
    assert any("validation: 30,240 samples" in line and "validation split is 360 by the table" in line
               for line in lines), lines  # fmt: skip


def test_a_larger_train_split_is_held_to_the_table(digits) -> None:
    def more_passes(events: list[dict]) -> None:
        find(events, runlog.RUN_START)["data"]["train"] = DIGITS.train * 10
        for epoch in _epochs(events):
            batch = find(events, runlog.MODEL_PROPOSED, task=epoch["task"])["hparams"]["batch_size"]
            recount(events, epoch, ((DIGITS.train * 10 // RANKS) // batch) * batch * RANKS)

    forge(digits, more_passes)
    assert_only(digits, "data splits", "one pass:", "train split is 1,437 by the table")


def test_a_users_own_data_set_keeps_its_logged_counts_and_says_so(digits) -> None:
    def own_file(events: list[dict]) -> None:
        find(events, runlog.RUN_START)["config"]["dataset"] = "hdf5"
        find(events, runlog.RUN_START)["data"]["dataset"] = "hdf5"

    forge(digits, own_file)
    rows = {c.name: c for c in verify.verify(digits).checks}
    assert rows["data splits"].verdict == checks.OK
    assert "a user's own data set (hdf5) (1437 train, 360 validation, 10 classes): its split sizes are taken " \
           "from the log" in rows["data splits"].summary  # fmt: skip


# --------------------------------------------------------------------------- b. the search space


def test_a_kernel_outside_the_tuners_space(child) -> None:
    """Kernels of 9 on the parent (graph, sha256, ops, record and score rewritten): the lineage rebuilds it at
    its logged kernel size, and the child (tuned to its own kernel) is unchanged."""
    parent = from_json(read_graph(child, find(read_log(child), runlog.MODEL_PROPOSED, task=0)))
    assert 9 not in KERNEL_SIZES
    lineage_runs.forge(child, 0, with_kernel_size(parent, 9), kernel_size=9)
    assert_only(child, "search space", "event 6 (model_proposed of task 0, group 0): kernel size 9: the tuner "
                                       "chooses among 3, 5, 7")  # fmt: skip


def test_a_batch_of_one(digits) -> None:
    """Batch 1: a step, and so an update, for every sample (more operations to count), each epoch a whole pass."""
    before = _score(digits)

    def batch_one(events: list[dict]) -> None:
        find(events, runlog.MODEL_PROPOSED, task=0)["hparams"]["batch_size"] = 1
        find(events, runlog.MODEL_DONE, task=0)["model"]["hparams"]["batch_size"] = 1
        for epoch in _epochs(events, 0):
            recount(events, epoch, (DIGITS.train // RANKS) * RANKS)

    forge(digits, batch_one)
    assert _score(digits) > before
    assert_only(digits, "search space", "event 6 (model_proposed of task 0, group 0): batch size 1: the tuner's are "
                                        "16, 32, 64, 128, 256, 512 (the configured batch_size 32")  # fmt: skip


def test_more_morphisms_than_the_strategy_chains(child) -> None:
    """The child's two morphisms logged as an exploration, which morphs once (the annealing chains)."""
    forge(child, lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD)["search"].update(strategy="explore"))
    assert_only(child, "search space", f"(model_proposed of task {CHILD}, group 0): 2 morphisms: a explore proposal "
                                       "chains 1")  # fmt: skip


def test_a_deeper_block_at_another_kernel_than_the_proposals(child) -> None:
    def kernel_seven(events: list[dict]) -> None:
        find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"][0]["args"][1] = 7

    forge(child, kernel_seven)  # the child is tuned to its kernel 3 after the morphisms: the same graph
    assert_only(child, "search space", "step 1: a deeper block of kernel 7, the search makes it at the proposal's "
                                       "kernel size 3")  # fmt: skip


def _illegal_skip(graph) -> tuple[str, str]:
    """A skip ``add_skip`` applies but the search never makes: from a layer that is not a ReLU."""
    analysis = analyse(graph)
    for src, dst in itertools.product(sorted(graph), sorted(graph)):
        if graph.nodes[src]["type"] == "conv" and graph.nodes[dst]["type"] == "relu":
            try:
                add_skip(graph, src, dst, analysis)
            except ValueError:
                continue
            assert not is_candidate(graph, "add_skip", (src, dst), analysis)
            return src, dst
    raise AssertionError("no such skip in the seed")


def test_a_morphism_at_a_place_the_search_never_morphs(child) -> None:
    """The child's graph made with one more skip, from a convolution, logged and rebuilt everywhere: the lineage
    replays it; the search joins ReLUs only."""
    events = read_log(child)
    parent = from_json(read_graph(child, find(events, runlog.MODEL_PROPOSED, task=0)))
    steps = find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"]
    src, dst = _illegal_skip(replay(parent, steps))
    steps = [*steps, {"kind": "add_skip", "args": [src, dst]}]
    lineage_runs.forge(child, CHILD, with_kernel_size(replay(parent, steps), 3))
    events = read_log(child)
    find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"] = steps
    rescore(child, events)
    assert_only(child, "search space", f"step 3: add_skip('{src}', '{dst}') is no place the search morphs")


def test_is_candidate_agrees_with_the_candidates(child) -> None:
    graph = from_json(read_graph(child, find(read_log(child), runlog.MODEL_PROPOSED, task=CHILD)))
    analysis = analyse(graph)
    for kind in ("deeper", "wider", "add_skip", "concat_skip"):
        found = set(candidates(graph, kind, analysis))
        places = [(n,) for n in graph] if kind in ("deeper", "wider") else itertools.product(graph, graph)
        assert {p for p in places if is_candidate(graph, kind, p, analysis)} == found, kind


def test_the_strategies_are_those_the_searches_name() -> None:
    """The chains the verifier allows are the searches' own strategies (search/bayesian.py)."""
    source = (Path(__file__).resolve().parents[2] / "aiperf_mpi" / "search" / "bayesian.py").read_text()
    for strategy in STRATEGY_CHAINS:
        assert f'"strategy": "{strategy}"' in source, strategy


# --------------------------------------------------------------------------- c. repeated graphs


def test_a_seed_again_after_a_model_could_be_ranked(tmp_path) -> None:
    """A third task on group 0 after model 0 ended with its accuracy: the seed at kernel 3, model 0's graph
    again — which the master would not hand out once a model can be ranked, and which today's rule let pass."""
    run_dir = consistent_run(tmp_path / "run")
    events = read_log(run_dir)
    graph_json = read_graph(run_dir, find(events, runlog.MODEL_PROPOSED, task=0)).decode()
    hparams = {"batch_size": 32, "kernel_size": 3}
    seed = find(events, runlog.MODEL_PROPOSED, task=0)
    proposal = {**seed, "time": 1072.0, "task": 2, **append_graph(run_dir, seed["graph_file"], graph_json)}
    proposal["hparams"] = hparams
    epochs = [_epoch(2, 0, 1, 1085, graph_json, 32, 0.6, "imagenet"),
              _epoch(2, 0, 2, 1095, graph_json, 32, 0.65, "imagenet")]  # fmt: skip
    done = _done(2, 0, 1096, graph_json, hparams, epochs)
    done["model"]["id"] = 2
    events += [proposal, *epochs, done]
    events.sort(key=lambda event: event["time"])
    rescore(run_dir, events)
    assert_only(run_dir, "repeated graphs", "(model_proposed of task 2, group 0): the seed again (task 0's graph), "
                                            "but model_done at event")  # fmt: skip


def _proposal(task: int, group: int, digest: str, parent: int | None = None) -> dict:
    return {"event": runlog.MODEL_PROPOSED, "task": task, "group": group, "parent": parent, "graph_sha256": digest,
            "hparams": {}, "search": {}}  # fmt: skip


def _done_event(task: int, group: int, model: int, accuracy: float | None) -> dict:
    return {"event": runlog.MODEL_DONE, "task": task, "group": group,
            "model": {"id": model, "status": "trained", "accuracy": accuracy}}  # fmt: skip


START = {"event": runlog.RUN_START, "config": {}}


def test_which_repeated_graphs_the_log_explains() -> None:
    """The judge alone: seeds while nothing is ranked (synthetic data: never), a discarded task's graph in a
    later segment, and nothing else."""
    a, b = "a" * 64, "b" * 64
    repeats = judged("repeated graphs", [
        START,
        _proposal(0, 0, a),
        _proposal(1, 1, a),  # both groups handed the seed at the start
        _done_event(0, 0, 0, None),  # no accuracy (synthetic data): nothing to rank
        _proposal(2, 0, a),
        _proposal(3, 0, b, parent=0),
        {"event": runlog.RUN_STOP, "discarded_tasks": [3]},
        START,
        _proposal(4, 1, b, parent=0),  # event 9: discarded in segment 1: a resumed master does not know
        _proposal(5, 0, b, parent=0),  # event 10: but task 4 is of this segment
    ])  # fmt: skip
    assert [line.split(":")[0] for line in repeats.problems] == ["event 10 (model_proposed of task 5, group 0)"]
    assert "task 4's graph again" in repeats.problems[0] and "of segment 2" in repeats.problems[0]
    assert repeats.notes == ["event 9 (model_proposed of task 4, group 1): task 3's graph again: task 3 was "
                             "discarded at segment 1's run_stop (a resumed master knows only ended models)"]
    assert "2 seed(s) proposed again before any model could be ranked" in repeats.summary


def test_a_seed_handed_out_before_the_first_ranked_model_is_explained() -> None:
    """Group 1's work was handed out when its previous task ended, before model 0 was ranked: its seed, logged
    after model 0's model_done, is the master's own."""
    a = "a" * 64
    repeats = judged("repeated graphs", [
        START,
        _proposal(0, 0, a),
        _proposal(1, 1, a),
        {"event": runlog.MODEL_FAILED, "task": 1, "group": 1, "model": 0},
        _done_event(0, 0, 1, 0.5),
        _proposal(2, 1, a),  # event 6: handed out at event 4
        _proposal(3, 0, a),  # event 7: handed out at event 5: model 1 was ranked
    ])  # fmt: skip
    assert [line.split(":")[0] for line in repeats.problems] == ["event 7 (model_proposed of task 3, group 0)"]


@pytest.mark.parametrize("change", [
    lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD)["hparams"].update(batch_size=[32], kernel_size={}),
    lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD)["search"].update(strategy=["gp-ucb"]),
    lambda events: find(events, runlog.MODEL_PROPOSED, task=CHILD)["morphs"][0].update(args=[["b1_relu1"], 3]),
    lambda events: find(events, runlog.RUN_START)["config"].update(device_memory_gb=1e308, seed_model=["tiny"]),
    lambda events: find(events, runlog.RUN_START)["data"].update(train=[1], image_shape={"a": 1}),
])  # fmt: skip
def test_hostile_values_are_named_never_a_traceback(child, change) -> None:
    forge(child, change)
    assert verify.main([str(child)]) == 1
