"""The change feed on PostgreSQL: nothing lost when the listening connection dies, tenants kept apart."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from pg_proxy import Proxy

from autogen_shared_memory import ScopeRef, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.backends.postgres.notify import LISTENER_NAME, channel
from autogen_shared_memory.core.types import Change
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def open_store(dsn: str, name: str) -> SharedMemoryStore:
    return SharedMemoryStore(backend=PostgresBackend(dsn, schema=name, max_size=3), embedder=HashEmbedder())


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def listener_pids(dsn: str, name: str) -> list[int]:
    """The backends listening on the schema's channel (the subscription's kept connection)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = %s",
            (LISTENER_NAME, f'LISTEN "{channel(name)}"'),
        ).fetchall()
    return [r[0] for r in rows]


def check_exactly_once_in_order(seen: list[Change], expected: list[Change]) -> None:
    keys = [(c.scope, c.seq) for c in seen]
    assert len(keys) == len(set(keys)), "a change was delivered twice"
    assert sorted(keys) == sorted((c.scope, c.seq) for c in expected), "a change was lost"
    for scope in {c.scope for c in seen}:
        seqs = [c.seq for c in seen if c.scope == scope]
        assert seqs == sorted(seqs), f"{scope}: out of order"


def _writer(dsn: str, name: str, n: int, out: Any) -> None:
    """Another process: half the facts each go to a scope of their own (nothing later in that scope would
    wake a subscriber that missed it), half to one shared scope."""
    store = open_store(dsn, name)
    ids = []
    for i in range(n):
        group = f"s{i}" if i % 2 == 0 else "crew"
        ids.append(store.remember(f"fact {i} from the writer process", "group", group_id=group).id)
        time.sleep(0.01)
    store.close()
    out.put(ids)


def test_the_feed_loses_nothing_while_its_listening_connection_is_killed_repeatedly(pg_dsn: str) -> None:
    name = schema()
    store = open_store(pg_dsn, name)
    seen: list[Change] = []
    sub = store.subscribe(seen.append)
    start = sub.position
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    writer = ctx.Process(target=_writer, args=(pg_dsn, name, 150, out))
    writer.start()
    killed: set[int] = set()
    while writer.is_alive():
        for pid in listener_pids(pg_dsn, name):
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.add(pid)
        time.sleep(0.15)
    ids = out.get(timeout=120)
    writer.join(timeout=60)
    assert len(killed) >= 5, "the listener was not killed often enough to test anything"
    expected = store.changes(since=start)
    assert len(expected) == 150 and sorted(c.fact_id for c in expected) == sorted(ids)
    assert wait_for(lambda: len(seen) >= len(expected)), f"{len(expected) - len(seen)} writes never arrived"
    time.sleep(0.5)
    check_exactly_once_in_order(seen, expected)
    assert sub.position == expected[-1].position or store.changes(since=sub.position) == []
    sub()
    assert listener_pids(pg_dsn, name) == []  # stopping closes the listening connection
    store.close()


def test_writes_committed_while_the_listener_cannot_reconnect_are_delivered_after_it_does(pg_dsn: str) -> None:
    # Deterministic: the writes happen while the subscriber cannot reach the server at all, and nothing is
    # written after it reconnects, so only the catch-up that follows every (re)LISTEN can deliver them.
    name = schema()
    proxy = Proxy(pg_dsn)
    subscriber = open_store(proxy.dsn, name)
    writer = open_store(pg_dsn, name)
    seen: list[Change] = []
    sub = subscriber.subscribe(seen.append)
    writer.remember("before the outage", "global")
    assert wait_for(lambda: len(seen) == 1, 20)
    proxy.cut()
    assert wait_for(lambda: listener_pids(pg_dsn, name) == [], 20)
    during = [writer.remember(f"during the outage {i}", "group", group_id=f"alone{i}").id for i in range(5)]
    time.sleep(0.5)  # the listener keeps failing to reconnect meanwhile
    proxy.restore()
    assert wait_for(lambda: len(seen) == 6, 30), f"delivered {len(seen) - 1} of the 5 writes made during the outage"
    assert [c.fact_id for c in seen[1:]] == during or sorted(c.fact_id for c in seen[1:]) == sorted(during)
    time.sleep(0.3)
    assert len(seen) == 6
    sub()
    writer.close()
    subscriber.close()
    proxy.close()


def test_tenants_in_one_database_do_not_hear_each_other(pg_dsn: str) -> None:
    ours, theirs = schema(), schema()
    assert channel(ours) != channel(theirs)
    store, other = open_store(pg_dsn, ours), open_store(pg_dsn, theirs)
    woken: list[ScopeRef] = []
    stop_wakeups = store.backend.subscribe(lambda scope, event: woken.append(scope))  # type: ignore[attr-defined]
    seen: list[Change] = []
    sub = store.subscribe(seen.append)
    other.remember("another tenant's secret plan", "group", group_id="crew")
    time.sleep(1.0)
    assert woken == [] and seen == []
    store.remember("our own fact", "group", group_id="crew")
    assert wait_for(lambda: len(seen) == 1 and woken == [ScopeRef("group", "crew")], 10)
    assert store.get(seen[0].fact_id).content == "our own fact"
    sub()
    stop_wakeups()
    store.close()
    other.close()


def test_a_long_schema_name_still_gets_a_channel_of_its_own() -> None:
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    assert len(channel(long_a)) <= 63 and channel(long_a) != channel(long_b)
    assert channel("MySchema") == channel("myschema")  # unquoted identifiers fold to lower case
