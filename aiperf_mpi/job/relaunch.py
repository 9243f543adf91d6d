"""A lost node costs its groups' work in progress, not the allocation: the templates' relaunch (issue 50).

At 4,096 accelerators for 24 hours a node loss is expected.  Under the templates' ``#SBATCH --no-kill`` Slurm
keeps the allocation when a node fails and takes the node out of it, but the launch ends on every launcher
(srun's step loses a task; PRRTE cannot keep a job whose daemon is lost), and until now the rest of the
allocation was lost unless a person resubmitted.  So the batch shell (``jobscripts/src/common.sh``), once the
launcher has returned and the close has scored the segment, asks this module whether to launch again, and with
what:

* :func:`decide` — relaunch when the run stopped early (the close's job status
  :data:`~aiperf_mpi.errors.EXIT_ENDED_EARLY`), the allocation has fewer nodes than when the job began and at
  least one, fewer than ``--max`` relaunches were made, and at least :data:`LEAST_SECONDS` of the allocation are
  left; otherwise not, in one line that says why;
* :func:`aiperf_mpi.cli.resume_arguments` (``python -m aiperf_mpi.cli resume-arguments``, where the parser
  lives) — the relaunch's options: ``--resume RUN_DIR --time-limit SECONDS`` and, of the first launch's options,
  those a resume may take (:data:`~aiperf_mpi.results.resumable.RESUME_OPTIONS`: the deadlines,
  ``--ignore-limits``), read by the benchmark's own parser, so that no option is restated in the shell.

The relaunch is a resumed segment like any other: its score spans every segment, and verify reads it as a
segment with fewer ranks.  MPI-free and Slurm-free (the shell asks Slurm); ``tests/unit/test_relaunch.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from aiperf_mpi.errors import EXIT_ENDED_EARLY

LEAST_SECONDS = 600
"""the least allocation time left that a relaunch is worth: its start-up (seconds to minutes at scale: the
start-up bound), a first model, and a scored window of its own; a site's ``AIPERF_RELAUNCH_LEAST`` overrides it"""
RELAUNCHES = 2
"""relaunches a job makes at most (``AIPERF_RELAUNCHES``): a third node loss in one allocation says more about the
machine than about the run"""


@dataclass(frozen=True)
class Decision:
    relaunch: bool
    why: str


def decide(status: int, nodes_at_start: int, nodes_now: int, relaunches: int, most: int,
           seconds_left: float, least: float = LEAST_SECONDS) -> Decision:  # fmt: skip
    """Whether the batch shell launches the run again on the nodes left (:mod:`aiperf_mpi.job.relaunch`)."""
    if status != EXIT_ENDED_EARLY:
        return Decision(False, "the run did not stop early" if status == 0 else f"job status {status}: nothing "
                        "to resume")  # fmt: skip
    if nodes_now >= nodes_at_start:
        return Decision(False, f"no node was lost ({nodes_now} of {nodes_at_start} in the allocation)")
    if nodes_now < 1:
        return Decision(False, "no node is left in the allocation")
    if relaunches >= most:
        return Decision(False, f"{relaunches} relaunch(es) already, the most this job makes (AIPERF_RELAUNCHES)")
    if seconds_left < least:
        return Decision(False, f"{seconds_left:.0f} s of the allocation left, under the {least:.0f} s a relaunch "
                        "needs (AIPERF_RELAUNCH_LEAST)")  # fmt: skip
    return Decision(True, f"{nodes_at_start - nodes_now} node(s) lost, {nodes_now} left; relaunch "
                    f"{relaunches + 1} of at most {most}, {seconds_left:.0f} s of the allocation left")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 (and say why, in one line) when the batch shell should launch the run again; 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m aiperf_mpi.job.relaunch", description=__doc__.split("\n")[0])
    for name in ("status", "nodes-at-start", "nodes-now", "relaunches", "most"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--seconds-left", type=float, required=True)
    parser.add_argument("--least", type=float, default=LEAST_SECONDS)
    args = parser.parse_args(argv)
    decision = decide(args.status, args.nodes_at_start, args.nodes_now, args.relaunches, args.most,
                      args.seconds_left, args.least)  # fmt: skip
    print(f"{'relaunch' if decision.relaunch else 'no relaunch'}: {decision.why}", flush=True)
    return 0 if decision.relaunch else 1


if __name__ == "__main__":
    sys.exit(main())
