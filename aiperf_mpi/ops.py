"""``python -m aiperf_mpi.ops``: the operation-count command's first name, kept for users' scripts.

The command lives with the counter it prints, as ``python -m aiperf_mpi.graph``.
"""

import sys

from aiperf_mpi.graph.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
