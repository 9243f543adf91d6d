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
from analysis.checks import BadInput, Check, Run, is_regular_file

WEIGHTS_ROW = "weights files"
WEIGHTS_DIR = "weights"
RULE = "rule: a kept weights file is the logged one, of its graph's shapes"


class KeptWeights:
    """The ``weights files`` row: the log's record of each task's weights, held to the files present."""

    def __init__(self, run: Run) -> None:
        self.run_dir = run.run_dir
        self.check = Check(WEIGHTS_ROW)
        self.places: dict[int, tuple[dict, object]] = {}
        """task → (where its proposal placed its graph, its proposed kernel size)"""
        self.saved: dict[str, tuple[int, str, object]] = {}
        """weights file → (its task, the sha256 logged, the kernel size it trained with)"""

    def model_proposed(self, event: dict, _: int) -> None:
        """(The walk hands a family only events that keep to the schema: an int task, a dict of hparams.)"""
        place = {name: event[name] for name in ("graph_file", "graph_offset", "graph_bytes") if name in event}
        self.places[event["task"]] = (place, event["hparams"].get("kernel_size"))

    def model_done(self, event: dict, _: int) -> None:
        model, task = event["model"], event["task"]
        weights = model.get("weights")
        if isinstance(weights, str) and weights:
            hparams = model.get("hparams") if isinstance(model.get("hparams"), dict) else {}
            kernel = hparams.get("kernel_size", self.places.get(task, ({}, None))[1])
            self.saved[weights] = (task, str(event.get(WEIGHTS_SHA256) or ""), kernel)

    def finish(self) -> list[Check]:
        folder = self.run_dir / WEIGHTS_DIR
        files = sorted(folder.glob("*.npz")) if folder.is_dir() and not folder.is_symlink() else []
        held = 0
        for path in files:
            name = f"{WEIGHTS_DIR}/{path.name}"
            try:
                regular = is_regular_file(path)
            except BadInput:
                regular = False
            if not regular:
                self.check.problems.append(f"{name}: not a regular file ({RULE})")
            elif name not in self.saved:
                self.check.notes.append(f"{name}: no model_done names it (a task cut off between saving its weights "
                                        "and its end, or not the run's): not checked")  # fmt: skip
            else:
                held += self._held(path, name)
        self._best()
        self.check.summary = (f"{held} of {len(files)} kept weights file(s) the logged sha256 and their graph's "
                              "shapes" + ("" if files else " (none kept here)"))  # fmt: skip
        return [self.check]

    def _held(self, path: Path, name: str) -> bool:
        """Whether the file ``name`` (a task's, by the log) is the logged file of its graph's shapes."""
        task, logged, kernel = self.saved[name]
        before = len(self.check.problems)
        expected = self._expected(task, kernel, name)
        found = None
        try:  # the arrays' headers: a few kB
            found = npz_shapes(path)
        except WeightsFileError as exc:
            self.check.problems.append(f"{name} (task {task}): {exc} ({RULE})")
        if not logged:
            self.check.missing.append(f"{name} (task {task}): the log records no {WEIGHTS_SHA256} (a run from before "
                                      "it was logged)")  # fmt: skip
        else:
            try:  # no more bytes hashed than the graph's arrays can need
                digest = file_sha256(path, _most_bytes(expected))
            except WeightsFileError as exc:
                self.check.problems.append(f"{name} (task {task}): {exc} ({RULE})")
            else:
                if digest != logged:
                    self.check.problems.append(f"{name} (task {task}): sha256 {digest[:16]}…, the log records "
                                               f"{logged[:16]}…: not the file the run saved ({RULE})")  # fmt: skip
        if found is not None and expected is not None and found != expected:
            self.check.problems.append(f"{name} (task {task}): {_difference(found, expected)} ({RULE})")
        return len(self.check.problems) == before and bool(logged)

    def _expected(self, task: int, kernel: object, name: str) -> dict[str, list[tuple[int, ...]]] | None:
        place = self.places.get(task, ({}, None))[0]
        try:
            if not place.get("graph_file"):
                raise GraphFileError("its model_proposed places no graph")
            graph = as_trained(from_json(read_graph(self.run_dir, place)), kernel)
            return param_shapes(graph)
        except (GraphFileError, GraphError, ValueError, TypeError) as exc:
            self.check.problems.append(f"{name} (task {task}): its graph cannot be read to hold it to "
                                       f"({' '.join(str(exc).split())[:120]}) ({RULE})")  # fmt: skip
            return None

    def _best(self) -> None:
        """``best/model.keras`` tied to the log through ``best/metadata.json``'s two sha256s."""
        model = self.run_dir / BEST_MODEL
        try:
            present = is_regular_file(model)
        except BadInput:
            present = False
        meta = read_best_metadata(self.run_dir)
        if not present or meta is None or not isinstance(meta.get(WEIGHTS_FILE), str):
            return  # no best model (the best/ row says so), or one it names unreadable
        source = meta[WEIGHTS_FILE]
        task, logged, kernel = self.saved.get(source, (meta.get("task"), "", None))
        before = len(self.check.problems)
        if MODEL_SHA256 not in meta or WEIGHTS_SHA256 not in meta:
            self.check.missing.append(f"{BEST_MODEL}: best/metadata.json records no {MODEL_SHA256} and "
                                      f"{WEIGHTS_SHA256} (an export from before they were recorded)")  # fmt: skip
            return
        expected = self._expected(task, kernel, BEST_MODEL) if isinstance(task, int) else None
        try:
            digest = file_sha256(model, _most_bytes(expected))
        except WeightsFileError as exc:
            self.check.problems.append(f"{BEST_MODEL}: {exc} ({RULE})")
            return
        if digest != meta[MODEL_SHA256]:
            self.check.problems.append(f"{BEST_MODEL}: its sha256 is not best/metadata.json's {MODEL_SHA256}: not "
                                       f"the file the export wrote ({RULE})")  # fmt: skip
        if logged and meta[WEIGHTS_SHA256] != logged:
            self.check.problems.append(f"{BEST_MODEL}: built from weights of sha256 {str(meta[WEIGHTS_SHA256])[:16]}…"
                                       f", the log records {logged[:16]}… for {source} (task {task}) ({RULE})")
        tied = len(self.check.problems) == before  # the file the export wrote: then its arrays, shape for shape
        if tied and expected is not None:
            try:
                found = keras_shapes(model)
            except WeightsFileError as exc:
                self.check.problems.append(f"{BEST_MODEL}: {exc} ({RULE})")
            else:
                wanted = sorted(_all_shapes(expected))
                if found != wanted:
                    self.check.problems.append(f"{BEST_MODEL}: {len(found)} arrays, not the {len(wanted)} of task "
                                               f"{task}'s graph as trained, shape for shape: not its weights "
                                               f"({RULE})")  # fmt: skip


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
