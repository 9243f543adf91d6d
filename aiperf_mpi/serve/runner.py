"""``serve run BUNDLE --data … --out predictions.(npz|csv)``: one code path on one process or an MPI world.

Rank 0 checks the bundle (every file's size and sha256, :func:`aiperf_mpi.serve.bundle.open_bundle`) and the
input (its shape against the bundle's) and tells every rank; bad input is one line from rank 0 and exit 2 on
every rank.  Then, in order, each phase bounded in time or size:

1. **peak** — every rank multiplies large matrices at once for ``--peak-seconds`` (the benchmark's own probe,
   :func:`aiperf_mpi.train.peak.measure_peak`), summed: the machine's measured ceiling.
2. **batch sweep** — rank 0 times offline batches of 1, 2, 4, … ``--max-batch`` on its device; the fastest
   is the best batch (``--batch best`` serves with it).
3. **offline** — each rank reads its contiguous slice of the input (cut at whole batches,
   :func:`aiperf_mpi.serve.scenarios.shards`) and predicts it; rank 0 gathers the probabilities in input order
   and writes one file, the same values whatever the number of ranks.  Progress lines every
   ``--progress-interval`` seconds.
4. **single-stream** and **server** — on rank 0's device while the others wait (a latency is one device's):
   ``--queries`` queries one at a time, then Poisson arrivals at rates searched for the highest whose p99
   latency is within ``--p99-ms`` (``--server-trials`` trials).

Rank 0 logs each phase (:mod:`aiperf_mpi.serve.log`) and prints its figures.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np

from aiperf_mpi.errors import EXIT_USAGE
from aiperf_mpi.serve import PROG, ServeError, scenarios
from aiperf_mpi.serve.bundle import MANIFEST, forward_ops, input_spec, open_bundle
from aiperf_mpi.serve.inputs import Input, open_input
from aiperf_mpi.serve.log import MLLOG_KEYS, ServeLog
from aiperf_mpi.serve.predictions import predictions_digest, write_predictions
from aiperf_mpi.serve.world import join_world

SCENARIOS = ("sweep", "offline", "single-stream", "server")
POOL = 256
"""rank 0's images for the sweep and the latency scenarios (queries cycle through them)"""


class Progress:
    """Rank 0's progress lines during the offline pass, at most one per ``interval`` seconds."""

    def __init__(self, interval: float, total: int, ranks: int) -> None:
        self.interval, self.total, self.ranks = interval, total, ranks
        self.started = self.last = time.monotonic()

    def update(self, done: int, mine: int) -> None:
        now = time.monotonic()
        if self.interval <= 0 or now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.started
        print(
            f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {PROG}: offline: rank 0 served {done} of its "
            f"{mine} ({done / elapsed:.1f} samples/s; ≈{min(self.total, done * self.ranks)} of {self.total} "
            "on all ranks)",
            flush=True,
        )


