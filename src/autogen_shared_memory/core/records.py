"""Per-agent records: the messages an agent sent and the tools it called, kept in that agent's file.

These are logs, not facts: they are never deduplicated, embedded or recalled into a prompt; they are
there for audit, debugging and full-text search of what happened.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import InvalidInputError, InvalidInputTypeError

MAX_RECORD_BYTES = 256 * 1024
MAX_TOOL_ARGS_BYTES = 64 * 1024  # a tool call's arguments as recorded; past it, their text cut (as a string)


def storable_text(text: str) -> str:
    """A record's text as every backend can store it: a lone surrogate (half of an emoji cut off in a
    model's JSON) becomes a ``\\udxxx`` escape and NUL a ``\\x00`` escape. Records are logs of what was
    said: kept, with the bytes that cannot be stored shown, rather than refused (one bad argument must not
    cost a tool call its record)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def record_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}"


def storable(value: Any) -> Any:
    """A record's JSON value as every backend can store it: each string (keys too) through
    :func:`storable_text`, and NaN or infinity as text ("nan", "inf"). PostgreSQL's ``jsonb`` refuses the
    ``\\u0000`` and lone-surrogate escapes JSON would otherwise carry, and NaN, and with them the whole batch
    of records; SQLite would keep the NUL itself."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def _clean(value: Any) -> bool:
    """Whether every string in ``value`` (keys too) is stored as it is (:func:`storable_text` keeps it)."""
    stack = [value]
    while stack:  # iterative: json.dumps has already bounded the depth
        item = stack.pop()
        if isinstance(item, str):
            if storable_text(item) != item:
                return False
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            stack += item
    return True


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(storable(value), default=lambda v: storable_text(str(v)), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputTypeError(f"{what} must be JSON-serialisable: {exc}") from exc


def strict_json(value: Any, what: str, limit: int = MAX_RECORD_BYTES) -> str:
    """``value`` as JSON text: a TypeError for anything JSON cannot hold (never pickle), a ValueError for
    text no backend stores alike (NUL, a lone surrogate) and beyond ``limit`` UTF-8 bytes."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputTypeError(f"{what} must be JSON-serialisable: {exc}") from exc
    if not _clean(value):
        raise InvalidInputError(f"{what} holds a NUL character or text that is not valid Unicode; not allowed")
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InvalidInputError(f"{what} is {size} bytes; the limit is {limit}")
    return text


def lookup_key(value: object, what: str) -> str | None:
    """A key a caller looks a record up by: a ``str``, else a TypeError; None for text no backend can hold
    (a NUL, a lone surrogate), which matches nothing on any of them (PostgreSQL refused it with a raw
    driver error where SQLite answered "not found")."""
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a str, got {type(value).__name__}")
    return value if storable_text(value) == value else None


def bounded_text(value: Any, what: str, limit: int = MAX_RECORD_BYTES, truncate: bool = False) -> str:
    """``value`` as text of at most ``limit`` UTF-8 bytes (cut with a marker if ``truncate``); a lone
    surrogate or NUL escaped (:func:`storable_text`), as records keep them."""
    text = storable_text(value) if isinstance(value, str) else _json(value, what)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    if not truncate:
        raise InvalidInputError(f"{what} is {len(data)} bytes; the limit is {limit}")
    marker = f"… [truncated from {len(data)} bytes]"
    if limit < len(marker.encode()):  # no room to say so
        return data[: max(0, limit)].decode("utf-8", errors="ignore")
    return data[: limit - len(marker.encode())].decode("utf-8", errors="ignore") + marker


MAX_LABEL_BYTES = 1024  # a record's session, task or call id, role or source (PostgreSQL indexes some of them)


