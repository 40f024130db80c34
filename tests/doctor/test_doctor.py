"""`ouro doctor` tries the real thing: a life in the sandbox under real ceilings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.engine.doctor import check_keys, ready, run_checks

REPO_ROOT = Path(__file__).resolve().parents[2]
MAIN = "import sys; from reconciler.cli import main; sys.argv[0] = 'ouro'; main()"


def _doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, "doctor", *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_this_host_is_ready_and_says_how() -> None:
    result = _doctor(env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok  a life in the sandbox: Emacs " in result.stdout
    assert "curl ok" in result.stdout
    assert "ok  ceilings: cgroup1: limits set and read back" in result.stdout


@pytest.mark.cgroup
def test_doctor_names_the_backend_auto_uses_here() -> None:
    """The line says what a generation's `enforcement: auto` really gets on this host."""
    from reconciler.kernel.base.config import Ceilings
    from reconciler.kernel.base.errors import CeilingError
    from reconciler.kernel.sandbox.ceilings import open_scope
    from tests.host import require

    try:
        scope = open_scope(Ceilings(enforcement="auto"), f"test-doctor-auto.{os.getpid()}")
    except CeilingError as error:
        require(False, f"needs a ceilings backend: {error}")
        raise
    scope.close()
    result = _doctor(env=dict(os.environ))
    line = [x for x in result.stdout.splitlines() if "ceilings by enforcement: auto" in x]
    assert line == [f"ok  ceilings by enforcement: auto: {scope.backend} (auto tries systemd, "
                    "cgroup2, cgroup1; the first that works)"], result.stdout


def test_auto_backend_is_the_first_that_works_in_autos_order() -> None:
    from reconciler.engine.doctor import Check, auto_backend

    def backends(*ok: bool) -> list[Check]:
        return [Check(f"ceilings: {name}", good, "") for name, good in
                zip(("systemd", "cgroup2", "cgroup1"), ok, strict=True)]

    assert auto_backend(backends(False, True, True)).detail.startswith("cgroup2 ")
    assert auto_backend(backends(True, False, True)).detail.startswith("systemd ")
    assert auto_backend(backends(False, False, True)).detail.startswith("cgroup1 ")
    none = auto_backend(backends(False, False, False))
    assert not none.ok and not none.required


def test_missing_programs_are_named_with_the_remedy(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # nothing on PATH
    result = _doctor(env=env)
    assert result.returncode == 1
    assert "NO  bwrap: not found on PATH" in result.stdout
    assert "apt-get install bubblewrap" in result.stdout
    assert "a life in the sandbox" not in result.stdout  # not attempted without bwrap


def test_key_checks_never_show_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OURO_TEST_KEY", "sk-very-secret-value")
    monkeypatch.delenv("OURO_MISSING_KEY", raising=False)
    checks = check_keys([("a", "OURO_TEST_KEY"), ("b", "OURO_MISSING_KEY")])
    assert [c.ok for c in checks] == [True, False]
    assert all("sk-very-secret-value" not in f"{c.detail} {c.remedy}" for c in checks)
    assert checks[1].remedy == "export OURO_MISSING_KEY=... before ouro apply"


def test_spec_keys_are_checked_from_the_specs(tmp_path: Path) -> None:
    spec = tmp_path / "paid.yaml"
    spec.write_text(
        "apiVersion: ouro/v1\nkind: Lineage\nmetadata: {name: paid}\n"
        "spec:\n  generations: 1\n  model: {provider: openai, name: gpt-5.6,"
        " api_key_env: OURO_DOCTOR_TEST_KEY}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OURO_DOCTOR_TEST_KEY"}
    result = _doctor(str(spec), env=env)
    assert result.returncode == 1
    assert "NO  key for paid: OURO_DOCTOR_TEST_KEY is not set" in result.stdout


@pytest.mark.sandbox
@pytest.mark.cgroup
def test_a_failed_life_makes_the_host_not_ready() -> None:
    from reconciler.engine.doctor import Check

    checks = run_checks(life=lambda: Check("a life in the sandbox", False, "probe died"))
    life = [c for c in checks if c.name == "a life in the sandbox"]
    others = [c for c in checks if c.name != "a life in the sandbox"]
    assert life and not life[0].ok
    assert ready(others), [c for c in others if not c.ok]  # the life alone decides here
    assert not ready(checks)
    assert ready(run_checks(life=lambda: Check("a life in the sandbox", True, "lived")))


def test_doctor_probes_each_provider_configuration_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe apply makes: a refused key is a NO line naming the variable."""
    from decimal import Decimal

    from reconciler.engine.doctor import check_providers
    from reconciler.kernel.base.config import ModelConfig, Price
    from tests.fakes.provider_server import FakeProvider, anthropic_error, script

    monkeypatch.setenv("OURO_DOCTOR_PROBE_KEY", "sk-doctor-secret-0123456789")
    refused = anthropic_error(401, "authentication_error", "invalid x-api-key")
    with FakeProvider(script(refused)) as fake:
        config = ModelConfig(provider="anthropic", name="claude-opus-4-8", base_url=fake.url,
                             api_key_env="OURO_DOCTOR_PROBE_KEY",
                             price=Price(Decimal(5), Decimal(25)))
        echo = ModelConfig(provider="echo", name="echo")
        checks = check_providers([("a", config), ("b", config), ("c", echo)])
    (check,) = checks
    assert not check.ok and check.name == "provider for a"
    assert "OURO_DOCTOR_PROBE_KEY" in check.detail + check.remedy
    assert "sk-doctor-secret" not in check.detail + check.remedy
    assert len(fake.requests) == 1 and fake.requests[0].path == "/v1/models"
    assert not ready(checks)
