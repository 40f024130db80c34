"""Reproduction: a lineage's recorded history run again from its own record.

Rule: the recorded lineage is read, never written; everything runs in a scratch place
under the lineage's own pinned kernel and recorded ceilings, each model call answered
from the record (docs/reproduce.md). ``run.reproduce`` is the one call the command makes;
``compare`` (pure) says whether a generation came out as recorded; ``limits`` reads a
generation's ceilings back from its observation; ``scratch`` makes the scratch lineage
and the replay folder; ``verdict`` is what was found.
"""

from reconciler.engine.reproduce.run import ReproduceRequest, reproduce
from reconciler.engine.reproduce.verdict import Reproduction

__all__ = ["ReproduceRequest", "Reproduction", "reproduce"]
