"""What a verdict rests on: the claims verify cannot hold to anything outside the run, each with what a lie could buy.

Verify holds every rate to the hardware table's bound for the hardware the
``system`` event names (``analysis/verify/hardware.py``), and every count to the
split tables.  What it cannot check is the naming itself: a log that claims a
bigger processor, more hosts, more logical processors or a faster precision
raises its own bound, and a file-read set relabelled ImageNet keeps its
accuracy.  TOP500 and MLPerf take such claims on a system description that
others can check; what they never do is print "valid" over one without saying
so.  So each verdict lists them (issue 45), with the largest factor by which a
false claim could have raised the score *within verify's bounds*, measured
against the hardware this verify runs on (:func:`aiperf_mpi.results.machine.local_description`),
and what would check it (the audit, the re-evaluation).  The factors are the
hardware table's ratios: an honest claim of a bigger machine gets the same
factor, which is the point: the score then rests on that claim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from aiperf_mpi.results.hardware import host_bound
from aiperf_mpi.results.inventory import group_ranks_by_host, training_ranks_by_host
from aiperf_mpi.results.logmodel import RunModel
from aiperf_mpi.results.precisions import logged_precision
from analysis.verify.fields import claimed_threads, rank_threads

CLAIM_NAMES = ("hardware named", "host list", "ranks of a host", "precision", "threads a rank", "timings",
               "kernel sizes", "audit record", "the data", "best accuracy", "energy readings")
"""every claim a verdict can list, in its order: the table of every logged field (:mod:`analysis.verify.fields`)
names a trusted field by one of these"""
FILE_READ_SETS = ("imagenet", "cifar10", "hdf5")
"""data sets read from files the reviewer does not hold (digits and synthetic are built in and counted here)"""


@dataclass(frozen=True)
class TrustedClaim:
    """One claim the verdict rests on."""

    name: str
    said: str
    """what the log claims, in words"""
    factor: float | None
    """the most a false claim could have raised the score within verify's bounds (None: no bound verify holds)"""
    check: str
    """what checks it, and whether that was done"""

    def line(self) -> str:
        bound = "no bound verify can hold" if self.factor is None else f"up to ×{_fmt(self.factor)}"
        return f"trusted: {self.name}: {self.said}; {bound}; {self.check}"

    def to_dict(self) -> dict:
        return {"claim": self.name, "said": self.said, "factor": self.factor, "check": self.check}


def _fmt(factor: float) -> str:
    return f"{factor:.3g}" if factor < 1000 else f"{factor:,.0f}"


def _kind(host: Mapping) -> str:
    devices = host.get("accelerators") if isinstance(host.get("accelerators"), list) else []
    if devices:
        names = sorted(map(str, devices))
        return " + ".join(f"{names.count(name)} × {name}" for name in dict.fromkeys(names))
    return f"{host.get('cpu')} ({host.get('cores')} logical processors, no accelerator)"


