"""verify's search rules: what the tuner and the search can propose, and which graphs may come twice (family
``search``).

The lineage row rebuilds each graph from what its proposal logs; it takes
the logged kernel size, batch size and morphisms as given.  A forger who
logs kernels of 9, a batch of 1 (more updates to count) or an extra
morphism (a larger model) rebuilds consistently.  Two rows hold the
proposals to the search's own space instead, recomputed from the
configuration and the code, not read from the log.  Each row is a plain
function of a proposal (:class:`analysis.verify.units.Proposal`: every
``model_proposed`` event, made by the unit stream with what held before it
— the tuners' batch sizes, sized once (:mod:`analysis.verify.tuner`), the
parent's graph place, the earlier proposal of the same graph) and one of
the run for the row's summary:

- ``search space`` (:func:`search_space`, :func:`space_counted`): each
  proposal's ``kernel_size`` is one the tuner chooses
  (:data:`~aiperf_mpi.graph.model.KERNEL_SIZES`), its ``batch_size`` one of
  its group's tuner (:func:`~aiperf_mpi.graph.model.batch_choices` of the
  seed model for the configured ``device_memory_gb``, and the configured
  ``batch_size`` of the warm-up rounds); each child's morphisms as many as
  its strategy chains (:data:`STRATEGY_CHAINS`), of the search's kinds, each
  one a place the search could morph
  (:func:`~aiperf_mpi.graph.morph.is_candidate` on the graph it applies to),
  a ``deeper`` block of the proposal's own kernel size (the search makes it
  at the tuner's kernel);
- ``repeated graphs`` (:func:`repeated_graphs`, :func:`repeats_counted`): no
  two tasks have the same graph (``graph_sha256``), except where the log
  says why the master accepted it again: a seed (the master never refuses
  one) proposed while no trained model had an accuracy to rank — the master
  hands out the seed then, and a leader's view holds no parent — or a graph
  whose earlier task never ended (discarded at its segment's ``run_stop``,
  lost with its group, or open when its segment was killed), proposed in a
  later segment: a resumed master's history holds the ended models only.  A
  graph's identity is its rebuild's by the lineage
  (:attr:`analysis.verify.units.Repeat.key`) when its file holds it in other
  bytes, so a re-serialised copy is the same graph.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import networkx as nx

from aiperf_mpi.graph.model import KERNEL_SIZES, from_json
from aiperf_mpi.graph.morph import MAX_CHAINED, MORPH_KINDS, is_candidate, replay
from aiperf_mpi.results.graphs import read_graph
from analysis.verify.tuner import ERRORS
from analysis.verify.units import END, Findings, Proposal, RunUnit, count, missing, note, problem, summary

STRATEGY_CHAINS = {"explore": 1, "random": 1, "gp-ucb": MAX_CHAINED}
"""how many morphisms a child of each search strategy chains (the ``strategy`` of its proposal's ``search``):
the Bayesian search's exploration morphs once and its annealing walks chain up to ``max_morphs``
(``aiperf_mpi/search/bayesian.py``), the random search morphs once"""
SEED_LATENCY = 60.0
"""seconds a leader may take to propose the seed after its work was handed out (by the log's clock): it proposes
the seed at once, without a search (a few seconds at most even at 128 ranks on 2 cores, BENCHMARKS.md); a repeated
seed proposed later, after a model was ranked, copies work the master would have refused"""


def _place(kind: str, args: list) -> tuple:
    return tuple(args[:1]) if kind in ("deeper", "wider") else tuple(args[:2])


# ------------------------------------------------------------------------------------------------ search space


def search_space(proposal: Proposal) -> Findings:
    """the space is recomputed from the configuration and the code, not read from the log: each proposal's
    `kernel_size` one the tuner chooses (`KERNEL_SIZES`: 3, 5, 7), its `batch_size` one of its tuner's (the
    configured `batch_size` of the warm-up rounds, and `batch_choices`' powers of two from 16 to 512 that fit the
    configured `device_memory_gb` for the seed model of the data the check read); each child's `morphs` as many as
    its strategy chains (`explore`, `random`: one; `gp-ucb`: 1 to 3), each of the search's kinds (`deeper`,
    `wider`, `add_skip`, `concat_skip`) at a place the search could morph in the graph it applies to
    (`is_candidate`: a skip joins two ReLUs), a `deeper` block at the proposal's own kernel size; a configuration
    without `device_memory_gb` and `batch_size` is *not recorded*"""
    event, at = proposal.event, proposal.number
    label = _label(event, at)
    yield count("proposals")
    hparams = event["hparams"]
    kernel, batch = hparams.get("kernel_size"), hparams.get("batch_size")
    if kernel not in KERNEL_SIZES or not _whole(kernel):
        yield problem(at, f"{label}: kernel size {str(kernel)[:20]}: the tuner chooses among "
                          f"{', '.join(map(str, KERNEL_SIZES))}")  # fmt: skip
    sizes = proposal.batches
    if proposal.sized and sizes.missing:
        yield missing(at, sizes.missing)
    if sizes.batches is not None and (not _whole(batch) or batch not in sizes.batches):
        yield problem(at, f"{label}: batch size {str(batch)[:20]}: the tuner's are "
                          f"{', '.join(map(str, sorted(sizes.batches)))} ({sizes.why})")  # fmt: skip
    if event["parent"] is not None:
        yield count("children")
        yield from _morphs(proposal, label)


def _morphs(proposal: Proposal, label: str) -> Findings:
    """A child's morphisms: as many as its strategy chains, each a step the search can take."""
    event, at = proposal.event, proposal.number
    steps, kernel = event.get("morphs"), event["hparams"].get("kernel_size")
    if not isinstance(steps, list):
        return  # not recorded, or not a list: the lineage row says so
    strategy = event["search"].get("strategy")
    known = isinstance(strategy, str) and strategy in STRATEGY_CHAINS
    chain = STRATEGY_CHAINS[strategy] if known else MAX_CHAINED
    if strategy is not None and not known:
        yield problem(at, f"{label}: strategy {str(strategy)[:30]!r}: a child of the search is one of "
                          f"{', '.join(STRATEGY_CHAINS)}")  # fmt: skip
    if not 1 <= len(steps) <= chain:
        yield problem(at, f"{label}: {len(steps)} morphisms: a {strategy or 'search'} proposal chains "
                          f"1{f' to {chain}' if chain > 1 else ''}")  # fmt: skip
    graph = _parent_graph(proposal)
    for number, step in enumerate(steps, start=1):
        if not isinstance(step, Mapping) or not isinstance(step.get("args"), list):
            return  # the lineage row names a step that is not one
        kind, args = step.get("kind"), step["args"]
        if kind not in MORPH_KINDS:
            yield problem(at, f"{label}: step {number}: {str(kind)[:30]!r} is no morphism the search makes "
                              f"({', '.join(MORPH_KINDS)})")  # fmt: skip
            return
        if kind == "deeper" and len(args) == 2 and args[1] != kernel:
            yield problem(at, f"{label}: step {number}: a deeper block of kernel {str(args[1])[:20]}, the search "
                              f"makes it at the proposal's kernel size {kernel}")  # fmt: skip
        if graph is None:
            continue
        try:
            candidate = is_candidate(graph, kind, _place(kind, args))
            if candidate:
                graph = replay(graph, [step])
        except ERRORS:
            return  # a step that does not apply: the lineage row names it
        if not candidate:
            yield problem(at, f"{label}: step {number}: {kind}{tuple(args)} is no place the search morphs (not "
                              "among the candidates of the graph it applies to)")  # fmt: skip
            return


