"""A forgery campaign against ``python -m analysis.verify`` (issue 45): forge, verify, and say what passed.

Each forgery is what a careful forger who has read the verifier would write for
one class issue 45 lists: it starts from :func:`tests.support.verify_runs.consistent_run`
(a hand-made run right in every detail verify checks), changes the log, and is
rescored with the package's own score code (:func:`tests.support.verify_runs.forge`),
so only the rules it breaks can name it.  Every run is then completed as a
submitter would (the best task's weights kept with their logged sha256, and
``best/`` exported), so that an unforged one is "valid" wherever the verifier
grants the word without a reviewer's checks.  Each forgery is judged twice:
as it is, and with a forged ``audit.json`` (a passing verdict and the log's
sha256, written by hand: no audit ran).

What is recorded for each: the gain (forged regulated score ÷ the honest
baseline's, and the same for the score), ``analysis.verify``'s exit code, its
verdict words, and its ``trusted:`` lines.  A forgery whose gain is not above 1
is reported but not counted.  ``--reevaluate`` is not run: the forgeries claim
ImageNet, which this machine does not hold (docs/verify.md, "The reviewer's
procedure"), and verify since issue 45 withholds "valid" without it.

Run it in the checkout under test (the package and ``analysis`` are imported from
``PYTHONPATH``, and the forged runs are built by that checkout's own test support)::

    PYTHONPATH=/tmp/before python -m benchmarks.forgeries --out before.json
    PYTHONPATH=$PWD        python -m benchmarks.forgeries --out after.json
    python -m benchmarks.forgeries --table before.json after.json

A ``--table`` writes the Markdown table and the counts (passed as "VERIFIED, a
valid run", and exit 0 at all) of the two campaigns.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aiperf_mpi.graph.model import from_json, to_json, with_kernel_size
from aiperf_mpi.results import runlog
from aiperf_mpi.results.graphs import append_graph, segment_graph_file
from aiperf_mpi.results.hardware import host_bound
from aiperf_mpi.results.stored_weights import file_sha256
from tests.support import verify_runs as support
from tests.support.verify_runs import HOST, consistent_run, find, forge, read_log, recount
from tests.unit.test_verify_forgeries import _densify, _peaks, _resume

CPU_HOST = {**HOST, "accelerators": []}
"""the consistent run's node without its accelerators (128 logical processors of an AMD EPYC 9575F)"""
B200_FP16 = 2.25e15
"""the table's dense fp16 peak of one B200"""
SHARE = 0.9
"""each forgery runs its groups at this share of the bound its claim buys (a forger keeps some margin)"""
VERIFY_TIMEOUT = 120.0
"""seconds a verify may take before the campaign calls it hung"""


@dataclass
class Outcome:
    """What one forgery gained and what verify said of it."""

    klass: str
    forgery: str
    gain: float | None
    """forged regulated score ÷ the honest baseline's (None: no score to compare)"""
    score_gain: float | None
    exit_code: int | None
    verdict: str
    trusted: list[str] = field(default_factory=list)
    forged_audit_exit: int | None = None
    forged_audit_verdict: str = ""
    seconds: float = 0.0
    note: str = ""
    failed: list[str] = field(default_factory=list)
    """the checks verify named MISMATCH"""
    honest_verdict: str = ""
    """verify's verdict on the honest baseline (completed the same way): the forgery starts from a passing run"""


def _scores(run: Path) -> tuple[float, float]:
    score = json.loads((run / "score.json").read_text())
    return float(score["score"]), float(score["regulated_score"])


def _verify(run: Path, *extra: str) -> tuple[int | None, str, list[str], float, list[str]]:
    """``python -m analysis.verify RUN``: its exit code, verdict line, trusted lines, seconds, failed checks."""
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "analysis.verify", str(run), *extra], capture_output=True,
                              text=True, timeout=VERIFY_TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, f"hung (killed after {VERIFY_TIMEOUT:g} s)", [], time.monotonic() - began, []
    lines = done.stdout.splitlines()
    verdict = next((line for line in lines if line.startswith("verdict:")), "")
    if not verdict:
        verdict = (done.stderr.strip().splitlines() or ["(nothing)"])[-1][:200]
    trusted = [line for line in lines if line.startswith("trusted:")]
    failed = sorted({line[14:].split(":")[0] for line in lines if line.startswith("MISMATCH      ")})
    return done.returncode, verdict, trusted, time.monotonic() - began, failed


