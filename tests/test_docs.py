"""The Python snippets in the docs run as written (they are the documentation's promise).

Every ```python block is executed; an illustrative fragment that cannot run alone is tagged ```py.
"""

from __future__ import annotations

import re
import sys
import tempfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = [
    pytest.param(code, id=f"{path.name}-{i}")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))
]


@pytest.mark.model
@pytest.mark.parametrize("code", SNIPPETS)
def test_doc_snippet_runs(code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("doc_snippet")  # a real module: dataclasses and pickling need one
    monkeypatch.setitem(sys.modules, "doc_snippet", module)
    exec(compile(code, "<doc snippet>", "exec"), module.__dict__)


@pytest.mark.model
def test_the_change_feed_snippet_leaves_the_default_store_alone_and_runs_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a reader runs it as it is: it must not write to their memory, and a second run must pass too
    text = (ROOT / "docs" / "postgres.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "store.subscribe(" in c)
    default, temp = tmp_path / "default-store", tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(default))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        module = types.ModuleType("doc_snippet")
        monkeypatch.setitem(sys.modules, "doc_snippet", module)
        exec(compile(code, "<doc snippet>", "exec"), module.__dict__)
    assert not default.exists()
    assert list(temp.iterdir()) == []  # its own store is removed at the end
