"""Command-line options, parsed once on rank 0 and shared with every rank.

Parsing on every rank would print a usage error or the help text N times.
Here rank 0 parses; the outcome — options, help/version already printed, or
an error message — is broadcast, so every rank takes the same branch at the
same time and bad input ends the job on all ranks within one collective.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiperf_mpi import __version__
from aiperf_mpi.errors import EXIT_OK, OneLineParser, UsageError, positive_int, whole_number
from aiperf_mpi.results.resumable import RESUME_OPTIONS

if TYPE_CHECKING:  # the parser itself is MPI-free so unit tests need no MPI
    from mpi4py import MPI

DESCRIPTION = """\
aiperf_mpi — an AutoML benchmark for AI supercomputers, run as one MPI job.

Rank 0 is the master; the other ranks form training groups (one per node, or
cut to --group-size ranks). Launch it with your MPI or Slurm, e.g.
  mpirun -n 4 python -m aiperf_mpi --layout
  srun --mpi=pmix -n 4096 python -m aiperf_mpi --layout
"""

EPILOG = """\
Every run option can also be given in the --config TOML file (same name,
with underscores: time_limit = 600); the command line wins.
SIGUSR1 (Slurm's time-limit warning) ends the run as at its time limit:
running epochs finish within --grace, the score is written. SIGTERM (the
kill is under way) writes the score at once, without the running epochs.
Set AIPERF_MPI_DEBUG=1 to print the full traceback of a fatal error.
"""


class _ParserExit(Exception):
    """argparse wanted to exit (after --help or --version): carry the status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(OneLineParser):
    """The one-line parser (:class:`~aiperf_mpi.errors.OneLineParser`) that raises instead of calling ``sys.exit``:
    rank 0 parses, and every rank learns the verdict."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        if message:
            self._print_message(message)
        raise _ParserExit(status)


def build_parser() -> argparse.ArgumentParser:
    """The full option set; ``--help`` documents every option, each run option's default read from ``RunConfig``.

    The defaults are :class:`~aiperf_mpi.config.RunConfig`'s (``load_config``
    starts from them), so the help cannot say another; the configuration is
    imported here, not at the top, because only rank 0 builds the parser and
    its imports cost every other rank ≈ 0.4 s of start-up.
    """
    from aiperf_mpi.config import CHOICES, RunConfig, shown_number

    defaults = RunConfig()

    def default(name: str, zero: str = "") -> str:
        """'default 3600': RunConfig's value of ``name``; where that is 0, ``zero`` says what 0 means."""
        value = getattr(defaults, name)
        return f"default {shown_number(value)}" + (f": {zero}" if zero and not value else "")

    def choice_list(name: str, notes: dict[str, str] | None = None) -> str:
        """'tpe (default), gp or random': CHOICES' values in order, RunConfig's marked, each note beside its value."""
        shown = []
        for value in CHOICES[name]:
            marks = ["default"] if value == getattr(defaults, name) else []
            marks += [(notes or {})[value]] if value in (notes or {}) else []
            shown.append(f"{value} ({': '.join(marks)})" if marks else value)
        return f"{', '.join(shown[:-1])} or {shown[-1]}"

    parser = _Parser(
        prog="python -m aiperf_mpi",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aiperf_mpi {__version__}")
    parser.add_argument(
        "--layout",
        action="store_true",
        help="print, from rank 0, the layout this job would use (world size, hosts, "
        "master, groups and their Horovod sizes) and exit",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="with --layout: print the layout as one JSON object instead of text",
    )
    parser.add_argument(
        "--group-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="cut each node's worker ranks into training groups of N ranks "
        "(default: one group per node; the last group of a node may be smaller)",
    )
    parser.add_argument(
        "--relays",
        type=whole_number,
        default=None,
        metavar="N",
        help="N ranks on rank 0's node receive, check and encode the group leaders' messages and hand them to "
        "rank 0 in batches (default: none, rank 0 receives them itself); one per 16,384 groups keeps rank 0 "
        "well ahead of the largest machines (docs/cluster.md)",
    )
    parser.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="after the score, write no report and export no best model: the job ends, and frees its nodes, "
        "as soon as the score is on disk (python -m analysis.report RUN_DIR and python -m aiperf_mpi.export "
        "--single-copy RUN_DIR make them later)",
    )
    parser.add_argument(
        "--serve-at-end",
        type=positive_int,
        nargs="?",
        const=1,
        default=None,
        metavar="K",
        help="after the score, the report and the export, publish the run's K best models (1 if K is omitted; "
        "an ensemble when K > 1) and serve them over the validation split on every training rank: the inference "
        "figures go to RUN_DIR/serve.json and RUN_DIR/serve/, never into the score; within --end-deadline "
        "(docs/serve.md)",
    )
    run = parser.add_argument_group("the run")
    run.add_argument("--config", metavar="FILE", help="a TOML file of run options (see docs/running.md)")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its event log")
    run.add_argument("--hardware-changed", metavar="REASON",
                     help="with --resume: why the resumed segment runs on other kinds of hardware than the first "
                     "segment (recorded in its run_start; without it verify holds the segment to the first "
                     "segment's hardware)")  # fmt: skip
    run.add_argument("--time-limit", type=float, metavar="SECONDS",
                     help=f"the benchmark's wall clock ({default('time_limit')})")  # fmt: skip
    run.add_argument("--max-models", type=int, metavar="N", help="stop after N models (default: no limit)")
    run.add_argument("--dataset", help=choice_list("dataset", {"digits": "embedded"}))
    run.add_argument("--data-path", metavar="PATH", help="the data for cifar10, imagenet and hdf5")
    run.add_argument("--stage-dir", metavar="DIR",
                     help="copy the data to this node-local directory before training (once per node)")  # fmt: skip
    run.add_argument("--image-size", type=int, metavar="PIXELS", help="image size for imagenet/synthetic")
    run.add_argument("--seed-model", help=f"the architecture the search starts from: {choice_list('seed_model')}")
    run.add_argument("--precision", help=choice_list("precision", {
        "auto": "bf16 on GPUs with bf16 tensor cores, fp16 with loss scaling on older tensor-core GPUs, fp32 on CPUs",
    }) + "; nothing narrower")  # fmt: skip
    run.add_argument("--run-dir", metavar="DIR", help="where the run writes (default runs/run-DATE-TIME)")
    run.add_argument("--score-step", type=float, metavar="SECONDS",
                     help=f"the score's time grid ({default('score_step')})")  # fmt: skip
    run.add_argument("--max-epochs", type=int, metavar="N", help=f"epoch limit of one model ({default('max_epochs')})")
    run.add_argument("--search-warmup-epochs", type=int, metavar="N",
                     help="epochs of each model in a group's first three rounds, whose final accuracy the search "
                     f"then predicts from the curve ({default('search_warmup_epochs', 'up to --max-epochs')}; "
                     "not the learning rate's warm-up, one epoch of every model)")  # fmt: skip
    run.add_argument("--patience", type=int, metavar="N",
                     help=f"early stop after N epochs without gain ({default('patience')})")  # fmt: skip
    run.add_argument("--model-seconds", type=float, metavar="SECONDS",
                     help="a model begins no epoch that would end more than SECONDS after its training began "
                          f"(at least one epoch; {default('model_seconds', 'no budget')}; make run plans its demo "
                          "with it)")  # fmt: skip
    run.add_argument("--min-delta", type=float, metavar="X", help=f"accuracy gain that counts ({default('min_delta')})")
    run.add_argument("--batch-size", type=int, metavar="N",
                     help=f"per-rank batch of the warm-up rounds ({default('batch_size')})")  # fmt: skip
    run.add_argument("--base-lr", type=float, metavar="X", help=f"learning rate per 256 samples ({default('base_lr')})")
    run.add_argument("--hpo", help=f"batch/kernel tuner: {choice_list('hpo')}")
    run.add_argument("--search", help=f"architecture search: {choice_list('search')}")
    run.add_argument("--no-inherit", dest="inherit", action="store_const", const=False,
                     help="train every child from scratch instead of inheriting its parent's weights")  # fmt: skip
    run.add_argument("--keep-weights", metavar="WHICH",
                     help="trained weights kept in the run directory: " + choice_list("keep_weights", {
                         "parents": "only those a child may still inherit, and the best model's"}))  # fmt: skip
    run.add_argument("--xla", choices=CHOICES["xla"],
                     help="compile the training step with XLA: " + choice_list("xla", {
                         "auto": "on for GPUs, off for CPUs, where TensorFlow's own kernels train faster",
                     }))  # fmt: skip
    run.add_argument("--no-xla", dest="xla", action="store_const", const="off", help="the same as --xla off")
    run.add_argument("--device-prefetch", choices=CHOICES["device_prefetch"],
                     help="copy the next training batches to the device while a step runs: "
                     + choice_list("device_prefetch", {"auto": "on GPUs"}))  # fmt: skip
    run.add_argument("--seed", type=int, help="random seed of search, tuning and training (default: a fresh one "
                     "drawn at start and logged, so repeat runs differ)")  # fmt: skip
    run.add_argument("--grace", type=float, metavar="SECONDS",
                     help=f"after the time limit, how long running epochs may finish ({default('grace')})")  # fmt: skip
    for name, what in DEADLINE_HELP.items():  # the phases' bounds (aiperf_mpi/job/deadlines.py)
        zero = DERIVED_HELP.get(name, "")
        run.add_argument(f"--{name.replace('_', '-')}", type=float, metavar="SECONDS",
                         help=f"{what} ({default(name, zero)})")  # fmt: skip
    run.add_argument("--progress-interval", type=float, metavar="SECONDS",
                     help=f"progress line period ({default('progress_interval')})")  # fmt: skip
    run.add_argument("--device-memory-gb", type=float, metavar="GB",
                     help="memory of one device, bounds the tuned batch size "
                     f"({default('device_memory_gb')})")  # fmt: skip
    run.add_argument("--monitor-interval", type=float, metavar="SECONDS",
                     help=f"utilisation/memory sample period on each node ({default('monitor_interval')}; "
                     "0: off)")  # fmt: skip
    run.add_argument("--ignore-limits", action="store_const", const=True,
                     help="start even when a node's memory (its cgroup's memory.max or MemAvailable) or rank 0's "
                     "open-file hard limit is short of what the job needs; without it rank 0 refuses in one line")
    run.add_argument("--no-peak-probe", dest="peak_probe", action="store_const", const=False,
                     help="skip the start-up matrix-multiply probe of each group's peak")  # fmt: skip
    run.add_argument("--peak-seconds", type=float, metavar="SECONDS",
                     help=f"how long the peak probe multiplies ({default('peak_seconds')})")  # fmt: skip
    run.add_argument("--rehearse", action="store_const", const=True,
                     help="rehearse the job this command line would run: the same ranks, layout, relays, staging, "
                     "search, log, score and report, with a stand-in for the training arithmetic and no "
                     "TensorFlow, in minutes; never a valid result (README, 'Running at scale')")  # fmt: skip
    run.add_argument("--rehearse-rate", type=float, metavar="OPS",
                     help="a rehearsal's operations per second per rank: each epoch lasts its analytic operations "
                     f"at this rate ({default('rehearse_rate')})")  # fmt: skip
    run.add_argument("--rehearse-allreduce", type=float, metavar="SHARE",
                     help="the share of a model's parameter bytes a rehearsing group all-reduces once an epoch "
                     f"({default('rehearse_allreduce')})")  # fmt: skip
    return parser


