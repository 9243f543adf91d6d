"""Every kept weights file against the log: its sha256 and its graph's shapes; ``best/`` tied to the log.

A task's ``weights/task-N.npz`` is what a child inherits and what the best
model is published and re-evaluated from, so it must be the file the run
wrote and the model the run trained.  Its training rank logs the file's
sha256 in the task's ``model_done`` (``weights_sha256``); the export records
in ``best/metadata.json`` the sha256 of the ``.npz`` it built
``best/model.keras`` from and of the ``model.keras`` it wrote.  Here, without
TensorFlow:

* each ``weights/*.npz`` present: its sha256 is the one its ``model_done``
  logged, and its arrays' shapes — read from their headers alone
  (:func:`aiperf_mpi.results.stored_weights.npz_shapes`) — are, layer for
  layer, the shapes of its graph as trained
  (:func:`aiperf_mpi.graph.model.param_shapes` of the stored graph at its
  kernel size): another model's weights, or a file edited by hand, fail;
* ``best/model.keras``: its sha256 is the one ``best/metadata.json`` records,
  and the ``.npz`` it was built from had the sha256 the log records for that
  task.

A file no ``model_done`` names (a task cut off between saving its weights
and its end) is noted; a log from before the sha256 was logged is *not
recorded*.

The row's rule, :func:`weights_files`, is a plain function of the run unit (:mod:`analysis.verify.units`): the
files are judged once the log has been read, against what the unit stream kept as it read it — each weights file's
latest ``model_done`` (its task, the sha256 logged, the kernel size it trained with: its record's, else its task's
latest proposal's as of that end) and where each task's latest proposal placed its graph.
"""

from __future__ import annotations

from pathlib import Path

from aiperf_mpi.graph.model import GraphError, as_trained, from_json, param_shapes
from aiperf_mpi.results.graphs import GraphFileError, read_graph
from aiperf_mpi.results.stored_weights import (
    BEST_MODEL,
    MAX_KERAS_WEIGHTS_BYTES,
    MODEL_SHA256,
    WEIGHTS_FILE,
    WEIGHTS_SHA256,
    WeightsFileError,
    file_sha256,
    keras_shapes,
    most_weights_bytes,
    npz_shapes,
    read_best_metadata,
)
from analysis.checks import BadInput, is_regular_file
from analysis.verify.units import (
    END,
    PROBLEM,
    Finding,
    Findings,
    RunUnit,
    SavedWeights,
    missing,
    note,
    problem,
    summary,
)

WEIGHTS_DIR = "weights"
RULE = "rule: a kept weights file is the logged one, of its graph's shapes"


def weights_files(run: RunUnit) -> Findings:
    """each `weights/*.npz` a `model_done` names has the sha256 that `model_done` logged (`weights_sha256`, written by
    the rank that saved the file) and, read from the arrays' headers without TensorFlow, exactly the arrays of its
    graph as trained (the stored graph at its `kernel_size`: conv kernel `(k, k, in, out)` and bias, dense kernel and
    bias, batch normalisation's four vectors), layer for layer; `best/model.keras` has the sha256
    `best/metadata.json` records (`model_sha256`), and the `.npz` it was built from had the one the log records
    (`weights_sha256`). A file no `model_done` names is noted; a log or an export from before the sha256 was
    recorded is *not recorded*. A file larger than its graph's arrays can need (8 bytes an element, 64 KiB an
    array, 64 MiB besides) is refused before it is hashed"""
    folder = run.run_dir / WEIGHTS_DIR
    files = sorted(folder.glob("*.npz")) if folder.is_dir() and not folder.is_symlink() else []
    held = 0
    for path in files:
        name = f"{WEIGHTS_DIR}/{path.name}"
        try:
            regular = is_regular_file(path)
        except BadInput:
            regular = False
        if not regular:
            yield problem(END, f"{name}: not a regular file ({RULE})")
        elif name not in run.saved_weights:
            yield note(END, f"{name}: no model_done names it (a task cut off between saving its weights and its "
                            "end, or not the run's): not checked")  # fmt: skip
        else:
            found = list(_held(run, path, name))
            yield from found
            held += not any(f.kind == PROBLEM for f in found) and bool(run.saved_weights[name].sha256)
    yield from _best(run)
    yield summary(f"{held} of {len(files)} kept weights file(s) the logged sha256 and their graph's shapes"
                  + ("" if files else " (none kept here)"))  # fmt: skip


def _held(run: RunUnit, path: Path, name: str) -> Findings:
    """What is wrong with the file ``name`` (a task's, by the log): not the logged file, or not its graph's shapes."""
    saved = run.saved_weights[name]
    task, logged = saved.task, saved.sha256
    expected, unread = _expected(run, task, saved.kernel, name)
    yield from unread
    found = None
    try:  # the arrays' headers: a few kB
        found = npz_shapes(path)
    except WeightsFileError as exc:
        yield problem(END, f"{name} (task {task}): {exc} ({RULE})")
    if not logged:
        yield missing(END, f"{name} (task {task}): the log records no {WEIGHTS_SHA256} (a run from before it was "
                           "logged)")  # fmt: skip
    else:
        try:  # no more bytes hashed than the graph's arrays can need
            digest = file_sha256(path, _most_bytes(expected))
        except WeightsFileError as exc:
            yield problem(END, f"{name} (task {task}): {exc} ({RULE})")
        else:
            if digest != logged:
                yield problem(END, f"{name} (task {task}): sha256 {digest[:16]}…, the log records {logged[:16]}…: "
                                   f"not the file the run saved ({RULE})")  # fmt: skip
    if found is not None and expected is not None and found != expected:
        yield problem(END, f"{name} (task {task}): {_difference(found, expected)} ({RULE})")


