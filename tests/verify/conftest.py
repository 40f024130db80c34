"""Fixtures of tests/verify: kernel-born lineages with a fake sandbox (from the kernel's tests)."""

from tests.kernel_generation.helpers import born, fake, identity, run_fake

__all__ = ["born", "fake", "identity", "run_fake"]
