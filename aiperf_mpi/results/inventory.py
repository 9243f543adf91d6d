"""Hardware that exists once: the layout against the world and the system description.

A forger who lists one group eight times on the same ranks, or one two-rank
group as two one-rank groups, gets eight or two times the hardware, each
with its own probe.  What MPI gave the job is written twice by two different
collectives, the ``system`` event (every rank's node, gathered) and the
``layout`` event (the plan every rank computed): these checks hold each to the
other and both to arithmetic.  The master, the relays and the groups must
partition the world's ranks, no rank may train in two groups, each rank must
sit on the host the system description puts it on, and each host is listed
once.  (More training ranks than a host has accelerators is allowed: MIG
instances and shared devices; the bound counts the devices, not the ranks.)

Pure: events in, problems out (a list of one-line sentences; empty is good).
"""

from __future__ import annotations

from collections.abc import Mapping


def _ints(value: object) -> list[int] | None:
    """A list of integers (the log's JSON; a tuple from the plan in memory, which the master's mllog reads)."""
    if isinstance(value, list | tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def host_of_rank(system: Mapping) -> dict[int, str]:
    """Each rank's host as the ``system`` event's gathered description says."""
    where: dict[int, str] = {}
    for host in system.get("hosts") or []:
        if isinstance(host, Mapping):
            for rank in _ints(host.get("ranks")) or []:
                where.setdefault(rank, str(host.get("host")))
    return where


def group_ranks_by_host(layout: Mapping, system: Mapping) -> dict[int, dict[str, int]]:
    """For each group index, how many of its ranks each host holds (the hosts as the system event places them)."""
    where = host_of_rank(system)
    groups: dict[int, dict[str, int]] = {}
    for group in layout.get("groups") or []:
        if not isinstance(group, Mapping) or not isinstance(group.get("index"), int):
            continue
        hosts = groups.setdefault(group["index"], {})
        for rank in _ints(group.get("ranks")) or []:
            host = where.get(rank, "?")
            hosts[host] = hosts.get(host, 0) + 1
    return groups


def inventory_problems(layout: Mapping, system: Mapping) -> list[str]:
    """What in the layout is not hardware the system description has, once each."""
    problems: list[str] = []
    world = layout.get("world_size")
    if not isinstance(world, int) or isinstance(world, bool) or world < 2:
        return [f"layout: world size {world!r} is not a number of ranks"]
    if system.get("ranks") != world:
        problems.append(f"layout: world size {world}, the system description gathered {system.get('ranks')!r} ranks")
    where = host_of_rank(system)
    problems += _hosts_once(system)
    if sorted(where) != list(range(world)):
        problems.append(f"system: its hosts list ranks {_span(sorted(where))}, not each of 0..{world - 1} once")
    owner: dict[int, str] = {}

    def claim(rank: object, role: str) -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world:
            problems.append(f"layout: {role} names rank {rank!r}, outside the world of {world}")
        elif rank in owner:
            problems.append(f"layout: rank {rank} is {owner[rank]} and {role} (hardware counted twice)")
        else:
            owner[rank] = role

    claim(layout.get("master_rank"), "the master")
    for relay in layout.get("relay_ranks") or []:
        claim(relay, "a relay")
    indexes: set[int] = set()
    for group in layout.get("groups") or []:
        index = group.get("index") if isinstance(group, Mapping) else None
        ranks = _ints(group.get("ranks")) if isinstance(group, Mapping) else None
        if not isinstance(index, int) or isinstance(index, bool) or ranks is None or not ranks:
            problems.append(f"layout: a group without an index and a list of ranks: {str(group)[:80]}")
            continue
        if index in indexes:
            problems.append(f"layout: group {index} is listed twice")
        indexes.add(index)
        for rank in ranks:
            claim(rank, f"in group {index}")
    if indexes and sorted(indexes) != list(range(len(indexes))):
        problems.append(f"layout: the groups are numbered {_span(sorted(indexes))}, not 0..{len(indexes) - 1}")
    unplaced = sorted(set(range(world)) - set(owner))
    if unplaced:
        problems.append(f"layout: rank(s) {_span(unplaced)} are neither the master, a relay nor in a group")
    hosts = layout.get("hosts")
    if isinstance(hosts, list) and len(hosts) == world:
        moved = [r for r in range(world) if r in where and hosts[r] != where[r]]
        if moved:
            problems.append(f"layout: rank(s) {_span(moved)} on other hosts than the system description's")
    elif hosts is not None:
        problems.append(f"layout: {len(hosts) if isinstance(hosts, list) else hosts!r} hosts for {world} ranks")
    return problems


def _hosts_once(system: Mapping) -> list[str]:
    """Each host once, with ranks, each rank on one host, its accelerators a list of names: a second entry of a
    host (with better hardware) must not be what a bound reads."""
    problems: list[str] = []
    hosts = system.get("hosts")
    if not isinstance(hosts, list):
        return [f"system: hosts is {type(hosts).__name__}, not a list"]
    seen: set[str] = set()
    placed: set[int] = set()
    for host in hosts:
        if not isinstance(host, Mapping):
            problems.append(f"system: a host entry that is not an object: {str(host)[:60]}")
            continue
        name, ranks = str(host.get("host")), _ints(host.get("ranks"))
        if name in seen:
            problems.append(f"system: host {name} is listed twice")
        seen.add(name)
        if not ranks:
            problems.append(f"system: host {name} lists no ranks")
        twice = sorted(placed & set(ranks or []))
        if twice:
            problems.append(f"system: rank(s) {_span(twice)} on two hosts")
        placed |= set(ranks or [])
        devices = host.get("accelerators", [])
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            problems.append(f"system: host {name}'s accelerators are not a list of names")
    if isinstance(system.get("nodes"), int) and system["nodes"] != len(hosts):
        problems.append(f"system: {system['nodes']} nodes, {len(hosts)} hosts listed")
    return problems


def training_ranks_by_host(layout: Mapping, system: Mapping) -> dict[str, int]:
    """Every group's ranks on each host together: what shares a CPU host's bound."""
    on_host: dict[str, int] = {}
    for counts in group_ranks_by_host(layout, system).values():
        for host, ranks in counts.items():
            on_host[host] = on_host.get(host, 0) + ranks
    return on_host


def _span(ranks: list[int]) -> str:
    text = ", ".join(map(str, ranks[:8]))
    return text + (f", … ({len(ranks)} in all)" if len(ranks) > 8 else "")
