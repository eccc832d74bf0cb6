"""examples/mcp_two_agents.py runs as a user runs it: real server processes on the default embedding model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import SRC

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_two_agents.py"


@pytest.mark.model
def test_two_agents_as_two_mcp_clients_share_a_group_fact(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER"}
    env["PYTHONPATH"] = SRC + ((":" + env["PYTHONPATH"]) if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--root", str(tmp_path)], capture_output=True, text=True, timeout=180, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "[researcher] memory_remember -> created fact g_" in out
    assert "[writer] heard: memory://group/launch changed" in out
    assert "| group:launch | by researcher |" in out and "March 3" in out
    assert "[writer] memory_remember -> DENIED:" in out
    assert sorted(p.name for p in tmp_path.glob("group_*.db")) == ["group_launch.db"]
