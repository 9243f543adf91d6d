"""A spot-check a reviewer runs: ``python -m analysis.audit RUN_DIR --sample K [--seed S]``.

A log's rates are claims: every epoch says how many operations it did
(``ops``, ``ops_train``, ``ops_update``, ``ops_validation``, counted by
:mod:`aiperf_mpi.graph.ops` for its graph, samples and batches) and how long
they took (``start`` to ``end``; ``compute``, the timed training steps;
``evaluation``, the timed validation batches).  A run whose clocks were
squeezed, with phantom epochs in the freed time, or whose peak was raised to
fit, is consistent with itself; only doing the work again tells.  The audit
does a little of it:

* it samples K tasks, reproducibly (``--seed``): half of them uniformly over
  every task (so the report can say how likely it was to miss a forged share
  of the tasks), then one from each segment × hosts stratum still missed,
  then the rest preferring the tasks with the most logged epoch time (each
  drawn with a weight of its time); every task can be drawn and a forger
  cannot tell which will be (:func:`sample_tasks`);
* it rebuilds each one's graph from the lineage the log records — the seed
  model's record and every morphism from it, each at its logged kernel size
  (:mod:`aiperf_mpi.graph.lineage`), as trained
  (:func:`aiperf_mpi.graph.model.as_trained`) — not from the stored graph
  file, which a forger may have written;
* it times a few training steps and evaluation batches of each at the
  logged batch size and precision on this machine, with the trainer's own
  code (``python -m aiperf_mpi.export.audit`` in a child process under a
  timeout: ``analysis/`` loads no TensorFlow), on the CPU beside as many
  copies of itself as its host held training ranks, which shared its cores
  (:func:`copies`);
* and it holds every epoch of the task to what was measured
  (:func:`epoch_bounds`): an epoch cannot have been faster than its steps
  run at their fastest here, so each logged rate must stay within the
  ceiling × (1 + ``--tolerance``).  A task that exceeds is timed once more
  before it is failed (the fastest of both), so a moment of load on this
  machine does not fail an honest run.

It can only judge on the submitter's kind of hardware: the report names the
machine it timed on (its processor from /proc/cpuinfo, its GPUs) and the one
the run's ``system`` event claims for each task's group, and when they differ
it says it cannot judge (exit 3).  Exit status: 0 every sampled task within
its ceilings, 1 some task faster than this machine can be (the tasks, their
logged and measured rates named), 2 bad input (one line), 3 not judged.
``docs/verify.md`` ("The audit") says why the tolerance is what it is and what
the audit cannot catch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import secrets
import stat
import sys
from collections.abc import Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from aiperf_mpi.errors import OneLineParser
from aiperf_mpi.graph.lineage import rebuild, seed_from_record, structure_difference
from aiperf_mpi.graph.model import GraphError, as_trained, from_json, to_json
from aiperf_mpi.results import runlog
from aiperf_mpi.results.child import ChildFailed, json_answer
from aiperf_mpi.results.epochs import rank_batches
from aiperf_mpi.results.graphs import GraphFileError
from aiperf_mpi.results.inventory import host_of_rank
from aiperf_mpi.results.logmodel import RunModel, read_model
from aiperf_mpi.results.machine import local_description
from aiperf_mpi.results.precisions import PRECISIONS, logged_precision
from analysis.checks import AUDIT_RECORD, EVENTS_SHA256, BadInput, events_sha256, is_regular_file
from analysis.guard import guarded
from analysis.verify.fields import rank_threads
from analysis.verify.lineage import ERRORS as LINEAGE_ERRORS

PROG = "analysis.audit"
CHILD = "aiperf_mpi.export.audit"
TOLERANCE = 0.25
"""how far above the measured ceiling a logged rate may lie (docs/verify.md, "The audit"): on untouched tiny-seed
digits runs on a shared 2-core machine each run's fastest epoch reached 0.87–1.18 of its training ceiling (1.18
audited at a load average of 26), two audits of one run moved its ceilings by up to 22 %, and a 1.5× squeeze put
a run's tasks at 1.52–1.78"""
SECONDS_PER_TASK = 8.0
"""the time spent timing each sampled model (at least a few calls of each kind, however long)"""
DEFAULT_TIMEOUT = 3600.0
"""seconds the child may take: TensorFlow's start-up and the models' building, tracing and timing"""
RETRIES = 2
"""times a task that exceeds its ceiling is timed again, each time for twice as long, before it fails (the fastest
of every timing counts: a busy machine's best run of steps is rarer, so it takes longer to find)"""
RETIME_ABOVE = 0.0
"""a task with an epoch above its ceiling × (1 + this) is timed again even within the tolerance: its ceiling was
likely measured in a busy moment (an honest run measured 1.18 at a load average of 26 on 2 cores)"""
WINDOW = 5
"""consecutive calls whose mean is a ceiling's step time (:func:`fastest_window`)"""
EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NOT_JUDGED = 1, 2, 3
EPOCH_FIELDS = ("steps", "train_samples", "validation_samples", "ops", "ops_train", "ops_update", "ops_validation",
                "start", "end", "compute", "evaluation")  # fmt: skip