def _expected(run: RunUnit, task: object, kernel: object,
              name: str) -> tuple[dict[str, list[tuple[int, ...]]] | None, list[Finding]]:  # fmt: skip
    """The shapes of ``task``'s graph as trained at ``kernel``, read where its latest proposal placed it (None, and
    the problem: it cannot be read)."""
    place = run.proposed_places.get(task, ({}, None))[0]
    try:
        if not place.get("graph_file"):
            raise GraphFileError("its model_proposed places no graph")
        graph = as_trained(from_json(read_graph(run.run_dir, place)), kernel)
        return param_shapes(graph), []
    except (GraphFileError, GraphError, ValueError, TypeError) as exc:
        return None, [problem(END, f"{name} (task {task}): its graph cannot be read to hold it to "
                                   f"({' '.join(str(exc).split())[:120]}) ({RULE})")]  # fmt: skip


def _best(run: RunUnit) -> Findings:
    """``best/model.keras`` tied to the log through ``best/metadata.json``'s two sha256s."""
    model = run.run_dir / BEST_MODEL
    try:
        present = is_regular_file(model)
    except BadInput:
        present = False
    meta = read_best_metadata(run.run_dir)
    if not present or meta is None or not isinstance(meta.get(WEIGHTS_FILE), str):
        return  # no best model (the best/ row says so), or one it names unreadable
    source = meta[WEIGHTS_FILE]
    saved = run.saved_weights.get(source, SavedWeights(meta.get("task"), "", None))
    task, logged = saved.task, saved.sha256
    if MODEL_SHA256 not in meta or WEIGHTS_SHA256 not in meta:
        yield missing(END, f"{BEST_MODEL}: best/metadata.json records no {MODEL_SHA256} and {WEIGHTS_SHA256} (an "
                           "export from before they were recorded)")  # fmt: skip
        return
    expected, unread = _expected(run, task, saved.kernel, BEST_MODEL) if isinstance(task, int) else (None, [])
    yield from unread
    try:
        digest = file_sha256(model, _most_bytes(expected))
    except WeightsFileError as exc:
        yield problem(END, f"{BEST_MODEL}: {exc} ({RULE})")
        return
    tied = not unread  # the file the export wrote: then its arrays, shape for shape
    if digest != meta[MODEL_SHA256]:
        tied = False
        yield problem(END, f"{BEST_MODEL}: its sha256 is not best/metadata.json's {MODEL_SHA256}: not the file the "
                           f"export wrote ({RULE})")  # fmt: skip
    if logged and meta[WEIGHTS_SHA256] != logged:
        tied = False
        yield problem(END, f"{BEST_MODEL}: built from weights of sha256 {str(meta[WEIGHTS_SHA256])[:16]}…, the log "
                           f"records {logged[:16]}… for {source} (task {task}) ({RULE})")  # fmt: skip
    if tied and expected is not None:
        try:
            found = keras_shapes(model)
        except WeightsFileError as exc:
            yield problem(END, f"{BEST_MODEL}: {exc} ({RULE})")
        else:
            wanted = sorted(_all_shapes(expected))
            if found != wanted:
                yield problem(END, f"{BEST_MODEL}: {len(found)} arrays, not the {len(wanted)} of task {task}'s "
                                   f"graph as trained, shape for shape: not its weights ({RULE})")  # fmt: skip


def _difference(found: dict, expected: dict) -> str:
    """The first way an ``.npz``'s shapes are not its graph's, in words."""
    extra, lacking = sorted(set(found) - set(expected)), sorted(set(expected) - set(found))
    if lacking:
        return f"no weights for the graph's layer(s) {lacking[:3]}: not the logged graph's weights"
    if extra:
        return f"weights for layer(s) {extra[:3]} the graph lacks: not the logged graph's weights"
    layer = next(name for name in sorted(expected) if found[name] != expected[name])
    return f"layer {layer!r} has arrays of shapes {found[layer]}, the graph's {expected[layer]}"


def _most_bytes(expected: dict[str, list[tuple[int, ...]]] | None) -> int:
    """The most a weights file may hold before it is hashed: what its graph's arrays can need, or, where the graph
    cannot be read (a problem already), the most any best model's weights may be."""
    return MAX_KERAS_WEIGHTS_BYTES if expected is None else most_weights_bytes(_all_shapes(expected))


def _all_shapes(shapes: dict[str, list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """Every array's shape of a ``{layer: [shapes]}`` table, for :func:`most_weights_bytes`."""
    return [shape for arrays in shapes.values() for shape in arrays]
