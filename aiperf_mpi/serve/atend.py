"""``python -m aiperf_mpi --serve-at-end [K]``: the run's best K models served over its validation split, in the job.

After the run's end on rank 0 — the score on disk, then the report and the best model's export — and only after a
run that ended normally, the job goes on for a bounded while:

1. **rank 0 publishes** the bundle of the run's K best models (``python -m aiperf_mpi.serve publish RUN_DIR
   RUN_DIR/serve/segment-N/bundle --top K`` in a child process, as the export runs: a timeout can stop it, and
   its TensorFlow, with no GPU visible, neither stays in rank 0's memory nor takes a training rank's device);
2. **every training rank of every group serves it** — the same ``serve run`` code as ``mpirun -n N python -m
   aiperf_mpi.serve run BUNDLE --data run --scenarios offline`` (:func:`aiperf_mpi.serve.runner.serve`), on a
   communicator of all the training ranks.  Why one world of every group's ranks rather than each group serving
   a share of its own: the runner then cuts the samples exactly as a launcher's ``N`` ranks cut them (contiguous
   whole batches, :func:`aiperf_mpi.serve.scenarios.shards`), so the predictions are the bit-identical file a
   one-process run writes, and the reviewer's check (``python -m aiperf_mpi.serve check``) recounts the in-job
   log unchanged; a per-group cut would be a second layout of the samples that no check knows, for no gain (a
   group is only a set of ranks to an inference pass: no all-reduce joins them).  Each rank serves on the device
   it trained on; rank 0 (no device) and the relays wait;
3. **rank 0 checks and records**: it runs the reviewer's check on the serving log and writes ``RUN_DIR/serve.json``
   (the figures, the check's verdict, where the bundle and the log are) and one line of figures, then makes the
   report again, whose section "Serving at the end" reads ``serve.json`` (the report was first made before
   serving, so a serving that fails or outlives the deadline cannot cost it).

The inference figures live in their own files — the serving run's event log ``serve_events.jsonl``, its
``:::MLLOG`` lines ``mllog.log`` and ``summary.json`` under ``RUN_DIR/serve/segment-N/log/``, and
``RUN_DIR/serve.json`` — beside the score, never in it: ``events.jsonl``, ``mllog.log`` and ``score.json`` of the
run are closed before serving begins and are not touched again.

Bounded: everything here runs inside rank 0's end deadline (``--end-deadline``, :mod:`aiperf_mpi.job.deadlines`),
whose watchdog ends the job (the score on disk) if serving outlives it; the publish's timeout is what is left of
it less :data:`END_MARGIN`, and serving is skipped with one line when less than :data:`LEAST_SECONDS` remain.
A failure costs the serving, never the score or the log: a publish that fails or times out is one warning line
(the job still exits 0); a rank that fails while serving says so in one line and ends the job (its peers would
otherwise wait in the runner's collectives until the deadline), the score already on disk.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiperf_mpi.errors import EXIT_FATAL, EXIT_TERMINATED
from aiperf_mpi.job.deadlines import THE_END
from aiperf_mpi.job.session import ServingAtEnd
from aiperf_mpi.results.child import run_child
from aiperf_mpi.serve import PROG, ServeError

if TYPE_CHECKING:
    from aiperf_mpi.serve.reexecute import Reexecution

PROGRAM = "aiperf_mpi"
SERVE_DIR = "serve"
RECORD_FILE = "serve.json"
RECORD_FORMAT = "aiperf_mpi.serve-at-end/1"
END_MARGIN = 30.0
"""seconds of the end deadline kept for what follows serving: the agreement and MPI's end"""
LEAST_SECONDS = 20.0
"""serving is not begun with less of the end deadline left than this (after the margin)"""
UNBOUNDED = 3600.0
"""the publish's timeout where no watchdog bounds the end (an in-process caller)"""
OUTCOME_DONE = "done"
SERVED_DATA = ("digits", "hdf5")
"""the data sets whose validation split ``serve run --data run`` reads (:func:`aiperf_mpi.serve.inputs.run_data`)"""
VERDICT = ("check", "problems")
"""``serve.json``'s verdict of the check run at the end: a reviewer's check runs it again rather than compare it"""


