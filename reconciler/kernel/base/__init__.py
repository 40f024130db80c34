"""The kernel's ground floor: plain values, errors, on-disk formats, names, identity.

Two lists every layer derives its own from live here once: the model providers
(``registry``: one record each) and the refusal reasons (``refusals``).

Rule: nothing here imports another part of the kernel (only ``base`` itself),
and nothing here runs a process or touches a lineage: these are the words every
other sub-package, and the control plane, share.
"""
