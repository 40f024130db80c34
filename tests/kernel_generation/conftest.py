"""Fixtures of tests/kernel_generation (defined in helpers.py, shared with the test files)."""

from tests.kernel_generation.helpers import born, fake, identity, real_host, run_fake

__all__ = ["born", "fake", "identity", "real_host", "run_fake"]
