"""The kernel's layout: its contract covers every sub-package, its fingerprint every file
of the tree; one provider registry and one list of refusal reasons, which every layer
derives its own lists from."""

from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path
from typing import get_args

import pytest

from reconciler.engine import provider_check as probe
from reconciler.kernel.base import config, identity, refusals, registry
from reconciler.kernel.base.errors import DamageError, DriftError
from reconciler.kernel.broker import door, providers
from reconciler.plan import REASONS, kernel_choice, planner
from reconciler.spec import models
from reconciler.state import observe
from tests.conftest import REPO_ROOT
from tests.host import require

KERNEL = REPO_ROOT / "reconciler" / "kernel"


def test_the_kernels_contract_names_every_sub_package() -> None:
    config_ = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (inner,) = [c for c in config_["tool"]["importlinter"]["contracts"]
                if c.get("containers") == ["reconciler.kernel"]]
    named = {part.strip() for layer in inner["layers"] for part in layer.split("|")}
    folders = {p.name for p in KERNEL.iterdir() if (p / "__init__.py").is_file()}
    assert folders and folders | {"entry"} == named


def test_every_file_git_keeps_in_the_kernel_is_fingerprinted() -> None:
    """Nothing in the kernel's tree falls outside the physics (a sub-package, a data file)."""
    require((REPO_ROOT / ".git").exists(), "needs this repository's git checkout")
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "reconciler/kernel"],
                            capture_output=True, text=True, check=True).stdout.split()
    relative = sorted(Path(name).relative_to("reconciler/kernel").as_posix() for name in listed)
    assert relative and set(relative) <= set(identity.trusted_files())
    assert [name for name in relative if "/" in name], "the kernel is laid out in sub-packages"


@pytest.mark.parametrize("planted", ["base/__pycache__/x.py", "x.txt", "base/x.json"])
def test_the_fingerprint_covers_the_tree_by_relative_path(tmp_path: Path, planted: str) -> None:
    files = {"a.py": b"a", "sub/b.py": b"b", "sub/c.sh": b"c", "sub/d.el": b"d"}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / planted).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / planted).write_bytes(b"not physics")
    assert identity.read_trusted(tmp_path) == files
    assert identity.fingerprint(tmp_path) == identity.fingerprint_of(files)
    moved = dict(files)
    moved["other/b.py"] = moved.pop("sub/b.py")
    assert identity.fingerprint_of(moved) != identity.fingerprint_of(files)
    # v1 (a flat kernel, by file name) is the same rule: flat files fingerprint alike
    assert identity.fingerprint_of({"a.py": b"a"}) == identity.fingerprint_of({"a.py": b"a"})


def test_every_provider_list_derives_from_the_registry() -> None:
    names = tuple(record.name for record in registry.REGISTRY)
    assert names == registry.PROVIDERS == config.PROVIDERS
    # a spec's providers: the kernel's, and recorded (ouro's replay folder of another
    # lineage's replies: the kernel sees replay, reconciler.spec.loaded)
    assert get_args(models.Provider) == (*registry.PROVIDERS, models.RECORDED)
    assert tuple(r.name for r in registry.REGISTRY if r.offline) == config.OFFLINE_PROVIDERS
    assert set(door.KEYED) == providers.KEYED_PROVIDERS == {
        r.name for r in registry.REGISTRY if r.needs_key}
    assert door.HTTP_PROVIDERS == tuple(providers.WIRE_FORMATS) == tuple(
        r.name for r in registry.REGISTRY if r.wire)
    assert {r.name: r.key_env for r in registry.REGISTRY} == models.DEFAULT_API_KEY_ENV
    assert tuple(r.name for r in registry.REGISTRY if not r.offline) == models.PAID_PROVIDERS
    for record in registry.REGISTRY:
        if record.wire is None:
            assert record.offline and record.models_path is None and not record.needs_key
            continue
        assert providers.DEFAULT_BASE_URLS.get(record.name) == record.base_url
        assert providers.MODEL_LIST_PATHS[record.name] == record.models_path
        assert registry.record(record.name) is record
    assert registry.record("gemini") is None
    assert probe.registry is registry


def test_one_list_of_refusal_reasons() -> None:
    assert REASONS is refusals.REASONS and planner.Reason is refusals.Reason
    assert kernel_choice.KernelReason is refusals.KernelReason
    assert observe.ProblemCode is refusals.ProblemCode
    assert set(get_args(refusals.ProblemCode)) <= set(REASONS)
    assert set(get_args(refusals.KernelReason)) <= set(REASONS)
    kernel_refusals = set(get_args(refusals.KernelRefusal))
    assert kernel_refusals - set(refusals.KERNEL_ONLY) <= set(REASONS)
    assert not set(refusals.KERNEL_ONLY) & set(REASONS)
    assert refusals.as_kernel_refusal("unbalanced", "damaged") == "unbalanced"
    assert refusals.as_kernel_refusal("made-up", "damaged") == "damaged"


def test_every_reason_the_kernel_gives_is_in_the_list() -> None:
    """Each ``reason=`` a kernel module passes to a refusal is one of ``KernelRefusal``."""
    given = set()
    for path in KERNEL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
                    DriftError.__name__, DamageError.__name__):
                for keyword in node.keywords:
                    if keyword.arg == "reason" and isinstance(keyword.value, ast.Constant):
                        given.add(keyword.value.value)
    assert given and given <= set(get_args(refusals.KernelRefusal)), given
