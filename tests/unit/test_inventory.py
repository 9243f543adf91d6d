"""Hardware that exists once: the layout against the world and the system description (results/inventory.py)."""

from __future__ import annotations

import copy
import json

import pytest

from aiperf_mpi.mpi.plan import plan_layout
from aiperf_mpi.results.inventory import group_ranks_by_host, inventory_problems


def real_shape(ranks_per_node: int = 4, nodes: int = 2, group_size: int | None = 2, relays: int = 1,
               accelerators: int = 0) -> tuple[dict, dict]:  # fmt: skip
    """A layout event as the planner writes it and the system event that gathered the same world."""
    hosts = [f"node{n}" for n in range(nodes) for _ in range(ranks_per_node)]
    node_of = [n for n in range(nodes) for _ in range(ranks_per_node)]
    layout = json.loads(json.dumps(plan_layout(hosts, node_of, group_size, relays=relays).to_dict()))  # as logged
    system = {"ranks": len(hosts), "nodes": nodes, "hosts": [
        {"host": f"node{n}", "cores": 8, "accelerators": ["NVIDIA A100"] * accelerators,
         "ranks": [r for r, h in enumerate(hosts) if h == f"node{n}"]} for n in range(nodes)]}  # fmt: skip
    return layout, system


@pytest.mark.parametrize("shape", [{}, {"group_size": None, "relays": 0}, {"nodes": 3, "group_size": 1},
                                   {"accelerators": 4}])  # fmt: skip
def test_what_the_planner_writes_is_hardware_that_exists_once(shape: dict) -> None:
    layout, system = real_shape(**shape)
    assert inventory_problems(layout, system) == []


def forge(change) -> list[str]:
    layout, system = real_shape()
    layout, system = copy.deepcopy(layout), copy.deepcopy(system)
    change(layout, system)
    return inventory_problems(layout, system)


def test_one_group_listed_again_on_the_same_ranks_is_named() -> None:
    def again(layout: dict, system: dict) -> None:
        layout["groups"].append({**layout["groups"][0], "index": len(layout["groups"])})

    assert any("hardware counted twice" in p for p in forge(again))


def test_a_two_rank_group_relabelled_as_two_one_rank_groups_keeps_the_count_but_not_the_numbering() -> None:
    def split(layout: dict, system: dict) -> None:
        first = layout["groups"][0]
        layout["groups"][0] = {**first, "ranks": first["ranks"][:1]}
        layout["groups"].insert(1, {**first, "index": 99, "ranks": first["ranks"][1:]})

    assert any("numbered" in p for p in forge(split))


def test_ranks_beyond_the_gathered_world_or_on_other_hosts_are_named() -> None:
    def bigger(layout: dict, system: dict) -> None:
        layout["world_size"] += 2
        layout["groups"].append({"index": len(layout["groups"]), "ranks": [8, 9]})

    problems = forge(bigger)
    assert any("gathered 8 ranks" in p for p in problems), problems

    def moved(layout: dict, system: dict) -> None:
        layout["hosts"][5] = "node0"

    assert any("other hosts" in p for p in forge(moved))


def test_a_rank_left_out_or_a_group_without_ranks_is_named() -> None:
    def dropped(layout: dict, system: dict) -> None:
        layout["relay_ranks"] = []

    assert any("neither the master, a relay nor in a group" in p for p in forge(dropped))

    def listed(layout: dict, system: dict) -> None:
        layout["groups"][0]["index"] = [0]  # a list where the index goes: a problem, never a traceback

    assert any("without an index" in p for p in forge(listed))


def test_more_training_ranks_than_accelerators_is_allowed_but_a_host_listed_twice_is_named() -> None:
    layout, system = real_shape(accelerators=1)  # MIG instances, shared devices: the bound counts devices
    assert inventory_problems(layout, system) == []
    system["hosts"].append({**system["hosts"][0], "ranks": [], "accelerators": ["NVIDIA B200"] * 8})
    problems = inventory_problems(layout, system)
    assert any("listed twice" in p for p in problems) and any("lists no ranks" in p for p in problems), problems


def test_group_ranks_by_host_counts_where_the_system_puts_them() -> None:
    layout, system = real_shape(group_size=None, relays=0)
    assert group_ranks_by_host(layout, system) == {0: {"node0": 3}, 1: {"node1": 4}}
