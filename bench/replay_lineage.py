"""The lineage the one-generation benchmarks run: fresh, the seed organism, ``replies``
replay replies that give the seed back (each generation asks once, ends no-change)."""

from __future__ import annotations

from pathlib import Path

from reconciler.kernel.base.config import Identity, LineagePaths, ModelConfig
from reconciler.kernel.base.identity import fingerprint
from reconciler.kernel.transaction import lineage


def replay_lineage(root: Path, replies: int) -> tuple[LineagePaths, Identity, ModelConfig]:
    paths = LineagePaths(root / "bench", root / "bench.git", root / "bench.observations",
                         "lineage-bench", "observations/lineage-bench")
    identity = Identity("https://example.invalid/ouro.git", "bench", "b" * 40, fingerprint())
    lineage.init_lineage(paths, identity)
    folder = root / "replies"
    folder.mkdir()
    seed = lineage.ORGANISM.read_text()
    for index in range(replies):
        (folder / f"{index:04d}.el").write_text(seed)
    return paths, identity, ModelConfig(provider="replay", name="replay-bench",
                                        replay_dir=folder)