"""what an epoch must record to be bounded"""


class AuditFailed(Exception):
    """The timing could not be made (the child failed or ran out of time): one line, exit 2."""


# -- the comparison (pure)


@dataclass
class Bound:
    """One logged rate of one epoch against the ceiling this machine measured."""

    task: int
    epoch: int
    kind: str
    """``training`` (the timed steps: ``compute``), ``evaluation`` (the timed batches: ``evaluation``) or
    ``epoch`` (everything, ``start`` to ``end``)"""
    ops: float
    """the logged operations this bound covers"""
    logged_seconds: float
    least_seconds: float
    """the least time they can take here: as many of the fastest step (or batch) as they need"""

    @property
    def logged_rate(self) -> float:
        return self.ops / self.logged_seconds if self.logged_seconds > 0 else math.inf

    @property
    def ceiling(self) -> float:
        return self.ops / self.least_seconds

    @property
    def ratio(self) -> float:
        """The logged rate over the ceiling (1: as fast as this machine's fastest step)."""
        return self.least_seconds / self.logged_seconds if self.logged_seconds > 0 else math.inf

    def exceeds(self, tolerance: float) -> bool:
        return not self.ratio <= 1.0 + tolerance  # a NaN exceeds: a rate that is not a number is not a pass


def _number(epoch: Mapping, name: str) -> float:
    value = epoch.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def epoch_bounds(task: int, epoch: Mapping, batch: int, train_step: float, eval_batch: float) -> list[Bound]:
    """The bounds one logged epoch must keep, given this machine's fastest training step and evaluation batch.

    Each rank of the task's group ran ``steps`` training steps of ``batch`` samples and its share of the
    validation split in batches of ``batch`` (``ranks = train_samples ÷ (steps × batch)``), so however many ranks
    the group had, its epoch took at least ``steps`` fastest steps and ``⌊validation ÷ ranks ÷ batch⌋`` fastest
    full batches (a short last batch is counted as nothing).  The trainer leaves the step and the batch that traced
    out of ``compute`` and ``evaluation`` (their time is in ``compile``): an epoch with a ``compile`` time is given
    one step and one batch fewer, and the operations of what its times cover.
    """
    values = {name: _number(epoch, name) for name in EPOCH_FIELDS}
    number = int(_number(epoch, "epoch")) if math.isfinite(_number(epoch, "epoch")) else -1
    steps, samples, validation = values["steps"], values["train_samples"], values["validation_samples"]
    if not (steps >= 1 and samples >= steps * batch and validation >= 0):
        return []
    ranks = max(1, int(samples // (steps * batch)))
    traced = 1 if _number(epoch, "compile") > 0 else 0
    full_batches = rank_batches(validation, ranks, batch)
    bounds = []
    timed_steps = steps - traced
    if timed_steps >= 1 and math.isfinite(values["compute"]):
        ops = (values["ops_train"] + values["ops_update"]) * timed_steps / steps
        bounds.append(Bound(task, number, "training", ops, values["compute"], timed_steps * train_step))
    timed_batches = full_batches - traced
    if timed_batches >= 1 and validation > 0 and math.isfinite(values["evaluation"]):
        ops = values["ops_validation"] * timed_batches * batch * ranks / validation
        bounds.append(Bound(task, number, "evaluation", ops, values["evaluation"], timed_batches * eval_batch))
    duration = values["end"] - values["start"]
    if math.isfinite(duration):
        bounds.append(Bound(task, number, "epoch", values["ops"], duration,
                            steps * train_step + full_batches * eval_batch))  # fmt: skip
    return [b for b in bounds if math.isfinite(b.ops) and b.least_seconds > 0]


def worst(bounds: list[Bound]) -> dict[str, Bound]:
    """Each kind's bound of the highest ratio (the epoch nearest to, or furthest above, its ceiling)."""
    found: dict[str, Bound] = {}
    for bound in bounds:
        if bound.kind not in found or not bound.ratio <= found[bound.kind].ratio:
            found[bound.kind] = bound
    return found


def sample_tasks(weights: Mapping[int, float], count: int, seed: int,
                 strata: Mapping[int, Hashable] | None = None) -> list[int]:  # fmt: skip
    """``count`` tasks drawn without replacement by ``random.Random(seed)``, in three parts (issue 45: a draw
    weighted by logged time alone never drew a segment of many very short forged epochs):

    1. :func:`uniform_draws` of them uniformly over every task: what :func:`miss_chance` bounds;
    2. one from each stratum (``strata``: task → its segment and hosts) the first part missed, uniformly within
       it, while draws are left: every segment and every host is audited when ``count`` allows;
    3. the rest with a chance growing with their logged time (Efraimidis and Spirakis' keys ``u ** (1 /
       weight)``): the tasks that carry most of the score.

    Tasks in order, so the same seed draws the same tasks; a task of no time keeps a tiny weight.
    """
    draw = random.Random(seed)
    tasks = sorted(weights)
    count = min(count, len(tasks))
    chosen = draw.sample(tasks, uniform_draws(count))
    if strata:
        missed = sorted({strata[t] for t in tasks if t in strata} - {strata.get(t) for t in chosen}, key=repr)
        draw.shuffle(missed)
        for key in missed[:count - len(chosen)]:
            chosen.append(draw.choice([t for t in tasks if strata.get(t) == key and t not in chosen]))
    rest, keys = [t for t in tasks if t not in chosen], []
    for task in rest:
        weight = weights[task] if math.isfinite(weights[task]) and weights[task] > 0 else 1e-9
        keys.append((draw.random() ** (1.0 / weight), task))
    chosen += [task for _, task in sorted(keys, reverse=True)[:count - len(chosen)]]
    return sorted(chosen)


def uniform_draws(count: int) -> int:
    """How many of ``count`` draws are uniform over every task: half, rounded up."""
    return (count + 1) // 2


def miss_chance(tasks: int, forged: float, draws: int) -> float:
    """The chance that ``draws`` tasks drawn uniformly without replacement from ``tasks`` miss every one of a
    forged share ``forged`` of them: C(N − F, K) / C(N, K) (at most (1 − forged) ** draws)."""
    bad = math.ceil(forged * tasks)
    if draws > tasks - bad:
        return 0.0
    return math.comb(tasks - bad, draws) / math.comb(tasks, draws)


def task_strata(model: RunModel, tasks: list[int]) -> dict[int, tuple]:
    """Each task's stratum for the draw: its segment and the hosts its group ran on (from the log)."""
    found = {}
    for task in tasks:
        record = model.tasks[task]
        segment = model.segment_of(record)
        found[task] = (segment.number if segment else 0, tuple(claimed_hardware(model, task).hosts))
    return found


# -- hardware: the run's claim and this machine


@dataclass
class Hardware:
    """A kind of hardware a task trained on, or the audit timed on."""

    kind: str
    """``gpu``, ``cpu``, or ``unknown`` (the log does not say)"""
    name: str
    """the accelerator's or the processor's model"""
    cores: int | None = None
    threads: int | None = None
    """TensorFlow's intra-op threads a rank of the group can have kept busy on the CPU: its probe's claim, at most
    its share of its host's logical processors (:func:`analysis.verify.fields.rank_threads`: a claim of 64 threads
    on a 2-core host is timed with 2, not left unjudged); None when neither is known"""
    hosts: list[str] = field(default_factory=list)
    company: int = 1
    """the training ranks on the busiest of its hosts, its group's included (the layout's groups, the system event's
    hosts): on the CPU they shared the host's cores at the same time, so the audit times that many copies of the
    task at once (:func:`copies`)"""

    def text(self) -> str:
        if self.kind == "gpu":
            return f"{self.name} ({', '.join(self.hosts) or 'this machine'})"
        if self.kind == "cpu":
            threads = f", {self.threads} threads a rank" if self.threads else ""
            beside = f", {self.company} training ranks on its host" if self.company > 1 else ""
            return (f"{self.name}, {self.cores} cores{threads}{beside}, no accelerator "
                    f"({', '.join(self.hosts) or 'here'})")  # fmt: skip
        return self.name


def claimed_hardware(model: RunModel, task: int) -> Hardware:
    """What the log says the task's group trained on: its ranks' hosts in the ``system`` event of its segment."""
    record = model.tasks[task]
    segment = model.segment_of(record)  # none: the last system and layout of the log
    system = (segment.system if segment else None) or model.system
    layout = (segment.layout if segment else None) or model.layout
    if not system or not layout:
        return Hardware("unknown", "no system or layout event in the log")
    ranks = next((g.get("ranks") for g in layout.get("groups") or []
                  if isinstance(g, Mapping) and g.get("index") == record.group), None)  # fmt: skip
    where = host_of_rank(system)
    names = sorted({where[r] for r in (ranks if isinstance(ranks, list) else []) if r in where})
    hosts = [h for h in system.get("hosts") or [] if isinstance(h, Mapping) and h.get("host") in names]
    if not hosts:
        return Hardware("unknown", f"group {record.group}'s ranks are on no host of the system event")
    peaks = segment.peaks if segment else list(model.peaks.values())  # the task's segment's probe of its group
    peak = next((p for p in reversed(peaks) if p.get("group") == record.group), None) or {}
    accelerators = sorted({str(a) for h in hosts for a in _listed(h.get("accelerators"))})
    if accelerators:
        return Hardware("gpu", " + ".join(accelerators), hosts=names)
    cpus = sorted({str(h.get("cpu")) for h in hosts})
    cores = min((h.get("cores") for h in hosts if isinstance(h.get("cores"), int)), default=None)
    training = [r for g in layout.get("groups") or [] if isinstance(g, Mapping) and isinstance(g.get("ranks"), list)
                for r in g["ranks"] if isinstance(r, int)]  # fmt: skip
    company = max((sum(where.get(r) == name for r in set(training)) for name in names), default=1)
    return Hardware("cpu", " + ".join(cpus), cores, rank_threads(system, layout, peak, record.group), names,
                    max(1, company))  # fmt: skip


COPIES_PER_CORE = 2
"""the most copies of a task the audit times at once, per core of its machine: each is a TensorFlow process (about
1 GiB); a host that ran more ranks than this to a core is timed with fewer copies than it had ranks (the note says)"""


def copies(claim: Hardware, here: Mapping) -> int:
    """How many copies of a task the audit times at once: one for each training rank its busiest host held (on the
    CPU), each at the task's threads, so the copies share this machine's cores as the ranks shared the host's
    (oversubscribed where the run was), up to :data:`COPIES_PER_CORE` a core of this machine.  Timed alone, a task
    has every core, cache and memory channel to itself: each group of a host could claim the whole host's rate (a
    rank's threads count up to ⌈cores ÷ its group's ranks there⌉: :func:`analysis.verify.fields.rank_threads`).
    On an accelerator each rank had its own device: one copy."""
    if claim.kind != "cpu" or claim.company <= 1:
        return 1
    cores = here.get("cores") if isinstance(here.get("cores"), int) and here["cores"] > 0 else 1
    return max(1, min(claim.company, COPIES_PER_CORE * cores))


def _listed(value: object) -> list:
    return value if isinstance(value, list) else []


def this_machine(description: Mapping) -> Hardware:
    """The audit's machine, from :func:`aiperf_mpi.results.machine.local_description`."""
    accelerators = list(description.get("accelerators") or [])
    if accelerators:
        return Hardware("gpu", str(accelerators[0]), description.get("cores"), hosts=[str(description.get("host"))])
    return Hardware("cpu", str(description.get("cpu")), description.get("cores"), hosts=[str(description.get("host"))])


def cannot_judge(claim: Hardware, here: Mapping) -> str:
    """Why the audit's machine is not the kind ``claim`` names ('' when it is)."""
    if claim.kind == "unknown":
        return f"the run does not say which hardware it trained on ({claim.name})"
    if claim.kind == "gpu":
        if claim.name not in (here.get("accelerators") or []):
            have = ", ".join(here.get("accelerators") or []) or "no GPU"
            return f"the run trained on {claim.name}, this machine has {have}"
        return ""
    if claim.name != here.get("cpu"):
        return f"the run trained on {claim.name} processors, this machine has {here.get('cpu')}"
    wanted = claim.threads or claim.cores
    if isinstance(wanted, int) and isinstance(here.get("cores"), int) and here["cores"] < wanted:
        return (f"a rank of the run could keep {wanted} threads busy (its probe's, at most its share of its host's "
                f"logical processors), this machine has {here['cores']} cores")  # fmt: skip
    return ""


# -- the run: sample, lineage, the child's request


@dataclass
class Sampled:
    """One sampled task: what the log says of it, the graph it trained (rebuilt), and its verdict."""

    task: int
    batch: int
    precision: str
    xla: bool
    seconds: float
    """its logged epoch time (its weight in the draw)"""
    epochs: list[dict]
    claim: Hardware
    graph: str = ""
    """the graph as trained, JSON: rebuilt from the lineage (or the stored graph where the log records none)"""
    not_judged: str = ""
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    timed: dict | None = None
    bounds: list[Bound] = field(default_factory=list)
    copies: int = 1
    """copies of it timed at once (:func:`copies`): the timings are theirs together"""


class Lineage:
    """Graphs rebuilt from the lineage each proposal logged (its parent, its seed record or morphisms): the
    proposals read back from the log (:meth:`RunModel.proposed_event`) for the sampled tasks' chains only."""

    def __init__(self) -> None:
        self.graphs: dict[int, nx.DiGraph] = {}
        """rebuilt graphs by task, as stored (each task's own kernel size): a child morphs its parent's"""

    @staticmethod
    def record(model: RunModel, task: int) -> dict | None:
        """Task ``task``'s ``model_proposed`` when it records a seed or morphisms (None: it records neither)."""
        event = model.proposed_event(model.tasks[task]) if task in model.tasks else {}
        return event if "seed" in event or "morphs" in event else None

    def graph(self, model: RunModel, task: int) -> nx.DiGraph:
        """Task ``task``'s graph as stored, rebuilt from the seed down; GraphError (or MorphError) when it cannot."""
        chain: dict[int, dict] = {}
        current = task
        while current not in self.graphs:
            if current in chain:
                raise GraphError(f"the lineage of task {task} is a loop")
            record = chain[current] = self.record(model, current)  # type: ignore[assignment]
            if record is None:
                raise GraphError(f"task {current}'s model_proposed records neither a seed nor morphisms")
            parent = record.get("parent")
            if parent is None:
                break
            if parent not in model.task_of_model:
                raise GraphError(f"task {current}'s parent model {parent} is not in the log")
            current = model.task_of_model[parent]
        for number, record in reversed(chain.items()):
            parent, kernel = record.get("parent"), model.tasks[number].kernel_size
            if parent is None:
                self.graphs[number] = rebuild(seed_from_record(record.get("seed")), None, [], kernel)
            else:
                self.graphs[number] = rebuild(None, self.graphs[model.task_of_model[parent]],
                                              list(record.get("morphs") or []), kernel)  # fmt: skip
        return self.graphs[task]


def read_run(run_dir: Path) -> tuple[RunModel, Lineage]:
    """The run's model and its lineage; BadInput for what is not a run directory (never opening a FIFO)."""
    try:
        mode = os.stat(run_dir).st_mode
    except FileNotFoundError:
        raise BadInput(f"{run_dir}: no such run directory") from None
    if not stat.S_ISDIR(mode):
        raise BadInput(f"{run_dir}: not a run directory (a FIFO, a device or a file is never opened)")
    if not is_regular_file(run_dir / runlog.EVENTS_FILE):
        raise BadInput(f"{run_dir}: not a run directory (no {runlog.EVENTS_FILE})")
    return read_model(run_dir), Lineage()


def run_precision(model: RunModel, task: int) -> str:
    """The precision the task's segment trained at (``auto`` as the system event resolved it; none logged: fp32)."""
    segment = model.segment_of(model.tasks[task])
    precision = logged_precision((segment.config if segment else model.config) or {})
    if precision not in PRECISIONS:
        precision = ((model.system or {}).get("precision") or {}).get("chosen", precision)
    return str(precision)


def candidates(model: RunModel) -> dict[int, float]:
    """Tasks that can be audited (epochs logged, a batch size) → their logged epoch time."""
    if not len(model.epochs):
        return {}
    tasks, duration = model.column("task"), model.column("end") - model.column("start")
    found = {}
    for number, record in model.tasks.items():
        batch = record.hparams.get("batch_size")
        if record.epochs and isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
            found[number] = float(np.nansum(duration[tasks == number]))
    return found


def sampled(model: RunModel, lineage: Lineage, task: int, seconds: float, here: Mapping) -> Sampled:
    """One drawn task, its graph rebuilt, its epochs read back, its hardware claim set beside this machine."""
    record = model.tasks[task]
    rows = np.nonzero(model.column("task") == task)[0]
    epochs = [model.epoch(int(row)) for row in rows]
    claim = claimed_hardware(model, task)
    found = Sampled(task, int(record.hparams["batch_size"]), run_precision(model, task),
                    any(e.get("xla") is True for e in epochs), seconds, epochs, claim)  # fmt: skip
    found.not_judged = cannot_judge(claim, here)
    try:
        stored = as_trained(from_json(model.graph_text(record)), record.kernel_size)
    except (GraphFileError, ValueError, KeyError, TypeError) as exc:
        stored, why = None, " ".join(str(exc).split())[:200]
        found.notes.append(f"its stored graph cannot be read ({why})")
    try:
        graph = as_trained(lineage.graph(model, task), record.kernel_size)
    except LINEAGE_ERRORS as exc:
        if lineage.record(model, task) is not None or stored is None:
            found.problems.append(f"its graph cannot be rebuilt from the lineage ({' '.join(str(exc).split())[:200]})")
            return found
        graph = stored
        found.notes.append("the log records no lineage for it: its stored graph was timed")
    else:
        if stored is not None and (difference := structure_difference(stored, graph)):
            found.notes.append(f"its stored graph is not its lineage's ({difference}): the lineage's was timed")
    found.graph = to_json(graph)
    return found


def request(tasks: list[Sampled], seconds: float, here: Mapping) -> dict:
    """The child's request: the rebuilt models, on the GPU when the run's were and this machine has one."""
    gpu = any(t.claim.kind == "gpu" for t in tasks) and bool(here.get("accelerators"))
    threads = [t.claim.threads for t in tasks if t.claim.kind == "cpu" and t.claim.threads]
    cores = here.get("cores") if isinstance(here.get("cores"), int) else None
    intra = min(max(threads), cores or max(threads)) if threads and not gpu else None
    return {"device": "gpu" if gpu else "cpu", "threads": {"intra": intra, "inter": intra} if intra else None,
            "seconds": seconds,
            "tasks": [{"task": t.task, "graph": t.graph, "batch": t.batch, "precision": t.precision, "xla": t.xla}
                      for t in tasks if t.graph]}  # fmt: skip


def run_child(asked: dict, timeout: float) -> dict:
    """The child's JSON answer; AuditFailed with its one line when it refused, failed or ran out of time."""
    try:
        return json_answer(CHILD, timeout=timeout, what="the timing", timeout_option="--timeout",
                           stdin=json.dumps(asked))  # fmt: skip
    except ChildFailed as exc:
        raise AuditFailed(str(exc)) from None


def run_children(asked: dict, timeout: float, count: int) -> list[dict]:
    """``count`` children timing the same request at the same time (:func:`copies`); their answers."""
    if count == 1:
        return [run_child(asked, timeout)]
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: run_child(asked, timeout), range(count)))


