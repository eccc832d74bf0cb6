"""Old revisions of the library for A/B benchmarks: ``git archive`` of ``src/`` at a revision, extracted."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # bench/common/revisions.py -> the repository


def extract(rev: str, into: Path) -> Path:
    """Extract ``src/`` at git revision ``rev`` under ``into`` (created if needed); return the ``src`` directory."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=REPO, capture_output=True, check=True).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into / "src"
