"""The search's view: a leader's view equals the master's after every update, and the search cannot tell it
from the whole history."""

import pickle
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiperf_mpi.graph.model import to_json
from aiperf_mpi.graph.seeds import tiny_resnet
from aiperf_mpi.search.bayesian import BayesianSearch, RandomSearch, SearchConfig
from aiperf_mpi.search.history import FAILED, History, ModelRecord, graph_hash
from aiperf_mpi.search.registry import candidate_parents
from aiperf_mpi.search.view import (
    MAX_RECORD,
    MasterHistory,
    SearchView,
    ViewBounds,
    ViewIndex,
    WireCodec,
    from_search_fields,
    search_fields,
    wire_record,
)
from tests.support.synthetic_objective import record

SEED_JSON = to_json(tiny_resnet())


def brute_force_view(records: list[ModelRecord], bounds: ViewBounds) -> set[int]:
    """V by its definition: the top by (score, then lower id) and the most recent trained, from all records."""
    trained = [r for r in records if r.search_accuracy is not None]
    top = sorted(trained, key=lambda r: (-r.search_accuracy, r.id))[: bounds.top]
    recent = trained[-bounds.recent :] if bounds.recent else []
    return {r.id for r in top} | {r.id for r in recent}


def make_record(model_id: int, score: float | None, weights: bool) -> ModelRecord:
    graph = SEED_JSON.replace('"format"', f'"variant":{model_id},"format"', 1)  # a distinct graph per record
    if score is None:
        return ModelRecord(model_id, None, graph, status=FAILED)
    return ModelRecord(model_id, None, graph, accuracy=score, weights=f"weights/task-{model_id}.npz" if weights else "",
                       epochs=[{"epoch": 1}], timings={"train": 1.0}, description="kept in the log only")  # fmt: skip


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.one_of(st.none(), st.sampled_from([0.1, 0.2, 0.5, 0.7, 0.9]),
                                               st.floats(0, 1, allow_nan=False))),  # fmt: skip
        st.tuples(st.just("send"), st.integers(0, 3)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(1, 5), st.integers(0, 4))
def test_a_leader_view_equals_the_master_view_after_every_update(ops, top, recent) -> None:
    """Whether the master compressed a member's record or the leader that trained it did (with the run's
    dictionary or before it had it), every leader's view is the master's after each update."""
    bounds = ViewBounds(top, recent)
    master = MasterHistory(bounds)
    records: list[ModelRecord] = []
    leaders = {g: SearchView(bounds) for g in range(4)}
    seen = dict.fromkeys(leaders, 0)
    dictionary_sent = dict.fromkeys(leaders, False)
    for kind, value in ops:
        if kind == "append":
            records.append(make_record(len(records), value, weights=len(records) % 2 == 0))
            maker = leaders[len(records) % len(leaders)]  # the group that trained it
            body = maker.own_record(records[-1]) if value is not None and len(records) % 3 else b""
            assert not body or master.codec.accepts(body)
            master.append(records[-1], body=body)
            assert set(master.view.ids()) == brute_force_view(records, bounds)
            continue
        update = master.update(seen[value], with_dictionary=not dictionary_sent[value])
        dictionary_sent[value] = dictionary_sent[value] or bool(update.dictionary)
        assert len(update.records) <= top + recent  # never more than the view, whatever was appended since
        seen[value] = len(master)
        leader = leaders[value]
        leader.apply(update)
        assert leader.ids() == master.view.ids()
        assert len(leader) == len(master) == len(records)
        for model_id in leader.ids():
            original = records[model_id]
            held = leader[model_id]
            assert (held.graph, held.accuracy, held.status, held.weights) == (
                original.graph, original.accuracy, original.status, original.weights)  # fmt: skip
            assert held.epochs == [] and held.description == ""  # what the search never reads is not sent
            assert leader.contains_graph(original.graph)
        assert [r.id for r in leader.best(top)] == master.view.best(top)


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(1, 5), st.integers(0, 4), st.lists(st.booleans(), min_size=1))
def test_an_update_holds_its_members_wire_records_compressed_now_or_later(ops, top, recent, defer) -> None:
    """Whichever way an update finds its records (a copy of the kept ones, or a walk since ``seen``) and whenever
    they are compressed (at once, or by the I/O thread's ``later`` before the reply leaves, maybe after the view
    has changed again), it holds exactly the members with id ≥ seen, each as its own wire record."""
    master = MasterHistory(ViewBounds(top, recent))
    pending: list = []  # updates whose records the I/O thread has not filled yet, their fills, what they must hold
    for step, (kind, value) in enumerate([*ops, ("send", 0)]):
        if kind == "append":
            master.append(make_record(len(master), value, weights=False))
        else:
            seen = max(0, len(master) - value * 2)
            later: list = []
            update = master.update(seen, with_dictionary=False, later=later if value % 2 else None)
            expected = [wire_record(i, master.codec.encode(master.view[i].fields)) for i in master.view.ids()
                        if i >= seen]  # fmt: skip
            pending.append((update, later, expected))
        if not defer[step % len(defer)] or step == len(ops):  # the I/O thread's round: fills, then releases
            for update, later, expected in pending:
                for fill in later:
                    fill()
                assert update.records == expected
            pending = []


def test_a_departed_model_never_returns() -> None:
    index: ViewIndex[None] = ViewIndex(ViewBounds(2, 2))
    departed: set[int] = set()
    for model_id, score in enumerate([0.9, 0.1, 0.2, 0.3, 0.95, 0.4, 0.5, 0.99, 0.6]):
        departed |= set(index.add(model_id, score, None))
        assert not departed & set(index.ids())
    assert index.ids() == [4, 7, 8] and index.best(2) == [7, 4] and index.recent(2) == [7, 8]
    with pytest.raises(ValueError, match="id order"):
        index.add(3, 0.5, None)