def _complete(run: Path) -> None:
    """Keep the best task's weights with their sha256 logged and export ``best/``, as a submitter would."""
    from aiperf_mpi import export

    support.write_weights(run, export.read_run(run).best)
    support.write_best(run)


def _forge_audit(run: Path) -> None:
    """A hand-written ``audit.json``: a passing verdict over this log's sha256 (no audit ran)."""
    record = {"events_sha256": file_sha256(runlog.log_path(run)), "verdict": "pass", "seed": 0, "tolerance": 0.25,
              "machine": {"cpu": "AMD EPYC 9575F", "accelerators": ["NVIDIA B200"] * 4},
              "tasks": [{"task": 0, "verdict": "pass"}]}  # fmt: skip
    (run / "audit.json").write_text(json.dumps(record))


def _rehearsal(events: list[dict]) -> None:
    """Mark the log a rehearsal's at the fastest rate a rank its phases show (the checkout's ``as_rehearsal``
    where it has one; the same rule here for a checkout without it)."""
    if hasattr(support, "as_rehearsal"):
        support.as_rehearsal(events)
        return
    rates = []
    for epoch in (e for e in events if e["event"] == runlog.EPOCH):
        for ops, seconds in ((epoch["ops_train"] + epoch["ops_update"], epoch["compute"]),
                             (epoch["ops_validation"], epoch["evaluation"])):  # fmt: skip
            if ops and seconds > 0:
                rates.append(ops / (seconds * support.RANKS))
    find(events, runlog.RUN_START)["config"].update(rehearse=True, rehearse_rate=max(rates))


# ---------------------------------------------------------------- the changes a forger makes


def _cpu(host: dict, precision: str, rate: float, limit: float = 3000.0) -> Callable[[list[dict]], list[dict]]:
    """Both groups on ``host`` at ``precision``, probes and epochs back to back at ``rate`` each over ``limit`` s."""

    def change(events: list[dict]) -> list[dict]:
        find(events, runlog.RUN_START)["config"]["precision"] = precision
        find(events, runlog.SYSTEM)["hosts"] = [{**host, "host": "h0", "ranks": [0, 1, 2, 3, 4]}]
        _peaks(events, rate, precision)
        return _densify(events, rate, limit=limit)

    return change


def _group_rate(host: dict, precision: str, groups_on_host: int = 2) -> float:
    return SHARE * host_bound(host, 4, precision).ops_per_second / groups_on_host


def _then(*changes: Callable[[list[dict]], list[dict] | None]) -> Callable[[list[dict]], list[dict]]:
    def change(events: list[dict]) -> list[dict]:
        for step in changes:
            events = step(events) or events
        return events

    return change


def _threads(intra: int) -> Callable[[list[dict]], None]:
    def change(events: list[dict]) -> None:
        for peak in (e for e in events if e["event"] == runlog.PEAK):
            peak["threads"] = [{"rank": r, "intra": intra, "inter": 2} for r in range(2)]

    return change


def _fields(change: Callable[[dict, dict, list[dict]], None]) -> Callable[[list[dict]], None]:
    """A field of the system, layout or peak events changed (``change(system, layout, peaks)``), nothing else."""

    def forged(events: list[dict]) -> None:
        change(find(events, runlog.SYSTEM), find(events, runlog.LAYOUT),
               [e for e in events if e["event"] == runlog.PEAK])  # fmt: skip

    return forged


def _nan(fields: tuple[str, ...]) -> Callable[[list[dict]], None]:
    def change(events: list[dict]) -> None:
        for epoch in (e for e in events if e["event"] == runlog.EPOCH):
            for name in fields:
                epoch[name] = float("nan")
        for task in {e["task"] for e in events if e["event"] == runlog.MODEL_DONE}:
            support.sync_record(events, task)

    return change