def trusted_claims(model: RunModel, here: Mapping, audited: bool, reevaluated: bool,
                   score: float | None, best_accuracy: float | None = None,
                   audit_ratio: float | None = None) -> list[TrustedClaim]:  # fmt: skip
    """The claims of ``model``'s log that verify takes on trust (see the module), worst segment first.

    ``here``: this verifier's machine (``local_description()``); ``audited``/``reevaluated``: whether a passing
    audit record of this log was found and the best model re-evaluated in this verify; ``score``: the run's score
    in operations per second (None: none), for the headroom its clocks had under the table's bound;
    ``best_accuracy``: the regulated score's accuracy as recomputed (None: none); ``audit_ratio``: the passing
    audit's highest logged rate over its measured ceiling (:func:`timings_claim`).
    """
    here_host = {**here, "host": here.get("host", "this machine")}
    mine = host_bound(here_host, 1, "fp32").ops_per_second
    audit = ("audited on the claimed kind by the reviewer's record (passed)" if audited else
             "not audited (python -m analysis.audit RUN_DIR --sample K --record RECORD; verify --audit RECORD)")
    claims: list[TrustedClaim] = []
    hardware: dict[str, tuple[float | None, str]] = {}
    total_bound, most_hosts, precisions = 0.0, 0, set()
    busiest: tuple[int, int, str] = (0, 0, "")
    """(the most training ranks one host lists in a segment, its groups, the host)"""
    threads: dict[int, int] = {}
    """each count of threads a CPU rank's probe claims → the most it is counted as (its share of its host)"""
    for segment in model.segment_records:
        system, layout = segment.system, segment.layout
        if not isinstance(system, Mapping) or not isinstance(layout, Mapping):
            continue
        precision = str(logged_precision(segment.config if isinstance(segment.config, Mapping) else {}))
        precisions.add(precision)
        hosts = [h for h in system.get("hosts") or [] if isinstance(h, Mapping)]
        most_hosts = max(most_hosts, len(hosts))
        training = training_ranks_by_host(layout, system)
        by_group = group_ranks_by_host(layout, system)
        for name, ranks in training.items():
            groups = sum(1 for counts in by_group.values() if counts.get(name))
            busiest = max(busiest, (ranks, groups, name))
        segment_bound = 0.0
        for host in hosts:
            ranks = training.get(str(host.get("host")), 0)
            bound = host_bound(host, max(ranks, 1), precision).ops_per_second
            if ranks and bound is not None:
                segment_bound += bound
                at_fp32 = host_bound(host, max(ranks, 1), "fp32").ops_per_second
                factor = at_fp32 / mine if at_fp32 and mine else None
                kind = _kind(host)
                if kind not in hardware or (factor or 0) > (hardware[kind][0] or 0):
                    hardware[kind] = (factor, precision)
        total_bound = max(total_bound, segment_bound)
        by_name = {str(h.get("host")): h for h in hosts}
        for peak in segment.peaks:
            group = peak.get("group")
            on = by_group.get(group, {}) if isinstance(group, int) else {}
            if any(by_name.get(name, {}).get("accelerators") for name in on):
                continue  # a GPU rank: the audit times it on its accelerator, whatever its CPU threads
            claimed, counted = claimed_threads(peak), rank_threads(system, layout, peak, group)
            if claimed is not None and counted is not None:
                threads[claimed] = max(threads.get(claimed, 0), counted)
    where = _kind(here_host)
    for kind, (factor, _) in sorted(hardware.items(), key=lambda item: -(item[1][0] or 0)):
        claims.append(TrustedClaim("hardware named", f"{kind} claimed", factor,
                                   f"the table's fp32 bound over this verifier's {where}; {audit}"))  # fmt: skip
    if most_hosts > 1:
        claims.append(TrustedClaim("host list", f"{most_hosts} hosts listed", float(most_hosts),
                                   "a made-up host of a listed kind adds its whole bound; no file proves a host "
                                   "existed: the site's system description and the audit on that kind"))  # fmt: skip
    if busiest[0] > 1:
        ranks, groups, name = busiest
        claims.append(TrustedClaim("ranks of a host", f"{ranks} training ranks in {groups} group(s) on one host "
                                   f"({name}, the most)", float(ranks),
                                   "a made-up group on a listed host adds its claimed work within the host's bound, "
                                   "so up to × its ranks (issue 52: eight phantom one-rank groups on one 2-core host "
                                   "bought ×4.09), as long as the ranks that ran were as busy as the ones claimed (on "
                                   "accelerators, p made-up ranks beside n that ran at a share h of their bound buy "
                                   "1 + p/(n·h)); no file proves a rank ran: the audit times a rank beside as many "
                                   "copies as its host held, so phantom ranks slow its ceiling"))  # fmt: skip
    for precision in sorted(precisions - {"fp32"}):
        ratios = []
        for segment in model.segment_records:
            for host in (segment.system or {}).get("hosts") or []:
                if isinstance(host, Mapping):
                    low = host_bound(host, 1, "fp32").ops_per_second
                    high = host_bound(host, 1, precision).ops_per_second
                    if low and high:
                        ratios.append(high / low)
        claims.append(TrustedClaim("precision", f"{precision} claimed", max(ratios, default=None),
                                   f"the table's {precision} bound over its fp32 one; {audit}"))  # fmt: skip
    if threads:
        said = ", ".join(f"{claimed}" + (f" (counted as {counted})" if counted < claimed else "")
                         for claimed, counted in sorted(threads.items()))  # fmt: skip
        most = float(max(threads.values()))
        claims.append(TrustedClaim("threads a rank", f"{said} TensorFlow thread(s) a rank (the probes'), each counted "
                                   "as at most its share of its host's logical processors", most,
                                   "verify's bounds do not read it; the audit times a rank with the threads counted, "
                                   "so a claim above what ran raises the audit's ceiling by at most this factor (a "
                                   "rank's rate grows at most linearly with its threads)"))  # fmt: skip
    if score and total_bound and math.isfinite(score):
        claims.append(timings_claim(score, total_bound, audited, audit_ratio))
    kernels = kernel_claim(model, audited)
    if kernels is not None:
        claims.append(kernels)
    if audited:
        claims.append(TrustedClaim("audit record", "the record named by --audit: an audit of this log at the "
                                   "default tolerance, passed", None,
                                   "the reviewer's own file (verify counts no record it finds in the run directory): "
                                   "a record the reviewer did not make is the maker's word, and buys what the timings "
                                   "line says"))  # fmt: skip
    dataset = str((model.config or {}).get("dataset", "")) if isinstance(model.config, Mapping) else ""
    if dataset in FILE_READ_SETS:
        claims.append(TrustedClaim("the data", f"which images the {dataset} files hold", None,
                                   "the accuracy, and so the regulated score's −ln E, rests on it; "
                                   + ("re-evaluated on the reviewer's data in this verify" if reevaluated else
                                      "not re-evaluated: python -m analysis.verify RUN_DIR --reevaluate --data-path "
                                      "YOUR_COPY")))  # fmt: skip
    claims += accuracy_claims(model, best_accuracy, reevaluated)
    claims += energy_claims(model)
    return claims