def fastest_window(times: list[float], width: int = WINDOW) -> float:
    """The least mean of ``width`` consecutive times (of all of them when fewer were timed).

    An epoch is a run of consecutive steps, so the steps it could have run at best are a run of this machine's
    fastest consecutive steps: a mean over a few of them, not the single fastest, which one lucky step sets
    (measured: up to 25 % below the next fastest on a shared machine).
    """
    width = max(1, min(width, len(times)))
    sums = np.convolve(np.asarray(times, dtype=float), np.ones(width), mode="valid")
    return float(sums.min() / width)


def judge(task: Sampled, timed: Mapping) -> None:
    """The task's bounds from ``timed``, the times measured so far: their fastest windows are the ceiling."""
    task.timed = {"train_times": list(timed["train_times"]), "eval_times": list(timed["eval_times"]),
                  "train_step": fastest_window(timed["train_times"]),
                  "eval_batch": fastest_window(timed["eval_times"])}  # fmt: skip
    task.bounds = [b for epoch in task.epochs for b in epoch_bounds(task.task, epoch, task.batch,
                                                                    task.timed["train_step"], task.timed["eval_batch"])]


def exceeded(task: Sampled, tolerance: float) -> list[str]:
    """One line for each kind of rate in which some epoch of ``task`` is faster than this machine can be."""
    return [f"epoch {b.epoch}: {b.kind} at {_rate(b.logged_rate)} logged, at most {_rate(b.ceiling)} here "
            f"(×{b.ratio:.2f} the ceiling, ×{1 + tolerance:.2f} allowed)"
            for b in worst(task.bounds).values() if b.exceeds(tolerance)]  # fmt: skip


