"""Every field a probe and the system description log, judged: checked by a named rule, trusted, or not a claim.

Issue 45: a forger who read the code found that a probe's ``threads`` was
read by no rule of verify, and claimed 64 threads a rank so that the audit
called every task "not judged".  Nothing said which fields a rule reads, so
nothing said which were left.  :data:`FIELDS` is that list, one row a field
of the ``system``, ``peak`` and ``layout`` events (their nested objects
included) and of ``run_start``'s provenance, with the configuration fields
that bound the score; each row's standing is

- ``checked``: the verify row that holds it, and how;
- ``trusted``: the line of :mod:`analysis.trusted` that names it under every
  verdict, with the factor a lie could buy (:data:`analysis.trusted.CLAIM_NAMES`);
- ``not a claim``: why nothing rests on it (it bounds nothing, or it is
  words).

tests/unit/test_verify_fields.py walks the schema and what the writers emit,
and fails on a field in no row: a new field cannot be added unjudged.
``docs/verify.md`` carries the table (:func:`markdown`, generated).

The family ``fields`` (one row, ``probe and layout fields``: :func:`probe_and_layout_fields`, a plain function
of the run unit, :mod:`analysis.verify.units`) checks, over the run's model's segments, what no other rule read:
each probe's ``threads`` (one pair of positive integers a rank) and ``host`` (its group leader's), the layout's
``leader``, ``host``, ``node``, ``nodes`` and ``node_count`` against the ``system`` event's hosts, the ``system``
event's ``accelerators_per_node`` and its ``mpi4py`` against the provenance.  A rank's threads cannot be held to a
count, since ``OMP_NUM_THREADS`` and ``TF_NUM_INTRAOP_THREADS`` are the user's to set: they count as at most the
rank's share of its host (:func:`rank_threads`), which is what the audit times it with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiperf_mpi.results.inventory import group_ranks_by_host, host_of_rank
from analysis.verify.units import END, Findings, RunUnit, note, problem, summary

CHECKED, TRUSTED, NOT_A_CLAIM = "checked", "trusted", "not a claim"
STANDINGS = (CHECKED, TRUSTED, NOT_A_CLAIM)
ROW = "probe and layout fields"
"""the verdict row of :func:`probe_and_layout_fields`"""


@dataclass(frozen=True)
class Field:
    """One logged field and its standing."""

    path: str
    """``event.field``; ``[]`` marks each entry of a list (``system.hosts[].cores``), ``.`` an object's key"""
    standing: str
    by: str
    """the verify row (checked), the trusted claim's name (trusted), or '' (not a claim)"""
    how: str
    """how it is checked, what a lie buys, or why nothing rests on it"""


def _c(path: str, row: str, how: str) -> Field:
    return Field(path, CHECKED, row, how)


def _t(path: str, claim: str, how: str) -> Field:
    return Field(path, TRUSTED, claim, how)


def _n(path: str, why: str) -> Field:
    return Field(path, NOT_A_CLAIM, "", why)


