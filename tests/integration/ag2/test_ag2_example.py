"""The AG2 example runs offline as a user would run it (a real process, the real embedding model)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ag2_group_chat.py"


@pytest.mark.model
def test_ag2_group_chat_example(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # every call ran as the agent that asked, though another agent executed it
    assert re.search(r"\[researcher\] memory_remember\(.*March 3.*\)  \(run by writer\)", out)
    assert re.search(r"\[writer\] memory_search\(.*\)  \(run by reviewer\)\n    -> \[memory: 2 of 2 facts\]", out)
    assert "by researcher" in out and "by reviewer" in out
    assert "[reviewer] memory_remember" in out and "DENIED by the memory policy: agent 'reviewer'" in out
    assert (tmp_path / "agent_researcher.db").exists() and len(list(tmp_path.glob("group_groupchat-*.db"))) == 1
