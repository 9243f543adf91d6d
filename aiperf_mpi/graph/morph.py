"""Network morphisms: new, larger graphs that compute the same function.

Each morphism returns the child graph and a *transfer plan*: a list of small,
JSON-ready steps that turn the parent's weights into the child's so the child
starts exactly where the parent ended (in inference mode).  The plan is data;
applying it to real weights happens on the TensorFlow side
(:mod:`aiperf_mpi.train.transfer`), so this module stays free of TensorFlow.

* :func:`deeper` — insert a whole conv(k×k)+BN+ReLU block after a ReLU, as the
  identity: the kernel is a centred identity, BN is the identity with its
  initial statistics, and a ReLU after a ReLU changes nothing.
* :func:`wider` — add filters to a convolution by replicating existing ones;
  every BN on the way gets the same replicas, and the consuming convolutions
  or dense layers divide the replicated inputs' weights by the number of
  copies, so sums are unchanged.
* :func:`add_skip` — add ``proj(src)`` to a later tensor, ``proj`` a 1×1 conv
  (stride to match) initialised to zero.
* :func:`concat_skip` — concatenate ``proj(src)`` to a later tensor; the new
  channels' weights in every consumer start at zero.

A morphism that cannot apply raises :class:`MorphError` saying why.  Every
child is validated before it is returned.

Every result also carries its *steps*: ``{"kind": ..., "args": [...]}`` per
morphism, the arguments being everything the child's structure depends on
(the random generator only chooses replicated filters and initial weights,
which are in the plan, not in the structure).  :func:`replay` applies steps
again, so a verifier can rebuild a logged child from its parent's graph
(:mod:`aiperf_mpi.graph.lineage`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import networkx as nx

from aiperf_mpi.graph.model import DEFAULT_KERNEL_SIZE, Analysis, GraphError, analyse

PER_CHANNEL = {"bn", "relu", "dropout", "maxpool", "avgpool", "gap"}
"""Layers that treat channels independently: a new channel passes through them."""
CHANNEL_CONSUMERS = {"conv", "dense"}
"""Layers whose weights have one slice per input channel."""
MORPH_KINDS = ("deeper", "wider", "add_skip", "concat_skip")
MAX_CHAINED = 3
"""morphisms the search chains into one proposal at most (its ``max_morphs``; the verifier's bound too)"""


class MorphError(ValueError):
    """A morphism that cannot apply here; the message says why."""


@dataclass(frozen=True)
class Morphed:
    """A morphism's result: the child graph, its transfer plan, and what was done."""

    graph: nx.DiGraph
    plan: list[dict]
    description: str
    morphs: int = 1
    """how many morphisms were chained to get here"""
    steps: tuple[dict, ...] = ()
    """the morphisms that made this child from its parent, replayable by :func:`replay` (JSON-ready)"""
    analysis: Analysis | None = field(default=None, compare=False, repr=False)
    """the child's validated structure (saves re-analysing it)"""


def fresh_name(graph: nx.DiGraph, prefix: str) -> str:
    """``prefix_N`` with the smallest N not used in ``graph``."""
    number = 1
    while f"{prefix}_{number}" in graph:
        number += 1
    return f"{prefix}_{number}"


def _reroute_consumers(graph: nx.DiGraph, old: str, new: str) -> None:
    """Every consumer of ``old`` now reads ``new`` instead, in the same slot."""
    for consumer in list(graph.successors(old)):
        slot = graph.edges[old, consumer].get("slot", 0)
        graph.remove_edge(old, consumer)
        graph.add_edge(new, consumer, slot=slot)


def channel_path(graph: nx.DiGraph, node: str) -> tuple[list[str], list[str]]:
    """Where ``node``'s channels go: (per-channel layers on the way, consuming conv/dense layers).

    Raises :class:`MorphError` when a channel would reach an add, a concat or
    the output, where the channel count cannot change alone.
    """
    per_channel: list[str] = []
    consumers: list[str] = []
    frontier = list(graph.successors(node))
    seen: set[str] = set()
    if not frontier:
        raise MorphError(f"{node!r} is the model's output: its width is the number of classes")
    while frontier:
        current = frontier.pop()
        if current in seen:
            continue
        seen.add(current)
        kind = graph.nodes[current]["type"]
        if kind in CHANNEL_CONSUMERS:
            consumers.append(current)
        elif kind in PER_CHANNEL:
            per_channel.append(current)
            successors = list(graph.successors(current))
            if not successors:
                raise MorphError(f"the channels of {node!r} reach the model's output {current!r}")
            frontier.extend(successors)
        else:
            raise MorphError(f"the channels of {node!r} reach {kind} {current!r}, whose width cannot change alone")
    return sorted(per_channel), sorted(consumers)


def _checked(graph: nx.DiGraph, plan: list[dict], description: str, kind: str, args: list) -> Morphed:
    """Validate a child before anyone sees it; an invalid child is a bug, reported loudly.

    ``kind`` and ``args`` are the morphism's replayable step (see :func:`replay`).
    """
    try:
        analysis = analyse(graph)
    except GraphError as exc:
        raise AssertionError(f"{description} produced an invalid graph: {exc}") from exc
    return Morphed(graph, plan, description, steps=({"kind": kind, "args": args},), analysis=analysis)


# --------------------------------------------------------------------------- the four morphisms


def deeper(
    graph: nx.DiGraph, after: str, kernel: int = DEFAULT_KERNEL_SIZE, analysis: Analysis | None = None
) -> Morphed:
    """Insert conv(``kernel``)+BN+ReLU after the ReLU ``after``, initialised to the identity."""
    if after not in graph or graph.nodes[after]["type"] != "relu":
        raise MorphError(f"deeper inserts after a ReLU; {after!r} is not one")
    if kernel < 1 or kernel % 2 == 0:
        raise MorphError(f"deeper needs an odd kernel size, got {kernel}")
    shapes = (analysis or analyse(graph)).shapes
    if len(shapes[after]) != 3:
        raise MorphError(f"{after!r} is not an image tensor")
    if graph.out_degree(after) == 0:
        raise MorphError(f"{after!r} is the output")
    channels = shapes[after][2]
    child = graph.copy()
    conv = fresh_name(child, "deep_conv")
    child.add_node(conv, type="conv", filters=channels, kernel=kernel, stride=1, padding="same", bias=False,
                   tunable=True)  # fmt: skip
    bn = fresh_name(child, "deep_bn")
    child.add_node(bn, type="bn", epsilon=1e-3, momentum=0.9)
    relu = fresh_name(child, "deep_relu")
    child.add_node(relu, type="relu")
    _reroute_consumers(child, after, relu)
    child.add_edge(after, conv, slot=0)
    child.add_edge(conv, bn, slot=0)
    child.add_edge(bn, relu, slot=0)
    plan = [
        {"op": "identity_conv", "layer": conv, "kernel": kernel, "channels": channels},
        {"op": "identity_bn", "layer": bn, "channels": channels, "epsilon": 1e-3},
    ]
    return _checked(child, plan, f"deeper: {kernel}×{kernel} block after {after}", "deeper", [after, kernel])


def wider(graph: nx.DiGraph, conv: str, extra: int, rng: random.Random) -> Morphed:
    """Add ``extra`` filters to ``conv``, replicas of randomly chosen existing ones."""
    if conv not in graph or graph.nodes[conv]["type"] != "conv":
        raise MorphError(f"wider widens a conv; {conv!r} is not one")
    if extra < 1:
        raise MorphError(f"wider needs at least one new filter, got {extra}")
    per_channel, consumers = channel_path(graph, conv)
    old = graph.nodes[conv]["filters"]
    sources = [rng.randrange(old) for _ in range(extra)]
    child = graph.copy()
    child.nodes[conv]["filters"] = old + extra
    plan: list[dict] = [{"op": "widen_out", "layer": conv, "sources": sources}]
    plan += [{"op": "widen_bn", "layer": bn, "sources": sources} for bn in per_channel
             if graph.nodes[bn]["type"] == "bn"]  # fmt: skip
    plan += [{"op": "widen_in", "layer": layer, "sources": sources, "old": old} for layer in consumers]
    return _checked(child, plan, f"wider: {conv} {old}→{old + extra} filters", "wider", [conv, extra])


def _projection_stride(shapes: dict, src: str, dst: str) -> int:
    (sh, sw, _), (dh, dw, _) = shapes[src], shapes[dst]
    stride = max(1, sh // dh)
    if -(-sh // stride) != dh or -(-sw // stride) != dw:
        raise MorphError(f"no stride maps {src!r} ({sh}×{sw}) onto {dst!r} ({dh}×{dw})")
    return stride


def _skip_endpoints(graph: nx.DiGraph, src: str, dst: str, analysis: Analysis | None) -> dict:
    for node in (src, dst):
        if node not in graph:
            raise MorphError(f"no layer {node!r}")
    if src == dst or not nx.has_path(graph, src, dst):
        raise MorphError(f"a skip goes forward: {src!r} does not come before {dst!r}")
    if graph.has_edge(src, dst):
        raise MorphError(f"{src!r} already feeds {dst!r} directly")
    shapes = (analysis or analyse(graph)).shapes
    if len(shapes[src]) != 3 or len(shapes[dst]) != 3:
        raise MorphError("skips connect image tensors")
    if graph.out_degree(dst) == 0:
        raise MorphError(f"{dst!r} is the output")
    return shapes


def _join_through_projection(
    graph: nx.DiGraph, src: str, dst: str, shapes: dict, join_type: str, filters: int
) -> tuple[nx.DiGraph, str]:
    """A copy of ``graph`` where ``join_type(dst, conv1×1(src))`` replaces ``dst`` for its consumers.

    Returns the copy and the projection's name.
    """
    child = graph.copy()
    proj = fresh_name(child, "skip_conv")
    stride = _projection_stride(shapes, src, dst)
    child.add_node(proj, type="conv", filters=filters, kernel=1, stride=stride, padding="same", bias=False,
                   tunable=False)  # fmt: skip
    join = fresh_name(child, f"skip_{join_type}")
    child.add_node(join, type=join_type)
    _reroute_consumers(child, dst, join)
    child.add_edge(src, proj, slot=0)
    child.add_edge(dst, join, slot=0)
    child.add_edge(proj, join, slot=1)
    return child, proj


def add_skip(graph: nx.DiGraph, src: str, dst: str, analysis: Analysis | None = None) -> Morphed:
    """``dst ← dst + conv1×1(src)``, the projection initialised to zero."""
    shapes = _skip_endpoints(graph, src, dst, analysis)
    cout = shapes[dst][2]
    child, proj = _join_through_projection(graph, src, dst, shapes, "add", cout)
    plan = [{"op": "zero_conv", "layer": proj, "kernel": 1, "cin": shapes[src][2], "cout": cout}]
    return _checked(child, plan, f"add-skip: {src} → {dst}", "add_skip", [src, dst])


def concat_skip(graph: nx.DiGraph, src: str, dst: str, rng: random.Random, analysis: Analysis | None = None) -> Morphed:
    """``dst ← concat(dst, conv1×1(src))``; the consumers' weights for the new channels start at zero."""
    shapes = _skip_endpoints(graph, src, dst, analysis)
    _projection_stride(shapes, src, dst)  # refuse impossible shapes before the costlier checks
    per_channel, consumers = channel_path(graph, dst)
    added = max(1, min(shapes[src][2], shapes[dst][2]) // 2)
    child, proj = _join_through_projection(graph, src, dst, shapes, "concat", added)
    plan: list[dict] = [
        {"op": "random_conv", "layer": proj, "kernel": 1, "cin": shapes[src][2], "cout": added,
         "seed": rng.randrange(2**31)},
    ]  # fmt: skip
    plan += [{"op": "extend_bn", "layer": bn, "count": added} for bn in per_channel
             if graph.nodes[bn]["type"] == "bn"]  # fmt: skip
    plan += [{"op": "extend_in_zero", "layer": layer, "count": added} for layer in consumers]
    return _checked(child, plan, f"concat-skip: {src} → {dst} (+{added} channels)", "concat_skip", [src, dst])


# --------------------------------------------------------------------------- choosing


def _channels_can_grow(graph: nx.DiGraph, node: str) -> bool:
    """Whether ``node``'s output may gain channels (see :func:`channel_path`)."""
    try:
        channel_path(graph, node)
    except MorphError:
        return False
    return True


def _stride_exists(shapes: dict, src: str, dst: str) -> bool:
    """Whether a strided 1×1 projection maps ``src`` onto ``dst``'s spatial size."""
    try:
        _projection_stride(shapes, src, dst)
    except MorphError:
        return False
    return True


def _is_relu_place(graph: nx.DiGraph, shapes: dict, node: object) -> bool:
    """Whether ``node`` is a ReLU the morphisms build on: an image tensor, not the output."""
    return (node in graph and graph.nodes[node]["type"] == "relu" and len(shapes[node]) == 3
            and graph.out_degree(node) > 0)  # fmt: skip


def _relus(graph: nx.DiGraph, shapes: dict) -> list[str]:
    return sorted(n for n in graph if _is_relu_place(graph, shapes, n))


def candidates(graph: nx.DiGraph, kind: str, analysis: Analysis | None = None) -> list[tuple]:
    """Every place ``kind`` can apply (arguments for the morphism, without rng/kernel)."""
    shapes = (analysis or analyse(graph)).shapes
    if kind == "deeper":
        return [(node,) for node in _relus(graph, shapes)]
    if kind == "wider":
        found = []
        for node, data in graph.nodes(data=True):
            if data["type"] == "conv" and _channels_can_grow(graph, node):
                found.append((node,))
        return sorted(found)
    if kind in ("add_skip", "concat_skip"):
        relus = _relus(graph, shapes)
        position = {n: i for i, n in enumerate(relus)}
        pairs = []
        for dst in relus:
            if kind == "concat_skip" and not _channels_can_grow(graph, dst):
                continue
            for src in nx.ancestors(graph, dst):
                if src in position and not graph.has_edge(src, dst) and _stride_exists(shapes, src, dst):
                    pairs.append((src, dst))
        return sorted(pairs)
    raise MorphError(f"unknown morphism {kind!r} (known: {', '.join(MORPH_KINDS)})")


def is_candidate(graph: nx.DiGraph, kind: str, place: tuple, analysis: Analysis | None = None) -> bool:
    """Whether ``place`` is among :func:`candidates` (``graph``, ``kind``): a place the search could morph.

    Tested directly, without enumerating every place (ResNet-50 has ≈ 1,200 skips), for the verifier:
    a logged step must be one the search can take, which :func:`replay` alone does not hold a skip's
    endpoints to (it joins any two image tensors).
    """
    shapes = (analysis or analyse(graph)).shapes
    if kind == "deeper" and len(place) == 1:
        return _is_relu_place(graph, shapes, place[0])
    if kind == "wider" and len(place) == 1:
        return place[0] in graph and graph.nodes[place[0]]["type"] == "conv" and _channels_can_grow(graph, place[0])
    if kind in ("add_skip", "concat_skip") and len(place) == 2:
        src, dst = place
        if not (_is_relu_place(graph, shapes, src) and _is_relu_place(graph, shapes, dst)):
            return False
        if src == dst or graph.has_edge(src, dst) or not nx.has_path(graph, src, dst):
            return False
        return _stride_exists(shapes, src, dst) and (kind == "add_skip" or _channels_can_grow(graph, dst))
    return False


def wider_extra(filters: int) -> int:
    """How many filters the search adds to a conv of ``filters``: half as many again (at least one)."""
    return max(1, filters // 2)


def apply_morph(
    graph: nx.DiGraph,
    kind: str,
    args: tuple,
    rng: random.Random,
    kernel: int = DEFAULT_KERNEL_SIZE,
    analysis: Analysis | None = None,
) -> Morphed:
    """Apply morphism ``kind`` at ``args`` (an entry of :func:`candidates`)."""
    if kind == "deeper":
        return deeper(graph, args[0], kernel, analysis)
    if kind == "wider":
        return wider(graph, args[0], wider_extra(graph.nodes[args[0]]["filters"]), rng)
    if kind == "add_skip":
        return add_skip(graph, *args, analysis=analysis)
    if kind == "concat_skip":
        return concat_skip(graph, *args, rng, analysis=analysis)
    raise MorphError(f"unknown morphism {kind!r}")


def _sample_place(graph: nx.DiGraph, kind: str, rng: random.Random, analysis: Analysis) -> tuple | None:
    """One random place for ``kind``, or ``None``; samples instead of enumerating.

    Enumerating every skip of ResNet-50 (≈ 1,200 pairs) costs ~0.1 s; drawing a
    destination and then a source among its ancestors costs a few ms.
    """
    if kind in ("deeper", "wider"):
        places = candidates(graph, kind, analysis)
        return rng.choice(places) if places else None
    shapes = analysis.shapes
    relus = _relus(graph, shapes)
    relu_set = set(relus)
    rng.shuffle(relus)
    for dst in relus:
        if kind == "concat_skip" and not _channels_can_grow(graph, dst):
            continue
        sources = sorted(n for n in nx.ancestors(graph, dst) if n in relu_set and not graph.has_edge(n, dst))
        rng.shuffle(sources)
        for src in sources:
            if _stride_exists(shapes, src, dst):
                return (src, dst)
    return None


def random_morph(
    graph: nx.DiGraph,
    rng: random.Random,
    kernel: int = DEFAULT_KERNEL_SIZE,
    kinds: tuple[str, ...] = MORPH_KINDS,
    analysis: Analysis | None = None,
) -> Morphed:
    """One morphism of a kind drawn uniformly among those that can apply, at a random place.

    Drawing the kind first (not the place) keeps skips as likely as
    deeper/wider — the classic implementation degenerated to wider/deeper.
    """
    analysis = analysis or analyse(graph)
    order = list(kinds)
    rng.shuffle(order)
    for kind in order:
        place = _sample_place(graph, kind, rng, analysis)
        if place is not None:
            return apply_morph(graph, kind, place, rng, kernel, analysis)
    raise MorphError("no morphism applies to this graph")


def compose(first: Morphed, second: Morphed) -> Morphed:
    """``second`` applied after ``first``: one graph, one plan to transfer weights in one go."""
    return Morphed(
        second.graph,
        first.plan + second.plan,
        f"{first.description}; {second.description}",
        first.morphs + second.morphs,
        first.steps + second.steps,
    )


REPLAY_ARGS = {"deeper": (str, int), "wider": (str, int), "add_skip": (str, str), "concat_skip": (str, str)}
"""each morphism's step arguments and their JSON types: (ReLU, kernel), (conv, extra filters), (source, destination)"""


def replay(graph: nx.DiGraph, steps: list[dict] | tuple[dict, ...]) -> nx.DiGraph:
    """``graph`` with the logged ``steps`` applied again, in order (the structure only: no plan is kept).

    Raises :class:`MorphError` for a step that is not one (unknown kind,
    arguments of the wrong number or type), that cannot apply here, or that
    the search would not have made (a widening by other than
    :func:`wider_extra`).  The random generator is fixed: it only chooses
    what the transfer plan copies, never the structure.
    """
    rng = random.Random(0)
    analysis: Analysis | None = None
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or set(step) != {"kind", "args"}:
            raise MorphError(f"step {number} is not {{kind, args}}: {str(step)[:80]}")
        kind, args = step["kind"], step["args"]
        types = REPLAY_ARGS.get(kind) if isinstance(kind, str) else None
        if types is None:
            raise MorphError(f"step {number}: unknown morphism {str(kind)[:40]!r} (known: {', '.join(MORPH_KINDS)})")
        if (
            not isinstance(args, list | tuple)
            or len(args) != len(types)
            or not all(isinstance(a, t) and not isinstance(a, bool) for a, t in zip(args, types, strict=True))
        ):
            raise MorphError(f"step {number}: {kind} takes ({', '.join(t.__name__ for t in types)}), "
                             f"got {str(args)[:80]}")  # fmt: skip
        if kind == "deeper":
            morphed = deeper(graph, args[0], args[1], analysis)
        elif kind == "wider":
            if args[0] in graph and graph.nodes[args[0]].get("type") == "conv":
                expected = wider_extra(graph.nodes[args[0]]["filters"])
                if args[1] != expected:  # and a forged huge count never reaches wider's per-filter plan
                    raise MorphError(f"step {number}: the search widens {args[0]!r} by {expected} filters, "
                                     f"not {args[1]}")  # fmt: skip
            morphed = wider(graph, args[0], args[1], rng)
        elif kind == "add_skip":
            morphed = add_skip(graph, args[0], args[1], analysis)
        else:
            morphed = concat_skip(graph, args[0], args[1], rng, analysis)
        graph, analysis = morphed.graph, morphed.analysis  # the child's analysis saves the next step one
    return graph