def _two_hosts(events: list[dict]) -> None:
    """Group 1 moved onto a made-up second host of the same kind (its ranks 3 and 4)."""
    system, layout = find(events, runlog.SYSTEM), find(events, runlog.LAYOUT)
    h0 = system["hosts"][0]
    system.update(nodes=2, hosts=[{**h0, "ranks": [0, 1, 2]}, {**h0, "host": "h1", "ranks": [3, 4]}])
    layout.update(hosts=["h0"] * 3 + ["h1"] * 2, nodes=[0, 0, 0, 1, 1])
    layout["groups"][1].update(node=1, host="h1")
    for peak in (e for e in events if e["event"] == runlog.PEAK and e["group"] == 1):
        peak["host"] = "h1"


def _kernel_raised(run: Path, task: int, kernel: int) -> Callable[[list[dict]], None]:
    """A non-best task's kernel size raised, its graph (appended), proposal, record and epochs recounted."""

    def change(events: list[dict]) -> None:
        proposal = find(events, runlog.MODEL_PROPOSED, task=task)
        done = find(events, runlog.MODEL_DONE, task=task)
        graph = to_json(with_kernel_size(from_json(done["model"]["graph"]), kernel))
        proposal["hparams"]["kernel_size"] = kernel
        done["model"]["hparams"]["kernel_size"] = kernel
        proposal.update(append_graph(run, segment_graph_file(1), graph))
        done["model"]["graph"] = graph
        for epoch in (e for e in events if e["event"] == runlog.EPOCH and e["task"] == task):
            recount(events, epoch)
        from aiperf_mpi.graph.ops import count_ops

        counts = count_ops(from_json(graph))
        done["model"]["ops"].update(forward_per_sample=counts.forward_eval, backward_per_sample=counts.backward,
                                    update_per_step=counts.update, params=counts.params)  # fmt: skip

    return change


def _squeeze(factor: float) -> Callable[[list[dict]], None]:
    def change(events: list[dict]) -> None:
        for epoch in (e for e in events if e["event"] == runlog.EPOCH):
            epoch["compute"] /= factor
            epoch["evaluation"] /= factor

    return change


def _resumed_faster(run: Path) -> Callable[[list[dict]], list[dict]]:
    """Segment 2 claims 8 B200s (``--hardware-changed``), raises ``max_epochs`` to 4, its probes ×2, and logs its
    epochs 2 at a time in the wall one took (short forged epochs: ×2 the ops in the same seconds; the consistent
    run is at 0.44 of the 4 B200s' table bound, so ×2 stays under it)."""

    def second(again: list[dict]) -> None:
        start = find(again, runlog.RUN_START)
        start["config"].update(hardware_changed="moved to the new partition", max_epochs=4)
        for peak in (e for e in again if e["event"] == runlog.PEAK):
            peak["ops_per_second"] *= 2
        find(again, runlog.SYSTEM)["hosts"] = [{**HOST, "accelerators": ["NVIDIA B200"] * 8}]
        out = []
        for event in again:
            if event["event"] != runlog.EPOCH:
                out.append(event)
                continue
            wall = (event["end"] - event["start"]) / 2
            for k in range(2):
                copied = copy.deepcopy(event)
                copied.update(epoch=(event["epoch"] - 1) * 2 + k + 1, start=event["start"] + k * wall,
                              end=event["start"] + (k + 1) * wall, compute=event["compute"] / 2,
                              evaluation=event["evaluation"] / 2, data_wait=0.0,
                              time=event["start"] + (k + 1) * wall + 0.001)  # fmt: skip
                out.append(copied)
        out.sort(key=lambda e: e["time"])
        again[:] = out

    return lambda events: _resume(events, run, second)


# ---------------------------------------------------------------- the campaign


@dataclass(frozen=True)
class Forgery:
    klass: str
    name: str
    honest: Callable[[Path], None]
    """builds the honest baseline's log in a consistent run (after consistent_run)"""
    forged: Callable[[Path], None]
    dataset: str = "imagenet"
    honest_dataset: str = "imagenet"
    gain_divisor: float = 1.0
    """the baseline is the honest run's score ÷ this (a run with fewer groups than the log: see its forgery)"""


def _by(change: Callable[[Path], Callable]) -> Callable[[Path], None]:
    return lambda run: forge(run, change(run))


def _plain(change: Callable[[list[dict]], list[dict] | None]) -> Callable[[Path], None]:
    return lambda run: forge(run, change)


def _nothing(run: Path) -> None:
    return None


