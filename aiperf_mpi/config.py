"""One configuration layer: defaults ← TOML file (``--config``) ← command-line options.

Validated in one place, on rank 0, before anything starts; every bad value
gets its own clear message, all of them reported together in one line.
"""

from __future__ import annotations

import math
import secrets
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from aiperf_mpi.data.sources import DATASETS
from aiperf_mpi.errors import UsageError
from aiperf_mpi.graph.seeds import SEED_MODELS
from aiperf_mpi.results.datasets import RESIZABLE
from aiperf_mpi.results.precisions import PRECISIONS
from aiperf_mpi.results.rules import VALID_SEARCH, VALID_TUNER
from aiperf_mpi.results.score import DEFAULT_STEP
from aiperf_mpi.search.registry import SEARCHES, TUNERS

KEEP_WEIGHTS = ("parents", "all")
"""which trained weights stay in the run directory (see :mod:`aiperf_mpi.job.retention`)"""
XLA_SETTINGS = ("auto", "on", "off")
"""the values of the per-device switches (``xla``, ``device_prefetch``): auto decides by the device"""


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; the field names are the TOML keys (``--time-limit`` ↔ ``time_limit``)."""

    time_limit: float = 3600.0
    """the benchmark's wall clock, seconds"""
    max_models: int = 0
    """stop handing out work after this many models (0: no limit)"""
    dataset: str = "digits"
    data_path: str = ""
    stage_dir: str = ""
    """copy file-based data to this node-local directory first ('' : read in place)"""
    image_size: int = 0
    """0: the data set's own size"""
    seed_model: str = "resnet50"
    precision: str = "auto"
    """auto (bf16 on GPUs with bf16 tensor cores, fp16 on older tensor-core GPUs, fp32 on CPUs:
    :func:`resolve_precision`), fp32, fp16 or bf16"""
    group_size: int = 0
    """0: one group per node"""
    relays: int = 0
    """ranks on rank 0's node that receive and check the leaders' messages for it (mpi/relay.py); 0: rank 0 does"""
    run_dir: str = ""
    """'' : runs/run-<date>-<time>"""
    score_step: float = DEFAULT_STEP
    max_epochs: int = 60
    search_warmup_epochs: int = 0
    """epochs each model of a group's first three rounds (the search's warm-up) trains at most, its final accuracy
    then predicted for the search (0: as many as max_epochs allow; never more than max_epochs).  Not the learning
    rate's warm-up, which the trainer applies to every model (``results.epochs.LEARNING_RATE_WARMUP_EPOCHS``)"""
    model_seconds: float = 0.0
    """a model's training time budget: it begins no epoch that, as long as its last, would end more than this
    many seconds after its training began (at least one epoch; 0: no budget).  ``make run`` plans its demo
    with it: time limit ÷ models, so the same number of models fits on a fast or a slow machine"""
    patience: int = 5
    min_delta: float = 0.001
    batch_size: int = 32
    """per-rank batch size of the warm-up rounds (tuned afterwards)"""
    base_lr: float = 0.1
    hpo: str = VALID_TUNER
    search: str = VALID_SEARCH
    inherit: bool = True
    keep_weights: str = "parents"
    """which trained weights stay in the run directory: parents (those a child may still inherit, and the
    best model) or all"""
    xla: str = "auto"
    """compile the training step with XLA: auto (on GPUs, off on CPUs: measured in BENCHMARKS.md), on, off"""
    device_prefetch: str = "auto"
    """copy the next training batches to the device while a step runs: auto (on GPUs), on, off"""
    seed: int = 0
    """fixed by ``--seed``/TOML; a run's configuration without one gets a fresh seed drawn by
    :func:`load_config` (rank 0), so repeat runs differ.  The logged seed is the one used (``--resume`` keeps it);
    this default serves only code that builds a RunConfig itself"""
    grace: float = 120.0
    """seconds the master waits, after the time limit, for running epochs to finish"""
    startup_deadline: float = 0.0
    """seconds a rank may take from its start to the start line before the job is ended (job/deadlines.py); 0:
    derived from the world's size (300 s + 0.3 s a rank)"""
    first_model_deadline: float = 0.0
    """seconds a group may be silent in its first model (search, build, trace, first epoch) before it is lost; 0:
    derived per group from its probed peak and the seed's first epoch (job/deadlines.first_model_for)"""
    end_deadline: float = 900.0
    """seconds rank 0's end may take after the drain (score, report, agreement, MPI_Finalize) before it ends the
    job; a training rank's end is bounded by this plus the grace plus a margin"""
    io_deadline: float = 300.0
    """seconds one fsync of rank 0's run log may take before the job is ended (a hung file system)"""
    ignore_limits: bool = False
    """start even when rank 0 finds a node's memory (its cgroup's or its own) or its open-file hard limit short of
    what the job needs (mpi/limits.py); by default it refuses, in one line, before anything starts"""
    master_deadline: float = 120.0
    """seconds rank 0 may be silent mid-run (no heartbeat to its watching leaders: mpi/heartbeat.py) before a
    watcher ends the job: a stopped or hung rank 0"""
    hang_margin: float = 60.0
    """seconds the master adds to 3 × a group's longest epoch (or first-epoch cost) before a group silent mid-run is
    lost (job/faults.HangPolicy): a check-point write, a slow validation, a busy file system"""
    progress_interval: float = 10.0
    device_memory_gb: float = 16.0
    """memory of one device, for the batch-size range"""
    monitor_interval: float = 30.0
    """seconds between utilisation samples on each node (0: no monitor)"""
    peak_probe: bool = True
    """measure each group's dense matrix-multiply throughput at start-up"""
    peak_seconds: float = 3.0
    """how long the peak probe multiplies"""
    rehearse: bool = False
    """a rehearsal (``--rehearse``): the job's shape with a stand-in for the training arithmetic
    (:mod:`aiperf_mpi.job.rehearsal`), no TensorFlow; never valid, and every file it writes says so"""
    rehearse_rate: float = 1e13
    """a rehearsal's stand-in speed, operations per second per rank: an epoch lasts its analytic operations at
    this rate (1e13: a ResNet-50 epoch of ImageNet at 224² on 8 ranks in ≈ 6 minutes)"""
    rehearse_allreduce: float = 1.0
    """the share of a model's parameter bytes a rehearsing group all-reduces once an epoch"""
    hardware_changed: str = ""
    """why a resumed segment runs on other hardware than the first segment (``--resume RUN_DIR
    --hardware-changed REASON``; '' : the same hardware, which verify then holds it to).  Its own segment's:
    a resume that does not give it says the hardware did not change"""

    def to_dict(self) -> dict:
        return asdict(self)


FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}

FILE_DATASETS = ("cifar10", "imagenet", "hdf5")
RESIZED_DATASETS = RESIZABLE
"""data sets whose image size is chosen by ``image_size`` (the data sets' table's); the others have a fixed size"""
MAX_GRID_POINTS = 1_000_000
"""time_limit / score_step at most: the score's grid is kept in memory and drawn"""

# Each numeric field: (lowest, highest, lowest allowed itself?).  The upper
# bounds are far beyond any real run but keep a typo (1e300) or an overflow
# from reaching code that would loop, allocate or hang on it.
NUMERIC_RANGES: dict[str, tuple[float, float, bool]] = {
    "time_limit": (0.0, 31 * 86400.0, False),
    "max_models": (0, 10**9, True),
    "image_size": (0, 4096, True),
    "group_size": (0, 2**20, True),
    "relays": (0, 2**16, True),
    "score_step": (1.0, 31 * 86400.0, True),
    "max_epochs": (1, 10**6, True),
    "search_warmup_epochs": (0, 10**6, True),
    "patience": (1, 10**6, True),
    "model_seconds": (0.0, 31 * 86400.0, True),
    "min_delta": (0.0, 1.0, True),
    "batch_size": (1, 2**20, True),
    "base_lr": (0.0, 1000.0, False),
    "seed": (0, 2**32 - 1, True),
    "grace": (0.0, 86400.0, True),
    "startup_deadline": (0.0, 31 * 86400.0, True),  # 0: derived from the job
    "first_model_deadline": (0.0, 31 * 86400.0, True),
    "end_deadline": (0.0, 31 * 86400.0, False),
    "io_deadline": (0.0, 31 * 86400.0, False),
    "master_deadline": (0.0, 31 * 86400.0, False),
    "hang_margin": (0.0, 31 * 86400.0, False),
    "progress_interval": (0.1, 86400.0, True),
    "device_memory_gb": (0.0, 2**20, False),
    "monitor_interval": (0.0, 86400.0, True),
    "peak_seconds": (0.0, 3600.0, False),
    "rehearse_rate": (0.0, 1e20, False),
    "rehearse_allreduce": (0.0, 1.0, True),
}
CHOICES: dict[str, tuple[str, ...]] = {
    "dataset": DATASETS,
    "seed_model": SEED_MODELS,
    "precision": ("auto", *PRECISIONS),
    "hpo": tuple(TUNERS),
    "search": tuple(SEARCHES),
    "xla": XLA_SETTINGS,
    "device_prefetch": XLA_SETTINGS,
    "keep_weights": KEEP_WEIGHTS,
}


