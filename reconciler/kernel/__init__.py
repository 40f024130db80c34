"""The physics: one generation of a lineage, under hard ceilings. Trusted harness.

Rule: nothing in this package imports from the rest of ``reconciler``; the
reconciler talks to it only through ``reconciler.kernel.base.config`` values, in
process, or through the versioned entry point (``python -m <this package>``, see
``entry`` and docs/kernel-entry.md) when a pinned kernel runs as a subprocess.

Every trusted file of the whole tree (``*.py``, ``*.sh``, ``*.el``, in this
folder and every sub-package; ``__pycache__`` excepted) is fingerprinted by its
relative path and bytes (fingerprint v2, see ``base.identity``): changing,
adding, removing or moving any of them changes the instrument, and lineages
born under the old physics can no longer be extended by it. Keep it small and
dependency-light.

The layers, top to bottom (an import-linter contract in pyproject.toml): this
folder's ``entry`` and ``__main__`` (the seam) -> ``transaction`` (a generation
as a crash-safe transaction over two repositories: birth, publish, recovery)
-> ``sandbox`` | ``broker`` (the life in bubblewrap under its ceilings; the only
door to a model) -> ``base`` (plain values, errors, formats, identity). A
module imports only its own sub-package and the layers below, relatively, so
the kernel runs under any package name.
"""
