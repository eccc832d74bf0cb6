"""What an operator meets: outages, a stuck writer, a role that may only read and write, pgvector in its own
schema, schema names PostgreSQL reserves."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from pg_proxy import Proxy
from psycopg.conninfo import make_conninfo

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import BackendUnavailableError, PostgresBackend
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def test_an_outage_fails_calls_within_the_connect_timeout_and_the_store_recovers(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg_pool waited 30 s per attempt whatever connect_timeout said (calls failed after 60-90 s), and
    after a long outage its reconnection back-off kept failing calls for minutes after the server was back."""
    from psycopg_pool.base import AttemptWithBackoff

    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 60.0)  # as far as a long outage backs it off
    proxy = Proxy(pg_dsn)
    backend = PostgresBackend(proxy.dsn, schema=schema(), min_size=1, max_size=2, connect_timeout=1)
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember("written before the outage", "global")
    proxy.cut()
    for _ in range(3):  # failing calls while the pool's reconnection attempts back off
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="PostgreSQL") as info:
            store.operator.search("outage", "global")
        # The pool says how long it waited for a connection: connect_timeout, not psycopg_pool's 30 s.
        assert "couldn't get a connection after 1.00 sec" in str(info.value.__cause__)
        # The whole call: at most two waits of connect_timeout per attempt (the pool, then the probe of the
        # server), with slack for a loaded machine, still far below the 30 s of a single default wait.
        assert time.monotonic() - started < 2 * backend.connect_timeout * (backend.retries + 1) + 15
    proxy.restore()
    assert [h.content for h in store.operator.search("written before the outage", "global")] == [
        "written before the outage"
    ]
    store.close()
    proxy.close()


def test_a_stuck_writer_makes_a_write_fail_after_lock_timeout_not_wait_forever(pg_dsn: str) -> None:
    """A writer frozen inside its transaction held the scope's row lock: every other writer waited forever
    (SQLite fails after busy_timeout); a statement or lock timeout was also retried as a lost connection."""
    name = schema()
    store = SharedMemoryStore(
        PostgresBackend(pg_dsn, schema=name, lock_timeout=0.5, retries=2), embedder=HashEmbedder()
    )
    store.operator.remember("the scope exists", "global")
    with psycopg.connect(pg_dsn) as stuck:  # a transaction holding the scope's row, and going nowhere
        stuck.execute(f"SELECT rev FROM {name}.asm_scopes WHERE scope_kind = 'global' FOR UPDATE")
        with pytest.raises(BackendUnavailableError, match="lock_timeout 0.5 s") as info:
            store.operator.remember("a write that must wait", "global")
        assert "nothing was written" in str(info.value)
        stuck.rollback()
    assert store.operator.search("a write that must wait", "global") == []
    assert store.operator.remember("a write that must wait", "global").status == "created"
    store.close()


def test_a_role_that_may_only_read_and_write_opens_a_deployment_made_before(pg_dsn: str) -> None:
    """Every open ran CREATE SCHEMA / CREATE TABLE IF NOT EXISTS, which PostgreSQL refuses to a role without
    the CREATE right even when the object exists."""
    name, role = schema(), f"rw_{uuid.uuid4().hex[:8]}"
    owner = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    owner.operator.remember("The deploy window is Thursday", "global")
    owner.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT USAGE ON SCHEMA {name} TO {role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {name} TO {role}")
        conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {name} TO {role}")
    try:
        dsn = make_conninfo(pg_dsn, user=role, password="pw")
        app = SharedMemoryStore(PostgresBackend(dsn, schema=name), embedder=HashEmbedder())
        assert [h.content for h in app.operator.search("deploy window", "global")] == ["The deploy window is Thursday"]
        assert app.operator.remember("The freeze starts Friday", "global").status == "created"
        app.close()
        with pytest.raises(BackendUnavailableError, match=f"may not create or upgrade schema {name}_new"):
            PostgresBackend(dsn, schema=f"{name}_new")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


def test_pgvector_in_a_schema_of_its_own(pg_dsn: str) -> None:
    """Hosted services install pgvector in a schema such as ``extensions``: the backend's search path left it
    out, and every statement naming the vector type failed."""
    database = f"vec_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    dsn = make_conninfo(pg_dsn, dbname=database)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA extensions")
            conn.execute("CREATE EXTENSION vector WITH SCHEMA extensions")
        store = SharedMemoryStore(PostgresBackend(dsn, schema="app"), embedder=HashEmbedder())
        store.operator.remember("The vector type lives in extensions", "global")
        assert [h.content for h in store.operator.search("vector type", "global")] == [
            "The vector type lives in extensions"
        ]
        store.close()
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)")


@pytest.mark.parametrize("name", ["select", "user", "order", "analyze", "pg_tenant"])
def test_a_schema_name_postgresql_reserves_is_refused(pg_dsn: str, name: str) -> None:
    with pytest.raises(ValueError, match="reserved word|PostgreSQL's own"):
        PostgresBackend(pg_dsn, schema=name)


def test_a_busy_pool_is_waited_for_not_replaced(pg_dsn: str) -> None:
    """A pool whose connections were all in use longer than connect_timeout was taken for an outage: every
    waiting call built a new pool (connections past max_size), and calls queued on the old ones failed."""
    import threading

    backend = PostgresBackend(pg_dsn, schema=schema(), min_size=1, max_size=2, connect_timeout=1, retries=4)
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember("The deploy window is Thursday", "global")
    first = backend.pool
    holding = threading.Barrier(3, timeout=60)  # both holders have a connection, and the test knows it
    release = threading.Event()

    def hold(conn: psycopg.Connection[object]) -> None:
        holding.wait()
        release.wait(60)

    holders = [
        threading.Thread(target=backend._run, args=(hold,), kwargs={"write": False}, daemon=True) for _ in range(2)
    ]
    for thread in holders:
        thread.start()
    holding.wait()  # every connection of the pool is taken
    renewals: list[bool] = []
    renew = backend._renew_pool

    def renew_then_release(failed: object) -> bool:
        # The search waited connect_timeout for a connection and asks whether to try again: then (not
        # before) the holders let go, so the retry finds a connection of the same pool.
        renewals.append(renew(failed))  # type: ignore[arg-type]
        release.set()
        return renewals[-1]

    backend._renew_pool = renew_then_release  # type: ignore[method-assign]
    try:
        assert [h.content for h in store.operator.search("deploy window", "global")] == [
            "The deploy window is Thursday"
        ]
    finally:
        release.set()
    assert renewals == [True]  # it did wait out a busy pool (once), and was told to try again
    assert backend.pool is first
    for thread in holders:
        thread.join(timeout=60)
    store.close()


def test_closing_while_a_pool_is_renewed_leaves_nothing_open(pg_dsn: str) -> None:
    backend = PostgresBackend(pg_dsn, schema=schema(), min_size=0, max_size=1, connect_timeout=1)
    failed = backend.pool
    backend.close()
    assert backend._renew_pool(failed) is False and backend.pool is failed and failed.closed
