"""History, the GP and the Bayesian search, driven through ask()/tell() without MPI or TensorFlow."""

import copy
import logging
import random

import numpy as np
import pytest

from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.search.bayesian import BayesianSearch, RandomSearch, SearchConfig
from aiperf_mpi.search.gp import GaussianProcess
from aiperf_mpi.search.history import FAILED, History, ModelRecord
from aiperf_mpi.search.hpo import HParams
from tests.support.synthetic_objective import record

SEED_JSON = to_json(tiny_resnet())


def seeded_history() -> History:
    graph = tiny_resnet()
    history = History()
    history.append(record(0, None, graph, to_json(graph)))
    return history


# --------------------------------------------------------------------------- history


def test_history_is_append_only_and_replicates_from_deltas() -> None:
    master = History()
    master.append(ModelRecord(0, None, SEED_JSON, accuracy=0.5, hparams={"batch": 32, "kernel": 3}))
    master.append(ModelRecord(1, 0, SEED_JSON + " ", accuracy=0.7, epochs=[{"epoch": 1, "accuracy": 0.7}]))
    with pytest.raises(ValueError, match="append-only"):
        master.append(ModelRecord(5, 0, SEED_JSON))
    with pytest.raises(ValueError, match="earlier model"):
        master.append(ModelRecord(2, 2, SEED_JSON))
    replica = History()
    assert replica.extend(master.since(0)) == 2
    master.append(ModelRecord(2, 1, SEED_JSON, status=FAILED, timings={"error": "NaN loss"}))
    assert replica.extend(master.since(1)) == 1  # overlapping deltas are checked, not duplicated
    assert replica.to_list() == master.to_list()
    assert [r.id for r in replica.best(5)] == [1, 0]  # a failed model is never ranked
    tampered = copy.deepcopy(master.since(0))
    tampered[1]["accuracy"] = 0.1
    with pytest.raises(ValueError, match="diverged"):
        replica.extend(tampered)


def test_predicted_accuracy_is_what_the_search_sees() -> None:
    history = History([ModelRecord(0, None, SEED_JSON, accuracy=0.4, predicted_accuracy=0.8)])
    assert history[0].search_accuracy == 0.8
    assert history.best(1)[0].id == 0


# --------------------------------------------------------------------------- GP


def test_gp_interpolates_a_smooth_function() -> None:
    x = np.linspace(0, 6, 25)[:, None]
    gp = GaussianProcess()
    assert gp.fit(x, np.sin(x[:, 0])).ok
    mean, std = gp.predict(np.array([[1.55], [20.0]]))
    assert abs(mean[0] - np.sin(1.55)) < 0.05
    assert std[1] > std[0]


def test_gp_reports_a_degenerate_kernel_instead_of_stopping_silently() -> None:
    broken = GaussianProcess(kernel=lambda a, b, scale: -np.ones((len(a), len(b))) * 10.0)
    status = broken.fit(np.arange(6.0)[:, None], np.arange(6.0))
    assert not status.ok and "Cholesky failed" in status.message
    nan = GaussianProcess(kernel=lambda a, b, scale: np.full((len(a), len(b)), np.nan))
    assert "non-finite" in nan.fit(np.arange(3.0)[:, None], np.arange(3.0)).message


def test_gp_survives_duplicated_points_with_jitter_or_noise() -> None:
    x = np.ones((10, 3))
    status = GaussianProcess().fit(x, np.linspace(0, 1, 10))
    assert status.ok


def test_search_keeps_proposing_and_logs_loudly_when_the_gp_fails(caplog: pytest.LogCaptureFixture) -> None:
    history = seeded_history()
    search = BayesianSearch(history, seed=1, config=SearchConfig(candidates=4, anchors=3))
    for _ in range(3):
        proposal = search.ask()
        search.tell(record(history.next_id, proposal.parent, proposal.graph, to_json(proposal.graph)))
    search.gp = GaussianProcess(kernel=lambda a, b, scale: -np.ones((len(a), len(b))))
    with caplog.at_level(logging.ERROR, logger="aiperf_mpi.search"):
        proposal = search.ask()
    assert proposal.info["strategy"] == "explore" and "GP failed" in proposal.info["reason"]
    assert search.gp_failures == 1
    assert any("could not be fitted" in r.message for r in caplog.records)


# --------------------------------------------------------------------------- search


def run(searcher, history: History, proposals: int) -> float:
    for _ in range(proposals):
        proposal = searcher.ask()
        assert not history.contains_graph(to_json(proposal.graph)), "duplicates are skipped"
        assert 0 <= proposal.parent < history.next_id
        searcher.tell(record(history.next_id, proposal.parent, proposal.graph, to_json(proposal.graph)))
    return max(r.accuracy for r in history)


def test_proposals_are_new_valid_children_with_plans() -> None:
    history = seeded_history()
    search = BayesianSearch(history, seed=3, config=SearchConfig(candidates=6, anchors=4))
    run(search, history, 6)
    proposal = search.ask()
    assert proposal.plan and proposal.description
    assert proposal.info["strategy"] == "gp-ucb"
    assert {"ucb", "mean", "std"} <= set(proposal.info)


