"""The close on a day's log: ``python -m aiperf_mpi.job.close RUN_DIR --job-status`` against the templates' bound.

The batch shell runs the close once the launcher has returned, and gives it ``CLOSE_BOUND`` seconds
(``jobscripts/src/common.sh``: past it the close is left, the job's status 6).  The close reads the whole log once
(the open segment, the score) and writes a ``run_stop``, ``mllog.log``'s last line, the score event and
``score.json``.  Here the log is the verifier bench's run of 100,000 models (:func:`benchmarks.verify.
write_verifiable_log`, 64 groups, two epochs a model), cut after its last epoch as a kill leaves it (its
``run_stop`` and ``score`` gone, ``score.json`` removed), then closed in a child process (issue 50, item 7).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path

from aiperf_mpi.job.deadlines import CLOSE_BOUND
from aiperf_mpi.results import runlog
from benchmarks.report import _measure
from benchmarks.verify import write_verifiable_log

SIZES = (10_000, 100_000)
EXPECTING_7 = ("import sys; from aiperf_mpi.job.close import main; "
               "status = main([sys.argv[1], '--launcher-status', '137', '--job-status']); sys.exit(status != 7)")


def close_bound() -> int:
    """The templates' bound on the close (its one home: ``aiperf_mpi/job/deadlines.py``, which they read)."""
    return math.ceil(CLOSE_BOUND)


def killed(run_dir: Path) -> None:
    """The run as a kill after its last epoch leaves it: its last lines (``run_stop``, ``score``) gone."""
    path = run_dir / runlog.EVENTS_FILE
    data = path.read_bytes()
    for _ in range(2):
        cut = data.rstrip(b"\n").rfind(b"\n") + 1
        assert data[cut:].startswith((b'{"event":"score"', b'{"event":"run_stop"')), data[cut : cut + 40]
        data = data[:cut]
    path.write_bytes(data)
    (run_dir / "score.json").unlink()
    mllog = run_dir / "mllog.log"
    lines = mllog.read_bytes().splitlines(keepends=True)
    mllog.write_bytes(b"".join(line for line in lines if b'"key": "run_stop"' not in line))


def run(sizes: tuple[int, ...] = SIZES) -> str:
    bound = close_bound()
    rows = []
    with tempfile.TemporaryDirectory(prefix="aiperf-close-bench-") as scratch:
        for models in sizes:
            run_dir = Path(scratch) / f"run-{models}"
            started = time.perf_counter()
            held = write_verifiable_log(run_dir, models)
            print(f"  {models:,} models: {held['bytes'] / 1e6:.0f} MB written in {time.perf_counter() - started:.0f} s",
                  flush=True)  # fmt: skip
            killed(run_dir)
            # as the templates run it; its status is 7 here (scored, stopped early), which _measure takes for 0
            measured = _measure([sys.executable, "-c", EXPECTING_7, str(run_dir)])
            if "closed from its log" not in measured["output"]:
                raise RuntimeError(f"the close of {models} models closed nothing:\n{measured['output']}")
            rows.append(f"| {models:,} | {held['bytes'] / 1e6:.0f} MB | {measured['seconds']:.1f} | "
                        f"{measured['cpu']:.1f} | {measured['rss_gib'] * 1024:.0f} MiB | "
                        f"{measured['seconds'] / bound:.0%} |")  # fmt: skip
            print(rows[-1], flush=True)
            for path in sorted(run_dir.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return "\n".join([
        "The verifier bench's runs (64 groups of 2 ranks, two epochs a model), each cut after its last epoch as a "
        "kill leaves it, closed by `python -m aiperf_mpi.job.close RUN_DIR --launcher-status 137 --job-status` in "
        f"a child process (imports included), against the templates' `CLOSE_BOUND` of {bound} s.",
        "",
        "| models | events.jsonl | wall (s) | CPU (s) | peak RSS | share of the bound |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"Load average when it ended (1 / 5 / 15 min): {load}, on a machine shared with other work.",
    ])  # fmt: skip


if __name__ == "__main__":
    print(run(tuple(int(a) for a in sys.argv[1:]) or SIZES))
