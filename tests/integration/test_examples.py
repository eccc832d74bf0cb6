"""The examples run offline as a user would run them (real processes, the real embedding model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
def test_quickstart(tmp_path: Path) -> None:
    out = run("quickstart.py", tmp_path)
    assert "duplicate -> reinforced" in out and "The Q3 report is due on October 14." in out


@pytest.mark.model
def test_crew_round_robin(tmp_path: Path) -> None:
    out = run("crew_round_robin.py", tmp_path)
    assert "by researcher" in out and "[writer] memory_search" in out and "DENIED:" in out
    assert (tmp_path / "agent_researcher.db").exists() and len(list(tmp_path.glob("group_*.db"))) == 1


@pytest.mark.model
def test_two_teams_two_processes(tmp_path: Path) -> None:
    out = run("two_teams_two_processes.py", tmp_path)
    assert out.count("######## process") == 2 and "policy from the other process respected: yes" in out
    assert "[analyst] memory_search -> [memory: 1 of 1 facts]" in out and "by compliance_officer" in out


@pytest.mark.model
def test_core_runtime(tmp_path: Path) -> None:
    out = run("core_runtime.py", tmp_path)
    assert "answer: The Q3 cloud budget is 11,500 EUR." in out
    assert "tool convert_currency" in out and "tool memory_remember" in out


@pytest.mark.model
def test_multi_host_postgres(pg_dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "multi_host_postgres.py"), "--dsn", pg_dsn],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[host b] notified of 2 writes by another host" in proc.stdout
    assert "by oncall" in proc.stdout and "by sre_lead" in proc.stdout
