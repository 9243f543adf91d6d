"""What one epoch of one model is, said once: its steps, its learning-rate warm-up, and when a model stops.

The trainer (``train/trainer.py``, through ``train/pipeline.py``), the
rehearsal's stand-in (``job/rehearsal.py``, ``mpi/rehearsal.py``), the MLLOG
writer, the compliance ruleset and the verifier all need these facts; each
used to state them itself, and a change made in one place left the others
judging a different trainer.  Here, in the results room, because verify and
the ruleset may import nothing higher.  Pure: no MPI, no TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEARNING_RATE_WARMUP_EPOCHS = 1
"""epochs over which the trainer ramps every model's learning rate linearly from a tenth of its peak to the peak
(``train/trainer.py``); not configurable.  ``mllog.log`` logs it as ``opt_learning_rate_warmup_epochs`` and the
compliance ruleset (1.2.0 on) holds the logged value to it.  Not the search's ``--search-warmup-epochs``, the
epoch cap of a group's first rounds (``config.RunConfig.search_warmup_epochs``)"""

EPOCH_LIMIT = "epoch limit"
EARLY_STOP = "early stop"
TIME_LIMIT = "time limit"
"""the reasons a model stops training that :class:`EpochStop` gives (a failure is the runner's own)"""


def rank_batches(samples: int | float, ranks: int, batch: int) -> int:
    """The whole batches of ``batch`` each of ``ranks`` ranks takes from its share of ``samples``: ``(samples //
    ranks) // batch``.

    Over the train split this is an epoch's steps, the same on every rank of a group (the pipeline drops each
    rank's remainder, so an epoch is one pass that never repeats a sample); over the validation split it is a
    rank's full batches (its last, short one aside).
    """
    return int((samples // ranks) // batch)


def stop_asked(answer: object) -> str:
    """A ``should_stop`` answer as a stop reason: '' to go on, the text it gave, or :data:`TIME_LIMIT` for a bare
    true (the leader's answer is a reason or a flag)."""
    if isinstance(answer, str):
        return answer
    return TIME_LIMIT if answer else ""


@dataclass
class EpochStop:
    """When a model stops training, epoch by epoch: the trainer's policy and the rehearsal's, one object.

    A model trains until its epoch limit, until ``patience`` epochs in a row
    have not beaten its best validation accuracy by more than ``min_delta``
    (early stop), or until it is asked to stop (the time limit); :attr:`reason`
    says which.  The first epoch always counts as an improvement.
    """

    patience: int
    min_delta: float
    reason: str = EPOCH_LIMIT
    best: float = -math.inf
    since_best: int = 0

    def stopped(self, reason: str) -> bool:
        """Record a stop asked for before an epoch (''  : none); whether the model stops."""
        if reason:
            self.reason = reason
        return bool(reason)

    def after_epoch(self, accuracy: float) -> bool:
        """Judge an epoch's validation accuracy; whether the model stops here (early stop)."""
        if accuracy > self.best + self.min_delta:
            self.best, self.since_best = accuracy, 0
            return False
        self.since_best += 1
        if self.since_best >= self.patience:
            self.reason = EARLY_STOP
            return True
        return False
