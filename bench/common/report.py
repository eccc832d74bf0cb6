"""Markdown helpers: tables and replacing one section of a markdown file."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table: the header line, the separator, one line per row."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def write_section(path: Path, section: str, heading: str) -> None:
    """Create ``path`` or replace only its section under ``heading`` (a ``## `` line) with ``section``."""
    if path.exists():
        text = path.read_text()
        pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
        if pattern.search(text):
            text = pattern.sub(lambda _m: section + "\n", text, count=1)
        else:
            text = text.rstrip("\n") + "\n\n" + section
    else:
        text = "# Benchmarks\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")