@pytest.mark.slow
def test_search_beats_random_morphing_on_a_synthetic_objective() -> None:
    config = SearchConfig(candidates=8, anchors=4)
    wins = 0
    for seed in range(10):
        guided = seeded_history()
        best_guided = run(BayesianSearch(guided, seed, config), guided, 30)
        blind = seeded_history()
        best_blind = run(RandomSearch(blind, seed), blind, 30)
        wins += best_guided > best_blind
    assert wins >= 8, f"the search beat random morphing in only {wins} of 10 seeds"


def test_ask_needs_a_trained_model() -> None:
    with pytest.raises(RuntimeError, match="at least one trained model"):
        BayesianSearch(History(), seed=0).ask()
    with pytest.raises(RuntimeError):
        RandomSearch(History([ModelRecord(0, None, SEED_JSON, status=FAILED)]), seed=0).ask()


def test_random_choice_of_seed_is_reproducible() -> None:
    a, b = seeded_history(), seeded_history()
    run(BayesianSearch(a, 5, SearchConfig(candidates=4, anchors=3)), a, 4)
    run(BayesianSearch(b, 5, SearchConfig(candidates=4, anchors=3)), b, 4)
    assert a.to_list() == b.to_list()
    assert random.Random(5).random() == random.Random(5).random()


# --------------------------------------------------------------------------- the registry


def test_the_registry_names_every_search_and_tuner_and_imports_them_lazily() -> None:
    import subprocess
    import sys

    from aiperf_mpi.config import CHOICES
    from aiperf_mpi.search.registry import SEARCHES, TUNERS, make_search, make_tuner, search_class

    assert CHOICES["search"] == tuple(SEARCHES) and CHOICES["hpo"] == tuple(TUNERS)  # config reads the registry
    assert search_class("bayesian") is BayesianSearch and search_class("random") is RandomSearch
    assert isinstance(make_search("random", seeded_history(), 0), RandomSearch)
    for name in TUNERS:
        tuner = make_tuner(name, [16, 32], 0, HParams(16, 3))
        assert callable(tuner.ask) and callable(tuner.tell)
    with pytest.raises(ValueError, match=r"unknown search 'evolution' \(known: bayesian, random\)"):
        search_class("evolution")
    code = ("import sys; import aiperf_mpi.search.registry, aiperf_mpi.config\n"
            "print(sorted(m for m in ('optuna', 'skopt', 'aiperf_mpi.search.bayesian') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"  # naming a backend loads nothing: its module is imported on first use


def test_the_registry_names_what_each_tuner_loads_and_nothing_else_branches_on_a_name() -> None:
    """A tuner's libraries are in the registry (a training rank preloads them: __main__._preload asks
    leader_libraries), they are what its first use loads, and no module compares a run's search or tuner with a
    name: a second decision per name would drift from the registry's."""
    import ast
    import json
    import subprocess
    import sys
    from pathlib import Path

    from aiperf_mpi.search.registry import SEARCHES, TUNERS, leader_libraries

    code = ("import sys\nfrom aiperf_mpi.search.registry import TUNERS, make_tuner\n"
            "from aiperf_mpi.search.hpo import HParams\n"
            "name = sys.argv[1]\nbefore = [m in sys.modules for m in TUNERS[name].libraries]\n"
            "tuner = make_tuner(name, [16, 32], 0, HParams(16, 3))\n"
            "for _ in range(4):\n    tuner.tell(tuner.ask(), 0.5)\n"
            "print(json.dumps([before, [m in sys.modules for m in TUNERS[name].libraries]]))")  # fmt: skip
    for name, entry in TUNERS.items():
        done = subprocess.run([sys.executable, "-c", "import json\n" + code, name], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        loaded_before, loaded_after = json.loads(done.stdout)
        assert entry.libraries and not any(loaded_before) and all(loaded_after), (name, done.stdout)
    assert leader_libraries("bayesian", "gp") == ("scipy.optimize", "scipy.linalg", "skopt")
    assert leader_libraries("random", "tpe") == ("scipy.optimize", "optuna")
    names = set(SEARCHES) | set(TUNERS)
    package = Path(__file__).resolve().parents[2] / "aiperf_mpi"
    branching = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(isinstance(o, ast.Attribute) and o.attr in ("search", "hpo") for o in operands) and any(
                        isinstance(o, ast.Constant) and o.value in names for o in operands):  # fmt: skip
                    branching.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not branching, f"a search or tuner chosen by its name outside search/registry.py: {branching}"


def test_each_search_says_which_parents_it_may_choose() -> None:
    from aiperf_mpi.search.registry import candidate_parents

    config = SearchConfig(parents=2)
    assert candidate_parents("bayesian", config, [5, 4, 3], [1, 2, 3, 4, 5]) == [5, 4]
    assert candidate_parents("random", config, [5, 4, 3], [1, 2, 3, 4, 5]) == [1, 2, 3, 4, 5]
    assert not BayesianSearch.parents_from_whole_view and RandomSearch.parents_from_whole_view
