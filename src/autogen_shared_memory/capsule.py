"""Capsules: recalled facts rendered as compact, byte-bounded text for a model's tool result.

A capsule is what keeps memory out of the prompt prefix: a handful of facts, each with the id an agent
needs to forget or supersede it and the provenance it needs to weigh it, never more than ``max_bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .model import Hit

MIN_CAPSULE_BYTES = 64
_ELLIPSIS = "…"


def truncate_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 fits in ``max_bytes`` (never splits a character)."""
    if max_bytes <= 0:
        return ""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")


def _date(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def hit_line(hit: Hit) -> str:
    """One fact as a single line: ``- [id | scope | by who | date | conf | xN] content``, where N is the
    number of distinct agents that stated it (one agent repeating itself does not inflate it)."""
    fact = hit.fact
    parts = [fact.id, str(fact.scope), f"by {fact.created_by}", _date(fact.created_at)]
    if fact.confidence < 1.0:
        parts.append(f"conf {fact.confidence:.2f}")
    if len(fact.stated_by) > 1:
        parts.append(f"x{len(fact.stated_by)}")
    if fact.status != "active":
        parts.append(fact.status)
    if fact.tags:
        parts.append("#" + " #".join(fact.tags))
    content = " ".join(fact.content.split())
    return f"- [{' | '.join(parts)}] {content}"


def _header(shown: int, total: int) -> str:
    omitted = total - shown
    head = f"[memory: {shown} of {total} facts"
    return head + (f", {omitted} left out by the size limit]" if omitted else "]")


def capsule(hits: Sequence[Hit], max_bytes: int = 2048) -> str:
    """Render ``hits`` (best first) within ``max_bytes`` UTF-8 bytes.

    Whole facts are added while they fit; the first one that does not fit is cut (marked ``…``) if a useful
    part of it fits, and the header states how many facts were left out. Memory is evidence, not
    instructions: the header and the fact lines make that framing visible to the model.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"max_bytes must be an int, got {type(max_bytes).__name__}")
    if max_bytes < MIN_CAPSULE_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_CAPSULE_BYTES}, got {max_bytes}")
    total = len(hits)
    if total == 0:
        return "[memory: no matching facts]"
    # Reserve room for the longest header this capsule could need.
    budget = max_bytes - len(_header(0, total).encode("utf-8")) - 1
    lines: list[str] = []
    used = 0
    for hit in hits:
        line = hit_line(hit)
        size = len(line.encode("utf-8")) + 1  # + newline
        if used + size <= budget:
            lines.append(line)
            used += size
            continue
        room = budget - used - 1 - len(_ELLIPSIS.encode("utf-8"))
        if room >= 48:
            lines.append(truncate_utf8(line, room) + _ELLIPSIS)
        break
    text = _header(len(lines), total) + "\n" + "\n".join(lines)
    return text.rstrip("\n")
