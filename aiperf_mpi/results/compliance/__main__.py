"""``python -m aiperf_mpi.results.compliance``: print the ruleset's absolute path, for the checker's ``--config``."""

from aiperf_mpi.results.compliance import ruleset_path

print(ruleset_path())
