"""ouro: a declarative reconciler for self-modifying-program lineages.

Layers, top to bottom (a layer imports only those below it; the import-linter
contracts in pyproject.toml enforce it):

    cli        typer only: parse, call one engine function, render, exit code
    viewer     `ouro view`: the second face, a read-only local web viewer
    report     text, JSON, markdown, progress (no decisions)
    engine     apply's session, locks, limits, events, audits, doctor (side effects)
    plan       desired vs observed -> actions (pure), saved plans
    state      what is on disk now, read-only: observe, status, audit (beside plan)
    spec       YAML specs -> validated models
    kernel     the physics; imports nothing else of reconciler

Keep this module light: the kernel's broker runs ``python -m
reconciler.kernel.broker.process`` once per generation and imports this package first.
"""

__version__ = "0.1.0"
