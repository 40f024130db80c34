"""Apply and its executors: locks, scheduling, limits, events, audits, doctor.

Rule: side effects live here, and only here above the kernel: this layer takes
locks, starts generations through the kernel, writes the event log and runs the
audit child. It decides nothing a plan did not decide, and renders nothing
(``reconciler.report`` does).

May import: ``plan``, ``spec``, ``state``, ``kernel``, ``errors``, ``ownfiles``. Never
``report`` or ``cli``.
"""
