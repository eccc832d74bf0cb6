"""The change feed on PostgreSQL: nothing lost when the listening connection dies, tenants kept apart."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from typing import Any

import psycopg
import pytest
from pg_proxy import Proxy

from autogen_shared_memory import ScopeRef, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.backends.postgres.notify import LISTENER_NAME, channel
from autogen_shared_memory.core.types import Change
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.testing.conformance import _settle as settle
from autogen_shared_memory.testing.conformance import _wait_for as wait_for

pytestmark = pytest.mark.usefixtures("pg_dsn")


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def open_store(dsn: str, name: str) -> SharedMemoryStore:
    return SharedMemoryStore(PostgresBackend(dsn, schema=name, max_size=3), embedder=HashEmbedder())


def reconnects_failed(caplog: pytest.LogCaptureFixture) -> int:
    """The listener's logged attempts to reconnect that failed (after the one telling the connection was lost)."""
    lost = [r for r in caplog.records if "the shared memory listener lost its PostgreSQL connection" in r.message]
    return max(len(lost) - 1, 0)


def listener_pids(dsn: str) -> list[int]:
    """The listening connections of this process (one per server, shared by every subscription; the tests
    in this process that are not running have stopped theirs)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (LISTENER_NAME,)).fetchall()
    return [r[0] for r in rows]


def client_connections(dsn: str) -> int:
    """Every client connection to the server but the one asking."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


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
        ids.append(store.as_operator(group).remember(f"fact {i} from the writer process", "group").id)
        time.sleep(0.01)  # pacing: the writes span many kills of the listener (the test checks it was killed)
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
        for pid in listener_pids(pg_dsn):
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.add(pid)
        time.sleep(0.15)  # pacing: the listener reconnects between kills
    ids = out.get(timeout=120)
    writer.join(timeout=60)
    assert len(killed) >= 5, "the listener was not killed often enough to test anything"
    expected = store.changes(since=start)
    assert len(expected) == 150 and sorted(c.fact_id for c in expected) == sorted(ids)
    assert wait_for(lambda: len(seen) >= len(expected)), f"{len(expected) - len(seen)} writes never arrived"
    settle(store, seen, {c.scope for c in expected})
    expected = store.changes(since=start)
    check_exactly_once_in_order(seen, expected)
    assert sub.position == expected[-1].position or store.changes(since=sub.position) == []
    sub()
    assert listener_pids(pg_dsn) == []  # stopping closes the listening connection
    store.close()


