"""The AG2 examples run offline as a user would run them (a real process, the real embedding model)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def run(name: str, tmp_path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.model
def test_ag2_group_chat_example(tmp_path: Path) -> None:
    out = run("ag2_group_chat.py", tmp_path)
    # every call ran as the agent that asked, though another agent executed it
    assert re.search(r"\[researcher\] memory_remember\(.*March 3.*\)  \(run by writer\)", out)
    assert re.search(r"\[writer\] memory_search\(.*\)  \(run by reviewer\)\n    -> \[memory: 2 of 2 facts\]", out)
    assert "by launch-press:researcher" in out and "by launch-press:reviewer" in out
    assert "[reviewer] memory_remember" in out and "DENIED: agent 'launch-press:reviewer'" in out
    assert len(list(tmp_path.glob("agent_launch-press-researcher~*.db"))) == 1
    assert [p.name for p in tmp_path.glob("group_*.db")] == ["group_launch-press.db"]


@pytest.mark.model
def test_ag2_pattern_chat_example(tmp_path: Path) -> None:
    out = run("ag2_pattern_chat.py", tmp_path)
    # AG2's tool executor ran every call, each as the agent that asked
    run_by = r"  \(run by _Group_Tool_Executor\)"
    assert re.search(r"\[researcher\] memory_remember\(.*March 3.*\)" + run_by, out)
    assert re.search(r"\[writer\] memory_search\(.*\)" + run_by + r"\n    -> \[memory: 1 of 1 facts\]", out)
    assert "by launch-press:researcher" in out and "by launch-press:reviewer" in out
    assert "DENIED: agent 'launch-press:reviewer'" in out
    assert len(list(tmp_path.glob("agent_launch-press-researcher~*.db"))) == 1
    assert [p.name for p in tmp_path.glob("group_*.db")] == ["group_launch-press.db"]
