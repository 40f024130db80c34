"""What is on disk now, read-only: observed lineages, their audit, this instrument.

Rule: nothing here writes a lineage's repositories (no ref, index, object or
file of theirs) and nothing here raises for a damaged lineage: what cannot be
read becomes a reported problem. All git access is pygit2.

May import: ``reconciler.errors``, ``reconciler.ownfiles`` (the caches' writes),
``reconciler.kernel`` (its on-disk names and formats), ``reconciler.spec``. Never
``plan``, ``engine``, ``report`` or ``cli``.
"""