DEADLINE_HELP = {
    "startup_deadline": "a rank that has not reached the start line this long after its start ends the job in one "
                        "line: a hang in start-up",
    "first_model_deadline": "a group silent this long in its first model (search, build, trace, first epoch) is "
                            "lost, or, with fault tolerance off, ends the run with its score",
    "end_deadline": "rank 0's end after the drain (score, report, export, --serve-at-end, MPI's end) may take this "
                    "long; then it ends the job, its score on disk",
    "io_deadline": "an fsync of rank 0's run log that takes longer ends the job in one line: a hung file system",
    "master_deadline": "rank 0 silent this long mid-run (its heartbeat to two watching leaders stops) ends the job in "
                       "one line: a stopped or hung rank 0; the close scores the log",
    "hang_margin": "a group silent mid-run for 3 × its longest epoch (or first-epoch cost) plus this long is lost, "
                   "or, with fault tolerance off, ends the run with its score: a hung rank",
}
"""the phases' bounds' help, by field: the ``--*-deadline`` options and ``--hang-margin`` (the mid-run bound's)"""
DERIVED_HELP = {
    "startup_deadline": "derived from the job's size, 300 s + 0.3 s a rank",
    "first_model_deadline": "derived per group, 300 s + 3 × the seed's first epoch at 3 %% of the group's "
                            "probed peak; 3600 s without a probe",
}
"""what a deadline of 0 means, where it has a meaning (job/deadlines.py)"""

