"""Where a task's trained weights are in a run directory: its ``weights/task-N.npz``, or ``best/model.keras``.

The best model is stored once: the end-of-run export writes it to
``best/model.keras`` (float32, the same arrays: every precision keeps float32
variables) and removes the task's ``.npz``, saying so in
``best/metadata.json`` (``weights_file`` and ``weights_file_removed``).  The
log still names the ``.npz`` (``model_done``'s ``weights``; no
``weights_removed`` event), so the master's retention and ``--resume`` keep
believing the file exists: every reader of a task's weights — a training rank
loading its parent's, a re-export — asks :func:`weights_location` where they
are instead of opening the name.  One decision, one place; pure (no I/O, no
TensorFlow) so that it is unit-tested without a run.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path

BEST_DIR = "best"
BEST_MODEL = f"{BEST_DIR}/model.keras"
"""the published best model, relative to the run directory"""
BEST_METADATA = f"{BEST_DIR}/metadata.json"
WEIGHTS_FILE = "weights_file"
"""``best/metadata.json``: the weights file (relative to the run directory) the exported model was built from"""
WEIGHTS_FILE_REMOVED = "weights_file_removed"
"""``best/metadata.json``: true when that file is gone and ``model.keras`` is the only copy of its weights"""


def weights_location(weights_file: str, best_metadata: dict | None, present: Collection[str]) -> str | None:
    """The file (relative to the run directory) that holds the weights logged as ``weights_file``; None: nowhere.

    ``present`` are the relative paths known to exist among ``weights_file`` and :data:`BEST_MODEL`;
    ``best_metadata`` is ``best/metadata.json`` (None when there is none or it cannot be read).  The ``.npz``
    wins whenever it exists; ``best/model.keras`` serves only when the metadata says it was built from exactly
    that file and that the file was removed (any other best model holds other weights).
    """
    if not weights_file:
        return None
    if weights_file in present:
        return weights_file
    holds_it = (isinstance(best_metadata, dict) and best_metadata.get(WEIGHTS_FILE) == weights_file
                and best_metadata.get(WEIGHTS_FILE_REMOVED) is True)  # fmt: skip
    return BEST_MODEL if holds_it and BEST_MODEL in present else None


def read_best_metadata(run_dir: Path) -> dict | None:
    """``best/metadata.json`` of ``run_dir``, or None when it is missing or unreadable (no best model to fall to)."""
    try:
        data = json.loads((Path(run_dir) / BEST_METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def locate_weights(run_dir: Path, weights_file: str) -> Path | None:
    """:func:`weights_location` on the disk: the path to read ``weights_file``'s weights from, or None.

    None too for a name that leaves the run directory (absolute, or with ``..``): the name comes from a
    leader's message or a log, and what a run or an export reads as weights is the run's own.
    """
    run_dir = Path(run_dir)
    if Path(weights_file).is_absolute() or ".." in Path(weights_file).parts:
        return None
    present = {name for name in (weights_file, BEST_MODEL) if name and (run_dir / name).is_file()}
    if weights_file in present:  # the common case: no metadata to read
        return run_dir / weights_file
    where = weights_location(weights_file, read_best_metadata(run_dir), present)
    return None if where is None else run_dir / where
