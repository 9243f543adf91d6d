"""The arithmetic precisions a run may train at: one table from a name to how each layer of the stack spells it.

A precision is named once, here, by the word a user writes (``--precision
bf16``) and the log records.  Training reads its Keras dtype policy, the
peak probe and the GPU check read the dtype of its arithmetic, and the
validity rule (:mod:`aiperf_mpi.results.rules`: FP16 or wider) reads the
names: nothing narrower than FP16 is in the table, so a run cannot train at
a precision the rule would have to refuse.  Pure data: no TensorFlow here
(the dtypes are TensorFlow's names, looked up by the callers that have it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Precision:
    """How one precision is spelled for the two places that run arithmetic."""

    keras_policy: str
    """the Keras dtype policy a model is built with (mixed: float32 variables, narrower arithmetic)"""
    dtype: str
    """the TensorFlow dtype of its arithmetic: what the peak probe multiplies in"""


PRECISIONS = MappingProxyType({
    "fp32": Precision(keras_policy="float32", dtype="float32"),
    "fp16": Precision(keras_policy="mixed_float16", dtype="float16"),
    "bf16": Precision(keras_policy="mixed_bfloat16", dtype="bfloat16"),
})  # fmt: skip
"""every precision a run accepts, widest first (the order ``--precision``'s choices and the GPU check's probes show)"""

UNRECORDED_PRECISION = "fp32"
"""the precision of a run whose configuration records none: logs from before ``--precision`` trained in fp32"""


def logged_precision(config: Mapping) -> object:
    """The precision a run's logged configuration says it trained at (the one place "none recorded: fp32" is said)."""
    return config.get("precision", UNRECORDED_PRECISION)