RUN_OPTIONS = (
    "time_limit", "max_models", "dataset", "data_path", "stage_dir", "image_size", "seed_model", "precision", "run_dir",
    "score_step", "max_epochs", "search_warmup_epochs", "patience", "model_seconds", "min_delta", "batch_size",
    "base_lr", "hpo", "search", "inherit", "keep_weights", "xla", "device_prefetch", "seed", "grace",
    "progress_interval", "device_memory_gb", "startup_deadline", "first_model_deadline", "end_deadline", "io_deadline",
    "master_deadline", "hang_margin", "ignore_limits", "monitor_interval", "peak_probe", "peak_seconds", "rehearse",
    "rehearse_rate", "rehearse_allreduce", "hardware_changed",
)  # fmt: skip


def run_overrides(options: argparse.Namespace) -> dict[str, object]:
    """The run options given on the command line (``None`` = not given)."""
    values = {name: getattr(options, name) for name in RUN_OPTIONS}
    if options.group_size is not None:
        values["group_size"] = options.group_size
    if options.relays is not None:
        values["relays"] = options.relays
    return values


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _listed(flags: list[str]) -> str:
    """'--a does' or '--a, --b do'."""
    return f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'}"


def check_mode(options: argparse.Namespace) -> None:
    """Refuse options that the chosen mode would silently ignore.

    ``--layout`` runs nothing, so run options do not apply to it; ``--resume``
    continues the logged configuration, so only a new time limit applies
    (:data:`~aiperf_mpi.results.resumable.RESUME_OPTIONS`).
    Raises :class:`UsageError` naming them all.
    """
    given = [name for name, value in run_overrides(options).items()
             if value is not None and name not in ("group_size", "relays")]  # both shape --layout too
    if options.json and not options.layout:
        raise UsageError("--json only applies to --layout")
    if options.serve_at_end and not options.report:
        raise UsageError("--serve-at-end does not apply with --no-report, which ends the job as soon as the score is "
                         "on disk: serve afterwards with python -m aiperf_mpi.serve (docs/serve.md)")  # fmt: skip
    if options.layout:
        ignored = [_flag(n) for n in given] + (["--config"] if options.config else [])
        ignored += [] if options.report else ["--no-report"]
        ignored += ["--resume"] if options.resume else []
        ignored += ["--serve-at-end"] if options.serve_at_end else []
        if ignored:
            raise UsageError(f"{_listed(ignored)} not apply to --layout, which only prints the layout")
    elif options.resume:
        if options.hardware_changed is not None and not options.hardware_changed.strip():
            raise UsageError("--hardware-changed needs a reason: why the resumed segment's hardware is not the "
                             "first segment's")  # fmt: skip
        ignored = [_flag(n) for n in given if n not in RESUME_OPTIONS]
        ignored += ["--config"] if options.config else []
        ignored += ["--group-size"] if options.group_size is not None else []
        ignored += ["--relays"] if options.relays is not None else []
        if ignored:
            taken = " and ".join(map(_flag, RESUME_OPTIONS))
            raise UsageError(f"{_listed(ignored)} not apply to --resume: a resumed run keeps its logged "
                             f"configuration; only {taken} may be given")  # fmt: skip
    elif options.hardware_changed is not None:
        raise UsageError("--hardware-changed applies only to --resume: a new run has no first segment's hardware "
                         "to differ from")  # fmt: skip


