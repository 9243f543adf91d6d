"""What a ``--resume`` may change: every other setting of a resumed run is its first segment's.

One list, read by the three places that decide it: the command line refuses
any other run option beside ``--resume`` (``cli.check_mode``), the session
takes these from the new segment and the rest from the log
(``job.session.prepare``), and verify holds every later segment's logged
configuration to the first's but for these (``analysis/verify.py``).  Here,
in the results room, because verify may import nothing higher.
"""

from __future__ import annotations

RESUME_OPTIONS = ("time_limit",)
"""the run options ``--resume`` takes from the command line (a new time limit); the rest is the logged configuration"""
RESUME_MAY_CHANGE = (*RESUME_OPTIONS, "run_dir")
"""what a resumed segment's configuration may hold differently from the first's: those options, and the run
directory, which is the one ``--resume`` names (a run moved or copied elsewhere resumes there)"""
