"""One configuration layer: defaults ← TOML file (``--config``) ← command-line options.

Validated in one place, on rank 0, before anything starts; every bad value
gets its own clear message, all of them reported together in one line.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from aiperf_mpi.data.sources import DATASETS
from aiperf_mpi.errors import UsageError
from aiperf_mpi.graph.seeds import SEED_MODELS
from aiperf_mpi.search.hpo import HPO_KINDS

SEARCHES = ("bayesian", "random")
PRECISIONS = ("fp32", "fp16", "bf16")


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
    precision: str = "fp32"
    group_size: int = 0
    """0: one group per node"""
    run_dir: str = ""
    """'' : runs/run-<date>-<time>"""
    score_step: float = 360.0
    max_epochs: int = 60
    patience: int = 5
    min_delta: float = 0.001
    batch_size: int = 32
    """per-rank batch size of the warm-up rounds (tuned afterwards)"""
    base_lr: float = 0.1
    hpo: str = "tpe"
    search: str = "bayesian"
    inherit: bool = True
    xla: bool = True
    seed: int = 0
    grace: float = 120.0
    """seconds the master waits, after the time limit, for running epochs to finish"""
    progress_interval: float = 10.0
    device_memory_gb: float = 16.0
    """memory of one device, for the batch-size range"""
    monitor_interval: float = 30.0
    """seconds between utilisation samples on each node (0: no monitor)"""
    peak_probe: bool = True
    """measure each group's dense matrix-multiply throughput at start-up"""
    peak_seconds: float = 3.0
    """how long the peak probe multiplies"""

    def to_dict(self) -> dict:
        return asdict(self)


FIELD_TYPES = {f.name: f.type for f in fields(RunConfig)}


def _validate(config: RunConfig) -> list[str]:
    problems = []

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    need(config.time_limit > 0, f"time_limit must be > 0 seconds, got {config.time_limit}")
    need(config.max_models >= 0, f"max_models must be ≥ 0, got {config.max_models}")
    need(config.dataset in DATASETS, f"dataset must be one of {', '.join(DATASETS)}, got {config.dataset!r}")
    need(
        config.dataset not in ("cifar10", "imagenet", "hdf5") or bool(config.data_path),
        f"dataset {config.dataset!r} needs data_path (--data-path)",
    )
    need(
        not config.stage_dir or config.dataset in ("cifar10", "imagenet", "hdf5"),
        f"stage_dir applies to file-based data (cifar10, imagenet, hdf5), not {config.dataset!r}",
    )
    need(config.image_size >= 0, f"image_size must be ≥ 0, got {config.image_size}")
    need(config.seed_model in SEED_MODELS, f"seed_model must be one of {', '.join(SEED_MODELS)}, "
         f"got {config.seed_model!r}")  # fmt: skip
    need(config.precision in PRECISIONS, f"precision must be fp32, fp16 or bf16 (nothing narrower than FP16), "
         f"got {config.precision!r}")  # fmt: skip
    need(config.group_size >= 0, f"group_size must be ≥ 0, got {config.group_size}")
    need(config.score_step > 0, f"score_step must be > 0 seconds, got {config.score_step}")
    need(config.max_epochs >= 1, f"max_epochs must be ≥ 1, got {config.max_epochs}")
    need(config.patience >= 1, f"patience must be ≥ 1, got {config.patience}")
    need(config.min_delta >= 0, f"min_delta must be ≥ 0, got {config.min_delta}")
    need(config.batch_size >= 1, f"batch_size must be ≥ 1, got {config.batch_size}")
    need(config.base_lr > 0, f"base_lr must be > 0, got {config.base_lr}")
    need(config.hpo in HPO_KINDS, f"hpo must be one of {', '.join(HPO_KINDS)}, got {config.hpo!r}")
    need(config.search in SEARCHES, f"search must be one of {', '.join(SEARCHES)}, got {config.search!r}")
    need(config.grace >= 0, f"grace must be ≥ 0 seconds, got {config.grace}")
    need(config.progress_interval > 0, f"progress_interval must be > 0, got {config.progress_interval}")
    need(config.monitor_interval >= 0, f"monitor_interval must be ≥ 0 seconds (0: off), got {config.monitor_interval}")
    need(config.peak_seconds > 0, f"peak_seconds must be > 0, got {config.peak_seconds}")
    need(config.device_memory_gb > 0, f"device_memory_gb must be > 0, got {config.device_memory_gb}")
    return problems


def _coerce(name: str, value: object) -> object:
    """TOML/CLI value → the field's type, or a message."""
    kind = FIELD_TYPES[name]
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
        return float(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    return value


def load_config(toml_path: str | None, overrides: dict[str, object]) -> RunConfig:
    """Defaults ← TOML ← ``overrides`` (CLI values that were given), validated.

    Raises :class:`UsageError` naming every bad key or value at once.
    """
    values: dict[str, object] = {}
    problems: list[str] = []
    if toml_path:
        path = Path(toml_path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"cannot read --config {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"--config {path} is not valid TOML: {exc}") from None
        data = data.get("aiperf_mpi", data)  # either top level or an [aiperf_mpi] table
        for key, value in data.items():
            name = key.replace("-", "_")
            if name not in FIELD_TYPES:
                problems.append(f"unknown key {key!r} in {path}")
                continue
            try:
                values[name] = _coerce(name, value)
            except TypeError as exc:
                problems.append(str(exc))
    for name, value in overrides.items():
        if value is not None:
            values[name] = value
    if problems:
        raise UsageError("; ".join(problems))
    config = RunConfig(**values)
    problems = _validate(config)
    if problems:
        raise UsageError("; ".join(problems))
    return config
