"""Reusable fakes for tests: loopback model providers and a broker client."""
