"""The physics: one generation of a lineage, under hard ceilings. Trusted harness.

Rule: nothing in this package imports from the rest of ``reconciler``; the
reconciler talks to it only through ``reconciler.kernel.config`` values, in process,
or through the versioned entry point (``python -m <this package>``, see ``entry``
and docs/kernel-entry.md) when a pinned kernel runs as a subprocess. Every
``*.py``, ``*.sh`` and ``*.el`` file here is fingerprinted (see ``identity``):
changing any of them changes the instrument, and lineages born under the old
physics can no longer be extended. Keep it small and dependency-light.
"""
