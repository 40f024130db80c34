"""A life: bubblewrap inside a ceilings scope, and what it leaves. Trusted harness.

Rule: imports only ``base`` below it (never the broker: a life reaches a model
only through the socket the transaction hands it). ``life`` runs the sandbox,
``ceilings`` bounds its process tree, ``decoder`` reads its result archive,
``runner.sh`` is what runs inside.
"""
