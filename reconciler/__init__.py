"""ouro: a declarative reconciler for self-modifying-program lineages.

Layers, top to bottom (a lower layer never imports a higher one):

    cli        parse, call, render, exit code
    apply      locks, scheduling, progress, recovery, retries (side effects)
    render     plans and status as text, JSON, markdown
    plan       desired vs observed -> actions (pure; no I/O)
    observe    what a lineage is now (pygit2, read-only)
    load/spec  YAML specs -> validated models
    kernel     the physics; imports nothing above it

Keep this module light: the kernel's broker runs ``python -m
reconciler.kernel.broker_process`` once per generation and imports this package first.
"""

__version__ = "0.1.0"
