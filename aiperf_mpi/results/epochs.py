"""What one epoch of one model is, said once: its steps.

The trainer (``train/trainer.py``, through ``train/pipeline.py``), the
rehearsal's stand-in (``job/rehearsal.py``, ``mpi/rehearsal.py``), the MLLOG
writer, the compliance ruleset and the verifier all need these facts; each
used to state them itself, and a change made in one place left the others
judging a different trainer.  Here, in the results room, because verify and
the ruleset may import nothing higher.  Pure: no MPI, no TensorFlow.
"""

from __future__ import annotations


def rank_batches(samples: int | float, ranks: int, batch: int) -> int:
    """The whole batches of ``batch`` each of ``ranks`` ranks takes from its share of ``samples``: ``(samples //
    ranks) // batch``.

    Over the train split this is an epoch's steps, the same on every rank of a group (the pipeline drops each
    rank's remainder, so an epoch is one pass that never repeats a sample); over the validation split it is a
    rank's full batches (its last, short one aside).
    """
    return int((samples // ranks) // batch)