_VERSIONS = "equal to `run_start`'s provenance, which `source_sha256` ties to the code; bounds nothing"
FIELDS: tuple[Field, ...] = (
    # -- the system event: the hosts MPI gave, as every rank described its node
    _c("system.event", "log", "the schema's event name"),
    _c("system.time", "times", "never before its segment's `run_start`, never backwards"),
    _c("system.ranks", "inventory", "the layout's `world_size`; its hosts list each rank 0 … n−1 once"),
    _c("system.nodes", "inventory", "the number of hosts listed"),
    _t("system.hosts", "host list", "each host once with its ranks (`inventory`); that a listed host existed is "
                                    "the site's word: a made-up host of a listed kind adds its whole bound"),
    _c("system.hosts[].host", "inventory", "every layout rank on the host the system event puts it on"),
    _c("system.hosts[].ranks", "inventory", "each rank on exactly one host; the layout's ranks there"),
    _t("system.hosts[].cpu", "hardware named", "the brand words must be its vendor's (`hardware bounds`); the "
                                               "model itself is the site's word"),
    _t("system.hosts[].cpu_vendor", "hardware named", "picks the table's clock ceiling; held to the processor's "
                                                      "brand words and the ISA flags' vendors (`hardware bounds`)"),
    _t("system.hosts[].cpu_flags", "hardware named", "the widest flag sets the operations a cycle; a flag its "
                                                     "vendor never made fails (`hardware bounds`)"),
    _t("system.hosts[].cores", "hardware named", "a CPU host's bound is linear in its logical processors; a rank's "
                                                 "threads count as at most its share of them (`threads a rank`)"),
    _t("system.hosts[].accelerators", "hardware named", "each model in the table, one a training rank (`hardware "
                                                        "bounds`, `inventory`); that the host had them is trusted"),
    _c("system.accelerators_per_node", ROW, "the most accelerators a listed host has (`mllog.log` bounds by it)"),
    _c("system.precision", "configuration", "under `--precision auto`, what was chosen is the configured one"),
    _c("system.precision.chosen", "configuration", "the configured precision (the probe's: rule `precision`)"),
    _n("system.precision.setting", "`auto`, the option that asked for the choice: `run_start`'s configuration "
                                   "holds the precision every bound reads"),
    _n("system.precision.reason", "words: why `auto` chose what it chose"),
    _n("system.startup", "each start-up phase's seconds on the slowest rank: before `run_start`, outside the "
                         "scored window; bounds nothing"),
    _t("system.energy", "energy readings", "each node's meters at the start line (one rank a node), then at each "
                                           "monitor sample: held to physics (`energy`); that they are the meters' "
                                           "readings is the site's word, and a lower one raises operations per "
                                           "joule, never the score"),
    _c("system.python", "provenance", _VERSIONS),
    _c("system.tensorflow", "provenance", _VERSIONS),
    _c("system.horovod", "provenance", _VERSIONS),
    _c("system.aiperf_mpi", "provenance", _VERSIONS),
    _c("system.mpi", "provenance", _VERSIONS + " (the object whole)"),
    _c("system.mpi.vendor", "provenance", "part of `mpi`, compared whole"),
    _c("system.mpi.version", "provenance", "part of `mpi`, compared whole"),
    _c("system.mpi.library", "provenance", "part of `mpi`, compared whole"),
    _c("system.mpi4py", ROW, _VERSIONS),
    # -- the peak probe: each group's measured matrix multiply
    _c("peak.event", "log", "the schema's event name"),
    _c("peak.time", "times", "in its segment, never backwards; dates the group's first work (`repeated graphs`)"),
    _c("peak.group", "physics", "a group of its segment's layout"),
    _c("peak.host", ROW, "the host of its group's leader in the `system` event"),
    _c("peak.precision", "rule *name*", "the configured precision"),
    _c("peak.ranks", "counts", "its group's ranks in the layout"),
    _c("peak.device", "hardware bounds", "the rehearsal stand-in only in a rehearsal; a GPU on a host that lists "
                                         "none is not bounded (*not recorded*)"),
    _c("peak.matrix_size", "hardware bounds", "positive: a probe that multiplied something"),
    _c("peak.seconds", "hardware bounds", "positive: a probe that multiplied for some time"),
    _c("peak.ops_per_second", "hardware bounds", "at most the table's bound of the group's hardware; bounds every "
                                                 "epoch at 2 × (`physics`)"),
    _c("peak.per_rank", "hardware bounds", "one figure a rank, summing to `ops_per_second`, each at most its "
                                           "fastest device"),
    _c("peak.threads", ROW, "one `{intra, inter}` a rank of the group, positive integers (none: a rehearsal's "
                            "stand-in, or a log older than the field)"),
    _t("peak.threads[].intra", "threads a rank", "counted as at most the rank's share of its host's logical "
                                                 "processors, ⌈cores ÷ its group's ranks there⌉ (a group's ranks "
                                                 "train at once); the audit times the rank with that many, so a "
                                                 "count above what ran buys the audit's ceiling at most × that "
                                                 "share; verify's bounds do not read it"),
    _n("peak.threads[].inter", "TensorFlow's inter-op pool; the audit times with as many inter-op as intra-op "
                               "threads, and no bound reads it (its form is checked with `threads`)"),
    # -- the layout: the plan every rank computed
    _c("layout.event", "log", "the schema's event name"),
    _c("layout.time", "times", "in its segment, never backwards"),
    _c("layout.world_size", "inventory", "the `system` event's ranks"),
    _c("layout.master_rank", "inventory", "a rank of the world, in no group"),
    _c("layout.relay_ranks", "inventory", "ranks of the world, in no group"),
    _c("layout.hosts", "inventory", "each rank's host, the `system` event's"),
    _c("layout.nodes", ROW, "a node (shared memory: one machine) on one host; the bounds read the `system` "
                            "event's hosts, not these numbers"),
    _c("layout.node_count", ROW, "the number of node numbers `nodes` holds"),
    _n("layout.group_size", "the size asked for (`--group-size`); every bound reads each group's `ranks`"),
    _c("layout.groups", "inventory", "the groups, the master and the relays partition the world"),
    _c("layout.groups[].index", "inventory", "numbered 0, 1, …, each once"),
    _c("layout.groups[].ranks", "inventory", "no rank in two groups; bounds and batches count them"),
    _c("layout.groups[].horovod_size", "counts", "the length of its `ranks`"),
    _c("layout.groups[].leader", ROW, "its first rank"),
    _c("layout.groups[].host", ROW, "the `system` event's host of its first rank"),
    _c("layout.groups[].node", ROW, "the `nodes` number of its first rank"),
    # -- run_start: what bounds the score, and where the code came from
    _c("run_start.event", "log", "the schema's event name"),
    _c("run_start.time", "times", "a segment's first event; a resumed one after the previous segment's claims"),
    _c("run_start.segment", "segments", "1, 2, … in order"),
    _c("run_start.resumed", "segments", "only after the first"),
    _c("run_start.config", "segments", "a resume changes none of it but `time_limit`, `hardware_changed` and "
                                       "`run_dir`"),
    _c("run_start.data", "data splits", "the versioned split table for a set it names; the configured set"),
    _n("run_start.cut_tail", "what a resume set aside of a cut log (the file `events.jsonl.cut-N` holds it); "
                             "counts nothing"),
    _c("run_start.provenance", "provenance", "recorded, every segment the same source"),
    _c("run_start.provenance.aiperf_mpi", "provenance", "recorded; the `system` event's"),
    _c("run_start.provenance.git_commit", "provenance", "a 40-digit commit or `unknown`"),
    _n("run_start.provenance.git_dirty", "noted: the source hash says which code ran"),
    _c("run_start.provenance.source_sha256", "provenance", "a sha256, the same in every segment; the verifier "
                                                           "notes whether its own source has it"),
    _n("run_start.provenance.source_files", "how many files the hash covers: the hash is the record"),
    _c("run_start.provenance.python", "provenance", "recorded; the `system` event's"),
    _c("run_start.provenance.tensorflow", "provenance", "recorded; the `system` event's"),
    _c("run_start.provenance.horovod", "provenance", "recorded; the `system` event's"),
    _c("run_start.provenance.mpi", "provenance", "recorded; the `system` event's"),
    _c("run_start.provenance.mpi4py", ROW, "the `system` event's"),
    _c("run_start.config.time_limit", "scored window", "positive; a self-ended segment counts all of it"),
    _c("run_start.config.max_models", "scored window", "a `max models` stop only with it"),
    _c("run_start.config.score_step", "score", "the score is recomputed with it"),
    _t("run_start.config.precision", "precision", "picks the table's figure; a probe at another precision fails "
                                                  "(rule `precision`), but the precision a run trained at is its word"),
    _c("run_start.config.rehearse", "hardware bounds", "a rehearsal is never valid (rule `training`); its phases "
                                                       "are held to its stand-in"),
    _c("run_start.config.rehearse_rate", "hardware bounds", "a rehearsal's phases no shorter than this rate makes "
                                                            "them"),
    _c("run_start.config.hardware_changed", "inventory", "a later segment on other kinds of host says why"),
    _c("run_start.config.max_epochs", "counts", "no epoch numbered above it"),
    _c("run_start.config.dataset", "configuration", "the data check read it; the graphs take its images"),
    _c("run_start.config.image_size", "configuration", "the graphs' input"),
    _c("run_start.config.batch_size", "search space", "the warm-up rounds' batch"),
    _c("run_start.config.device_memory_gb", "search space", "the batches the tuner sizes for it"),
    _c("run_start.config.seed_model", "lineage", "every seed is it"),
    _c("run_start.config.search", "configuration", "every child names it (rule `algorithms`)"),
    _c("run_start.config.hpo", "configuration", "every proposal names it (rule `algorithms`)"),
)  # fmt: skip
"""every field of the ``system``, ``peak`` and ``layout`` events and of ``run_start``'s provenance, and the
configuration fields that bound the score, with its standing"""