def offline_pass(servable, data: Input, span: tuple[int, int], batch: int, progress: Progress | None) -> dict:
    """This rank's slice: read, predict in chunks of whole batches; its arrays and its times."""
    start, end = span
    chunk = batch * max(1, 2048 // batch)
    parts, member_parts, label_parts = [], [], []
    read_seconds = predict_seconds = 0.0
    for first in range(start, end, chunk):
        last = min(end, first + chunk)
        began = time.perf_counter()
        images, labels = data.read(first, last)
        read_seconds += time.perf_counter() - began
        began = time.perf_counter()
        members = servable.member_predictions(images, batch)
        predict_seconds += time.perf_counter() - began
        parts.append(combine_members(members))
        member_parts.append(np.stack([m.argmax(axis=1) for m in members]))
        if labels is not None:
            label_parts.append(labels)
        if progress is not None:
            progress.update(last - start, end - start)
    empty = np.zeros((0, servable.manifest["signature"]["outputs"][0]["classes"]), np.float32)
    return {
        "span": span,
        "probabilities": np.concatenate(parts) if parts else empty,
        "members": np.concatenate(member_parts, axis=1)
        if member_parts
        else np.zeros((len(servable.models), 0), np.int64),
        "labels": np.concatenate(label_parts) if label_parts else None,
        "read_seconds": read_seconds,
        "predict_seconds": predict_seconds,
    }


def combine_members(members: list[np.ndarray]) -> np.ndarray:
    from aiperf_mpi.serve.servable import combine

    return combine(members)


def measure_sweep(servable, pool: np.ndarray, largest: int, seconds: float) -> list[dict]:
    """Samples per second at each batch of :func:`scenarios.batch_candidates` (each timed ≈ ``seconds``)."""
    rows = []
    for batch in scenarios.batch_candidates(largest):
        images = np.resize(pool, (batch, *pool.shape[1:]))
        servable.predict(images, batch)  # warm-up: the first call of a shape allocates
        samples, began = 0, time.perf_counter()
        while True:
            servable.predict(images, batch)
            samples += batch
            elapsed = time.perf_counter() - began
            if elapsed >= seconds:
                break
        rows.append({"batch": batch, "samples": samples, "seconds": elapsed, "samples_per_second": samples / elapsed})
    return rows


def single_stream(servable, pool: np.ndarray, queries: int) -> list[float]:
    """Latencies of ``queries`` queries of one sample, each sent when the last returned."""
    latencies = []
    servable.predict(pool[:1], 1)
    for query in range(queries):
        began = time.perf_counter()
        servable.predict(pool[query % len(pool)][None], 1)
        latencies.append(time.perf_counter() - began)
    return latencies


def server_trial(servable, pool: np.ndarray, rate: float, queries: int, max_batch: int, seed: int) -> list[float]:
    """Latencies of ``queries`` queries arriving at a Poisson ``rate`` (:func:`scenarios.serve_queue`)."""

    def run_batch(first: int, end: int) -> None:
        servable.predict(pool[np.arange(first, end) % len(pool)], max_batch)

    return scenarios.serve_queue(
        scenarios.poisson_arrivals(rate, queries, seed), max_batch, run_batch, time.perf_counter, time.sleep
    )


def _checked_start(options: argparse.Namespace) -> dict:
    """Rank 0: the bundle and the input, checked; what every rank needs to start (or the one line)."""
    manifest = open_bundle(options.bundle)
    shape = tuple(input_spec(manifest)["shape"][1:])
    data = open_input(options.data, shape, manifest)
    from aiperf_mpi.serve.bundle import check_input_shape

    check_input_shape(manifest, (data.count, *data.shape), f"--data {options.data}")
    if data.count < 1:
        raise ServeError(f"--data {options.data}: no images to serve")
    if options.out.suffix not in (".npz", ".csv"):
        raise ServeError(f"--out {options.out}: give a .npz or a .csv file")
    if not options.out.parent.is_dir():
        raise ServeError(f"--out {options.out}: its directory {options.out.parent} does not exist")
    if options.log_dir.exists() and any(options.log_dir.iterdir()):
        raise ServeError(f"--log-dir {options.log_dir} is not empty (a serving run's log is never written over)")
    manifest_sha = hashlib.sha256((options.bundle / MANIFEST).read_bytes()).hexdigest()
    return {"manifest": manifest, "manifest_sha256": manifest_sha, "count": data.count, "labelled": data.labelled}


def serve(options: argparse.Namespace, world=None) -> int:
    """The whole serving run (module doc); returns the exit status of this rank.

    ``world``: the ranks that serve (a communicator of mpi4py's interface); by default the launcher's world or this
    one process (:func:`~aiperf_mpi.serve.world.join_world`).  The benchmark's ``--serve-at-end`` passes the
    communicator of its training ranks (:mod:`aiperf_mpi.serve.atend`): the same run, on the ranks of a job.
    """
    if world is None:
        try:
            world = join_world()
        except ServeError as exc:  # a launch of N tasks that came up as N worlds of one: every task says it
            print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT_USAGE
    rank, size = world.Get_rank(), world.Get_size()
    verdict: dict = {}
    try:
        checked_options(options)  # the same on every rank
        if rank == 0:
            verdict = _checked_start(options)
    except ServeError as exc:
        verdict = {"error": str(exc)}
    verdict = world.bcast(verdict, root=0)
    if "error" in verdict:
        if rank == 0:
            print(f"{PROG}: error: {' '.join(verdict['error'].split())}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _serve(options, world, verdict)
    except ServeError as exc:  # a rank's own input failed after the start (a bad image in its slice)
        print(f"{PROG}: error: rank {rank}: {' '.join(str(exc).split())}", file=sys.stderr)
        if size > 1:
            world.Abort(EXIT_USAGE)
        return EXIT_USAGE


def _serve(options: argparse.Namespace, world, verdict: dict) -> int:
    """The phases in order (module doc), on every rank; rank 0 logs each."""
    from aiperf_mpi.serve.servable import Servable

    rank, size = world.Get_rank(), world.Get_size()
    started = time.perf_counter()
    manifest = verdict["manifest"]
    servable = Servable(options.bundle, manifest=manifest if rank else None)
    data = open_input(options.data, tuple(input_spec(manifest)["shape"][1:]), manifest)
    chosen = set(SCENARIOS) if options.scenarios == "all" else set(options.scenarios.split(","))
    log = _started_log(options, verdict, size, chosen) if rank == 0 else None
    peak = _measured_peak(options, world, log)
    pool = data.read(0, min(POOL, data.count))[0] if rank == 0 else None
    batch = options.batch if options.batch != "best" else None
    if log and ("sweep" in chosen or batch is None):
        best = _swept(options, servable, pool, log)  # swept whenever asked, even with a batch given
        batch = batch or best
    batch = int(world.bcast(batch, root=0))
    _offline(options, world, servable, data, verdict, batch, peak, log)
    if log and "single-stream" in chosen:
        _single_stream(options, servable, pool, log)
    if log and "server" in chosen:
        _server(options, servable, pool, log)
    world.Barrier()
    if log:
        seconds = time.perf_counter() - started
        log.event("serve_stop", status="success", time_to_solution=seconds)
        from aiperf_mpi.serve.check import summary_of

        log.summary(summary_of(log.folder))
        log.close()
        print(f"{PROG}: time to solution {seconds:.1f} s; log in {options.log_dir} (serve_events.jsonl, mllog.log, "
              "summary.json)", flush=True)  # fmt: skip
    return 0


def _started_log(options: argparse.Namespace, verdict: dict, size: int, chosen: set[str]) -> ServeLog:
    """Rank 0: the serving log opened, its ``serve_start`` and first ``:::MLLOG`` lines written, the first line
    printed."""
    manifest = verdict["manifest"]
    forward = forward_ops(manifest)
    log = ServeLog(options.log_dir)
    members = [{"name": m["name"], "forward_ops_per_sample": m["forward_ops_per_sample"]} for m in manifest["members"]]
    log.event("serve_start", bundle=str(options.bundle), manifest_sha256=verdict["manifest_sha256"],
              servable=manifest["servable"]["name"], type=manifest["servable"]["type"], members=members,
              forward_ops_per_sample=forward, ranks=size, host=socket.gethostname(), data=options.data,
              samples=verdict["count"], batch=options.batch, scenarios=sorted(chosen),
              out=str(options.out))  # fmt: skip
    log.mllog("submission_benchmark", "aiperf_mpi.serve", servable=manifest["servable"]["name"])
    log.mllog("number_of_ranks", size)
    log.mllog("aiperf_forward_ops_per_sample", forward)
    print(f"{PROG}: {manifest['servable']['type']} {manifest['servable']['name']} ({len(manifest['members'])} "
          f"member(s), {forward:,} forward ops/sample) on {size} rank(s); {verdict['count']} samples of "
          f"{options.data}", flush=True)  # fmt: skip
    return log


def _measured_peak(options: argparse.Namespace, world, log: ServeLog | None) -> float | None:
    """Every rank's matrix-multiply peak at once, summed on rank 0 and logged (None elsewhere, or when not asked)."""
    if options.peak_seconds <= 0:
        return None
    from aiperf_mpi.results.machine import local_description
    from aiperf_mpi.train.peak import measure_peak

    world.Barrier()
    mine = measure_peak("fp32", options.peak_seconds)
    every = world.gather(mine["ops_per_second"], root=0)
    machines = world.gather(local_description(), root=0)  # the hardware the peak is held to (serve/reexecute.py)
    if not log:
        return None
    peak = sum(every)
    hosts = list({machine["host"]: machine for machine in machines}.values())
    log.event("peak", precision="fp32", per_rank=every, ops_per_second=peak, matrix_size=mine["matrix_size"],
              hosts=hosts, rank_hosts=[machine["host"] for machine in machines])  # fmt: skip
    log.mllog("aiperf_peak_ops_per_second", peak, precision="fp32")
    return peak


def _swept(options: argparse.Namespace, servable, pool: np.ndarray, log: ServeLog) -> int:
    """Rank 0: the batch sweep, logged and printed; its best batch."""
    rows = measure_sweep(servable, pool, options.max_batch, options.sweep_seconds)
    best = scenarios.best_batch(rows)
    log.event("batch_sweep", rows=rows, best=best)
    log.mllog("aiperf_best_batch", best, rows=len(rows))
    print(f"{PROG}: batch sweep: " + ", ".join(f"{r['batch']}: {r['samples_per_second']:.1f}" for r in rows)
          + f" samples/s; best batch {best}", flush=True)  # fmt: skip
    return best


def _offline(options: argparse.Namespace, world, servable, data: Input, verdict: dict, batch: int,
             peak: float | None, log: ServeLog | None) -> None:  # fmt: skip
    """Every rank predicts its slice; rank 0 gathers them in input order, writes the predictions and logs the
    figures (and the accuracy, for labelled input)."""
    rank, size = world.Get_rank(), world.Get_size()
    manifest = verdict["manifest"]
    servable.predict(np.zeros((1, *input_spec(manifest)["shape"][1:]), np.uint8), 1)  # traced before the clock
    world.Barrier()
    offline_began = time.perf_counter()
    spans = scenarios.shards(verdict["count"], size, batch)
    progress = Progress(options.progress_interval, verdict["count"], size) if rank == 0 else None
    parts = world.gather(offline_pass(servable, data, spans[rank], batch, progress), root=0)
    if not log:
        return
    offline_seconds = time.perf_counter() - offline_began
    probabilities = np.concatenate([p["probabilities"] for p in parts])
    members = np.concatenate([p["members"] for p in parts], axis=1)
    labels = np.concatenate([p["labels"] for p in parts]) if verdict["labelled"] else None
    write_predictions(options.out, probabilities, labels, members)
    for index, p in enumerate(parts):
        samples = p["span"][1] - p["span"][0]
        log.event("shard", rank=index, start=p["span"][0], end=p["span"][1], samples=samples,
                  read_seconds=p["read_seconds"], predict_seconds=p["predict_seconds"],
                  samples_per_second=samples / p["predict_seconds"] if p["predict_seconds"] else 0.0)  # fmt: skip
    figures = scenarios.offline_figures(len(probabilities), offline_seconds, forward_ops(manifest), peak)
    log.event("offline", batch=batch, **figures)
    log.mllog(MLLOG_KEYS["offline"][0], figures["samples_per_second"], scenario="Offline", batch=batch)
    log.mllog("aiperf_inference_ops_per_second", figures["ops_per_second"], peak_ratio=figures["peak_ratio"])
    classes = probabilities.argmax(axis=1)
    log.event("predictions", file=os.path.relpath(options.out, options.log_dir),  # the run moves as one folder
              rows=len(probabilities), values_sha256=predictions_digest(probabilities, classes))  # fmt: skip
    ratio = f", {figures['peak_ratio']:.3%} of the measured peak" if figures["peak_ratio"] else ""
    print(f"{PROG}: offline: {figures['samples']} samples in {offline_seconds:.2f} s, "
          f"{figures['samples_per_second']:.1f} samples/s ({figures['samples_per_second'] / size:.1f} per rank), "
          f"{figures['ops_per_second'] / 1e9:.3f} G inference ops/s{ratio}; predictions in {options.out}",
          flush=True)  # fmt: skip
    if labels is not None:
        _accuracy(manifest, classes, members, labels, log)


def _accuracy(manifest: dict, classes: np.ndarray, members: np.ndarray, labels: np.ndarray, log: ServeLog) -> None:
    """Rank 0: the ensemble's accuracy and each member's over the labelled input, logged and printed."""
    correct = int((classes == labels).sum())
    member_correct = [int((row == labels).sum()) for row in members]
    log.event("accuracy", samples=len(labels), correct=correct, member_correct=member_correct,
              members=[m["name"] for m in manifest["members"]])  # fmt: skip
    log.mllog(MLLOG_KEYS_ACCURACY, correct / len(labels), members=[c / len(labels) for c in member_correct])
    each = ", ".join(f"{m['name']} {c / len(labels):.4f}"
                     for m, c in zip(manifest["members"], member_correct, strict=True))  # fmt: skip
    print(f"{PROG}: accuracy: {correct / len(labels):.4f} ({each})", flush=True)


def _single_stream(options: argparse.Namespace, servable, pool: np.ndarray, log: ServeLog) -> None:
    """Rank 0: ``--queries`` queries one at a time on its device, logged and printed."""
    latencies = single_stream(servable, pool, options.queries)
    summary = scenarios.latency_summary(latencies)
    log.event("single_stream", latencies=latencies, **summary)
    log.mllog(MLLOG_KEYS["single_stream"][0], int(summary["p90"] * 1e9), scenario="SingleStream")
    print(f"{PROG}: single-stream: p50 {summary['p50'] * 1e3:.2f} ms, p90 {summary['p90'] * 1e3:.2f} ms "
          f"over {len(latencies)} queries", flush=True)  # fmt: skip


def _server(options: argparse.Namespace, servable, pool: np.ndarray, log: ServeLog) -> None:
    """Rank 0: Poisson arrivals at rates searched for the highest whose p99 is within ``--p99-ms``, logged and
    printed."""
    bound = options.p99_ms / 1e3
    trials_latencies: list[list[float]] = []

    def p99_at(rate: float) -> dict:
        latencies = server_trial(servable, pool, rate,
                                 scenarios.trial_queries(rate, options.queries, options.trial_seconds),
                                 options.max_batch, seed=len(trials_latencies))  # fmt: skip
        trials_latencies.append(latencies)
        return scenarios.latency_summary(latencies)

    start_rate = options.start_rate or max(
        1.0, 0.5 / max(1e-6, scenarios.percentile(single_stream(servable, pool, 16), 50))
    )
    best_rate, trials = scenarios.search_rate(p99_at, bound, start_rate, options.server_trials)
    log.event("server", bound_seconds=bound, best_rate=best_rate,
              trials=[{"rate": t.rate, "met": t.met, "latencies": lat, **t.summary}
                      for t, lat in zip(trials, trials_latencies, strict=True)])  # fmt: skip
    log.mllog(MLLOG_KEYS["server"][0], best_rate, scenario="Server", p99_bound_ms=options.p99_ms)
    tried = "; ".join(f"{t.rate:.1f}/s p99 {t.summary['p99'] * 1e3:.1f} ms{'' if t.met else ' (missed)'}"
                      for t in trials)  # fmt: skip
    verdict = (f"highest rate within p99 ≤ {options.p99_ms:g} ms: {best_rate:.1f} queries/s" if best_rate
               else f"no rate tried met p99 ≤ {options.p99_ms:g} ms")  # fmt: skip
    print(f"{PROG}: server: {tried}; {verdict}", flush=True)


MLLOG_KEYS_ACCURACY = "aiperf_ensemble_accuracy"


def default_log_dir(out: Path) -> Path:
    return out.with_name(out.stem + ".serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", type=Path, help="the bundle's directory (serve publish wrote it)")
    parser.add_argument(
        "--data",
        required=True,
        help="digits[:train|all], synthetic[:N], FILE.h5[:split], a directory of images or of TFRecord shards "
        "(DIR[:split]), or run (the validation "
        "split the bundle's run trained on)",
    )
    parser.add_argument("--out", type=Path, required=True, help="predictions file: .npz or .csv")
    parser.add_argument("--log-dir", type=Path, default=None, help="the run's log (default: OUT's name + .serve/)")
    parser.add_argument("--batch", default="32", help="offline batch size, or 'best' (the sweep's; default 32)")
    parser.add_argument(
        "--scenarios",
        default="all",
        help=f"comma-separated among {','.join(SCENARIOS)} (default all; offline always runs)",
    )
    parser.add_argument("--max-batch", type=int, default=128, help="the sweep's and the server's largest batch")
    parser.add_argument("--sweep-seconds", type=float, default=0.5, help="time per batch size in the sweep")
    parser.add_argument("--queries", type=int, default=200, help="queries of single-stream and of each server trial")
    parser.add_argument(
        "--trial-seconds",
        type=float,
        default=10.0,
        help="a server trial's arrivals span at most this long (at least 20 queries)",
    )
    parser.add_argument("--p99-ms", type=float, default=100.0, help="the server's p99 latency bound (ms)")
    parser.add_argument("--server-trials", type=int, default=6, help="the rate search's trials")
    parser.add_argument("--start-rate", type=float, default=0.0, help="the first rate tried (default: from latency)")
    parser.add_argument("--peak-seconds", type=float, default=2.0, help="the peak probe's time (0: none)")
    parser.add_argument("--progress-interval", type=float, default=10.0, help="seconds between progress lines")


def checked_options(options: argparse.Namespace) -> argparse.Namespace:
    """Option values checked (ServeError: one line); the log directory's default filled in."""
    if options.batch != "best" and (not str(options.batch).isdigit() or int(options.batch) < 1):
        raise ServeError(f"--batch {options.batch}: give a positive number or 'best'")
    options.batch = options.batch if options.batch == "best" else int(options.batch)
    unknown = [] if options.scenarios == "all" else sorted(set(options.scenarios.split(",")) - set(SCENARIOS))
    if unknown:
        raise ServeError(f"--scenarios: unknown {', '.join(unknown)} (known: {', '.join(SCENARIOS)}, all)")
    for name in ("max_batch", "queries", "server_trials"):
        if getattr(options, name) < 1:
            raise ServeError(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("p99_ms", "sweep_seconds", "trial_seconds"):
        if not getattr(options, name) > 0:
            raise ServeError(f"--{name.replace('_', '-')} must be positive")
    options.log_dir = options.log_dir or default_log_dir(options.out)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return options
