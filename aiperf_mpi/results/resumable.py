"""What a ``--resume`` may change: every other setting of a resumed run is its first segment's.

One list, read by the three places that decide it: the command line refuses
any other run option beside ``--resume`` (``cli.check_mode``), the session
takes these from the new segment and the rest from the log
(``job.session.prepare``), and verify holds every later segment's logged
configuration to the first's but for these (``analysis/verify/__init__.py``).  Here,
in the results room, because verify may import nothing higher.
"""

from __future__ import annotations

from collections.abc import Mapping

RESUME_OPTIONS = ("time_limit", "hardware_changed", "startup_deadline", "first_model_deadline", "end_deadline",
                  "io_deadline", "master_deadline", "hang_margin", "ignore_limits")
"""the run options ``--resume`` takes from the command line (a new time limit; why the hardware is not the first
segment's, verify holding the segment to the first segment's hardware without it; the phases' deadlines and the
mid-run bound's margin, which belong to the machine and the job that runs the segment, not to the result); the rest
is the logged configuration"""
HARDWARE_CHANGED = "hardware_changed"
"""the option a resume on other hardware gives its reason in (``--hardware-changed REASON``): only a resume may"""
RESUME_MAY_CHANGE = (*RESUME_OPTIONS, "run_dir")
"""what a resumed segment's configuration may hold differently from the first's: those options, and the run
directory, which is the one ``--resume`` names (a run moved or copied elsewhere resumes there)"""
RENAMED_OPTIONS = {"warmup_epochs": "search_warmup_epochs"}
"""run options renamed since a log may have been written, old name → new: the search's warm-up cap was
``warmup_epochs`` until it was told apart from the learning rate's warm-up (``results/epochs.py``)"""


def current_names(config: Mapping) -> dict:
    """A logged configuration under today's option names (:data:`RENAMED_OPTIONS`), so a run logged before a
    rename resumes, and its segments compare, as one configuration."""
    return {RENAMED_OPTIONS.get(name, name): value for name, value in config.items()}
