"""PostgreSQL-specific behaviour, against a real server (embedded, or $AUTOGEN_SHARED_MEMORY_TEST_DSN)."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from autogen_shared_memory import FactNotFoundError, ScopeRef, SharedMemoryStore
from autogen_shared_memory.backends.postgres import SCHEMA_VERSION, BackendUnavailableError, PostgresBackend, redact
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def test_unreachable_server_names_the_dsn_without_its_password() -> None:
    dsn = "postgresql://alice:s3cret@127.0.0.1:1/memory"
    with pytest.raises(BackendUnavailableError) as info:
        PostgresBackend(dsn, connect_timeout=2)
    message = str(info.value)
    assert "127.0.0.1" in message and "alice" in message and "memory" in message and "s3cret" not in message
    assert "s3cret" not in redact("host=db user=u password=s3cret dbname=x")


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql+psycopg://app:S3CRETpw@db-host/memory",  # a SQLAlchemy URL
        "postgresql://app:S3CRETpw@[::1/memory",
        "postgresql://app:S3CRETpw@127.0.0.1:1/memory?sslmod=require",
    ],
)
def test_a_dsn_that_cannot_be_parsed_is_refused_without_its_password(dsn: str) -> None:
    # psycopg's parse error quotes the whole DSN: the CLI printed it, password and all
    with pytest.raises((ValueError, BackendUnavailableError)) as info:
        PostgresBackend(dsn, connect_timeout=2)
    shown = [str(info.value), repr(info.value.__cause__), repr(info.value.__context__)]
    assert not any("S3CRETpw" in text for text in shown), shown
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    result = CliRunner().invoke(app, ["--dsn", dsn, "scopes"])
    assert result.exit_code == 1 and "S3CRETpw" not in result.output and "Traceback" not in result.output


def test_missing_pgvector_says_how_to_enable_it(pg_dsn: str) -> None:
    name = f"novec_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pw'")
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"REVOKE CREATE ON DATABASE {name} FROM PUBLIC")
    params = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    params.update(user=name, password="pw", dbname=name)
    dsn = psycopg.conninfo.make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    with pytest.raises(BackendUnavailableError, match="CREATE EXTENSION vector") as info:
        PostgresBackend(dsn)
    assert "pw" not in str(info.value).replace("pgvector", "")


def test_store_from_dsn_argument_and_env(pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store = SharedMemoryStore(pg_dsn, embedder=HashEmbedder())
    assert isinstance(store.backend, PostgresBackend)
    assert store.dump_component().config["location"] == pg_dsn  # explicit: kept (docs/postgres.md says so)
    store.close()
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DSN", pg_dsn)
    from_env = SharedMemoryStore(embedder=HashEmbedder())
    assert isinstance(from_env.backend, PostgresBackend)
    dumped = from_env.dump_component()
    assert dumped.config.get("dsn") is None and dumped.config.get("root") is None  # the password stays in the env
    reloaded = SharedMemoryStore.load_component(dumped)
    assert isinstance(reloaded.backend, PostgresBackend)  # read from the environment again
    reloaded.close()
    from_env.close()
    assert not isinstance(SharedMemoryStore(tmp_path, embedder=HashEmbedder()).backend, PostgresBackend)


def _terminate_other_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database() "
            "AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def test_dropped_connections_are_retried_and_nothing_is_half_written(pg_dsn: str) -> None:
    backend = PostgresBackend(pg_dsn, schema=schema(), min_size=2, max_size=2)
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember("written before the network outage", "global")
    assert _terminate_other_connections(pg_dsn) >= 1
    receipt = store.operator.remember(
        "recorded once connections recovered", "global"
    )  # the dead pooled connection is replaced
    assert receipt.status == "created" and store.stats()[0].counts["active"] == 2
    no_retry = PostgresBackend(pg_dsn, schema=backend.schema, min_size=1, max_size=1, retries=0)
    fragile = SharedMemoryStore(no_retry, embedder=HashEmbedder())
    fragile.operator.search("warm up", "global")
    _terminate_other_connections(pg_dsn)
    with pytest.raises(BackendUnavailableError, match="nothing was half-written"):
        fragile.operator.remember_many(["one of a batch", "two of a batch"], "global")
    assert [h.content for h in store.operator.search("batch", "global")] == []  # all or nothing
    fragile.close()
    store.close()


def test_listen_notify_tells_other_hosts_about_writes(pg_dsn: str) -> None:
    name = schema()
    listener = PostgresBackend(pg_dsn, schema=name)
    seen: list[tuple[ScopeRef, str]] = []
    event = threading.Event()

    def on_change(scope: ScopeRef, what: str) -> None:
        seen.append((scope, what))
        event.set()

    stop = listener.subscribe(on_change)  # returns once LISTEN is in place
    writer = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    writer.as_operator("crew").remember("a fact from another host", "group")
    assert event.wait(60)
    assert seen[0] == (ScopeRef("group", "crew"), "write")
    stop()
    writer.close()
    listener.close()


def _pg_worker(dsn: str, name: str, proc: int, out: Any, done_writing: Any) -> None:
    store = SharedMemoryStore(
        PostgresBackend(dsn, schema=name, max_size=3), embedder=HashEmbedder(), policy=WritePolicy(global_writers=["*"])
    )
    errors, created = [], []
    for i in range(25):
        try:
            r = store.as_agent(f"h{proc}", "crew").remember(
                f"host{proc} fact{i} token{proc * 100 + i}", "global" if i % 2 else "group"
            )
            created.append(r.id)
            if i % 5 == 0:
                store.as_agent(f"h{proc}", "crew").forget(r.id)
            store.as_agent(f"h{proc}", "crew").search(f"fact{i}")
        except Exception as exc:
            errors.append(repr(exc))
    done_writing.wait(timeout=240)  # a host that started late has not written yet
    seen = sum(1 for other in range(4) if store.operator.search(f"token{other * 100 + 1}", "global", top_k=1))
    store.close()
    out.put((proc, errors, created, seen))


def test_several_processes_write_and_read_through_postgres(pg_dsn: str) -> None:
    name = schema()
    setup = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    for p in range(4):
        setup.operator.add_member("crew", f"h{p}")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    done_writing = ctx.Barrier(4)
    procs = [ctx.Process(target=_pg_worker, args=(pg_dsn, name, p, out, done_writing)) for p in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[1] for r in results] == [[], [], [], []]
    created = {i for r in results for i in r[2]}
    assert len(created) == 100
    stats = {st.scope.kind: st.counts for st in setup.stats()}
    assert stats["global"]["active"] + stats["group"]["active"] == 80
    assert stats["global"]["forgotten"] + stats["group"]["forgotten"] == 20
    assert all(r[3] == 4 for r in results)  # every host sees the others' facts
    setup.close()


def _migrate_worker(dsn: str, name: str, out: Any) -> None:
    try:
        PostgresBackend(dsn, schema=name).close()
        out.put("ok")
    except Exception as exc:
        out.put(repr(exc))


def test_schema_creation_is_safe_when_processes_start_at_once(pg_dsn: str) -> None:
    name = schema()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_migrate_worker, args=(pg_dsn, name, out)) for _ in range(4)]
    for p in procs:
        p.start()
    assert sorted(out.get(timeout=120) for _ in procs) == ["ok"] * 4
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT version FROM {name}.asm_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_sqlite_to_postgres_and_back_is_lossless(pg_dsn: str, tmp_path: Path) -> None:
    source = SharedMemoryStore(tmp_path / "a", embedder=HashEmbedder())
    source.operator.add_member("crew", "alice")
    old = source.operator.remember("Freeze starts Monday", "global")
    source.operator.remember("Freeze starts Wednesday", "global", supersedes=[old.id])
    source.as_agent("alice", "crew").remember("deploy on thursdays", "group", tags=["ops"], ttl_days=3)
    source.for_agent("alice", "crew").case_log.append("case opened")
    source.for_agent("alice").log_conversation("assistant", "hello")
    source.state.store_agent_state("alice", "u1", "k", {"v": [1, 2]})
    first = tmp_path / "a.jsonl"
    source.export(first)
    pg = SharedMemoryStore(PostgresBackend(pg_dsn, schema=schema()), embedder=HashEmbedder())
    progress: list[int] = []
    pg.import_(first, policy=True, progress=progress.append)
    assert sum(progress) == len(first.read_text().splitlines()) - 2
    middle = tmp_path / "b.jsonl"
    pg.export(middle)
    back = SharedMemoryStore(tmp_path / "c", embedder=HashEmbedder())
    back.import_(middle, policy=True)
    last = tmp_path / "c.jsonl"
    back.export(last)

    def rows(path: Path) -> list[str]:
        return sorted(line for line in path.read_text().splitlines() if '"type": "header"' not in line)

    assert rows(first) == rows(middle) == rows(last)
    assert pg.operator.search("freeze", "global")[0].content == "Freeze starts Wednesday"
    pg.close()


def test_schema_1_is_migrated_with_stated_by_and_new_hashes(pg_dsn: str) -> None:
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    fact = store.operator.remember("Fact from the old schema.", "global")
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 1, with a restatement by bob
        conn.execute(f"ALTER TABLE {name}.asm_facts DROP COLUMN stated_by")
        conn.execute(f"UPDATE {name}.asm_facts SET content_hash = 'old-rule'")
        conn.execute(
            f"INSERT INTO {name}.asm_audit (scope_kind, owner, fact_id, event, actor, at) "
            "VALUES ('global', '', %s, 'reinforced', 'bob', 0)",
            (fact.id,),
        )
        conn.execute(f"UPDATE {name}.asm_schema SET version = 1")
    reopened = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    assert reopened.operator.get(fact.id).stated_by == ("system", "bob")
    assert reopened.operator.remember("fact from the old schema", "global").duplicate_of == fact.id
    reopened.close()


def test_a_fact_is_found_by_id_alone_through_the_id_index(pg_dsn: str) -> None:
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    ids = [store.as_operator(f"g{g}").remember(f"fact of group {g}", "group").id for g in range(20)]
    private = store.as_agent("alice").remember("alice drinks green tea", "agent").id
    assert store.operator.get(ids[13]).content == "fact of group 13"
    assert store.operator.get(private).scope == ScopeRef("agent", "alice")
    with pytest.raises(FactNotFoundError):
        store.operator.get("g_0000000000000000beef")
    with psycopg.connect(pg_dsn) as conn:  # one probe of an index, not a scan of every scope's rows
        conn.execute(f"SET search_path TO {name}, public")
        conn.execute("SET enable_seqscan = off")
        plan = " ".join(r[0] for r in conn.execute("EXPLAIN SELECT * FROM asm_facts WHERE id = 'g_x'"))
    assert "asm_facts_id" in plan
    store.close()


def test_the_listener_keeps_one_connection_and_listens_when_subscribe_returns(pg_dsn: str) -> None:
    # It used to reopen its connection after every 0.5 s without a message: notifications sent while it
    # reconnected were lost, and subscribe returned before it listened.
    backend = PostgresBackend(pg_dsn, schema=schema())
    heard = threading.Event()
    stop = backend.subscribe(lambda scope, event: heard.set())
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember("written right after subscribe returned", "global")
    assert heard.wait(60)

    def listeners() -> list[Any]:
        with psycopg.connect(pg_dsn) as conn:
            return conn.execute(
                "SELECT pid, backend_start FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
            ).fetchall()

    before = listeners()
    time.sleep(1.6)  # three of the old 0.5 s timeouts
    assert listeners() == before and len(before) >= 1
    stop()
    store.close()


@pytest.mark.parametrize("index", ["exact", "hnsw"])
def test_writes_and_searches_sharing_a_small_pool_never_wait_on_each_other(pg_dsn: str, index: str) -> None:
    # A write (and build_ann) took the scope cache's lock, then waited for a pooled connection; each search
    # leg held a pooled connection, then waited for that lock: with the pool's connections all held by
    # searches, every call stalled for the pool's 30 s timeout, three times, then failed. The lock now comes
    # after the connection everywhere.
    backend = PostgresBackend(pg_dsn, schema=schema(), max_size=2, vector_index=index, ann_min_facts=100)  # type: ignore[arg-type]
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember_many([f"base fact {i} about deploys" for i in range(200)], "global")
    stop, errors, slowest = threading.Event(), [], [0.0]

    def call(work: Any) -> None:
        while not stop.is_set():
            start = time.monotonic()
            try:
                work()
            except Exception as exc:  # pragma: no cover - the failure this test looks for
                errors.append(exc)
            slowest[0] = max(slowest[0], time.monotonic() - start)

    counter = iter(range(1 << 30))
    jobs = [lambda: store.operator.remember(f"fresh fact {next(counter)} about servers", "global")]
    jobs += [lambda r=r: store.operator.search(f"deploys {r}", "global") for r in range(4)]
    if index == "hnsw":
        jobs.append(lambda: backend.build_ann(ScopeRef("global")))
    threads = [threading.Thread(target=call, args=(job,), daemon=True) for job in jobs]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    # Stalled calls waited out the pool's timeout (connect_timeout), then failed: none may come near it.
    assert errors == [] and slowest[0] < backend.connect_timeout, (errors[:1], slowest)
    store.close()


def _kill_postmaster(server: Any) -> None:
    """Kill an embedded server's postmaster (SIGKILL: no shutdown at all), and wait until it is gone."""
    import signal

    import psutil

    process = psutil.Process(server.server.get_pid())
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    deadline = time.monotonic() + 30
    while server.answers(2) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_test_server_is_started_again_once_then_reported_down_once(pg_server: Any) -> None:
    """The fixture's liveness check (tests/conftest.py), on the session's own server: one death costs a
    restart, a second one fails the first test that finds it and skips the others, instead of failing each
    with a connection error. The session's server is left running and its restart unspent."""
    TestServer = type(pg_server)  # tests/conftest.py's class ("conftest" may name another folder's module)

    if pg_server.server is None:
        pytest.skip("an external server ($AUTOGEN_SHARED_MEMORY_TEST_DSN) is never killed or restarted")
    server, table = TestServer(), schema()
    server.server, server.dsn = pg_server.server, pg_server.dsn
    try:
        with psycopg.connect(server.checked_dsn(), autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")  # the server's default here is off: a crash may lose it
            conn.execute(f"CREATE TABLE {table} AS SELECT 42 AS answer")
        _kill_postmaster(server)
        with pytest.warns(UserWarning, match="stopped answering; starting it again"):
            dsn = server.checked_dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:  # the same data, started again
            assert conn.execute(f"SELECT answer FROM {table}").fetchall() == [(42,)]
            conn.execute(f"DROP TABLE {table}")
        _kill_postmaster(server)
        with pytest.raises(pytest.fail.Exception, match="down: it does not answer, started again once already"):
            server.checked_dsn()
        with pytest.raises(pytest.skip.Exception, match="the first test to find it so failed"):
            server.checked_dsn()
    finally:
        if not pg_server.answers(2):
            server._restart()
            pg_server.dsn = server.dsn
    assert pg_server.restarts == 0 and pg_server.checked_dsn() == server.dsn
