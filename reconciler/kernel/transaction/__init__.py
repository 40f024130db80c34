"""A generation as a crash-safe transaction over a lineage's two repositories.

Rule: imports ``sandbox``, ``broker`` and ``base`` below it, never ``entry``.
``lineage`` births, ``generation`` runs one generation, ``publish`` writes it,
``recovery`` and ``leftovers`` finish or discard what a crash left, ``faults``
names host faults, ``worktree`` reads and writes the lineage's worktree;
``organism.el`` is the seed organism.
"""
