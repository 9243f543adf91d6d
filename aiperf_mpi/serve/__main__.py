"""``python -m aiperf_mpi.serve publish|run|check``: publish a run's models, serve them, check a serving run.

Bad input is one line ``aiperf_mpi.serve: error: …`` (from rank 0 under MPI) and exit status 2 on every rank.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aiperf_mpi.errors import EXIT_USAGE
from aiperf_mpi.serve import PROG, ServeError
from aiperf_mpi.serve.reexecute import SAMPLE_DEFAULT
from aiperf_mpi.serve.runner import add_arguments


def _publish(options: argparse.Namespace) -> int:
    from aiperf_mpi.export import ExportError
    from aiperf_mpi.graph.model import GraphError
    from aiperf_mpi.serve.publish import publish

    try:
        manifest = publish(options.run_dir, options.out, options.top)
    except (ExportError, GraphError) as exc:
        raise ServeError(str(exc)) from None
    sizes = sum(entry["bytes"] for entry in manifest["files"].values())
    members = ", ".join(f"task {m['task']} ({m['validation_accuracy']:.4f})" for m in manifest["members"])
    print(
        f"{PROG}: {manifest['servable']['type']} of {len(manifest['members'])} in {options.out}: {members}; "
        f"{len(manifest['files'])} files, {sizes / 1e6:.1f} MB, forward {manifest['forward_ops_per_sample']:,} "
        "ops/sample"
    )
    return 0


def _run(options: argparse.Namespace) -> int:
    from aiperf_mpi.serve.runner import serve

    return serve(options)


def _check(options: argparse.Namespace) -> int:
    from aiperf_mpi.serve.atend import check_record
    from aiperf_mpi.serve.check import UNCHECKABLE, check_run
    from aiperf_mpi.serve.reexecute import Reexecution

    if options.sample < 0:
        raise ServeError(f"--sample {options.sample}: give a number of rows, 0 or more")
    if options.seed is not None and not 0 <= options.seed < 2**64:
        raise ServeError(f"--seed {options.seed}: give a whole number from 0 to 2**64 - 1")
    reexecution = Reexecution(options.data, options.sample, *([] if options.seed is None else [options.seed]))
    try:
        if options.bundle is None:  # a benchmark run that served at its end (--serve-at-end): its serve.json
            problems = check_record(options.log_dir, reexecution)
        else:
            problems = check_run(options.log_dir, options.bundle, reexecution)
    except ServeError:
        raise  # bad input the check names itself: one line, exit 2 (main)
    except UNCHECKABLE as exc:  # a record of the wrong shape where the recount reads it: the records fail
        print(f"{PROG} check: FAIL: {options.log_dir}: the records cannot be checked ({type(exc).__name__}: "
              f"{' '.join(str(exc).split())[:200]})")  # fmt: skip
        return 1
    for line in reexecution.found:
        print(f"{PROG} check: re-executed: {line}")
    for claim in reexecution.claims:
        print(f"{PROG} check: trusted: {claim}")
    for problem in problems:
        print(f"{PROG} check: FAIL: {problem}")
    if problems:
        print(f"{PROG} check: {options.log_dir}: {len(problems)} problem(s)")
        return 1
    besides = "" if options.bundle else "; serve.json recomputed from them, its ranks held to the run's layout"
    print(
        f"{PROG} check: {options.log_dir}: PASS (bundle files and forward counts, shards, offline figures, "
        f"predictions, scenarios, mllog and summary recounted{besides}; the bundle re-executed as above)"
    )
    return 0


def _compare(options: argparse.Namespace) -> int:
    """Two predictions files hold the same values in the same order (a one-process run and an N-rank one)."""
    from aiperf_mpi.serve.predictions import read_predictions

    for path in (options.first, options.second):
        if not path.is_file():
            raise ServeError(f"{path}: no such predictions file")
    first, second = read_predictions(options.first), read_predictions(options.second)
    a, b = first["probabilities"], second["probabilities"]
    if a.shape != b.shape:
        print(f"{PROG} compare: DIFFERENT: {options.first} has {a.shape}, {options.second} {b.shape}")
        return 1
    rows = [int(r) for r in (a != b).any(axis=1).nonzero()[0]]
    if rows:
        print(f"{PROG} compare: DIFFERENT: {len(rows)} of {len(a)} rows differ, the first row {rows[0]}")
        return 1
    print(f"{PROG} compare: IDENTICAL: {len(a)} rows of {a.shape[1]} probabilities, bit for bit")
    return 0


def _report(options: argparse.Namespace) -> int:
    from aiperf_mpi.serve.report import report

    page = report(options.out, options.log_dirs)
    print(f"{PROG} report: {page} (latency.png, ranks.png, batch.png beside it)")
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    publish = commands.add_parser("publish", help="write a servable bundle from a run directory")
    publish.add_argument("run_dir", type=Path)
    publish.add_argument("out", type=Path, help="the bundle's directory (must not exist)")
    publish.add_argument("--top", type=int, default=1, help="the K best models as an ensemble (default 1)")
    run = commands.add_parser("run", help="serve a bundle on one process, or on every rank of mpirun/srun")
    add_arguments(run)
    check = commands.add_parser("check", help="recount a serving run's figures from its log and the bundle")
    check.add_argument("log_dir", type=Path, help="the run's log directory (run's --log-dir); or a benchmark run's "
                       "directory that served at its end (--serve-at-end), without BUNDLE: its serve.json")
    check.add_argument("bundle", type=Path, nargs="?", help="the bundle served (not given: LOG_DIR is a run directory)")
    check.add_argument("--data", default=None, help="the reviewer's copy of the input served (as serve run's --data): "
                       "rows of it are re-predicted, and the accuracy is counted against its labels only (default: "
                       "the run's own input where the package holds it: digits, synthetic)")
    check.add_argument("--sample", type=int, default=SAMPLE_DEFAULT,
                       help=f"rows re-predicted (default {SAMPLE_DEFAULT}; 0: none)")
    check.add_argument("--seed", type=int, default=None,
                       help="the draw's seed (default: fresh from this machine, printed; give it to repeat a draw)")
    compare = commands.add_parser("compare", help="whether two predictions files hold the same values")
    compare.add_argument("first", type=Path)
    compare.add_argument("second", type=Path)
    page = commands.add_parser("report", help="a page with plots from one or more serving logs")
    page.add_argument("out", type=Path, help="the report's directory")
    page.add_argument("log_dirs", type=Path, nargs="+", help="serving runs' log directories")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    try:
        if options.command == "publish":
            return _publish(options)
        if options.command == "run":
            return _run(options)
        if options.command == "check":
            return _check(options)
        if options.command == "compare":
            return _compare(options)
        if options.command == "report":
            return _report(options)
    except ServeError as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