def faster(first: Mapping, second: Mapping) -> dict:
    """Two timings of one model merged: every timed call of both (so the fastest of both)."""
    return {name: list(first[name]) + list(second[name]) for name in ("train_times", "eval_times")}


# -- the report

SHARES = (0.1, 0.25, 0.5)
"""the shares of forged tasks the audit states its chance of missing for"""


@dataclass
class Audit:
    """Everything the audit found, for the text and ``--json``."""

    run_dir: str
    sample: int
    seed: int
    tolerance: float
    eligible: int
    here: dict
    device: str = ""
    tasks: list[Sampled] = field(default_factory=list)
    load: float | None = None
    strata: int = 0
    """how many segment × hosts strata the run's tasks fall in (each drawn from when the sample allows)"""
    uniform: int = 0
    """how many of the sampled tasks were drawn uniformly over every task (:func:`miss_chance` bounds those)"""
    events_sha256: str = ""
    """the sha256 of the event log audited (:mod:`analysis.audit_record`: what ties ``audit.json`` to the run)"""

    @property
    def failed(self) -> list[Sampled]:
        return [t for t in self.tasks if not t.not_judged and (t.problems or exceeded(t, self.tolerance))]

    @property
    def not_judged(self) -> list[Sampled]:
        return [t for t in self.tasks if t.not_judged]

    @property
    def status(self) -> int:
        if self.failed:
            return EXIT_FAILED
        return EXIT_NOT_JUDGED if self.not_judged else 0

    def to_dict(self) -> dict:
        tasks = []
        for task in self.tasks:
            entry = {k: v for k, v in asdict(task).items() if k not in ("graph", "epochs", "bounds")}
            entry["bounds"] = [{**asdict(b), "logged_rate": b.logged_rate, "ceiling": b.ceiling, "ratio": b.ratio}
                               for b in task.bounds]  # fmt: skip
            tasks.append(entry)
        verdict = {0: "pass", EXIT_FAILED: "fail", EXIT_NOT_JUDGED: "not judged"}[self.status]
        return {"run_dir": self.run_dir, "verdict": verdict, "sample": self.sample, "seed": self.seed,
                "tolerance": self.tolerance, "eligible": self.eligible, "machine": self.here,
                "device": self.device, "load_average": self.load, EVENTS_SHA256: self.events_sha256,
                "strata": self.strata, "uniform_draws": self.uniform,
                "miss_chance": {f"{share:g}": miss_chance(self.eligible, share, self.uniform) for share in SHARES},
                "tasks": tasks}  # fmt: skip

    def text(self) -> str:
        here = this_machine(self.here)
        load = f"; load average {self.load:.1f} while it timed" if self.load is not None else ""
        cores = self.here.get("cores")
        own = max((t.copies * (t.claim.threads or 1) for t in self.tasks), default=0)  # the copies' own load
        busy = self.load is not None and isinstance(cores, int) and self.load > max(cores, own)
        chances = ", ".join(f"{share:.0%} forged: {miss_chance(self.eligible, share, self.uniform):.2g}"
                            for share in SHARES)  # fmt: skip
        lines = [f"{PROG}: {self.run_dir}: {len(self.tasks)} of {self.eligible} tasks sampled (seed {self.seed}): "
                 f"{self.uniform} uniformly, then one from each of the {self.strata} segment × hosts strata still "
                 f"missed, the rest the longest likeliest; tolerance {self.tolerance:.0%}",
                 f"the chance its uniform draws miss every forged task, by the share of tasks forged: {chances}",
                 f"timed on: {here.text()}, TensorFlow on {self.device or '(nothing timed)'}{load}", "",
                 f"{'task':>5}  {'batch':>5}  {'prec':<4}  {'kind':<10}  {'epoch':>5}  {'logged':>12}  "
                 f"{'ceiling here':>12}  {'ratio':>5}  verdict"]  # fmt: skip
        for task in self.tasks:
            verdict = "not judged" if task.not_judged else ("FAIL" if task in self.failed else "ok")
            rows = worst(task.bounds)
            if not rows:
                lines.append(f"{task.task:>5}  {task.batch:>5}  {task.precision:<4}  {'-':<10}  {'-':>5}  {'-':>12}  "
                             f"{'-':>12}  {'-':>5}  {verdict}")  # fmt: skip
            for kind in ("training", "evaluation", "epoch"):
                if kind in rows:
                    b = rows[kind]
                    mark = "not judged" if task.not_judged else "FAIL" if b.exceeds(self.tolerance) else "ok"
                    lines.append(f"{task.task:>5}  {task.batch:>5}  {task.precision:<4}  {kind:<10}  {b.epoch:>5}  "
                                 f"{_rate(b.logged_rate):>12}  {_rate(b.ceiling):>12}  {b.ratio:>5.2f}  {mark}")
        lines.append("")
        for task in self.tasks:
            claim = f"task {task.task}: claims {task.claim.text()}"
            if task.not_judged:
                lines.append(f"warning: {claim}: not judged: {task.not_judged}")
            for note in task.notes:
                lines.append(f"note: task {task.task}: {note}")
            if not task.not_judged:
                problems = task.problems + exceeded(task, self.tolerance)
                lines += [f"FAIL: task {task.task}: {problem}" for problem in problems]
        if busy:
            lines.append(f"note: this machine was busy (load average {self.load:.1f} on {cores} cores): its ceilings "
                         "are lower than an idle machine's, which favours a failure; audit again when it is idle")
        kinds = sorted({t.claim.text() for t in self.tasks if not t.not_judged})
        if kinds:
            lines.append(f"the run claims: {'; '.join(kinds)} — the kind timed here")
        if self.status == EXIT_FAILED:
            names = ", ".join(str(t.task) for t in self.failed)
            lines.append(f"FAILED: task(s) {names} logged rates above what this machine can reach")
        elif self.status == EXIT_NOT_JUDGED:
            lines.append(f"NOT JUDGED: {len(self.not_judged)} of {len(self.tasks)} sampled tasks trained on "
                         "another kind of hardware than this machine: the audit cannot judge them here")  # fmt: skip
        else:
            lines.append(f"PASSED: every logged rate of the {len(self.tasks)} sampled tasks within "
                         f"{1 + self.tolerance:.2f}× the ceiling measured here")  # fmt: skip
        return "\n".join(lines) + "\n"