CPU_FP32 = _group_rate(CPU_HOST, "fp32")
BIG_CPU = {**CPU_HOST, "cpu": "AMD EPYC 9965 192-Core Processor", "cores": 384}
MANY_LP = {**CPU_HOST, "cores": 1024}
TWO_CORES = {**CPU_HOST, "cores": 2}
SIXTY_FOUR = {**CPU_HOST, "cores": 64}
B200_4 = SHARE * 4 * B200_FP16 / 2
B200_8 = SHARE * 8 * B200_FP16 / 2


def campaign() -> list[Forgery]:
    """Every forgery, by class (issue 45's list, in its order)."""
    honest_cpu = _plain(_cpu(CPU_HOST, "fp32", CPU_FP32))
    honest_b200 = _plain(_cpu(HOST, "fp16", B200_4))
    honest_half = _plain(_cpu(CPU_HOST, "fp32", CPU_FP32 / 2))
    return [
        Forgery(
            "relabelled digits",
            "a 1000-class ImageNet log on 4 B200s (a digits run's lineage, made up)",
            honest=_nothing,
            forged=_nothing,
            honest_dataset="digits",
        ),
        Forgery(
            "hardware claims",
            "a bigger CPU (EPYC 9965, 384 logical processors)",
            honest_cpu,
            _plain(_cpu(BIG_CPU, "fp32", _group_rate(BIG_CPU, "fp32"))),
        ),
        Forgery(
            "hardware claims",
            "more logical processors (1,024 on the EPYC 9575F)",
            honest_cpu,
            _plain(_cpu(MANY_LP, "fp32", _group_rate(MANY_LP, "fp32"))),
        ),
        Forgery(
            "hardware claims",
            "bf16 on the CPU that has avx512_bf16",
            honest_cpu,
            _plain(_cpu(CPU_HOST, "bf16", _group_rate(CPU_HOST, "bf16"))),
        ),
        Forgery(
            "hardware claims",
            "4 B200s claimed on the CPU host (EPYC 9575F)",
            honest_cpu,
            _plain(_cpu(HOST, "fp16", B200_4)),
        ),
        Forgery(
            "hardware claims",
            "8 B200s where the host has 4 (2 groups of 2 ranks)",
            honest_b200,
            _plain(_then(_cpu({**HOST, "accelerators": ["NVIDIA B200"] * 8}, "fp16", B200_8))),
        ),
        Forgery(
            "hardware claims",
            "64 threads a rank claimed, clocks ÷ 1.2 (a run at half the bound)",
            honest_half,
            _plain(_then(_cpu(CPU_HOST, "fp32", CPU_FP32 / 2 * 1.2), _threads(64))),
        ),
        Forgery(
            "unread fields",
            "64 threads a rank claimed on a 2-core host, its processor count raised to 64 (groups at 0.9 of that)",
            _plain(_cpu(TWO_CORES, "fp32", _group_rate(TWO_CORES, "fp32"), limit=400_000)),
            _plain(_then(_cpu(SIXTY_FOUR, "fp32", _group_rate(SIXTY_FOUR, "fp32"), limit=400_000), _threads(64))),
        ),
        Forgery(
            "unread fields",
            "a probe's threads: one entry, a string, for a group of 2 ranks",
            _nothing,
            _plain(_fields(lambda s, lay, p: p[0].update(threads=[{"intra": "64", "inter": 2}]))),
        ),
        Forgery(
            "unread fields",
            "group 0's probe logged on a made-up host h9",
            _nothing,
            _plain(_fields(lambda s, lay, p: p[0].update(host="h9"))),
        ),
        Forgery(
            "unread fields",
            "accelerators_per_node 4 → 64 (the mllog description's bound)",
            _nothing,
            _plain(_fields(lambda s, lay, p: s.update(accelerators_per_node=64))),
        ),
        Forgery(
            "unread fields",
            "layout: group 1's host and node a made-up second node (the system event untouched)",
            _nothing,
            _plain(_fields(lambda s, lay, p: lay["groups"][1].update(host="h1", node=1))),
        ),
        Forgery(
            "non-finite fields",
            "compute and evaluation NaN, epochs at 3× the bound",
            honest_cpu,
            _plain(_then(_cpu(CPU_HOST, "fp32", 3 * CPU_FP32), _nan(("compute", "evaluation")))),
        ),
        Forgery(
            "non-finite fields",
            "evaluation and data_wait NaN, epochs at 3× the bound",
            honest_cpu,
            _plain(_then(_cpu(CPU_HOST, "fp32", 3 * CPU_FP32), _nan(("evaluation", "data_wait")))),
        ),
        Forgery(
            "groups > cores",
            "2 groups of 2 ranks on a 2-core host, each at the host's 1-group rate",
            _plain(_cpu(TWO_CORES, "fp32", _group_rate(TWO_CORES, "fp32", 1), limit=400_000)),
            _plain(_cpu(TWO_CORES, "fp32", _group_rate(TWO_CORES, "fp32", 1), limit=400_000)),
            gain_divisor=2.0,
        ),
        Forgery(
            "fabricated hosts",
            "group 1 on a made-up second EPYC host, each group at a whole host's bound",
            honest_cpu,
            _plain(_then(_two_hosts, _cpu_keep_hosts(_group_rate(CPU_HOST, "fp32", 1)))),
        ),
        Forgery(
            "resumed segment",
            "segment 2 on 8 B200s (--hardware-changed), max_epochs 2 → 4, epochs ×2 as short",
            _by(_resumed_honest),
            _by(_resumed_faster),
        ),
        Forgery(
            "rehearsal",
            "a rehearsal's clocks ÷ 1000",
            _plain(_rehearsal),
            _plain(_then(_rehearsal, _squeeze(1000.0), _shift_ends(1000.0))),
        ),
        Forgery(
            "kernel sizes",
            "non-best task 1's kernel 5 → 7, graph and counts consistent",
            _nothing,
            _by(lambda run: _kernel_raised(run, 1, 7)),
        ),
        Forgery(
            "clocks squeezed",
            "every clock ÷ 1.2, nothing else (a run at half the bound)",
            honest_half,
            _plain(_cpu(CPU_HOST, "fp32", CPU_FP32 / 2 * 1.2)),
        ),
        Forgery(
            "clocks squeezed",
            "every clock squeezed to 0.9 of the table's bound (a run at 0.1 of it)",
            _plain(_cpu(CPU_HOST, "fp32", CPU_FP32 / 9, limit=30_000)),
            _plain(_cpu(CPU_HOST, "fp32", CPU_FP32, limit=30_000)),
        ),
    ]