def test_wire_records_name_their_dictionary() -> None:
    codec = WireCodec(SEED_JSON.encode())
    blob = codec.encode(("a record", SEED_JSON))
    assert len(blob) < len(WireCodec().encode(("a record", SEED_JSON))) / 3
    assert WireCodec(SEED_JSON.encode()).decode(blob) == ("a record", SEED_JSON)
    with pytest.raises(ValueError, match="dictionary"):
        WireCodec().decode(blob)


def test_the_master_takes_a_leaders_record_only_if_every_leader_can_decode_it() -> None:
    """A leader's compressed record is checked by its header: made without a dictionary or with the run's, it
    passes; made with another dictionary, or not a zlib stream, it does not (it would fail on every leader)."""
    run = WireCodec(SEED_JSON.encode())
    other = WireCodec(b"another dictionary" * 100)
    fields = ("a record", SEED_JSON)
    assert run.accepts(run.encode(fields)) and run.accepts(WireCodec().encode(fields))
    assert WireCodec().accepts(WireCodec().encode(fields))
    assert not run.accepts(other.encode(fields)) and not WireCodec().accepts(run.encode(fields))
    assert not any(run.accepts(bad) for bad in (b"", b"x", b"\x78", b"\x78\x00rest", b"not zlib", "text"))
    assert run.decode(WireCodec().encode(fields)) == fields  # a stream without a dictionary decodes with one


class _Runs:
    def __reduce__(self):
        return (print, ("a leader's record ran code",))


def test_a_record_that_names_a_function_is_refused_not_run(capsys) -> None:
    """Leaders relay each other's records: unpickling one may build numbers, text and tuples, nothing else."""
    codec = WireCodec()
    with pytest.raises(ValueError, match="only numbers and text"):
        codec.decode(codec.encode(("fields", _Runs())))
    assert "ran code" not in capsys.readouterr().out
    record = make_record(3, 0.5, weights=True)
    blob = codec.encode(search_fields(record))
    assert from_search_fields(3, codec.decode(blob))[0].graph == record.graph
    bomb = zlib.compress(pickle.dumps("x" * (MAX_RECORD + 1)))  # 64 kB that would inflate past the bound
    for bad in (blob[:-4], blob[: len(blob) // 2], bomb):  # no checksum, cut short, a bomb: refused, not read
        with pytest.raises(ValueError, match="wire record"):
            codec.decode(bad)
    for fields in (search_fields(record)[:3], (True, *search_fields(record)[1:]), [*search_fields(record)]):
        with pytest.raises(ValueError, match="seven"):
            from_search_fields(3, codec.decode(codec.encode(fields)))


def test_a_nan_accuracy_is_never_ranked() -> None:
    history = History([ModelRecord(0, None, SEED_JSON, accuracy=float("nan")), ModelRecord(1, 0, SEED_JSON + " ",
                                                                                            accuracy=0.3)])  # fmt: skip
    assert [r.id for r in history.best(5)] == [1] and [r.id for r in history.recent(5)] == [1]


def fed_from(history_records: list[ModelRecord], master: MasterHistory, view: SearchView, seen: int) -> int:
    """Append new records to the master and send the leader its update, as a Work would."""
    for r in history_records[len(master) :]:
        master.append(r)
        view.remember(r.graph_hash)  # stands for the master's Duplicate answers (see the test below)
    view.apply(master.update(seen, with_dictionary=True))
    return len(master)


@pytest.mark.parametrize("kind", ["bayesian", "random"])
def test_the_search_proposes_the_same_from_its_view_as_from_the_whole_history(kind) -> None:
    """What a leader no longer sees is what the search never read: the proposals are identical.

    A small view (4 best, 4 recent) against 30 models, so most records have
    left it.  The view learns every graph's hash through ``remember``: in a
    run the master answers Duplicate for a graph outside the view, so the
    leader learns it one round trip later instead — the only difference.
    """
    config = SearchConfig(candidates=4, anchors=3, working_set=8, parents=2)
    full, view = History(), SearchView(config.view_bounds())
    master = MasterHistory(config.view_bounds())
    graph = tiny_resnet()
    full.append(record(0, None, graph, to_json(graph)))
    if kind == "bayesian":
        on_full, on_view = BayesianSearch(full, 7, config), BayesianSearch(view, 7, config)
    else:
        on_full, on_view = RandomSearch(full, 7, config), RandomSearch(view, 7, config)
    seen = fed_from(list(full), master, view, 0)
    for _ in range(30):
        a, b = on_full.ask(), on_view.ask()
        assert (a.parent, to_json(a.graph), a.plan, a.info) == (b.parent, to_json(b.graph), b.plan, b.info)
        pool = candidate_parents(kind, config, master.best_ids(config.parents), master.view.ids())
        assert a.parent in pool  # the master keeps this parent's weights
        on_full.tell(record(full.next_id, a.parent, a.graph, to_json(a.graph)))
        seen = fed_from(list(full), master, view, seen)
    assert len(view.ids()) <= 8 < len(full)
    if kind == "bayesian":
        assert len(on_view._cache.graphs) <= 8  # the search's caches are bounded by the view too


def test_a_leader_remembers_a_bounded_number_of_hashes() -> None:
    view = SearchView(ViewBounds(2, 2))
    for i in range(SearchView.KNOWN_HASHES + 10):
        view.remember(graph_hash(str(i)))
    assert len(view._known) == SearchView.KNOWN_HASHES
    assert not view.contains_graph("0") and view.contains_graph(str(SearchView.KNOWN_HASHES + 9))
