"""Spec files for plan tests: one YAML document per lineage, storage pointed at real places."""

from __future__ import annotations

from pathlib import Path

from reconciler.kernel.base.config import LineagePaths


def spec_yaml(name: str, paths: LineagePaths, *, generations: int, provider: str = "openai",
              model: str = "gpt-5.6", budget: str = "1.00", pin: str | None = None,
              extra_model: str = "", branches: bool = True) -> str:
    """One spec document; ``branches=False`` leaves storage.branch / observation_branch unset."""
    text = f"""apiVersion: ouro/v1
kind: Lineage
metadata:
  name: {name}
spec:
  generations: {generations}
  model:
    provider: {provider}
    name: {model}
    budget_usd: "{budget}"
{extra_model}  storage:
    path: {paths.worktree}
    git_dir: {paths.git_dir}
    observations: {paths.observations}
"""
    if branches:
        text += f"""    branch: {paths.branch}
    observation_branch: {paths.observation_branch}
"""
    if pin:
        text += f"  instrument:\n    commit: \"{pin}\"\n"
    return text


def write_specs(folder: Path, *documents: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "fleet.yaml"
    target.write_text("---\n".join(documents), encoding="utf-8")
    return target
