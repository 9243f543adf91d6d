"""Fixtures shared by the unit tests: they live in tests/support and are made visible here.

With ``AIPERF_VERIFY_CORPUS=FOLDER`` set, every run and bundle a test verifies is also copied into FOLDER
(:mod:`tests.support.verify_corpus`: the before/after comparison of verify's verdicts).
"""

import os

from tests.support.verify_corpus import ENV, install
from tests.support.verify_runs import pristine, run  # noqa: F401 - the verifier tests' consistent run and its copy

if os.environ.get(ENV):
    install(os.environ[ENV])