EVENTS_WALKED = ("system", "peak", "layout", "run_start")
CONFIG_PREFIX = "run_start.config."
"""the configuration has many more fields (paths, intervals, ...); the table lists those a bound reads"""


def standing(path: str, fields: Iterable[Field] = FIELDS) -> Field | None:
    """The row of ``path`` (None: no row)."""
    return next((entry for entry in fields if entry.path == path), None)


def unjudged(paths: Iterable[str], fields: Iterable[Field] = FIELDS) -> list[str]:
    """The paths of ``paths`` that no row judges, sorted: what the test refuses."""
    known = {entry.path for entry in fields}
    return sorted(set(paths) - known)


def counts(fields: Iterable[Field] = FIELDS) -> dict[str, int]:
    """How many rows of each standing."""
    found = dict.fromkeys(STANDINGS, 0)
    for entry in fields:
        found[entry.standing] += 1
    return found


def markdown(fields: tuple[Field, ...] = FIELDS) -> str:
    """The table as Markdown (``docs/verify.md``)."""
    tally = counts(fields)
    lines = [f"{len(fields)} fields (`analysis/verify/fields.py`): {tally[CHECKED]} checked, {tally[TRUSTED]} trusted "
             f"(each named under every verdict), {tally[NOT_A_CLAIM]} not a claim.", "",
             "| field | standing | by | how, or why |", "|---|---|---|---|"]  # fmt: skip
    for entry in fields:
        by = f"`trusted: {entry.by}`" if entry.standing == TRUSTED else entry.by or "–"
        lines.append(f"| `{entry.path}` | {entry.standing} | {by} | {entry.how} |")
    return "\n".join(lines) + "\n"


