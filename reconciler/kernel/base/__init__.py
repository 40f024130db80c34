"""The kernel's ground floor: plain values, errors, on-disk formats, names, identity.

Rule: nothing here imports another part of the kernel (only ``base`` itself),
and nothing here runs a process or touches a lineage: these are the words every
other sub-package, and the control plane, share.
"""