@dataclass(frozen=True)
class ServePaths:
    """Where one segment's serving writes, under the run directory (a resumed segment gets its own folder)."""

    run_dir: Path
    segment: int

    @property
    def folder(self) -> Path:
        return self.run_dir / SERVE_DIR / f"segment-{self.segment}"

    @property
    def bundle(self) -> Path:
        return self.folder / "bundle"

    @property
    def log_dir(self) -> Path:
        return self.folder / "log"

    @property
    def predictions(self) -> Path:
        return self.log_dir / "predictions.npz"

    @property
    def record(self) -> Path:
        return self.run_dir / RECORD_FILE


# --------------------------------------------------------------------------- pure: what to do, what to write


def why_not_serve(outcome: str | None, rehearse: bool, dataset: str) -> str:
    """Why this run's end serves nothing ('' when it serves): the same runs the export skips."""
    if rehearse:
        return "a rehearsal trains no model (--rehearse)"
    if dataset == "synthetic":
        return "synthetic data has no accuracy to choose the best models by"
    if dataset not in SERVED_DATA:
        return (f"serving at the end reads {' and '.join(SERVED_DATA)} data, not {dataset}: publish and serve it "
                "afterwards (python -m aiperf_mpi.serve publish, then run … --data)")  # fmt: skip
    if outcome != OUTCOME_DONE:
        return f"the run did not end normally ({outcome}): no time is left to serve"
    return ""


def time_left(remaining: float | None) -> float:
    """Seconds serving may take of what is left of the end deadline (``remaining``; None: unbounded)."""
    return UNBOUNDED if remaining is None else remaining - END_MARGIN


def serve_arguments(paths: ServePaths, data: str, batch: int, progress_interval: float) -> list[str]:
    """The ``serve run`` command line the training ranks run: ``data`` (the run's validation split), offline only (the
    figures of a whole pass; the latency scenarios measure one device, which the standalone tool does), no peak
    probe (the run probed each group's at start-up: the ``peak`` events of its log)."""
    return [str(paths.bundle), "--data", data, "--out", str(paths.predictions), "--log-dir", str(paths.log_dir),
            "--scenarios", "offline", "--batch", str(batch), "--peak-seconds", "0",
            "--progress-interval", f"{progress_interval:g}"]  # fmt: skip


