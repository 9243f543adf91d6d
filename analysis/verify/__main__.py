"""``python -m analysis.verify RUN_DIR|BUNDLE``: the command (:func:`analysis.verify.main`)."""

import sys

from analysis.verify import main

sys.exit(main())
