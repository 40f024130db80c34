"""`ouro controller`: a GitOps reconcile loop over a spec repository.

Rule: the controller keeps no state of its own beyond a deletable cache (the spec
repository's clone, the conditions file): killed and restarted, it resumes from the
spec repository and the lineages' repositories alone. It decides nothing a plan does
not decide: each pass loads the specs of the last good revision, plans, and runs what
the plan says through the same engine as `ouro apply` (``reconciler.engine.apply``).

Modules: ``source`` (fetch and check out the spec repository, pygit2 only), ``conditions``
(per-lineage and controller conditions, written atomically in the state dir),
``notify`` (webhook and command delivery off the reconcile path), ``budget`` (the day's
spend guard), ``loop`` (the loop itself, its lock and signals).
"""