def serve_options(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as ``python -m aiperf_mpi.serve run`` parses it (the same arguments, the same defaults)."""
    from aiperf_mpi.serve.runner import add_arguments

    parser = argparse.ArgumentParser(prog=f"{PROGRAM} --serve-at-end")
    add_arguments(parser)
    return parser.parse_args(argv)


def serve_record(summary: dict, problems: list[str], paths: ServePaths, top: int, groups: int,
                 publish_seconds: float) -> dict:  # fmt: skip
    """``serve.json``: the in-job serving's figures, from the serving log's ``summary.json``, and the check's verdict.

    Inference figures only: nothing of it is part of the score (``score.json``), and nothing of the score is
    repeated here.
    """
    offline = summary["offline"]
    served = summary.get("time_to_solution")
    record = {
        "format": RECORD_FORMAT,
        "note": "inference figures of the run's published models, served at the run's end; not part of the score",
        "segment": paths.segment,
        "top": top,
        "servable": summary["servable"],
        "type": summary["type"],
        "bundle": paths.bundle.relative_to(paths.run_dir).as_posix(),
        "log_dir": paths.log_dir.relative_to(paths.run_dir).as_posix(),
        "check": "PASS" if not problems else "FAIL",
        "problems": problems,
        "groups": groups,
        "ranks": summary["ranks"],
        "data": summary["data"],
        "samples": summary["samples"],
        "batch": offline["batch"],
        "forward_ops_per_sample": summary["forward_ops_per_sample"],
        "samples_per_second": offline["samples_per_second"],
        "samples_per_second_per_rank": summary["samples_per_second_per_rank"],
        "inference_ops_per_second": offline["ops_per_second"],
        "offline_seconds": offline["seconds"],
        "publish_seconds": publish_seconds,
        "serve_seconds": served,
        "time_to_solution": publish_seconds + served if served is not None else None,
    }
    if "accuracy" in summary:
        record["accuracy"] = summary["accuracy"]
    return record


def figures_line(record: dict, run_dir: Path) -> str:
    """The one line rank 0 prints of the in-job serving's figures."""
    per_rank = record["samples_per_second_per_rank"]
    accuracy = record.get("accuracy")
    shown = (f"accuracy {accuracy['ensemble']:.4f} (members "
             + ", ".join(f"{name} {value:.4f}" for name, value in accuracy["members"].items()) + "); "
             if accuracy else "")  # fmt: skip
    check = "check PASS" if record["check"] == "PASS" else f"check FAIL ({len(record['problems'])} problem(s))"
    return (f"{PROGRAM}: served at the end: {record['type']} of {record['top']} on {record['ranks']} rank(s) of "
            f"{record['groups']} group(s), {record['samples']} samples of {record['data']}: "
            f"{record['samples_per_second']:.1f} samples/s ({min(per_rank):.1f}–{max(per_rank):.1f} per rank), "
            f"{record['inference_ops_per_second'] / 1e9:.3f} G inference ops/s; {shown}time to solution "
            f"{record['time_to_solution']:.1f} s (publish {record['publish_seconds']:.1f} s); {check}; in "
            f"{run_dir / RECORD_FILE}, beside the score, never in it")  # fmt: skip


# --------------------------------------------------------------------------- rank 0: publish, check, record


def publish_in_child(run_dir: Path, bundle: Path, top: int, timeout: float) -> str:
    """``python -m aiperf_mpi.serve publish RUN_DIR BUNDLE --top K`` in a child: '' when written, else why not."""
    done = run_child(PROG, ["publish", str(run_dir), str(bundle), "--top", str(top)], timeout=max(1.0, timeout),
                     no_accelerator=True)  # fmt: skip
    if done.returncode is None:
        return f"publishing took longer than the {timeout:.0f} s left of --end-deadline and was stopped"
    return done.reason(PROG) if done.returncode != 0 else ""


def warn(text: str) -> None:
    print(f"{PROGRAM}: warning: no serving at the end: {' '.join(text.split())[:400]}", file=sys.stderr, flush=True)


def plan_on_master(end: ServingAtEnd, top: int) -> dict:
    """Rank 0: whether to serve, and what (the bundle published); ``{"skip": why}`` otherwise."""
    config = end.config
    why = why_not_serve(end.outcome, config.rehearse, config.dataset)
    paths = ServePaths(end.run_dir, end.segment)
    remaining = end.watchdog.remaining() if end.watchdog is not None else None
    if not why and time_left(remaining) < LEAST_SECONDS:
        why = f"only {remaining:.0f} s of --end-deadline are left"
    if why:
        warn(why)
        return {"skip": why}
    if end.watchdog is not None:
        end.watchdog.rename(THE_END, "serving at the end (--serve-at-end) outlived --end-deadline; the score and "
                                     "the log are on disk (score.json, events.jsonl)")  # fmt: skip
    began = time.monotonic()
    paths.folder.mkdir(parents=True, exist_ok=True)
    why = publish_in_child(end.run_dir, paths.bundle, top, time_left(remaining))
    published = time.monotonic() - began
    remaining = end.watchdog.remaining() if end.watchdog is not None else None
    if not why and time_left(remaining) < LEAST_SECONDS:
        why = f"only {remaining:.0f} s of --end-deadline are left after publishing"
    if why:
        warn(why)
        return {"skip": why}
    try:
        data = validation_data(paths.bundle)
    except (OSError, ValueError, ServeError) as exc:
        warn(str(exc))
        return {"skip": str(exc)}
    paths.log_dir.mkdir()
    print(f"{PROGRAM}: serving at the end: published the best {top} in {paths.bundle} ({published:.1f} s); "
          f"serving {data} on every training rank", flush=True)  # fmt: skip
    return {"argv": serve_arguments(paths, data, SERVE_BATCH, config.progress_interval), "publish_seconds": published}


def validation_data(bundle: Path) -> str:
    """The ``--data`` of the run's validation split, as ``serve run --data run`` resolves it from the manifest
    (:func:`aiperf_mpi.serve.inputs.run_data`), named so that the serving log says which data it served."""
    from aiperf_mpi.serve.bundle import MANIFEST
    from aiperf_mpi.serve.inputs import run_data

    return run_data(json.loads((bundle / MANIFEST).read_text(encoding="utf-8")))


SERVE_BATCH = 32
"""the offline batch: the standalone tool's default (``serve run --batch``)"""


def record_on_master(end: ServingAtEnd, top: int, plan: dict, statuses: list[int | None]) -> None:
    """Rank 0, after the serving ranks: the reviewer's check of their log, ``serve.json`` and the figures' line."""
    from aiperf_mpi.results.runlog import write_whole
    from aiperf_mpi.serve.check import check_run
    from aiperf_mpi.serve.log import SUMMARY

    paths = ServePaths(end.run_dir, end.segment)
    failed = [status for status in statuses if status not in (None, 0)]
    if failed:
        warn(f"the serving ranks ended with status {max(failed)} (their line above says why)")
        return
    try:
        problems = check_run(paths.log_dir, paths.bundle)
        summary = json.loads((paths.log_dir / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, ServeError) as exc:
        warn(f"the serving log {paths.log_dir} cannot be read: {exc}")
        return
    record = serve_record(summary, problems, paths, top, end.groups, plan["publish_seconds"])
    write_whole(paths.record, json.dumps(record, indent=2) + "\n")
    print(figures_line(record, end.run_dir), flush=True)
    for problem in problems:
        print(f"{PROGRAM}: warning: serving check: {problem}", file=sys.stderr, flush=True)
    remaining = end.watchdog.remaining() if end.watchdog is not None else None
    if end.report is not None and time_left(remaining) >= LEAST_SECONDS:  # its section "Serving at the end"
        end.report(end.run_dir)  # never raises: a failure costs the report, as at the end
    elif end.report is not None:
        print(f"{PROGRAM}: the report lacks the serving's figures (too little of --end-deadline is left): python -m "
              f"analysis.report {end.run_dir} adds them", flush=True)  # fmt: skip


# --------------------------------------------------------------------------- every rank: the collectives


def meet(comm, stop_flag, while_waiting: str) -> None:
    """A barrier polled from Python: the watchdog's thread runs, and a SIGTERM on rank 0 ends the job at once."""
    request = comm.Ibarrier()
    while not request.Test():
        if comm.Get_rank() == 0 and stop_flag is not None and stop_flag.urgent:
            print(f"{PROGRAM}: terminated {while_waiting}; the score and the log are on disk", file=sys.stderr,
                  flush=True)  # fmt: skip
            comm.Abort(EXIT_TERMINATED)
        time.sleep(0.01)


def serve_on_ranks(serving, argv: list[str]) -> int:
    """A training rank's part: the ``serve run`` of ``argv`` on the ``serving`` communicator; its exit status.

    A rank that fails here (beyond the runner's own one-line errors) says so in one line and ends the job: its
    peers would wait in the runner's next collective until the end's deadline.  The score is already on disk.
    """
    from aiperf_mpi.serve.runner import serve

    try:
        return serve(serve_options(argv), world=serving)
    except Exception as exc:  # noqa: BLE001 - the score is written; one line, then the job ends
        print(f"{PROGRAM}: rank {serving.Get_rank()} of the serving ranks: serving at the end failed: "
              f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}; the score and the log are on disk",
              file=sys.stderr, flush=True)  # fmt: skip
        if serving.Get_size() > 1:
            serving.Abort(EXIT_FATAL)
        return EXIT_FATAL


def guarded(step: Callable[[], object], instead: object) -> object:
    """Rank 0's steps never raise (the score is on disk; an exception would end the job with status 1): an
    unexpected error is one warning line, and ``instead`` is what the step gives."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - whatever went wrong is one line; the score and the log stand
        warn(f"{type(exc).__name__}: {exc}")
        return instead


def serve_at_end(top: int) -> Callable[[ServingAtEnd], None]:
    """The hook ``--serve-at-end K`` injects (:class:`~aiperf_mpi.job.session.EndOfRunHooks`): collective over the
    world, called by every rank after its role's end."""

    def hook(end: ServingAtEnd) -> None:
        from mpi4py import MPI

        comm, master = end.comm, end.role == "master"
        plan = guarded(lambda: plan_on_master(end, top), {"skip": "an error"}) if master else None
        meet(comm, end.stop_flag, "while rank 0 published the bundle")
        plan = comm.bcast(plan, root=0)
        if "argv" not in plan:
            return
        serving = comm.Split(0 if end.role == "training" else MPI.UNDEFINED, comm.Get_rank())
        status = None
        if serving != MPI.COMM_NULL:
            status = serve_on_ranks(serving, plan["argv"])
            serving.Free()
        meet(comm, end.stop_flag, "while the training ranks served")
        statuses = comm.gather(status, root=0)
        if master:
            guarded(lambda: record_on_master(end, top, plan, statuses), None)
            if end.watchdog is not None:
                end.watchdog.rename(THE_END, "the score is on disk (score.json); ending the job")

    return hook


# --------------------------------------------------------------------------- the reviewer's check of serve.json


def check_record(run_dir: Path | str, reexecution: Reexecution | None = None) -> list[str]:
    """``RUN_DIR/serve.json`` believed in nothing (``python -m aiperf_mpi.serve check RUN_DIR``): its serving log and
    bundle recounted by the reviewer's check (:func:`aiperf_mpi.serve.check.check_run`), each figure of it
    recomputed from that log, and its groups and ranks held to the run's own ``layout`` (every training rank of
    every group served).  ``reexecution``: the reviewer's (:func:`aiperf_mpi.serve.check.check_run`).  Every
    disagreement, in words (empty: it holds)."""
    from aiperf_mpi.results.logmodel import read_model
    from aiperf_mpi.serve.check import check_run, summary_of

    run_dir = Path(run_dir)
    path = run_dir / RECORD_FILE
    if not path.is_file():
        raise ServeError(f"{run_dir} has no {RECORD_FILE}: the run did not serve at its end (--serve-at-end)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ServeError(f"{path} is not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or not isinstance(
            record.get("segment"), int):  # fmt: skip
        raise ServeError(f"{path} is not a {RECORD_FORMAT} record")
    paths = ServePaths(run_dir, record["segment"])
    problems = check_run(paths.log_dir, paths.bundle, reexecution)
    try:
        publish = float(record["publish_seconds"])
        recomputed = serve_record(summary_of(paths.log_dir), list(problems), paths, record.get("top"),
                                  record.get("groups"), publish)  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        return [*problems, f"{RECORD_FILE}: {type(exc).__name__}: {exc}"]
    for key, value in recomputed.items():
        if key not in VERDICT and record.get(key) != value:
            problems.append(f"{RECORD_FILE} {key}: {record.get(key)!r}; its serving log gives {value!r}")
    segments = read_model(run_dir, require_start=False, keep_ended=False).segment_records
    layout = segments[paths.segment - 1].layout if 0 < paths.segment <= len(segments) else None
    groups = (layout or {}).get("groups") or []
    ranks = sum(len(group.get("ranks", [])) for group in groups)
    if (record.get("groups"), record.get("ranks")) != (len(groups), ranks):
        problems.append(f"{RECORD_FILE}: served on {record.get('ranks')} rank(s) of {record.get('groups')} "
                        f"group(s); segment {paths.segment}'s layout has {ranks} training rank(s) in {len(groups)} "
                        "group(s)")  # fmt: skip
    if record.get("top") != len(json.loads((paths.bundle / "manifest.json").read_text(encoding="utf-8"))["members"]):
        problems.append(f"{RECORD_FILE}: top {record.get('top')!r} is not the bundle's number of members")
    return problems