def _cpu_keep_hosts(rate: float) -> Callable[[list[dict]], list[dict]]:
    """:func:`_cpu`'s rates on the hosts the log already lists (their accelerators removed), fp32."""

    def change(events: list[dict]) -> list[dict]:
        find(events, runlog.RUN_START)["config"]["precision"] = "fp32"
        for host in find(events, runlog.SYSTEM)["hosts"]:
            host["accelerators"] = []
        _peaks(events, rate, "fp32")
        return _densify(events, rate, limit=3000)

    return change


def _resumed_honest(run: Path) -> Callable[[list[dict]], list[dict]]:
    """The same run resumed once on the same host, its second segment a copy of the first: the resume's baseline."""

    return lambda events: _resume(events, run, lambda again: None)


def _shift_ends(factor: float) -> Callable[[list[dict]], list[dict]]:
    """Each task's epochs packed into its first epoch's wall ÷ ``factor`` apart (the window then holds ×factor)."""

    def change(events: list[dict]) -> list[dict]:
        return _densify(events, _fastest(events) * factor * 0.999)

    return change


def _fastest(events: list[dict]) -> float:
    return max(e["ops_train"] / (e["end"] - e["start"]) for e in events if e["event"] == runlog.EPOCH)


def run_forgery(forgery: Forgery, where: Path) -> Outcome:
    honest = consistent_run(where / "honest", dataset=forgery.honest_dataset)
    forgery.honest(honest)
    run = consistent_run(where / "forged", dataset=forgery.dataset)
    forgery.forged(run)
    _complete(run)
    base_score, base_regulated = _scores(honest)
    score, regulated = _scores(run)
    base_score /= forgery.gain_divisor
    base_regulated /= forgery.gain_divisor
    code, verdict, trusted, seconds, failed = _verify(run)
    outcome = Outcome(forgery.klass, forgery.name, regulated / base_regulated if base_regulated else None,
                      score / base_score if base_score else None, code, verdict, trusted, seconds=seconds,
                      failed=failed)  # fmt: skip
    _complete(honest)
    outcome.honest_verdict = _verify(honest)[1]
    if "NOT VERIFIED" in outcome.honest_verdict:  # no passing run to start from: the gain is not counted
        outcome.note = "the honest baseline itself is NOT VERIFIED: not counted"
    _forge_audit(run)
    outcome.forged_audit_exit, outcome.forged_audit_verdict, *_ = _verify(run)
    return outcome


