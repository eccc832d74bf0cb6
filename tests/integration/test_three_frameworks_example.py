"""examples/three_frameworks.py runs offline as a user would run it: an AutoGen team, a MAF workflow and an AG2
group chat in three real processes on one store (the real embedding model), and its checks catch a leak."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.model
def test_three_frameworks_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "memory"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "three_frameworks.py"), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    pids = re.findall(r"^######## process (\d+): .* \(exit 0\)$", out, re.M)
    assert len(set(pids)) == 3 and "mismatch" not in out
    # each framework's agents recalled the other frameworks' facts, with the author and the scope
    for scope, author, fact in [
        ("group:launch", "autogen_researcher", "The product launch is on March 3, 2027."),
        ("group:launch", "maf_writer", "The launch venue is Hall B of the Lisbon congress centre."),
        ("group:launch", "ag2_reviewer", "The launch budget is capped at 40,000 EUR."),
        ("global", "autogen_lead", "Public dates are written as ISO 8601 dates, e.g. 2027-03-03."),
        ("global", "maf_lead", "Press releases need legal sign-off two days before publishing."),
        ("global", "ag2_lead", "Announcements must avoid forward-looking revenue claims."),
    ]:
        line = rf"^   {re.escape(scope)} +by launch:{author} +\(\w+\) +{re.escape(fact)}  <- another process$"
        assert len(re.findall(line, out, re.M)) >= 2, (author, fact)
    assert len(re.findall(r"^   ok  launch:\w+ +global DENIED ", out, re.M)) == 3
    assert out.count("<- another process") >= 12 and out.rstrip().endswith("no private note left its owner.")
    assert (root / "group_launch.db").exists() and len(list(root.glob("agent_launch-maf_writer~*.db"))) == 1

    # the parent's checks are real: a private note copied into the group is reported
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("three_frameworks")
    store = SharedMemoryStore(root, policy=WritePolicy(global_writers=example.GLOBAL_WRITERS))
    try:
        note = example.TEAMS["ag2"].private_note
        store.as_agent("launch:ag2_reviewer", example.GROUP).remember(note, "group")
        children = {fw: SimpleNamespace(proc=SimpleNamespace(pid=0)) for fw in example.TEAMS}
        problems = example.verify(store, children)
    finally:
        store.close()
    assert any("launch:ag2_reviewer's private note is visible to" in problem for problem in problems), problems

    # and a memory that is not fresh is refused rather than checked
    again = subprocess.run(
        [sys.executable, str(EXAMPLES / "three_frameworks.py"), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode != 0 and "already holds a memory" in again.stderr
