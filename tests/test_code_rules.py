"""Rules for the code itself: it says what it does and why, never which ticket or earlier design it came from
(an issue or seed number means nothing to a reader of the code, and goes stale)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# "issue 18", "Issue #5", "seed 001", "seed-004", "issue15": a ticket or design number
TICKET = re.compile(r"\b(issue|seed)[ _#-]?#?\d+", re.IGNORECASE)


def ticket_mentions(folder: Path) -> list[str]:
    """Each line of a text file under ``folder`` that names an issue or seed number, as ``path:line: text``."""
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix not in {".py", ".pyi", ".md", ".sql", ".toml", ".txt", ".sh"}:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if TICKET.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def ticket_named_files(*folders: Path) -> list[str]:
    return [str(p.relative_to(ROOT)) for folder in folders for p in folder.rglob("*") if TICKET.search(p.name)]


def test_the_package_source_names_no_issue_or_seed() -> None:
    assert ticket_mentions(ROOT / "src") == []


def test_no_source_or_benchmark_file_is_named_after_an_issue_or_seed() -> None:
    assert ticket_named_files(ROOT / "src", ROOT / "bench") == []


def test_the_rule_sees_what_it_forbids() -> None:
    # the pattern itself: a check that matched nothing would pass on any tree
    for text in ("(issue 18)", "Issue #5", "seed 001 kept vectors", "seed-004's view", "bench/issue15_goals.sh"):
        assert TICKET.search(text), text
    for text in ("random.seed(0)", "a tissue 5", "the seed of the hash", "issues"):
        assert not TICKET.search(text), text