def _range_problem(name: str, value: float) -> str | None:
    """Why ``value`` is out of ``name``'s range (non-finite included), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be a finite number, got {value}"
    low, high, low_ok = NUMERIC_RANGES[name]
    if value < low or (value == low and not low_ok):
        return f"{name} must be {'≥' if low_ok else '>'} {shown_number(low)}, got {shown_number(value)}"
    if value > high:
        return f"{name} must be ≤ {shown_number(high)}, got {shown_number(value)}"
    return None


def shown_number(value: float) -> str:
    """A number as a user would write it: whole numbers in full, others short (the messages here, ``--help``)."""
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:g}"


def _validate(config: RunConfig, given: set[str], skip: set[str] = frozenset()) -> list[str]:
    """Every problem of ``config``, each once; ``given`` are the fields set by TOML or CLI.

    ``skip`` are fields already reported (a wrong type): they hold their
    default here and are not judged again.
    """
    problems = []
    for name in NUMERIC_RANGES:
        if name not in skip:
            problem = _range_problem(name, getattr(config, name))
            if problem:
                problems.append(problem)
    for name, choices in CHOICES.items():
        value = getattr(config, name)
        if name not in skip and value not in choices:
            extra = " (nothing narrower than FP16)" if name == "precision" else ""
            problems.append(f"{name} must be one of {', '.join(choices)}{extra}, got {value!r}")
    dataset = config.dataset
    if dataset in FILE_DATASETS and not config.data_path:
        problems.append(f"dataset {dataset!r} needs data_path (--data-path)")
    if dataset in DATASETS and dataset not in FILE_DATASETS:
        if config.data_path:
            problems.append(f"data_path does not apply to dataset {dataset!r} (it is embedded or generated)")
        if config.stage_dir:
            problems.append(f"stage_dir applies to file-based data ({', '.join(FILE_DATASETS)}), not {dataset!r}")
    if dataset in DATASETS and dataset not in RESIZED_DATASETS and config.image_size:
        problems.append(f"image_size does not apply to dataset {dataset!r}: its images have a fixed size "
                        f"(only {' and '.join(RESIZED_DATASETS)} are resized)")  # fmt: skip
    rehearsing = [name for name in ("rehearse_rate", "rehearse_allreduce") if name in given]
    if rehearsing and not config.rehearse:
        verb = "applies" if len(rehearsing) == 1 else "apply"
        problems.append(f"{' and '.join(rehearsing)} {verb} only to a rehearsal (--rehearse)")
    if not config.peak_probe and "peak_seconds" in given:
        problems.append("peak_seconds does not apply with the peak probe off (--no-peak-probe)")
    if not skip & {"time_limit", "score_step"} and not _range_problem("time_limit", config.time_limit):
        if not _range_problem("score_step", config.score_step) and \
                config.time_limit / config.score_step > MAX_GRID_POINTS:  # fmt: skip
            problems.append(f"score_step {config.score_step:g} s is too fine for time_limit {config.time_limit:g} s "
                            f"(at most {MAX_GRID_POINTS:,} grid points)")  # fmt: skip
    return problems


@dataclass(frozen=True)
class DeviceCaps:
    """What a training rank's device offers, for the precision ``auto`` chooses (no TensorFlow here)."""

    kind: str
    """'GPU' or 'CPU'"""
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    """NVIDIA's (major, minor); None where TensorFlow does not say (CPUs, other vendors)"""


BF16_CAPABILITY = (8, 0)
"""Ampere and later: bf16 tensor cores"""
FP16_CAPABILITY = (7, 0)
"""Volta and later: fp16 tensor cores"""


def resolve_precision(setting: str, devices: list[DeviceCaps]) -> tuple[str, str]:
    """The one precision a run trains at, and why: ``setting`` unless it is ``auto``.

    ``auto`` takes what every training rank's device runs fast, so a run has
    one precision (its validity rule and its peak probe name one): bf16 where
    every rank has an NVIDIA GPU of compute capability 8.0 or more (bf16 has
    fp32's range: no loss scaling), fp16 with dynamic loss scaling where every
    rank has tensor cores (7.0 or more), fp32 otherwise — on CPUs (bf16 trained
    ResNet-50 only 1.07× faster than fp32 here, and converges differently), on
    GPUs without tensor cores, on GPUs whose capability TensorFlow does not
    report, and in a run that mixes CPUs and GPUs.
    """
    if setting != "auto":
        return setting, "set by the configuration"
    if not devices:
        return "fp32", "no training rank reported a device"
    if any(d.kind != "GPU" for d in devices):
        return "fp32", "a training rank has no GPU (CPUs train at fp32)"
    capabilities = [d.compute_capability for d in devices]
    if any(c is None for c in capabilities):
        return "fp32", "a GPU's compute capability is unknown (set --precision to choose)"
    lowest = min(capabilities)
    shown = f"{lowest[0]}.{lowest[1]}"
    if lowest >= BF16_CAPABILITY:
        return "bf16", f"every training rank has a GPU with bf16 tensor cores (compute capability {shown} ≥ 8.0)"
    if lowest >= FP16_CAPABILITY:
        return "fp16", (f"the GPUs have fp16 tensor cores but not bf16 (lowest compute capability {shown}): fp16 with "
                        "dynamic loss scaling")  # fmt: skip
    return "fp32", f"the GPUs have no tensor cores (lowest compute capability {shown} < 7.0)"


