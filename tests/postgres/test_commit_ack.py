"""A write whose COMMIT reached the server but whose answer was lost is applied once, not retried into a
second application (a remember counted as said twice, a forget answered "already forgotten")."""

from __future__ import annotations

import uuid

import pytest
from pg_proxy import Proxy

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def test_a_commit_whose_answer_was_lost_is_applied_once(pg_dsn: str) -> None:
    proxy = Proxy(pg_dsn)
    name = f"t{uuid.uuid4().hex[:16]}"
    store = SharedMemoryStore(
        backend=PostgresBackend(proxy.dsn, schema=name, min_size=1, max_size=2), embedder=HashEmbedder()
    )
    fact = "the deploy window is Tuesday 14:00 UTC"
    created = store.remember(fact, "global")
    before = store.get(created.id).reinforcement

    proxy.lose_next_commit_answer()
    again = store.remember(fact, "global")  # said a second time: reinforced once
    assert proxy.lost_answers == 1
    assert again.status == "reinforced" and again.id == created.id
    assert store.get(created.id).reinforcement == before + 1  # a retry would make it + 2
    assert [e.event for e in store.history(created.id)].count("reinforced") == 1

    fresh = store.remember("the release train leaves on Thursdays", "global")
    assert fresh.status == "created"
    proxy.lose_next_commit_answer()
    forgotten = store.forget(fresh.id)  # a retry would find the fact already forgotten
    assert proxy.lost_answers == 2
    assert forgotten.status == "forgotten"
    assert [e.event for e in store.history(fresh.id)] == ["created", "forgotten"]
    store.close()
    proxy.close()