def _rate(ops_per_second: float) -> str:
    if not math.isfinite(ops_per_second):
        return "∞ ops/s"
    return f"{ops_per_second / 1e9:.3g} GOPS" if ops_per_second < 1e12 else f"{ops_per_second / 1e12:.4g} TOPS"


def audit(run_dir: Path, count: int, seed: int, tolerance: float, seconds: float, timeout: float,
          retries: int = RETRIES, here: Mapping | None = None) -> Audit:  # fmt: skip
    """Sample, rebuild, time and judge (see the module); BadInput or AuditFailed when it cannot."""
    here = dict(here or local_description())
    model, lineage = read_run(run_dir)  # BadInput for what is not a run directory (a FIFO is never opened)
    judged_log = events_sha256(run_dir)  # the record names the log the audit judged
    weights = candidates(model)
    if not weights:
        raise BadInput(f"{run_dir}: no model in the log has an epoch to audit")
    result = Audit(str(run_dir), count, seed, tolerance, len(weights), here, events_sha256=judged_log)
    strata = task_strata(model, sorted(weights))
    drawn = sample_tasks(weights, count, seed, strata)
    result.strata = len(set(strata.values()))
    result.uniform = uniform_draws(len(drawn))
    result.tasks = [sampled(model, lineage, task, weights[task], here) for task in drawn]
    todo = [t for t in result.tasks if t.graph]
    for task in todo:
        task.copies = copies(task.claim, here)
        if task.copies > 1 or task.claim.company > 1:
            task.notes.append(f"{task.claim.company} ranks trained on its host at once, sharing its cores: timed as "
                              f"{task.copies} copies at once" + ("" if task.copies == task.claim.company else
                              f" (at most {COPIES_PER_CORE} a core of this machine)"))  # fmt: skip
    for attempt in range(retries + 1):
        if not todo:
            break
        for count in sorted({t.copies for t in todo}):  # each task beside as many copies as its host held ranks
            alike = [t for t in todo if t.copies == count]
            answers = run_children(request(alike, seconds * 2**attempt, here), timeout, count)  # retimed 2× longer
            result.device = str(answers[0].get("device", ""))
            for answer in answers:
                timed = {entry["task"]: entry for entry in answer.get("tasks", [])}
                for task in alike:
                    if task.task in timed:
                        judge(task, timed[task.task] if task.timed is None else faster(task.timed, timed[task.task]))
        # timed again: a task that exceeds, and one whose epochs beat this machine's best (a busy moment here)
        todo = [t for t in todo if exceeded(t, min(tolerance, RETIME_ABOVE))] if attempt < retries else []
    for task in result.tasks:
        if task.graph and task.timed is None:
            task.problems.append(f"python -m {CHILD} returned no timing for it")
        elif task.timed is not None and not task.bounds and not task.not_judged:
            task.not_judged = "its epochs record no times and counts to bound"
    result.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return result


