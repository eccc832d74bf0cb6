"""examples/maf_group_chat.py runs offline as a user would run it (a real process, the real embedding model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "maf_group_chat.py"


@pytest.mark.model
def test_maf_group_chat_example(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[launch-press:writer] memory_search" in out and "by launch-press:researcher" in out
    assert "by launch-press:reviewer" in out
    assert "DENIED:" in out and "[launch-press:reviewer] Approved. TERMINATE" in out
    assert len(list(tmp_path.glob("agent_launch-press-researcher~*.db"))) == 1
    assert [p.name for p in tmp_path.glob("group_*.db")] == ["group_launch-press.db"]
