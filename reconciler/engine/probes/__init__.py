"""Probes: measurements of a lineage's generations, never physics (docs/spec.md, ``spec.probes``).

Rule: a probe runs on one generation's committed tree in a sandbox as strict as a
life's, built from the kernel's public pieces (its ceilings scope, its bwrap
arguments, its confinement prelude, seccomp filter and fresh keyring), and never
changes the lineage, its worktree or its physics. Whatever a probe does -- bad
output, a timeout, a crash -- is a recorded probe failure, never a lineage's.
"""