def record_label(value: object, what: str) -> str | None:
    """A record's short text field: None, or a str of at most :data:`MAX_LABEL_BYTES` (escaped as records
    keep text, :func:`storable_text`). A longer one broke PostgreSQL's index (reported as an outage), a list
    was stored as ``'{x}'`` there and refused by SQLite."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a str or None, got {type(value).__name__}")
    text = storable_text(value)
    if len(text.encode("utf-8")) > MAX_LABEL_BYTES:
        raise InvalidInputError(f"{what} is {len(text.encode('utf-8'))} bytes; the limit is {MAX_LABEL_BYTES}")
    return text


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False


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
        row = {f.name: getattr(self, f.name) for f in fields(self)}  # not asdict: it recursed into the context
        row["context"] = _json(self.context, "context")
        for name in ("role", "source", "session_id", "task_id"):
            row[name] = record_label(row[name], name)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ConversationRecord:
        fields = {k: v for k, v in row.items() if k != "seq"}
        return cls(**{**fields, "context": json.loads(row.get("context") or "{}")})


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
        duration = self.duration_ms
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, (int, float)) or not _finite(duration)
        ):  # an infinite one was stored, exported as bare Infinity, and refused by every import
            raise InvalidInputError(
                f"duration_ms must be a finite number of milliseconds or None, got {duration!r:.20}"
            )
        row = {f.name: getattr(self, f.name) for f in fields(self)}  # not asdict: it copies the arguments deeply
        for name in ("session_id", "task_id", "call_id"):
            row[name] = record_label(row[name], name)
        if row["error"] is not None:
            row["error"] = bounded_text(row["error"], "error", truncate=True)
        args = _json(self.tool_args, "tool_args")
        if len(args.encode("utf-8")) > MAX_TOOL_ARGS_BYTES:  # a model's 5 MB argument: recorded, cut
            args = json.dumps(
                {"truncated_arguments": bounded_text(args, "tool_args", MAX_TOOL_ARGS_BYTES // 2, truncate=True)},
                ensure_ascii=False,
            )
        row["tool_args"] = args
        row["success"] = int(self.success)
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ToolCallRecord:
        fields = {k: v for k, v in row.items() if k != "seq"}
        fields.update(tool_args=json.loads(row.get("tool_args") or "{}"), success=bool(row.get("success")))
        return cls(**fields)


Record = ConversationRecord | ToolCallRecord


# ----------------------------------------------------------------------------------------- table specs
@dataclass(frozen=True)
class TableSpec:
    """One record table, described once: every backend builds its schema from these specs.

    Every table also has an integer ``seq`` (insertion order; the row id full-text indexes point at).
    """

    name: str
    columns: dict[str, type]
    key: tuple[str, ...]
    not_null: tuple[str, ...] = ()
    indexes: tuple[tuple[str, ...], ...] = ()
    fts: str | None = None  # the column with a full-text index
    append_only: bool = False  # the database itself refuses UPDATE and DELETE
    json_columns: tuple[str, ...] = ()

    def check_mutable(self) -> None:
        if self.append_only:
            raise InvalidInputError(f"{self.name} is append-only")

    def check_delete(self, force: bool, before: float | None, time_column: str) -> None:
        """The rules every backend applies before deleting records."""
        if self.append_only and not force:
            raise InvalidInputError(f"{self.name} is append-only; deleting from it needs an explicit force=True")
        if before is not None and time_column not in self.columns:
            raise InvalidInputError(f"{self.name} has no column {time_column!r}")


TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        TableSpec(
            "conversations",
            {
                "id": str,
                "agent_id": str,
                "session_id": str,
                "role": str,
                "source": str,
                "content": str,
                "context": str,
                "task_id": str,
                "created_at": float,
            },
            key=("id",),
            not_null=("id", "agent_id", "content", "created_at"),
            indexes=(("agent_id", "created_at"), ("session_id", "created_at")),
            fts="content",
            json_columns=("context",),
        ),
        TableSpec(
            "tool_calls",
            {
                "id": str,
                "agent_id": str,
                "session_id": str,
                "tool_name": str,
                "tool_args": str,
                "result": str,
                "success": int,
                "duration_ms": float,
                "error": str,
                "task_id": str,
                "call_id": str,
                "created_at": float,
            },
            key=("id",),
            not_null=("id", "agent_id", "tool_name", "created_at"),
            indexes=(("agent_id", "tool_name"), ("created_at",)),
            json_columns=("tool_args",),
        ),
        TableSpec(
            "tasks",
            {
                "id": str,
                "agent_id": str,
                "created_by": str,
                "title": str,
                "status": str,
                "context": str,
                "result": str,
                "group_id": str,
                "fact_id": str,
                "created_at": float,
                "updated_at": float,
                "completed_at": float,
            },
            key=("id",),
            not_null=("id", "agent_id", "created_by", "title", "status", "created_at"),
            indexes=(("agent_id", "status"), ("created_at",)),
            json_columns=("context", "result"),
        ),
        TableSpec(
            "user_profile",
            {"key": str, "value": str, "source_agent": str, "confidence": float, "updated_at": float},
            key=("key",),
            not_null=("key", "updated_at"),
            json_columns=("value",),
        ),
        TableSpec(
            "agent_directory",
            {
                "agent_id": str,
                "display_name": str,
                "description": str,
                "capabilities": str,
                "model": str,
                "tools": str,
                "status": str,
                "last_active_at": float,
                "updated_at": float,
            },
            key=("agent_id",),
            not_null=("agent_id", "updated_at"),
            indexes=(("status",),),
            json_columns=("capabilities", "tools"),
        ),
        TableSpec(
            "saved_conversations",
            {
                "session_id": str,
                "user_id": str,
                "schema_version": int,
                "data": str,
                "summary": str,
                "message_count": int,
                "created_at": float,
                "updated_at": float,
            },
            key=("session_id",),
            not_null=("session_id", "user_id", "data", "updated_at"),
            indexes=(("user_id", "updated_at"),),
            json_columns=("data",),
        ),
        TableSpec(
            "agent_state",
            {"agent_id": str, "owner_id": str, "key": str, "value": str, "updated_at": float},
            key=("agent_id", "owner_id", "key"),
            not_null=("agent_id", "owner_id", "key", "updated_at"),
            json_columns=("value",),
        ),
        TableSpec(
            "case_log",
            {
                "id": str,
                "session_id": str,
                "author": str,
                "summary": str,
                "supersedes": str,
                "created_at": float,
                "embedding": bytes,
            },
            key=("id",),
            not_null=("id", "author", "summary", "created_at"),
            indexes=(("created_at",),),
            fts="summary",
            append_only=True,
            json_columns=("supersedes",),
        ),
        TableSpec(
            "case_checkpoints",
            {"agent_id": str, "entry_id": str, "version": int, "updated_at": float},
            key=("agent_id",),
            not_null=("agent_id", "entry_id", "updated_at"),
        ),
    )
}


def table_spec(name: str) -> TableSpec:
    spec = TABLES.get(name)
    if spec is None:
        raise InvalidInputError(f"unknown record table {name!r}; known: {sorted(TABLES)}")
    return spec


def fts_column(table: str) -> str:
    """The column of ``table`` with a full-text index, or a ValueError: only record tables have one (facts
    are matched by :meth:`~autogen_shared_memory.backends.base.Backend.lexical`, from each process's postings)."""
    spec = TABLES.get(table)
    if spec is None or spec.fts is None:
        raise InvalidInputError(f"{table} has no full-text index")
    return spec.fts
