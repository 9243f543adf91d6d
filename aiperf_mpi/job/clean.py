"""``python -m aiperf_mpi.job.clean [ROOT] [--keep N] [--dry-run]``: remove old runs, never a live one.

A ``make run`` leaves a few hundred MB under ``runs/`` (the weights of the
models that can still be parents, and the published best model, stored once
in ``best/``); ten tries
fill a small disk.  This removes the run directories directly under ROOT
(default ``runs``), newest ``--keep`` kept, and never one whose lock a live
run holds (:mod:`aiperf_mpi.job.runlock`).  Only directories that hold an
event log are runs; anything else under ROOT, and symbolic links, are left
alone.  ``make clean-runs`` calls it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiperf_mpi.job.runlock import is_running
from aiperf_mpi.results.runlog import EVENTS_FILE


@dataclass(frozen=True)
class Decision:
    run_dir: Path
    size: int
    action: str
    """``remove``, ``keep (newest)`` or ``keep (running)``"""


def tree_size(path: Path) -> int:
    """Bytes of the regular files under ``path``, links not followed."""
    total = 0
    stack = [path]
    while stack:
        folder = stack.pop()
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir():
                stack.append(entry)
            elif entry.is_file():
                total += entry.stat().st_size
    return total


def plan(root: Path, keep: int) -> list[Decision]:
    """What happens to each run under ``root``, newest first (by its event log's last change)."""
    runs = [d for d in root.iterdir() if d.is_dir() and not d.is_symlink() and (d / EVENTS_FILE).is_file()]
    runs.sort(key=lambda d: (d / EVENTS_FILE).stat().st_mtime, reverse=True)
    decisions = []
    for index, run_dir in enumerate(runs):
        if is_running(run_dir):
            action = "keep (running)"
        elif index < keep:
            action = "keep (newest)"
        else:
            action = "remove"
        decisions.append(Decision(run_dir, tree_size(run_dir), action))
    return decisions


def megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aiperf_mpi.job.clean", description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="runs", help="the folder that holds the runs (default: runs)")
    parser.add_argument("--keep", type=int, default=1, help="the newest runs to keep (default 1)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    options = parser.parse_args(argv)
    root = Path(options.root)
    if options.keep < 0:
        print("aiperf_mpi.job.clean: error: --keep must be 0 or more", file=sys.stderr)
        return 2
    if not root.exists():
        print(f"aiperf_mpi.job.clean: nothing to clean: {root} does not exist")
        return 0
    if not root.is_dir():
        print(f"aiperf_mpi.job.clean: error: {root} is not a directory", file=sys.stderr)
        return 2
    freed = 0
    for decision in plan(root, options.keep):
        verb = decision.action
        if decision.action == "remove":
            verb = "would remove" if options.dry_run else "removed"
            if not options.dry_run:
                shutil.rmtree(decision.run_dir)
            freed += decision.size
        print(f"{verb}: {decision.run_dir} ({megabytes(decision.size)})")
    print(f"aiperf_mpi.job.clean: {'would free' if options.dry_run else 'freed'} {megabytes(freed)} under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