def timings_claim(score: float, bound: float, audited: bool, ratio: float | None) -> TrustedClaim:
    """Every epoch's clock (issue 52, item 3): its factor is the claimed rate over the highest rate the evidence
    supports, what a squeeze already taken bought, not the headroom a further one has left.

    The only evidence of a rate that the log does not write is the reviewer's audit: each sampled task timed on
    the claimed kind, its fastest steps the ceiling (``analysis/audit.py``), so the factor is the audit's highest
    logged rate over its ceiling (at least 1: a rate below what the reviewer measured bought nothing).  Without
    one nothing supports any rate: the hardware table bounds the score from above only, so a squeeze of every
    clock buys whatever factor the true rate lies below the claim, and no file shows it (a squeeze of ×6.13 had
    been printed as the ×1.22 of headroom left): no bound verify can hold, and the line says the headroom."""
    headroom = f"the table's bound lies ×{_fmt(bound / score)} above it"
    if audited and ratio is not None:
        return TrustedClaim("timings", f"every epoch's clock (score {score / 1e9:,.4g} GOPS; {headroom})",
                            max(1.0, ratio), f"the reviewer's audit measured the sampled tasks' ceilings on the "
                            f"claimed kind, and their logged rates reach ×{ratio:.3g} of them: the claimed rate over "
                            "the highest the evidence supports; a run that ran below its ceiling could have been "
                            "squeezed up to it unseen, which no timing can show (the audit's tolerance bounds the "
                            "rest), and a task the fresh draw missed buys at most its share of the work")  # fmt: skip
    why = ("the reviewer's audit record names no ratio of a logged rate to its ceiling" if audited else
           "not audited: python -m analysis.audit RUN_DIR --sample K --record RECORD; verify --audit RECORD")
    return TrustedClaim("timings", f"every epoch's clock (score {score / 1e9:,.4g} GOPS; {headroom})", None,
                        "nothing but the clocks supports any rate: a squeeze of every clock buys what it squeezed, "
                        f"up to the table's bound, and no file shows the true rate; {why}")  # fmt: skip


def kernel_claim(model: RunModel, audited: bool) -> TrustedClaim | None:
    """The tuner's kernel sizes (issue 52, item 2: the search's free choices): any size of the tuner's space passes
    every rule, so a graph logged with larger kernels than it trained counts more operations in the same clocks
    (every kernel set to 7 but the best's bought ×1.83, under no named claim).  Only the tunable convolutions scale,
    by the square of the size, so a model's operations are at most (k / the smallest)² its count at the smallest:
    the factor is that at the largest size a proposal logged (the size every epoch of its task is recounted at,
    whether the task ended, failed or was lost).  None when every proposal was at the smallest."""
    from aiperf_mpi.graph.model import KERNEL_SIZES

    smallest = min(KERNEL_SIZES)
    counted = model.proposed_kernels  # every proposal's, the size the recount applies to all its epochs
    larger = {k: n for k, n in counted.items() if k in KERNEL_SIZES and k > smallest}
    if not larger:
        return None
    largest = max(larger)
    return TrustedClaim("kernel sizes", f"{sum(larger.values())} of {sum(counted.values())} proposed models at a "
                        f"kernel size above {smallest} (the largest {largest})", (largest / smallest) ** 2,
                        "the tuner's free choice, within its space, so no rule fails it: a graph logged with larger "
                        "kernels than it trained counts up to (k/3)² the operations of its tunable convolutions in "
                        "the same clocks; a kept weights file shows its model's shapes (the weights row), and "
                        + ("the audit re-timed the sampled graphs as logged (audited)" if audited else
                           "the audit re-times a sampled graph as logged (not audited)"))  # fmt: skip