@dataclass(frozen=True)
class ParseOutcome:
    """What rank 0 decided, broadcast to all ranks."""

    options: dict | None = None
    exit_status: int | None = None
    error: str | None = None


def parse_on_root(comm: MPI.Comm, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv`` on rank 0 and return the same options on every rank.

    Raises :class:`UsageError` on every rank for bad options, and
    ``SystemExit(0)`` on every rank after ``--help``/``--version``.
    Collective over ``comm``.
    """
    outcome = None
    if comm.Get_rank() == 0:
        try:
            outcome = ParseOutcome(options=vars(build_parser().parse_args(argv)))
        except _ParserExit as done:
            outcome = ParseOutcome(exit_status=done.status)
        except UsageError as bad:
            outcome = ParseOutcome(error=str(bad))
    outcome = comm.bcast(outcome, root=0)
    if outcome.error is not None:
        raise UsageError(outcome.error)
    if outcome.exit_status is not None:
        raise SystemExit(outcome.exit_status or EXIT_OK)
    return argparse.Namespace(**outcome.options)


def resume_arguments(run_dir: str, time_limit: int, argv: Sequence[str]) -> list[str]:
    """A relaunch's options (the templates' relaunch after a lost node, :mod:`aiperf_mpi.job.relaunch`):
    ``--resume RUN_DIR --time-limit T`` and those of the first launch's options ``argv`` that a resume may take
    (:data:`~aiperf_mpi.results.resumable.RESUME_OPTIONS` but the time limit and the hardware's reason), read by
    this parser, so that the shell restates no option."""
    options, _ = build_parser().parse_known_args(list(argv))
    kept: list[str] = []
    for name in RESUME_OPTIONS:
        value = getattr(options, name, None)
        if name in ("time_limit", "hardware_changed") or value is None:
            continue
        flag = _flag(name)
        kept += [flag] if value is True else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return ["--resume", run_dir, "--time-limit", str(time_limit), *kept]


if __name__ == "__main__":  # the templates' relaunch: python -m aiperf_mpi.cli resume-arguments RUN_DIR T -- ARGS...
    import sys

    if len(sys.argv) < 4 or sys.argv[1] != "resume-arguments":
        print("usage: python -m aiperf_mpi.cli resume-arguments RUN_DIR TIME_LIMIT -- OPTIONS...", file=sys.stderr)
        sys.exit(2)
    rest = sys.argv[4:]
    print("\n".join(resume_arguments(sys.argv[2], int(sys.argv[3]), rest[1:] if rest[:1] == ["--"] else rest)))
