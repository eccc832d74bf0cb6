"""Per-agent records: the messages an agent sent and the tools it called, kept in that agent's file.

These are logs, not facts: they are never deduplicated, embedded or recalled into a prompt; they are
there for audit, debugging and full-text search of what happened.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_RECORD_BYTES = 256 * 1024


def record_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}"


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def bounded_text(value: Any, what: str, limit: int = MAX_RECORD_BYTES, truncate: bool = False) -> str:
    """``value`` as text of at most ``limit`` UTF-8 bytes (cut with a marker if ``truncate``)."""
    text = value if isinstance(value, str) else _json(value, what)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    if not truncate:
        raise ValueError(f"{what} is {len(data)} bytes; the limit is {limit}")
    marker = f"… [truncated from {len(data)} bytes]"
    return data[: limit - len(marker.encode())].decode("utf-8", errors="ignore") + marker


@dataclass(frozen=True)
class ConversationRecord:
    """One message an agent sent (or received, with ``role``), in a session."""

    agent_id: str
    content: str
    role: str = "assistant"
    source: str | None = None
    session_id: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    task_id: str | None = None
    created_at: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: record_id("m"))

    table = "conversations"

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["context"] = _json(self.context, "context")
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ConversationRecord:
        return cls(**{**row, "context": json.loads(row.get("context") or "{}")})


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call by an agent: arguments, result, success, duration and error."""

    agent_id: str
    tool_name: str
    tool_args: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    success: bool = True
    duration_ms: float | None = None
    error: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    call_id: str | None = None
    created_at: float = field(default_factory=time.time)
    id: str = field(default_factory=lambda: record_id("t"))

    table = "tool_calls"

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["tool_args"] = _json(self.tool_args, "tool_args")
        row["success"] = int(self.success)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ToolCallRecord:
        return cls(
            **{
                **row,
                "tool_args": json.loads(row.get("tool_args") or "{}"),
                "success": bool(row.get("success")),
            }
        )


Record = ConversationRecord | ToolCallRecord