def test_writes_committed_while_the_listener_cannot_reconnect_are_delivered_after_it_does(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Deterministic: the writes happen while the subscriber cannot reach the server at all, and nothing is
    # written after it reconnects, so only the catch-up that follows every (re)LISTEN can deliver them.
    name = schema()
    proxy = Proxy(pg_dsn)
    subscriber = open_store(proxy.dsn, name)
    writer = open_store(pg_dsn, name)
    seen: list[Change] = []
    sub = subscriber.subscribe(seen.append)
    writer.operator.remember("before the outage", "global")
    assert wait_for(lambda: len(seen) == 1, 20)
    proxy.cut()
    assert wait_for(lambda: listener_pids(pg_dsn) == [], 20)
    during = [writer.as_operator(f"alone{i}").remember(f"during the outage {i}", "group").id for i in range(5)]
    assert wait_for(lambda: reconnects_failed(caplog) >= 2, 20)  # the listener keeps failing to reconnect
    proxy.restore()
    assert wait_for(lambda: len(seen) == 6, 30), f"delivered {len(seen) - 1} of the 5 writes made during the outage"
    assert [c.fact_id for c in seen[1:]] == during or sorted(c.fact_id for c in seen[1:]) == sorted(during)
    sentinels = settle(writer, seen, {c.scope for c in seen})  # nothing more, nothing twice
    assert len(seen) == 6 + len(sentinels)
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
    other.as_operator("crew").remember("another tenant's secret plan", "group")
    store.as_operator("crew").remember("our own fact", "group")
    # One listening connection gets notifications in commit order: had it heard the other tenant's write, that
    # wake-up would be in woken before ours, which never equals a single one then.
    assert wait_for(lambda: len(seen) == 1 and woken == [ScopeRef("group", "crew")], 10)
    assert store.operator.get(seen[0].fact_id).content == "our own fact"
    sub()
    stop_wakeups()
    store.close()
    other.close()


def test_a_long_schema_name_still_gets_a_channel_of_its_own() -> None:
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    assert len(channel(long_a)) <= 63 and channel(long_a) != channel(long_b)
    assert channel("MySchema") == channel("myschema")  # unquoted identifiers fold to lower case


def test_many_subscriptions_in_one_process_share_one_listening_connection(pg_dsn: str) -> None:
    # A connection per subscription would take ~95 subscriptions to lock every other client out of a server
    # with the default max_connections of 100.
    ours, theirs = schema(), schema()
    before = client_connections(pg_dsn)
    store, other = open_store(pg_dsn, ours), open_store(pg_dsn, theirs)  # pools of at most 3 connections each
    seen: list[list[Change]] = [[] for _ in range(150)]
    subs = [store.subscribe(seen[i].append) for i in range(10)]
    assert len(listener_pids(pg_dsn)) == 1
    subs += [store.subscribe(seen[i].append) for i in range(10, 150)]
    their_seen: list[Change] = []
    their_sub = other.subscribe(their_seen.append)  # another schema (tenant) on the same server: same connection
    assert len(listener_pids(pg_dsn)) == 1
    assert client_connections(pg_dsn) - before <= 3 + 3 + 1  # the two pools and one listener
    first = store.as_operator("crew").remember("every subscription hears this", "group").id
    assert wait_for(lambda: all(len(s) == 1 for s in seen), 30), f"{sum(not s for s in seen)} never heard it"
    assert all(s[0].fact_id == first for s in seen)
    subs[0]()  # stopping one stops none of the others
    second = store.operator.remember("all but the stopped one hear this", "global").id
    assert wait_for(lambda: all(len(s) == 2 for s in seen[1:]), 30)
    assert all(s[1].fact_id == second for s in seen[1:]) and len(seen[0]) == 1
    theirs_id = other.operator.remember("another tenant's fact", "global").id
    assert wait_for(lambda: len(their_seen) == 1, 30) and their_seen[0].fact_id == theirs_id
    third = store.operator.remember("a sentinel: heard after theirs, had they been heard", "global").id
    assert wait_for(lambda: all(len(s) == 3 for s in seen[1:]), 30)
    assert all(s[2].fact_id == third for s in seen[1:]) and len(seen[0]) == 1  # not theirs
    for sub in subs[1:]:
        sub()
    assert len(listener_pids(pg_dsn)) == 1  # the other tenant still listens
    their_sub()
    assert wait_for(lambda: listener_pids(pg_dsn) == [], 10)  # the last one stopped: the connection closes
    store.close()
    other.close()


def test_the_shared_listener_reconnects_and_every_subscription_catches_up(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # After the shared connection is killed, writes made before it listens again reach every subscription
    # through the catch-up read that follows each LISTEN (they were never notified).
    name = schema()
    proxy = Proxy(pg_dsn)
    subscriber = open_store(proxy.dsn, name)
    writer = open_store(pg_dsn, name)
    seen: list[list[Change]] = [[] for _ in range(5)]
    subs = [subscriber.subscribe(seen[i].append) for i in range(5)]
    proxy.cut()
    assert wait_for(lambda: listener_pids(pg_dsn) == [], 20)
    during = {writer.as_operator(f"alone{i}").remember(f"during the outage {i}", "group").id for i in range(3)}
    assert wait_for(lambda: reconnects_failed(caplog) >= 1, 20)  # it tried again meanwhile, and failed
    proxy.restore()
    assert wait_for(lambda: all(len(s) == 3 for s in seen), 30), [len(s) for s in seen]
    assert all({c.fact_id for c in s} == during for s in seen)
    for sub in subs:
        sub()
    writer.close()
    subscriber.close()
    proxy.close()