def _option(kind: type, low: float, high: float, what: str):
    """An argparse type: a ``kind`` (int or float) in [low, high), else an error naming ``what`` it expects."""

    def read(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not low <= value < high:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}")
        return value

    return read


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0], name=PROG,
                           status=EXIT_BAD_INPUT)  # bad options: one line and exit 2, as every bad input here
    seconds = _option(float, 1e-3, 1e7, "a positive number of seconds")
    parser.add_argument("run", type=Path, help="the run directory")
    parser.add_argument("--sample", type=_option(int, 1, math.inf, "a positive integer"), required=True, metavar="K",
                        help="how many tasks to rebuild and time (all of them when the run has fewer)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the draw's seed: the same seed draws the same tasks (default: a fresh one from this "
                             "machine, which the log cannot predict; the record says which)")  # fmt: skip
    parser.add_argument("--tolerance", type=_option(float, 0, 10, "a fraction such as 0.25"), default=TOLERANCE,
                        help=f"how far above the measured ceiling a logged rate may lie (default {TOLERANCE:g})")
    parser.add_argument("--seconds", type=seconds, default=SECONDS_PER_TASK,
                        help=f"time spent timing each sampled model (default {SECONDS_PER_TASK:g})")
    parser.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT,
                        help=f"give the timing up after this long (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--json", type=Path, default=None, help="also write the audit as JSON to this file")
    parser.add_argument("--record", nargs="?", type=Path, default=None, const=True, metavar="RECORD",
                        help=f"also write the record (tied to the log by its sha256) to RECORD, or to "
                             f"RUN_DIR/{AUDIT_RECORD} without one (the site's claim); a verdict counts only the "
                             "record its reviewer names: python -m analysis.verify RUN_DIR --audit RECORD "
                             "(docs/verify.md, \"The reviewer's procedure\")")  # fmt: skip
    options = parser.parse_args(argv)
    return guarded(PROG, options.run, lambda: _main(options))


def _main(options: argparse.Namespace) -> int:
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31)  # fresh: the log cannot steer it
    try:
        result = audit(options.run, options.sample, seed, options.tolerance, options.seconds, options.timeout)
    except (BadInput, AuditFailed) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(result.text())
    text = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    if options.json is not None:
        options.json.write_text(text, encoding="utf-8")
    if options.record is not None:
        record = Path(options.run) / AUDIT_RECORD if options.record is True else Path(options.record)
        partial = record.with_name(record.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(record)  # whole or not at all: a verify that reads it never sees half a record
        print(f"{PROG}: the record is in {record} (seed {seed}); a verdict counts it when its reviewer names it: "
              f"python -m analysis.verify {options.run} --audit {record}")
    return result.status


if __name__ == "__main__":
    sys.exit(main())
