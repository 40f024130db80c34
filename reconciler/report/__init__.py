"""What ouro shows: plans, status, summaries as text, JSON and markdown; progress.

Rule: no decisions here. Everything shown was decided by ``reconciler.plan``
or ``reconciler.engine`` or read by ``reconciler.state``; this layer only
formats it. Colour only on a terminal; JSON documents are versioned.

May import: ``engine``, ``plan``, ``spec``, ``state``, ``kernel``, ``errors``.
Never ``cli`` or ``viewer``.
"""
