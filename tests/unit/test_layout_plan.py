"""The layout planner's rules, without MPI."""

import json

import pytest

from aiperf_mpi.mpi.plan import LayoutError, _ranges, plan_layout, relay_hint


def one_node(n: int) -> tuple[list[str], list[int]]:
    return ["n0"] * n, [0] * n


def test_one_node_one_group_without_master() -> None:
    plan = plan_layout(*one_node(4))
    assert [g.ranks for g in plan.groups] == [(1, 2, 3)]
    assert plan.groups[0].leader == 1
    assert plan.groups[0].horovod_size == 3
    assert plan.group_of(0) is None
    assert plan.group_of(3) == plan.groups[0]


@pytest.mark.parametrize(
    ("group_size", "expected"),
    [(1, [(1,), (2,), (3,)]), (2, [(1, 2), (3,)]), (3, [(1, 2, 3)]), (100, [(1, 2, 3)])],
)
def test_group_size_cuts_a_node(group_size: int, expected: list[tuple[int, ...]]) -> None:
    assert [g.ranks for g in plan_layout(*one_node(4), group_size).groups] == expected


def test_groups_never_span_nodes() -> None:
    hosts = ["a", "a", "a", "b", "b", "b", "b", "b"]
    nodes = [0, 0, 0, 3, 3, 3, 3, 3]
    plan = plan_layout(hosts, nodes, group_size=4)
    assert [g.ranks for g in plan.groups] == [(1, 2), (3, 4, 5, 6), (7,)]
    assert [g.host for g in plan.groups] == ["a", "b", "b"]
    assert [g.index for g in plan.groups] == [0, 1, 2]
    assert plan.node_count == 2


def test_interleaved_ranks_group_by_node_not_by_rank_order() -> None:
    """Round-robin rank placement (``--map-by node``) must still give per-node groups."""
    nodes = [0, 1, 0, 1, 0, 1]
    plan = plan_layout([f"h{n}" for n in nodes], nodes)
    assert [g.ranks for g in plan.groups] == [(2, 4), (1, 3, 5)]


def test_world_of_one_has_no_groups_and_says_why() -> None:
    plan = plan_layout(["solo"], [0])
    assert plan.groups == ()
    assert "at least 2 ranks" in plan.describe()


@pytest.mark.parametrize(
    ("hosts", "nodes", "group_size", "message"),
    [
        (["a"], [0, 0], None, "host names"),
        ([], [], None, "empty"),
        (["a", "a"], [0, 0], 0, "at least 1"),
    ],
)
def test_bad_input_raises_layout_error(hosts, nodes, group_size, message) -> None:
    with pytest.raises(LayoutError, match=message):
        plan_layout(hosts, nodes, group_size)


def test_to_dict_is_json_and_complete() -> None:
    data = json.loads(json.dumps(plan_layout(*one_node(3), 1).to_dict()))
    assert data["world_size"] == 3
    assert data["groups"][1] == {"index": 1, "node": 0, "host": "n0", "ranks": [2], "leader": 2, "horovod_size": 1}


def test_describe_compresses_rank_ranges() -> None:
    assert _ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8"
    text = plan_layout(*one_node(4096)).describe()
    assert "ranks 1-4095" in text
    assert "horovod size 4095" in text


def test_each_worker_gets_its_nodes_next_device_and_the_master_none() -> None:
    hosts, nodes = ["a"] * 5 + ["b"] * 4, [0] * 5 + [5] * 4  # 4 GPUs per node, the master on node a
    plan = plan_layout(hosts, nodes, 1)
    assert [plan.device_index(r) for r in range(1, 9)] == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="master"):
        plan.device_index(0)


def test_one_monitor_per_node_on_its_first_group_leader() -> None:
    hosts, nodes = ["a"] * 5 + ["b"] * 4, [0] * 5 + [5] * 4
    plan = plan_layout(hosts, nodes, 2)  # groups (1,2) (3,4) on a; (5,6) (7,8) on b
    assert [r for r in range(9) if plan.monitors_node(r)] == [1, 5]


def test_relays_are_the_first_ranks_beside_the_master_and_serve_the_groups_in_turn() -> None:
    """``--relays``: ranks of rank 0's node after it, in no group, taking no device; each group has one."""
    nodes = [0, 0, 0, 0, 1, 1, 2, 2]
    plan = plan_layout([f"h{n}" for n in nodes], nodes, group_size=1, relays=2)
    assert plan.relay_ranks == (1, 2)
    assert [g.ranks for g in plan.groups] == [(3,), (4,), (5,), (6,), (7,)]
    assert [plan.relay_of(g.index) for g in plan.groups] == [1, 2, 1, 2, 1]
    assert plan.group_of(1) is None and plan.group_of(2) is None
    assert plan.device_index(3) == 0  # the master's and the relays' cores are no accelerator's
    with pytest.raises(ValueError, match="relay"):
        plan.device_index(1)
    assert "relays:       rank(s) 1-2 on h0, each taking the messages of every 2nd group's leader for the master" \
        in plan.describe()
    assert json.loads(json.dumps(plan.to_dict()))["relay_ranks"] == [1, 2]
    without = plan_layout([f"h{n}" for n in nodes], nodes, group_size=1)
    assert without.relay_ranks == () and {without.relay_of(g.index) for g in without.groups} == {0}


@pytest.mark.parametrize(("nodes", "relays", "message"), [
    ([0, 0, 1, 1], 2, "rank 0's node"),
    ([0, 0, 0], 2, "leaves no rank to train"),
    ([0, 0], -1, "0 or more"),
])  # fmt: skip
def test_relays_that_cannot_be_placed_are_refused_in_one_line(nodes: list[int], relays: int, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        plan_layout([f"h{n}" for n in nodes], nodes, relays=relays)


def test_rank_0_suggests_relays_from_16384_groups_when_it_has_none() -> None:
    assert relay_hint(16_383, 0) is None and relay_hint(65_536, 2) is None
    assert "--relays 1 (one per 16,384 groups)" in relay_hint(16_384, 0)
    assert "65,536 groups and no relay ranks" in relay_hint(65_536, 0) and "--relays 4 " in relay_hint(65_536, 0)
