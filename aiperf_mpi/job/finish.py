"""The end of a run on the master: the score in a few lines a person reads.

The report and the best model's export come after it, as hooks the entry
point injects into the session (:class:`aiperf_mpi.job.session.EndOfRunHooks`;
they live in :mod:`analysis.after_run`, a room above this one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from aiperf_mpi.results import runlog
from aiperf_mpi.results.energy import energy_line

SCORE_FILE = "score.json"
"""the score's file beside the log, for the reader who wants the number without the log"""


def record_score(log: runlog.EventLog, run_dir: Path, score,
                 guard: Callable[[], AbstractContextManager] = nullcontext) -> None:  # fmt: skip
    """The ``score`` event (its grid left to the file) and ``score.json``, written whole: what the master writes at
    its end, and what the job script's close writes for a run whose launch ended first (job/close.py).  ``guard``
    bounds the file's write (rank 0's fsync watchdog)."""
    log.write(runlog.SCORE, sync=True, **{k: v for k, v in score.to_dict().items() if k != "grid"})
    with guard():
        write_score_file(run_dir, score)


def write_score_file(run_dir: Path, score) -> None:
    """``score.json``, written whole: the score with its grid (the close writes it alone when a death left it out)."""
    runlog.write_whole(run_dir / SCORE_FILE, json.dumps(score.to_dict(), indent=2))


def print_score(score, run_dir: Path) -> None:
    """The score, the regulated score, the verdict and where the results are: what a person reads first."""
    print(f"aiperf_mpi: score {score.score / 1e9:.4f} GOPS (analytic operations per second) over "
          f"{score.active_time:.0f} s of active time, {score.models_trained} models, {score.epochs} epochs",
          flush=True)  # fmt: skip
    if score.regulated_score is not None:
        print(f"aiperf_mpi: regulated score {score.regulated_score / 1e9:.4f} GOPS "
              f"(best accuracy {score.best_accuracy:.4f})", flush=True)  # fmt: skip
    else:
        print("aiperf_mpi: regulated score not defined (no accuracy: synthetic data or no epoch)", flush=True)
    if score.energy:  # what the window cost, from the nodes' meters, or why there is no figure (issue 53)
        print(energy_line(score.energy), flush=True)
    broken = [f"{name} {rule['value']} (needs {rule['need']})" for name, rule in score.rules.items() if not rule["ok"]]
    verdict = "valid run" if score.valid else "unofficial run: " + "; ".join(broken)
    print(f"aiperf_mpi: {verdict}", flush=True)
    print(f"aiperf_mpi: results in {run_dir}/score.json and {run_dir}/{runlog.EVENTS_FILE}", flush=True)