def error_floor() -> Outcome:
    """A claim 3 of 360 above its recount at the error floor, judged by the re-evaluation's own comparison."""
    from analysis import reevaluation

    claim = {"task": 0, "epoch": 2, "logged_correct": 360, "validation_samples": 360, "batch_size": 32, "ranks": 2,
             "logged_from": "epoch", "weights_file": "weights/task-0.npz"}  # fmt: skip
    answer = {"claim": claim, "correct": 357, "seen": 360, "precision": "fp32", "run_precision": "fp32",
              "trained_on": "cpus", "seconds": 1.0}  # fmt: skip
    row = reevaluation.compare(answer, reevaluation.ALLOWED_SHARE)
    floor = getattr(reevaluation, "ERROR_FLOOR", None) or 1e-3
    gain = -__import__("math").log(floor) / -__import__("math").log(3 / 360)
    verdict = "re-evaluation row ok" if not row.problems else f"re-evaluation row refused: {row.problems[0][:120]}"
    return Outcome(
        "error floor",
        "360 of 360 claimed, 357 recounted (default tolerance)",
        gain,
        1.0,
        0 if not row.problems else 1,
        verdict,
        note="analysis.reevaluation.compare, no TensorFlow",
    )


def audit_draw() -> Outcome:
    """How often the audit's draw (this checkout's ``sample_tasks``) misses a resumed segment of short forged epochs:
    10 honest tasks of 600 s in segment 1, 10 forged tasks of 6 s in segment 2 (epochs 100× too short: their
    ops, and so their share of the score, are an honest task's), 2 tasks drawn, over 1,000 seeds."""
    import inspect

    from analysis import audit

    weights = {task: 600.0 if task < 10 else 6.0 for task in range(20)}
    strata = {task: (1 if task < 10 else 2, ("h0",)) for task in range(20)}
    stratified = "strata" in inspect.signature(audit.sample_tasks).parameters
    missed = 0
    for seed in range(1000):
        drawn = audit.sample_tasks(weights, 2, seed, strata) if stratified else audit.sample_tasks(weights, 2, seed)
        missed += not any(task >= 10 for task in drawn)
    gain = 20 / 10  # the forged segment doubles the ops logged in the window (its tasks' ops are honest ones')
    return Outcome(
        "audit draw",
        "segment 2's 10 tasks of 100×-short forged epochs, 2 of 20 tasks drawn",
        gain,
        gain,
        None,
        f"the draw missed segment 2 in {missed} of 1,000 seeds",
        note="analysis.audit.sample_tasks",
    )


def audit_threads(where: Path) -> Outcome:
    """Whether ``analysis.audit`` (this checkout's) can judge a run whose probes claim 64 threads a rank on the
    submitter's own processor: a 2-core CPU host, audited on a machine of the same processor and cores."""
    from analysis import audit

    run = consistent_run(where / "run")
    rewrite = _then(_fields(lambda s, lay, p: s.update(hosts=[{**TWO_CORES, "host": "h0", "ranks": [0, 1, 2, 3, 4]}])),
                    _threads(64))  # fmt: skip
    forge(run, rewrite)
    model, _ = audit.read_run(run)
    here = {"host": "here", "cpu": TWO_CORES["cpu"], "cores": 2, "accelerators": []}
    claim = audit.claimed_hardware(model, 0)
    why = audit.cannot_judge(claim, here)
    verdict = f"audit: not judged: {why}" if why else f"audit: judged, timed with {claim.threads} thread(s) a rank"
    return Outcome("unread fields", "64 threads a rank claimed; audited on the submitter's own 2-core processor",
                   None, None, audit.EXIT_NOT_JUDGED if why else None, verdict,
                   note="analysis.audit.claimed_hardware and cannot_judge, no timing")  # fmt: skip


