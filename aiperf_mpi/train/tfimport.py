"""TensorFlow's import on a training rank, without what Keras loads only for its plots and scikit-learn wrappers.

Keras 3 (TensorFlow ≥ 2.16) imports ``matplotlib.pyplot`` (``keras.visualization``)
and scikit-learn (``keras.wrappers``) as it loads, whenever they are installed;
this stack installs both (the report draws with matplotlib, scikit-optimize
needs scikit-learn).  Keras guards each of those imports with
``except ImportError`` and then only lacks those two features, which the
benchmark never calls.  So a training rank imports TensorFlow with the two
hidden, and afterwards they import as usual: the rank's preload
(``aiperf_mpi.__main__._preload``, before the scored window) brings in
scikit-learn where the run uses it (the embedded digits, the GP tuner).

Measured (AMD EPYC, 2 cores): ``import tensorflow`` 9.4 → 6.8 s of CPU and
4,020 → 3,385 modules.  Every training rank pays it at start-up, before the
first step.  A run on a data set read from files with the TPE tuner (the
benchmark's own case: ImageNet) keeps the whole saving, 635 modules fewer read
per rank from the shared file system at once; a digits or GP run gets
scikit-learn back in its preload and saves matplotlib's part.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType

HIDDEN = ("matplotlib", "sklearn")
"""top-level packages Keras imports only for features the benchmark does not use"""


def import_tensorflow() -> ModuleType:
    """``tensorflow``, imported (the first time) with :data:`HIDDEN` out of Keras' sight."""
    loaded = sys.modules.get("tensorflow")
    if loaded is not None:
        return loaded
    hidden = [name for name in HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError, which Keras catches
    try:
        import tensorflow
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]  # a later import loads it as usual
    logging.getLogger("tensorflow").addFilter(_not_retracing)
    return tensorflow


RETRACING = "triggered tf.function retracing"


def _not_retracing(record: logging.LogRecord) -> bool:
    """TensorFlow's "N out of the last M calls to ... triggered tf.function retracing" is left out (issue 51): a
    run trains a new Keras model for every task, and each model's step and evaluation are traced once by design
    (the trainer keeps one traced function per model, ``reduce_retracing``); the warning counts those traces and
    asks the user to change what the benchmark is.  The trace's time is measured and logged apart (an epoch's
    ``compile``)."""
    return RETRACING not in record.getMessage()