# -- threads: what a rank can have used


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def host_share(system: Mapping, layout: Mapping, group: object) -> int | None:
    """The most threads one rank of ``group`` can have kept busy: ⌈its host's logical processors ÷ the group's
    ranks on that host⌉, the largest over its hosts (None: a host or its count unknown).

    A group's ranks train in step (Horovod averages every step's gradients), so they run at once and share their
    host's processors; other groups on the host are left out, since they may have been idle meanwhile.  Rounded
    up, so the share is never below what a rank could use: the bound stays correct when ranks × threads exceed
    the processors (three ranks on two cores, ``--oversubscribe``)."""
    hosts = {str(h.get("host")): h for h in system.get("hosts") or [] if isinstance(h, Mapping)}
    on_host = group_ranks_by_host(layout, system).get(group) if isinstance(group, int) else None
    if not on_host:
        return None
    shares = []
    for name, ranks in on_host.items():
        cores = _count(hosts.get(name, {}).get("cores"))
        if cores is None:
            return None
        shares.append(math.ceil(cores / ranks))
    return max(shares)


def claimed_threads(peak: Mapping) -> int | None:
    """The most intra-op threads a rank of the probe claims (None: none logged in a form that counts)."""
    entries = peak.get("threads") if isinstance(peak.get("threads"), list) else []
    found = [_count(e.get("intra")) for e in entries if isinstance(e, Mapping)]
    return max((n for n in found if n is not None), default=None)


def rank_threads(system: Mapping, layout: Mapping, peak: Mapping, group: object) -> int | None:
    """The threads a rank of ``group`` is counted with: its probe's claim, at most its share of its host
    (:func:`host_share`); the share alone when the probe claims none; None when neither is known."""
    share, claimed = host_share(system, layout, group), claimed_threads(peak)
    if share is None or claimed is None:
        return share if claimed is None else claimed
    return min(share, claimed)


# -- the rule


def _thread_problems(peak: Mapping) -> list[str]:
    """What is wrong with a probe's ``threads``: the probe writes one ``{intra, inter}`` a rank (train/peak.py),
    positive integers; a rehearsal's stand-in none."""
    threads = peak.get("threads")
    if threads is None or threads == []:
        return []
    if not isinstance(threads, list) or len(threads) != peak.get("ranks"):
        size = len(threads) if isinstance(threads, list) else repr(threads)[:40]
        return [f"threads lists {size} entries for its {peak.get('ranks')!r} ranks (one a rank)"]
    bad = [i for i, e in enumerate(threads)
           if not isinstance(e, Mapping) or _count(e.get("intra")) is None or _count(e.get("inter")) is None]
    return [f"threads of rank(s) {bad[:8]} are not a positive intra-op and inter-op count"] if bad else []


