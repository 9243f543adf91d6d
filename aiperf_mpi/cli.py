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
from aiperf_mpi.errors import EXIT_OK, UsageError

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


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of calling ``sys.exit``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        if message:
            self._print_message(message)
        raise _ParserExit(status)


def whole_number(text: str) -> int:
    """argparse type: an integer ≥ 0, with a message that names the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1, with a message that names the value."""
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The full option set; ``--help`` documents every option."""
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
        "as soon as the score is on disk (python -m analysis.report RUN_DIR and python -m analysis.export "
        "--single-copy RUN_DIR make them later)",
    )
    run = parser.add_argument_group("the run")
    run.add_argument("--config", metavar="FILE", help="a TOML file of run options (see docs/running.md)")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its event log")
    run.add_argument("--time-limit", type=float, metavar="SECONDS", help="the benchmark's wall clock (default 3600)")
    run.add_argument("--max-models", type=int, metavar="N", help="stop after N models (default: no limit)")
    run.add_argument("--dataset", help="digits (default, embedded), synthetic, cifar10, imagenet or hdf5")
    run.add_argument("--data-path", metavar="PATH", help="the data for cifar10, imagenet and hdf5")
    run.add_argument("--stage-dir", metavar="DIR",
                     help="copy the data to this node-local directory before training (once per node)")  # fmt: skip
    run.add_argument("--image-size", type=int, metavar="PIXELS", help="image size for imagenet/synthetic")
    run.add_argument("--seed-model", help="the architecture the search starts from: resnet50 (default) or tiny")
    run.add_argument("--precision", help="auto (default: bf16 on GPUs with bf16 tensor cores, fp16 with loss "
                     "scaling on older tensor-core GPUs, fp32 on CPUs), fp32, fp16 or bf16; nothing narrower")
    run.add_argument("--run-dir", metavar="DIR", help="where the run writes (default runs/run-DATE-TIME)")
    run.add_argument("--score-step", type=float, metavar="SECONDS", help="the score's time grid (default 360)")
    run.add_argument("--max-epochs", type=int, metavar="N", help="epoch limit of one model (default 60)")
    run.add_argument("--warmup-epochs", type=int, metavar="N",
                     help="epochs of each model in a group's first three rounds, whose final accuracy the search "
                     "then predicts from the curve (default 0: up to --max-epochs)")  # fmt: skip
    run.add_argument("--patience", type=int, metavar="N", help="early stop after N epochs without gain (default 5)")
    run.add_argument("--model-seconds", type=float, metavar="SECONDS",
                     help="a model begins no epoch that would end more than SECONDS after its training began "
                          "(at least one epoch; default 0: no budget; make run plans its demo with it)")
    run.add_argument("--min-delta", type=float, metavar="X", help="accuracy gain that counts (default 0.001)")
    run.add_argument("--batch-size", type=int, metavar="N", help="per-rank batch of the warm-up rounds (default 32)")
    run.add_argument("--base-lr", type=float, metavar="X", help="learning rate per 256 samples (default 0.1)")
    run.add_argument("--hpo", help="batch/kernel tuner: tpe (default), gp or random")
    run.add_argument("--search", help="architecture search: bayesian (default) or random")
    run.add_argument("--no-inherit", dest="inherit", action="store_const", const=False,
                     help="train every child from scratch instead of inheriting its parent's weights")  # fmt: skip
    run.add_argument("--keep-weights", metavar="WHICH",
                     help="trained weights kept in the run directory: parents (default: only those a child may "
                     "still inherit, and the best model's) or all")  # fmt: skip
    run.add_argument("--xla", choices=("auto", "on", "off"),
                     help="compile the training step with XLA: auto (default: on for GPUs, off for CPUs, where "
                     "TensorFlow's own kernels train faster), on or off")  # fmt: skip
    run.add_argument("--no-xla", dest="xla", action="store_const", const="off", help="the same as --xla off")
    run.add_argument("--device-prefetch", choices=("auto", "on", "off"),
                     help="copy the next training batches to the device while a step runs: auto (default: on "
                     "GPUs), on or off")  # fmt: skip
    run.add_argument("--seed", type=int, help="random seed of search, tuning and training (default: a fresh one "
                     "drawn at start and logged, so repeat runs differ)")  # fmt: skip
    run.add_argument("--grace", type=float, metavar="SECONDS",
                     help="after the time limit, how long running epochs may finish (default 120)")  # fmt: skip
    run.add_argument("--progress-interval", type=float, metavar="SECONDS", help="progress line period (default 10)")
    run.add_argument("--device-memory-gb", type=float, metavar="GB",
                     help="memory of one device, bounds the tuned batch size (default 16)")  # fmt: skip
    run.add_argument("--monitor-interval", type=float, metavar="SECONDS",
                     help="utilisation/memory sample period on each node (default 30; 0: off)")  # fmt: skip
    run.add_argument("--no-peak-probe", dest="peak_probe", action="store_const", const=False,
                     help="skip the start-up matrix-multiply probe of each group's peak")  # fmt: skip
    run.add_argument("--peak-seconds", type=float, metavar="SECONDS",
                     help="how long the peak probe multiplies (default 3)")  # fmt: skip
    return parser


RUN_OPTIONS = (
    "time_limit", "max_models", "dataset", "data_path", "stage_dir", "image_size", "seed_model", "precision", "run_dir",
    "score_step", "max_epochs", "warmup_epochs", "patience", "model_seconds", "min_delta", "batch_size", "base_lr",
    "hpo", "search", "inherit", "keep_weights", "xla", "device_prefetch", "seed", "grace", "progress_interval",
    "device_memory_gb",
    "monitor_interval", "peak_probe", "peak_seconds",
)  # fmt: skip


def run_overrides(options: argparse.Namespace) -> dict[str, object]:
    """The run options given on the command line (``None`` = not given)."""
    values = {name: getattr(options, name) for name in RUN_OPTIONS}
    if options.group_size is not None:
        values["group_size"] = options.group_size
    if options.relays is not None:
        values["relays"] = options.relays
    return values


RESUME_OPTIONS = ("time_limit",)
"""what ``--resume`` takes besides the run directory: the rest is the logged configuration"""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _listed(flags: list[str]) -> str:
    """'--a does' or '--a, --b do'."""
    return f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'}"


def check_mode(options: argparse.Namespace) -> None:
    """Refuse options that the chosen mode would silently ignore.

    ``--layout`` runs nothing, so run options do not apply to it; ``--resume``
    continues the logged configuration, so only a new time limit applies.
    Raises :class:`UsageError` naming them all.
    """
    given = [name for name, value in run_overrides(options).items()
             if value is not None and name not in ("group_size", "relays")]  # both shape --layout too
    if options.json and not options.layout:
        raise UsageError("--json only applies to --layout")
    if options.layout:
        ignored = [_flag(n) for n in given] + (["--config"] if options.config else [])
        ignored += [] if options.report else ["--no-report"]
        ignored += ["--resume"] if options.resume else []
        if ignored:
            raise UsageError(f"{_listed(ignored)} not apply to --layout, which only prints the layout")
    elif options.resume:
        ignored = [_flag(n) for n in given if n not in RESUME_OPTIONS]
        ignored += ["--config"] if options.config else []
        ignored += ["--group-size"] if options.group_size is not None else []
        ignored += ["--relays"] if options.relays is not None else []
        if ignored:
            raise UsageError(f"{_listed(ignored)} not apply to --resume: a resumed run keeps its logged "
                             "configuration; only --time-limit may be given")  # fmt: skip


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
