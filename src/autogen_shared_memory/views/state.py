"""The conversation and agent-state store: whole conversations and keyed agent state.

Values are JSON, never pickle: any JSON-serialisable value (for example what ``await team.save_state()``
returns) is accepted; anything else is a ``TypeError`` and nothing is written. Conversations carry a
schema version. Two implementations of one contract: in memory (tests, single sessions) and on a
storage backend (SQLite's ``global.db``, or the PostgreSQL backend's tables through the same code).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

from ..backends.base import Backend
from ..core.records import storable_text, strict_json
from ..core.types import ScopeRef
from ..errors import InvalidInputError

CONVERSATION_SCHEMA_VERSION = 1
MAX_STATE_BYTES = 4 * 1024 * 1024


def _encode(value: Any, what: str) -> str:
    return strict_json(value, what, MAX_STATE_BYTES)


def _key(value: object, what: str) -> str:
    """A key, stored or looked up: the same answer from every backend (PostgreSQL refused NUL and lone
    surrogates with raw driver errors)."""
    if not isinstance(value, str) or not value or len(value) > 256 or storable_text(value) != value:
        raise InvalidInputError(
            f"{what} must be a non-empty string of at most 256 characters, without NUL or lone surrogates"
        )
    return value


def _metadata(session_id: str, user_id: str, conversation: Any, created: float, updated: float) -> dict[str, Any]:
    messages = conversation.get("messages") if isinstance(conversation, dict) else conversation
    count = len(messages) if isinstance(messages, list) else None
    summary = None
    if isinstance(messages, list) and messages:
        last = messages[-1]
        text = last.get("content") if isinstance(last, dict) else last
        summary = str(text)[:200]
    return {
        "session_id": session_id,
        "user_id": user_id,
        "schema_version": CONVERSATION_SCHEMA_VERSION,
        "message_count": count,
        "summary": summary,
        "created_at": created,
        "updated_at": updated,
    }


class ConversationStateStore(ABC):
    """Store whole conversations by session and agent state by (agent_id, owner_id, key)."""

    @abstractmethod
    def store_conversation(self, session_id: str, user_id: str, conversation: Any) -> None:
        """Store or replace a conversation (JSON: typically ``{"messages": [...]}`` or a list)."""

    @abstractmethod
    def retrieve_conversation(self, session_id: str) -> Any | None:
        """The stored conversation, or None."""

    @abstractmethod
    def delete_conversation(self, session_id: str) -> bool:
        """True if a conversation was deleted, False if there was none."""

    @abstractmethod
    def list_conversations_for_user(self, user_id: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        """Metadata only (session_id, schema_version, message_count, summary, timestamps), newest first."""

    @abstractmethod
    def store_agent_state(self, agent_id: str, owner_id: str, key: str, state_data: Any) -> None:
        """Store or replace one piece of agent state."""

    @abstractmethod
    def retrieve_agent_state(self, agent_id: str, owner_id: str, key: str) -> Any | None:
        """The stored state, or None."""

    @abstractmethod
    def delete_agent_state(self, agent_id: str, owner_id: str, key: str) -> bool:
        """True if state was deleted."""

    @abstractmethod
    def get_all_agent_states(self, agent_id: str, owner_id: str) -> dict[str, Any]:
        """Every key of an agent's state for one owner."""

    @staticmethod
    def _page(limit: int, offset: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidInputError(f"limit must be between 1 and 10000, got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative int, got {offset!r}")


class InMemoryConversationStateStore(ConversationStateStore):
    """The same contract in memory (values are copied in and out, as a database would)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conversations: dict[str, tuple[str, str, float, float]] = {}
        self._states: dict[tuple[str, str, str], str] = {}

    def store_conversation(self, session_id: str, user_id: str, conversation: Any) -> None:
        text = _encode(conversation, "conversation")
        _key(session_id, "session_id"), _key(user_id, "user_id")
        with self._lock:
            created = self._conversations.get(session_id, ("", "", time.time(), 0.0))[2]
            self._conversations[session_id] = (user_id, text, created, time.time())

    def retrieve_conversation(self, session_id: str) -> Any | None:
        with self._lock:
            found = self._conversations.get(session_id)
        return None if found is None else json.loads(found[1])

    def delete_conversation(self, session_id: str) -> bool:
        with self._lock:
            return self._conversations.pop(session_id, None) is not None

    def list_conversations_for_user(self, user_id: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        self._page(limit, offset)
        with self._lock:
            mine = [(sid, v) for sid, v in self._conversations.items() if v[0] == user_id]
        mine.sort(key=lambda item: -item[1][3])
        return [
            _metadata(sid, uid, json.loads(text), created, updated)
            for sid, (uid, text, created, updated) in mine[offset : offset + limit]
        ]

    def store_agent_state(self, agent_id: str, owner_id: str, key: str, state_data: Any) -> None:
        text = _encode(state_data, "agent state")
        with self._lock:
            self._states[(_key(agent_id, "agent_id"), _key(owner_id, "owner_id"), _key(key, "key"))] = text

    def retrieve_agent_state(self, agent_id: str, owner_id: str, key: str) -> Any | None:
        with self._lock:
            text = self._states.get((agent_id, owner_id, key))
        return None if text is None else copy.deepcopy(json.loads(text))

    def delete_agent_state(self, agent_id: str, owner_id: str, key: str) -> bool:
        with self._lock:
            return self._states.pop((agent_id, owner_id, key), None) is not None

    def get_all_agent_states(self, agent_id: str, owner_id: str) -> dict[str, Any]:
        with self._lock:
            return {k: json.loads(v) for (a, o, k), v in self._states.items() if (a, o) == (agent_id, owner_id)}


class BackendConversationStateStore(ConversationStateStore):
    """The contract on a storage backend, in the global scope (``global.db`` on SQLite)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.scope = ScopeRef("global")

    def store_conversation(self, session_id: str, user_id: str, conversation: Any) -> None:
        text = _encode(conversation, "conversation")
        now = time.time()
        meta = _metadata(_key(session_id, "session_id"), _key(user_id, "user_id"), conversation, now, now)
        existing = self.backend.read_records(self.scope, "saved_conversations", {"session_id": session_id}, limit=1)
        created = existing[0]["created_at"] if existing else now
        self.backend.upsert_records(self.scope, "saved_conversations", [{**meta, "created_at": created, "data": text}])

    def retrieve_conversation(self, session_id: str) -> Any | None:
        where = {"session_id": _key(session_id, "session_id")}
        rows = self.backend.read_records(self.scope, "saved_conversations", where, limit=1)
        return json.loads(rows[0]["data"]) if rows else None

    def delete_conversation(self, session_id: str) -> bool:
        where = {"session_id": _key(session_id, "session_id")}
        return self.backend.delete_records(self.scope, "saved_conversations", where) > 0

    def list_conversations_for_user(self, user_id: str, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        self._page(limit, offset)
        where = {"user_id": _key(user_id, "user_id")}
        rows = self.backend.read_records(self.scope, "saved_conversations", where, limit=100_000)
        rows.sort(key=lambda r: -r["updated_at"])
        keep = (
            "session_id",
            "user_id",
            "schema_version",
            "message_count",
            "summary",
            "created_at",
            "updated_at",
        )
        return [{k: r[k] for k in keep} for r in rows[offset : offset + limit]]

    def store_agent_state(self, agent_id: str, owner_id: str, key: str, state_data: Any) -> None:
        text = _encode(state_data, "agent state")
        self.backend.upsert_records(
            self.scope,
            "agent_state",
            [
                {
                    "agent_id": _key(agent_id, "agent_id"),
                    "owner_id": _key(owner_id, "owner_id"),
                    "key": _key(key, "key"),
                    "value": text,
                    "updated_at": time.time(),
                }
            ],
        )

    def retrieve_agent_state(self, agent_id: str, owner_id: str, key: str) -> Any | None:
        where = {
            "agent_id": _key(agent_id, "agent_id"),
            "owner_id": _key(owner_id, "owner_id"),
            "key": _key(key, "key"),
        }
        rows = self.backend.read_records(self.scope, "agent_state", where, limit=1)
        return json.loads(rows[0]["value"]) if rows else None

    def delete_agent_state(self, agent_id: str, owner_id: str, key: str) -> bool:
        where = {
            "agent_id": _key(agent_id, "agent_id"),
            "owner_id": _key(owner_id, "owner_id"),
            "key": _key(key, "key"),
        }
        return self.backend.delete_records(self.scope, "agent_state", where) > 0

    def get_all_agent_states(self, agent_id: str, owner_id: str) -> dict[str, Any]:
        rows = self.backend.read_records(
            self.scope,
            "agent_state",
            {"agent_id": _key(agent_id, "agent_id"), "owner_id": _key(owner_id, "owner_id")},
            limit=100_000,
            oldest_first=True,
        )
        return {r["key"]: json.loads(r["value"]) for r in rows}
