"""Old revisions of the library for A/B benchmarks: ``git archive`` of ``src/`` at a revision, extracted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

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


def run_worker(code: str, src: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with the library at ``src`` and the model offline; return its last
    line of output, a JSON object (its error output on failure)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {}), "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result
