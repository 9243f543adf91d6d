"""The models a run found, served: a bundle to copy anywhere, one code path from a laptop to an allocation.

``python -m aiperf_mpi.serve publish RUN_DIR OUT [--top K]`` writes a *servable
bundle* (:mod:`aiperf_mpi.serve.publish`): the run's best model, or its best K
as an ensemble, each as ``model.keras`` and a TensorFlow SavedModel, with its
graph, its analytic forward operations per sample (the counter the score uses,
:mod:`aiperf_mpi.graph.ops`) and a ``manifest.json`` that says how to call it
and holds the sha256 and size of every file (:mod:`aiperf_mpi.serve.bundle`).

``python -m aiperf_mpi.serve run BUNDLE --data … --out predictions.npz``
(:mod:`aiperf_mpi.serve.runner`) serves it: one process on a laptop (mpi4py
is not even imported), or ``mpirun -n N`` / ``srun`` on an allocation, where
each rank reads its contiguous slice of the input and rank 0 writes the
predictions of all in input order, the same bytes as one process writes.
Scenarios after MLPerf Inference (offline, single-stream, server) and a
bounded batch sweep are :mod:`aiperf_mpi.serve.scenarios`; the run's event
log, ``:::MLLOG`` lines and summary are :mod:`aiperf_mpi.serve.log`, and
``python -m aiperf_mpi.serve check OUTDIR BUNDLE`` (:mod:`aiperf_mpi.serve.check`)
recounts them as ``analysis.verify`` recounts a training run.

The room sits beside ``export``: it builds Keras models (``train``, ``export``)
and may use mpi4py, but its pure modules (bundle, scenarios, check) load
neither, so a reviewer's check runs without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable

PROG = "aiperf_mpi.serve"


def serve_at_end(top: int) -> Callable:
    """The hook ``python -m aiperf_mpi --serve-at-end K`` gives its job's end (``EndOfRunHooks.serve``): the
    room's one entry for the benchmark's ranks, which import nothing of its modules (issue 51).  Serving's
    modules load when the hook is made, on a run that asked for it."""
    from aiperf_mpi.serve.atend import serve_at_end as hook

    return hook(top)


class ServeError(ValueError):
    """Bad input to publishing or serving; the message is the one line the user sees (exit 2)."""