def sparse_file(where: Path, which: str) -> Outcome:
    """A 1 TiB sparse file under a kept weights name or best/model.keras; how long verify takes."""
    run = consistent_run(where / "run")
    _complete(run)
    from aiperf_mpi import export

    best = export.read_run(run).best
    path = run / ("weights" if which == "weights" else "best") / (f"task-{best}.npz" if which == "weights"
                                                                   else "model.keras")  # fmt: skip
    path.unlink()
    with path.open("wb") as handle:
        handle.truncate(1 << 40)
    code, verdict, trusted, seconds, failed = _verify(run)
    return Outcome(
        "1 TiB sparse file",
        f"{path.relative_to(run)} a sparse 1 TiB",
        None,
        None,
        code,
        f"{verdict} in {seconds:.1f} s",
        trusted,
        seconds=seconds,
        failed=failed,
    )


def malformed_compare(where: Path) -> list[Outcome]:
    """``analysis.compare`` on five malformed logs: a traceback is the failure, a one-line error the pass."""
    cases = {
        "a string time": lambda e: e[0].update(time="noon"),
        "a list config": lambda e: e[0].update(config=[1, 2]),
        "a null ops": lambda e: next(x for x in e if x["event"] == runlog.EPOCH).update(ops=None),
        "a byte-order mark": None,
        "an --out naming an existing file": None,
    }
    out = []
    for name, change in cases.items():
        run = consistent_run(where / name.replace(" ", "-"))
        extra: list[str] = []
        if change is not None:
            events = read_log(run)
            change(events)
            support.write_log(run, events)
        elif "byte-order" in name:
            log = runlog.log_path(run)
            log.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())
        else:
            (where / "exists.md").write_text("x")
            extra = ["--out", str(where / "exists.md")]
        other = consistent_run(where / (name.replace(" ", "-") + "-b"))
        done = subprocess.run([sys.executable, "-m", "analysis.compare", str(run), str(other), *extra],
                              capture_output=True, text=True, timeout=VERIFY_TIMEOUT, cwd=where)  # fmt: skip
        traceback = "Traceback" in done.stderr
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1][:140]
        out.append(
            Outcome("compare malformed", name, None, None, done.returncode, ("TRACEBACK: " if traceback else "") + last)
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forgeries", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the campaign's outcomes (JSON) here")
    parser.add_argument("--table", type=Path, nargs=2, metavar=("BEFORE", "AFTER"),
                        help="print the Markdown table of two campaigns' outcomes")  # fmt: skip
    options = parser.parse_args(argv)
    if options.table:
        print(table(*(json.loads(p.read_text()) for p in options.table)))
        return 0
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="forgeries-") as folder:
        for index, forgery in enumerate(campaign()):
            where = Path(folder) / str(index)
            try:
                outcomes.append(run_forgery(forgery, where))
            except (
                ValueError,
                KeyError,
                StopIteration,
                TypeError,
            ) as exc:  # a forgery the checkout's support cannot build is reported, not hidden
                outcomes.append(Outcome(forgery.klass, forgery.name, None, None, None, f"not built: {exc!r}"[:200]))
            print(f"{forgery.klass}: {outcomes[-1].verdict[:100]}", file=sys.stderr)
        outcomes.append(error_floor())
        outcomes.append(audit_draw())
        outcomes.append(audit_threads(Path(folder) / "audit-threads"))
        for which in ("weights", "best"):
            outcomes.append(sparse_file(Path(folder) / f"sparse-{which}", which))
        outcomes += malformed_compare(Path(folder) / "compare")
    text = json.dumps([asdict(o) for o in outcomes], indent=1)
    if options.out:
        options.out.write_text(text)
    else:
        print(text)
    return 0


VALID = "VERIFIED, a valid run"
"""the worst outcome: the bare word "valid" (``consistent with a valid run, NOT YET VALID`` contains "a valid run")"""


def _words(verdict: str) -> str:
    if "NOT YET VALID" in verdict:
        missing = verdict.split("missing ", 1)[-1]
        lacks = [what for key, what in (("re-evaluated", "re-evaluation"), ("audit", "audit")) if key in missing]
        return f"consistent, NOT YET VALID (lacks {' + '.join(lacks)})"
    for words in (VALID, "unofficial", "NOT VERIFIED"):
        if words in verdict:
            return words
    return verdict[:110]


