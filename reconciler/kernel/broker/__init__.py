"""The model broker: the only door from a generation to a model. Trusted harness.

Rule: imports only ``base`` below it. ``door`` is the parent's side (starting
the broker's process, the manifest, the audit), ``process`` the child's
(``python -m <kernel>.broker.process``), ``providers`` and ``ledger`` what the
child runs, ``relay`` the organism's socket the kernel holds.
"""