def _parent_graph(proposal: Proposal) -> nx.DiGraph | None:
    """The parent's stored graph, read back by the place its proposal logged (None: not a model logged before,
    or unreadable: the lineage and graph files rows name it)."""
    if not proposal.parent_place:
        return None
    try:
        return from_json(read_graph(proposal.run_dir, proposal.parent_place).decode("utf-8"))
    except ERRORS:
        return None


def space_counted(run: RunUnit, counted: Counter) -> Findings:
    """(search space) what was judged"""
    yield summary(f"{counted['proposals']} proposals' kernel and batch sizes in the tuner's space, "
                  f"{counted['children']} children's morphisms steps the search can take")  # fmt: skip


# ------------------------------------------------------------------------------------------------ repeated graphs


def repeated_graphs(proposal: Proposal) -> Findings:
    """no two tasks have the same graph (`graph_sha256`) unless the log says why the master accepted it again: a
    seed (which the master never refuses) proposed while no trained model had an accuracy to rank when its group's
    work was handed out (after the group's previous task ended), or a graph whose earlier task never ended —
    discarded at its segment's `run_stop`, lost with its group (`group_lost`) or open when its segment was killed —
    proposed in a later segment (a resumed master's history holds the ended models only); proposals without
    `graph_sha256` are *not recorded*"""
    yield count("proposals")
    seen, event, at = proposal.repeat, proposal.event, proposal.number
    if seen is None:
        yield count("unhashed")
        return
    if seen.earlier is None:
        yield count("graphs")
        return
    label, group, seed = _label(event, at), event["group"], event["parent"] is None
    first, segment, was_seed = seen.earlier
    ranked_at = seen.ranked_at
    if seed and was_seed and seen.handed_out is not None:
        handed_out, since = seen.handed_out
        now = event.get("time")
        late = _is_number(since) and _is_number(now) and now - since > SEED_LATENCY  # type: ignore[operator]
        if (ranked_at is None or ranked_at > handed_out) and not (late and ranked_at is not None):
            yield count("seeds again")
            return
        if late and ranked_at is not None and ranked_at > handed_out:
            yield problem(at, f"{label}: the seed again (task {first}'s graph) {now - since:.0f} s after group "
                              f"{group}'s work was handed out, when model_done at event {ranked_at} had an accuracy "
                              f"to rank: a leader proposes the seed at once (within {SEED_LATENCY:g} s)")  # type: ignore[operator]
            return
        yield problem(at, f"{label}: the seed again (task {first}'s graph), but model_done at event {ranked_at} had an "
                          "accuracy to rank before the group's work was handed out: the master hands out the seed "
                          "only while no model has one")  # fmt: skip
    elif not seen.earlier_ended and seen.earlier_not_ended is not None and segment < seen.segment:
        yield count("again")
        yield note(at, f"{label}: task {first}'s graph again: task {first} was {_not_ended(seen.earlier_not_ended)} "
                       "(a resumed master knows only ended models)")  # fmt: skip
    else:
        known = "ended before it" if seen.earlier_ended else f"of segment {segment}"
        yield problem(at, f"{label}: task {first}'s graph again (graph_sha256 {seen.key[:12]}…), a task {known}: the "
                          "master answers Duplicate to a graph it knows, and the log gives no reason it was proposed "
                          "again")  # fmt: skip


def _not_ended(why: tuple[str, object]) -> str:
    """Why a task never ended, in the log's words."""
    kind, number = why
    if kind == "cut":
        return f"open when segment {number} was cut"
    if kind == "discarded":
        return f"discarded at segment {number}'s run_stop"
    return f"lost with group {number}"


def repeats_counted(run: RunUnit, counted: Counter) -> Findings:
    """(repeated graphs) what was judged, and what an older log does not record"""
    proposals, unhashed = counted["proposals"], counted["unhashed"]
    yield summary(f"{counted['graphs']} distinct graphs of {proposals - unhashed} proposals; "
                  f"{counted['seeds again']} seed(s) proposed again before any model could be ranked, "
                  f"{counted['again']} graph(s) of a task that never ended proposed again")  # fmt: skip
    if unhashed:
        yield missing(END, f"{unhashed} of {proposals} model_proposed events have no graph_sha256 (a log older than "
                           "the field): their graphs are not compared")  # fmt: skip


def _label(event: dict, number: int) -> str:
    """A proposal as the rows' lines name it."""
    return f"event {number} (model_proposed of task {event['task']}, group {event['group']})"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
