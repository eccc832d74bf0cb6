"""New facts go to PostgreSQL in one binary ``COPY`` (each column in its type's binary form): every field and
the float32 vector come back exactly as written, NULLs included."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def test_a_batch_round_trips_through_binary_copy(pg_dsn: str) -> None:
    embedder = HashEmbedder()
    backend = PostgresBackend(pg_dsn, schema=f"t{uuid.uuid4().hex[:16]}", max_size=2)
    store = SharedMemoryStore(backend, embedder=embedder)
    rich = {
        "content": 'Ünïcode ✓ — a "quoted" \\ backslash,\ttab and 日本語',
        "tags": ["ops", "naïve"],
        "category": "runbook",
        "metadata": {"source": "wiki ✓", "page": 4, "nested": {"ok": True}},
        "session_id": "call-7",
        "ttl_days": 2.5,
        "confidence": 0.75,
    }
    receipts = store.as_agent("ann").remember_many([rich, "a plain fact"], "agent")
    assert backend._fact_forms is not None  # the binary path, not the text one
    full, plain = (store.as_agent("ann").get(r.id) for r in receipts)
    assert (full.content, full.tags, full.category, full.metadata) == (
        rich["content"],
        ("ops", "naïve"),
        "runbook",
        rich["metadata"],
    )
    assert (full.session_id, full.confidence, full.created_by, full.stated_by) == ("call-7", 0.75, "ann", ("ann",))
    assert full.expires_at == pytest.approx(full.created_at + 2.5 * 86400)
    assert (full.status, full.reinforcement, full.version, full.supersedes) == ("active", 1, 1, ())
    assert (plain.category, plain.expires_at, plain.metadata, plain.tags) == (None, None, {}, ())
    rows = {r["id"]: r for r in backend.rows(ScopeRef("agent", "ann"), "facts")}
    vectors = np.asarray(embedder.embed([rich["content"], "a plain fact"]), dtype=np.float32)
    assert [rows[r.id]["embedding"] for r in receipts] == [v.tobytes() for v in vectors]
    assert store.as_agent("ann").search("plain fact", "agent")[0].fact.id == receipts[1].id
    store.close()
