"""Fixtures shared by the unit tests: they live in tests/support and are made visible here."""

from tests.support.verify_runs import pristine, run  # noqa: F401 - the verifier tests' consistent run and its copy