def _factor(trusted: list[str]) -> str:
    """Each trusted line's claim and factor, in short ("no bound" where the line names none)."""
    found = []
    for line in trusted:
        if "the data" in line or line.startswith("trusted: together"):
            continue
        bound = re.search(r"; (up to ×[0-9.,e+]+|no bound verify can hold);", line)
        found.append(f"{line.removeprefix('trusted: ').split(':')[0]} "
                     f"{bound.group(1).replace('no bound verify can hold', 'no bound') if bound else '?'}")
    return "; ".join(found)


def printed_product(trusted: list[str]) -> float | None:
    """What the verdict's last trusted line says the claims together could have bought: its product, or infinity
    where it names claims with no bound (issue 52: "times what the claims with no bound bought"); None: no line."""
    line = next((line for line in trusted if line.startswith("trusted: together, up to ×")), None)
    if line is None:
        return None
    if "claims with no bound bought" in line:
        return float("inf")
    return float(line.removeprefix("trusted: together, up to ×").split(" ", 1)[0].replace(",", ""))


def beyond_printed(outcomes: list[dict]) -> list[str]:
    """Issue 52's test: each forgery that gains and exits 0 whose gain exceeds the product its verdict prints (a
    verdict with one factor or none prints no product: its single factor is the bound)."""
    found = []
    for outcome in outcomes:
        gains = outcome["gain"] is not None and outcome["gain"] > 1.0001 and not outcome["note"].startswith("the h")
        if not gains or outcome["exit_code"] != 0:
            continue
        product = printed_product(outcome["trusted"])
        if product is None:
            factors = [float(part.split("up to ×")[1].split(";")[0].replace(",", "")) for part in outcome["trusted"]
                       if "; up to ×" in part]  # fmt: skip
            product = max(factors, default=1.0)
        if outcome["gain"] > product:
            found.append(f"{outcome['forgery'][:60]}: ×{outcome['gain']:.3g} against ×{product:.3g} printed")
    return found


def table(before: list[dict], after: list[dict]) -> str:
    """The Markdown table of the two campaigns, and the counts of forgeries that gain and pass."""
    rows = [
        "| class | forgery | gain (regulated, score) | before: exit, verdict (+ forged audit.json) | "
        "after: exit, verdict (+ forged audit.json); trusted lines |",
        "|---|---|---|---|---|",
    ]
    counts = {"before": [0, 0, 0], "after": [0, 0, 0]}
    for old, new in zip(before, after, strict=True):
        gain = "–" if old["gain"] is None else f"×{old['gain']:.3g}, ×{(old['score_gain'] or 0):.3g}"
        for side, outcome in (("before", old), ("after", new)):
            gains = outcome["gain"] is not None and outcome["gain"] > 1.0001 and not outcome["note"].startswith("the h")
            if gains:
                counts[side][0] += 1
                counts[side][1] += outcome["exit_code"] == 0
                counts[side][2] += VALID in outcome["verdict"] or VALID in outcome["forged_audit_verdict"]

        def cell(o: dict) -> str:
            audited = f" (+audit: {_words(o['forged_audit_verdict'])})" if o["forged_audit_verdict"] else ""
            failed = f" [{', '.join(o['failed'])}]" if o.get("failed") else ""
            return f"{o['exit_code']}, {_words(o['verdict'])}{failed}{audited}"

        note = f" ({new['note']})" if new["note"].startswith("the h") else ""
        rows.append(f"| {old['klass']} | {old['forgery']}{note} | {gain} | {cell(old)} | {cell(new)}"
                    f"{'; trusted: ' + _factor(new['trusted']) if new['trusted'] else ''} |")  # fmt: skip
    for side, (gaining, exit0, valid) in counts.items():
        outcomes = before if side == "before" else after
        beyond = beyond_printed(outcomes)
        rows.append(f"\n{side}: {gaining} forgeries that raise the regulated score; {exit0} of them exit 0; "
                    f"{valid} of them \"VERIFIED, a valid run\" (with or without the forged audit.json); "
                    f"{len(beyond)} of the exit-0 ones gain more than the product their verdict prints"
                    + (f" ({'; '.join(beyond)})" if beyond else ""))  # fmt: skip
    return "\n".join(rows)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