def segment_field_problems(number: int, system: Mapping | None, layout: Mapping | None, peaks: list[Mapping],
                           provenance: object) -> tuple[list[str], list[str]]:  # fmt: skip
    """(problems, notes) of one segment's fields that no other rule reads (see the module)."""
    problems: list[str] = []
    notes: list[str] = []
    label = f"segment {number}"
    if not isinstance(system, Mapping) or not isinstance(layout, Mapping):
        return problems, notes  # the inventory row names a segment without them
    where = host_of_rank(system)
    hosts = [h for h in system.get("hosts") or [] if isinstance(h, Mapping)]
    most = max((len(h["accelerators"]) for h in hosts if isinstance(h.get("accelerators"), list)), default=0)
    if "accelerators_per_node" in system and system["accelerators_per_node"] != most:
        problems.append(f"{label}: system: accelerators_per_node {system['accelerators_per_node']!r}, its hosts list "
                        f"at most {most}")  # fmt: skip
    if isinstance(provenance, Mapping) and "mpi4py" in system and system["mpi4py"] != provenance.get("mpi4py"):
        problems.append(f"{label}: system: mpi4py {system['mpi4py']!r}, its provenance {provenance.get('mpi4py')!r}")
    nodes = layout.get("nodes")
    host_of_node: dict[object, set] = {}
    if isinstance(nodes, list):
        for rank, node in enumerate(nodes):
            if rank in where:
                host_of_node.setdefault(repr(node), set()).add(where[rank])
        # a shared-memory node is one machine, so one host name; one name on several nodes is left alone (the
        # planner trusts COMM_TYPE_SHARED over names, which containers may repeat)
        shared = sorted(str(n) for n, h in host_of_node.items() if len(h) > 1)
        if shared:
            problems.append(f"{label}: layout: node(s) {shared[:3]} span several hosts of the system event")
        if "node_count" in layout and layout["node_count"] != len(set(map(repr, nodes))):
            problems.append(f"{label}: layout: node_count {layout['node_count']!r}, nodes holds "
                            f"{len(set(map(repr, nodes)))}")  # fmt: skip
    leaders: dict[int, object] = {}
    for group in layout.get("groups") or []:
        if not isinstance(group, Mapping) or not isinstance(group.get("ranks"), list) or not group["ranks"]:
            continue  # the inventory row names it
        index, ranks = group.get("index"), group["ranks"]
        if isinstance(index, int) and not isinstance(index, bool):  # else the inventory row names it
            leaders[index] = ranks[0]
        if "leader" in group and group["leader"] != ranks[0]:
            problems.append(f"{label}: layout: group {index}'s leader {group['leader']!r} is not its first rank "
                            f"{ranks[0]!r}")  # fmt: skip
        first = ranks[0] if isinstance(ranks[0], int) and not isinstance(ranks[0], bool) else None
        if "host" in group and first in where and where[first] != group["host"]:
            problems.append(f"{label}: layout: group {index} on host {group['host']!r}, the system event puts its "
                            f"first rank on {where[first]!r}")  # fmt: skip
        if "node" in group and isinstance(nodes, list) and first is not None and 0 <= first < len(nodes) \
                and nodes[first] != group["node"]:  # fmt: skip
            problems.append(f"{label}: layout: group {index} on node {group['node']!r}, nodes puts its first rank "
                            f"on {nodes[first]!r}")  # fmt: skip
    for peak in peaks:
        group = peak.get("group")
        what = f"{label}: peak of group {group}"
        problems += [f"{what}: {p}" for p in _thread_problems(peak)]
        leader = leaders.get(group) if isinstance(group, int) else None
        if isinstance(leader, int) and leader in where and "host" in peak and where[leader] != peak["host"]:
            problems.append(f"{what}: logged on host {peak['host']!r}, its leader (rank {leader}) is on "
                            f"{where[leader]!r}")  # fmt: skip
        claimed, share = claimed_threads(peak), host_share(system, layout, group)
        if claimed is not None and share is not None and claimed > share and not _thread_problems(peak):
            notes.append(f"{what}: {claimed} threads a rank claimed, counted as {share} (its share of its host's "
                         "logical processors: what the audit times it with)")  # fmt: skip
    return problems, notes


def probe_and_layout_fields(run: RunUnit) -> Findings:
    """what no other row reads of the `system`, `layout` and `peak` events ([the table of every
    field](#every-field-of-the-system-probe-and-layout-events)): each probe's `threads` one `{intra, inter}` of positive
    integers a rank of its group (none: a rehearsal's stand-in or an older log), a rank's intra-op threads counted as at
    most its share of its host's logical processors, ⌈cores ÷ its group's ranks there⌉ (more is noted, not failed: the
    user may set them; the audit times the rank with that share); each probe's `host` its group leader's; each layout
    group's `leader`, `host` and `node` its first rank's; no node of `nodes` on two hosts, and `node_count` how many;
    `accelerators_per_node` the most accelerators a host lists; the `system` event's `mpi4py` its provenance's"""
    probes = 0
    for segment in run.segments:
        problems, notes = segment_field_problems(segment.number, segment.system, segment.layout, segment.peaks,
                                                 segment.logged_provenance)  # fmt: skip
        yield from (problem(END, line) for line in problems)
        yield from (note(END, line) for line in notes)
        probes += len(segment.peaks)
    yield summary(f"{len(run.segments)} segment(s), {probes} probe(s): each probe's threads and host, the layout's "
                  "leaders, hosts and nodes, accelerators_per_node and mpi4py agree with the system event")