def accuracy_claims(model: RunModel, best_accuracy: float | None, reevaluated: bool) -> list[TrustedClaim]:
    """The best accuracy (issue 52, item 2): the regulated score's −ln E rests on one logged count, and on the best
    model never having trained on the validation split, which no file can show (a re-evaluation recounts what the
    weights predict, not what they were trained on).  So what the claim could have bought is its −ln E over a model
    that learned nothing, at chance (1 − 1/classes): a count raised in the log, or a model fine-tuned on the
    validation split, buys up to that; a re-evaluation bounds the first (its row holds the count to its recount
    within ``MAX_REGULATED_LIFT``), never the second.  The regulated score only: the score counts operations."""
    from aiperf_mpi.results.datasets import image_shape
    from aiperf_mpi.results.score import ERROR_FLOOR

    if best_accuracy is None or not math.isfinite(best_accuracy) or not 0 <= best_accuracy <= 1:
        return []
    config = model.config if isinstance(model.config, Mapping) else {}
    shape = image_shape(config.get("dataset"), config.get("image_size"))
    classes = shape[3] if shape else None
    for segment in model.segment_records if classes is None else ():
        counted = (segment.data or {}).get("classes") if isinstance(segment.data, Mapping) else None
        classes = counted if isinstance(counted, int) and not isinstance(counted, bool) else classes
    claimed = -math.log(max(1.0 - best_accuracy, ERROR_FLOOR))
    chance = -math.log(1.0 - 1.0 / classes) if isinstance(classes, int) and classes > 1 else None
    factor = max(claimed / chance, 1.0) if chance else None
    count = ("re-evaluated in this verify: the count is its weights' (within the re-evaluation's tolerance)"
             if reevaluated else "not re-evaluated: the count is the log's alone (python -m analysis.verify RUN_DIR "
             "--reevaluate)")  # fmt: skip
    return [TrustedClaim("best accuracy", f"{best_accuracy:.4f}, the regulated score's −ln E = {claimed:.3g} (the "
                         "regulated score only)", factor,
                         f"{count}; that the best model never trained on the validation split no file can show: a "
                         "model fine-tuned on it passes the re-evaluation. The factor is its −ln E over a model at "
                         f"chance ({'1 − 1/' + str(classes) if chance else 'the classes are not recorded'}); it "
                         "assumes the honest model did at least as well as chance: over one below it, what the "
                         "claim bought has no bound")]


def energy_claims(model: RunModel) -> list[TrustedClaim]:
    """The nodes' energy readings (issue 53): no file shows they are the meters'.  A reading lower than the truth
    raises operations per joule, never the score; verify holds each node's mean power between the power table's
    floor and bound for its counted domains (``energy``), not to what it drew: the truth could have been up to the
    bound, so the factor is the bound over the measured mean power."""
    from aiperf_mpi.results.energy import lie_factor

    ledger = model.energy
    windows = [max(segment.end - segment.start, 0.0) for segment in model.segment_records]
    record = ledger.figures(windows, 0.0, None)
    if not record.get("measured"):
        return []
    return [TrustedClaim("energy readings", f"{record['watts']:,.4g} W mean over {record['nodes']} node(s) "
                         f"({', '.join(record['covers'])})", lie_factor(record, ledger.bound_watts()),
                         "the nodes' meters as the run logged them; held to physics (`energy`: the power table's "
                         "floor and bound, counters that only rise), not to what the nodes drew: a lower reading "
                         "raises operations per joule (never the score) by up to this factor, the table's bound for "
                         "the read domains over the measured power")]  # fmt: skip
