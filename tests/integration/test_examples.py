"""The examples run offline as a user would run them (real processes, the real embedding model)."""

from __future__ import annotations

import os
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
    assert "by launch-press:researcher" in out and "[writer] memory_search" in out and "DENIED:" in out
    assert len(list(tmp_path.glob("agent_launch-press-researcher~*.db"))) == 1  # "launch-press:researcher"
    assert [p.name for p in tmp_path.glob("group_*.db")] == ["group_launch-press.db"]


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
    assert "by incident-crew:oncall" in proc.stdout and "by incident-crew:sre_lead" in proc.stdout


def run_in(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """An example run as a newcomer runs it: no --root, its temporary folder under ``tmp``."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.model
def test_an_example_removes_its_temporary_memory_unless_kept(tmp_path: Path) -> None:
    out = run_in(tmp_path, "quickstart.py").stdout
    assert not list(tmp_path.glob("shared-memory-*")) and "removed the temporary memory" in out.splitlines()[-1]
    kept = run_in(tmp_path, "quickstart.py", "--keep").stdout.splitlines()[-1]
    [folder] = list(tmp_path.glob("shared-memory-*"))
    assert f"the memory is kept in {folder}" in kept and (folder / "global.db").is_file()


@pytest.mark.model
def test_an_ag2_example_prints_no_upstream_log_noise(tmp_path: Path) -> None:
    # AG2 logged "INFO - Detected custom model client in config ..." to stdout for every scripted agent
    proc = run_in(tmp_path, "ag2_group_chat.py")
    assert "INFO" not in proc.stdout and proc.stderr == ""
    assert "EXECUTED FUNCTION memory_remember" in proc.stdout  # the chat ran