def xla_enabled(setting: str | bool, accelerator: bool) -> bool:
    """Whether a rank compiles its training step with XLA.

    ``auto`` turns it on where the rank has a GPU and off on CPUs: on CPU the
    plain ``tf.function`` path (oneDNN kernels) trained ResNet-50 2.8–3.8×
    faster than XLA (BENCHMARKS.md, "XLA against tf.function").  A logged
    configuration from before the setting had three values holds a bool.
    """
    if isinstance(setting, bool):
        return setting
    return setting == "on" or (setting == "auto" and accelerator)


def device_prefetch_enabled(setting: str, accelerator: bool) -> bool:
    """Whether a rank's input pipeline prefetches batches onto its device (auto: where it has a GPU).

    On a GPU the host→device copy of the next batches then overlaps the
    running step; on a CPU the batch is already where the step runs.
    """
    return setting == "on" or (setting == "auto" and accelerator)


def _coerce(name: str, value: object) -> object:
    """TOML/CLI value → the field's type, or a message."""
    kind = FIELD_TYPES[name]
    if name in ("xla", "device_prefetch") and isinstance(value, bool):  # xla = true/false in TOML
        return "on" if value else "off"
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise TypeError(f"{name} must be true or false, got {value!r}")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be a whole number, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{name} must be a number, got {value!r}")
        try:
            return float(value)
        except OverflowError:  # a TOML integer beyond a double
            raise TypeError(f"{name} must be a finite number, got {value}") from None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    if "\0" in value:
        raise TypeError(f"{name} must not contain a NUL character")
    return value


DRAWN_SEED_LIMIT = 2**31
"""a drawn seed is below this: every consumer (NumPy, Keras, the leaders' ``seed * 100_003 + group``) takes it"""


def draw_seed() -> int:
    """A fresh seed from the operating system: a repeat run samples another search path, as a spread needs."""
    return secrets.randbelow(DRAWN_SEED_LIMIT)


def load_config(toml_path: str | None, overrides: dict[str, object]) -> RunConfig:
    """Defaults ← TOML ← ``overrides`` (CLI values that were given), validated; a seed drawn where none was given.

    Raises :class:`UsageError` naming every bad key or value at once: a value
    of the wrong type is reported and its field judged no further; every
    other field is still checked, so one run of the command shows all of a
    file's mistakes.
    """
    values: dict[str, object] = {}
    problems: list[str] = []
    type_problems: dict[str, str] = {}
    """field → why its (last given) value has the wrong type; a later layer's good value clears it"""
    sources: list[tuple[str, dict]] = []
    if toml_path:
        path = Path(toml_path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"cannot read --config {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--config {path} is not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"--config {path} is not valid TOML: {exc}") from None
        data = data.get("aiperf_mpi", data)  # either top level or an [aiperf_mpi] table
        if not isinstance(data, dict):
            raise UsageError(f"--config {path}: [aiperf_mpi] must be a table")
        known = {}
        for key, value in data.items():
            name = key.replace("-", "_")
            if name not in FIELD_TYPES:
                problems.append(f"unknown key {key!r} in {path}")
            else:
                known[name] = value
        sources.append(("config", known))
    sources.append(("command line", {k: v for k, v in overrides.items() if v is not None}))
    for _, given in sources:
        for name, value in given.items():
            try:
                values[name] = _coerce(name, value)
                type_problems.pop(name, None)
            except TypeError as exc:
                values.pop(name, None)
                type_problems[name] = str(exc)
    if "seed" not in values and "seed" not in type_problems:
        values["seed"] = draw_seed()
    config = RunConfig(**values)
    problems += type_problems.values()
    problems += _validate(config, set(values) | set(type_problems), skip=set(type_problems))
    if problems:
        raise UsageError("; ".join(problems))
    return config
