"""The seed and the broker inside the real sandbox (bwrap, ceilings): the organism finds the
manifest at /kernel, reaches the socket without any network, and its successor comes back
in the result archive. Integration with kernel.sandbox; the unit behaviour is tested
elsewhere without a sandbox."""

from __future__ import annotations

import io
import shutil
import tarfile
import uuid
from pathlib import Path

import pytest

from reconciler.kernel.base.config import Ceilings, ModelConfig, constraints_manifest
from reconciler.kernel.broker.door import Broker
from reconciler.kernel.sandbox import life as sandbox
from reconciler.kernel.transaction.lineage import ORGANISM
from tests.host import require

pytestmark = [pytest.mark.sandbox, pytest.mark.cgroup]

REPLY = b';; the successor, written from inside the sandbox\n(message "ok")\n'


@pytest.mark.parametrize(("provider", "expected"), [("replay", REPLY), ("echo", None)])
def test_seed_in_the_sandbox_gets_its_successor_through_the_broker(
        tmp_path: Path, provider: str, expected: bytes | None) -> None:
    require(shutil.which("bwrap") is not None, "bubblewrap (bwrap) on PATH")
    kernel = tmp_path / "k"
    kernel.mkdir()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.add(str(ORGANISM), arcname="organism.el")
    (kernel / "input.tar").write_bytes(archive.getvalue())
    (kernel / "journal.md").write_text("\n## gen 1 — no-change — 2026-11-29T15:45:59+00:00\n")
    sandbox.install_runner(kernel)
    replies = tmp_path / "replies"
    replies.mkdir()
    (replies / "0001").write_bytes(REPLY)
    model = ModelConfig(provider=provider, name="scripted", replay_dir=replies)
    ceilings = Ceilings(wall_seconds=120)
    broker = Broker.start(kernel_dir=kernel, private_dir=tmp_path / "p", model=model,
                          constraints=constraints_manifest(ceilings, model), api_key=None,
                          generation=2)
    try:
        result = sandbox.run_sandbox(kernel_dir=kernel, ceilings=ceilings,
                                     scope_name=f"broker-test-{uuid.uuid4().hex[:12]}")
    finally:
        report = broker.stop()
    assert result.exit_status == 0, result.stderr
    with tarfile.open(fileobj=io.BytesIO(result.archive)) as tar:
        files = {member.name.removeprefix("./"): tar.extractfile(member)
                 for member in tar.getmembers() if member.isfile()}
        assert set(files) == {"organism.el"}
        organism = files["organism.el"]
        assert organism is not None
        body = organism.read()
    assert body == (expected if expected is not None else ORGANISM.read_bytes())
    (call,) = report.model_calls
    assert call["http_status"] == 200 and call["generation"] == 2
    assert "## gen 1 — no-change" in call["prompt"]
    assert '"socket": "/kernel/model.sock"' in call["prompt"]
