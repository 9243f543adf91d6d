"""The batch sizes a run's tuners may choose, recomputed from its configuration and its seed model, not read from
the log (the ``search`` family's ``search space`` row; sized once a run by the unit stream,
:class:`analysis.verify.units.UnitStream`, at the log's first proposal, for every proposal's unit to carry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from aiperf_mpi.graph.lineage import seed_from_record
from aiperf_mpi.graph.model import batch_choices
from aiperf_mpi.graph.seeds import seed_model
from aiperf_mpi.results.graphs import GraphFileError

ERRORS = (ValueError, KeyError, TypeError, AttributeError, RecursionError, GraphFileError, UnicodeDecodeError)
"""what a malformed record or graph raises here: the graph files and lineage rows name it"""
GIB = 2**30
MAX_MEMORY_GB = 2**20
"""the largest ``device_memory_gb`` the configuration takes (aiperf_mpi/config.py's bounds)"""


@dataclass(frozen=True)
class TunerBatches:
    """The batch sizes the tuners may choose (None: they cannot be recomputed), why those, and the ``search
    space`` row's missing line when none."""

    batches: frozenset[int] | None
    why: str
    missing: str = ""


def tuner_batches(config: Mapping | None, data: object, seed: object) -> TunerBatches:
    """The batch sizes every group's tuner may choose and why those (None and why none: the row's missing line):
    the configured ``batch_size`` of the warm-up rounds and the powers of two that fit ``device_memory_gb`` for the
    seed model, by the first ``run_start``'s ``config`` and ``data`` and the first proposal's ``seed`` record."""
    config = config or {}
    memory, default = config.get("device_memory_gb"), config.get("batch_size")
    if not (isinstance(memory, int | float) and not isinstance(memory, bool) and 0 <= memory <= MAX_MEMORY_GB
            and isinstance(default, int) and not isinstance(default, bool)):  # fmt: skip
        why = "the configuration has no usable device_memory_gb and batch_size"
        return TunerBatches(None, why, f"{why} (a log older than them): batch sizes are not held to the tuner's")
    try:
        model = _seed(config, data, seed)
    except ERRORS as exc:
        why = f"no seed model to size them by ({str(exc)[:80]})"
        return TunerBatches(None, why, f"{why}: batch sizes are not held to the tuner's")
    return TunerBatches(frozenset(batch_choices(model, int(memory * GIB))) | {default},
                        f"the configured batch_size {default} and the powers of two that fit {memory:g} GB for the "
                        f"seed model, {config.get('seed_model')}")  # fmt: skip


def _seed(config: Mapping, data: object, seed: object) -> nx.DiGraph:
    """The seed model the leaders sized their batches by: the configured one, for the data the check read (a log
    without the data check: the proposal's seed record)."""
    if isinstance(data, Mapping) and isinstance(data.get("image_shape"), list) and len(data["image_shape"]) == 3:
        size, _, channels = data["image_shape"]
        return seed_model(config.get("seed_model"), size, channels, data.get("classes"))
    return seed_from_record(seed)
