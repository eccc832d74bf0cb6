"""``PostgresBackend(search="server")``: both legs answered by SQL, nothing per scope kept in the process, the
same filters and hits as in-process search."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends import open_backend
from autogen_shared_memory.backends.postgres import BackendUnavailableError, PostgresBackend
from autogen_shared_memory.backends.postgres import server_search as server_search_module
from autogen_shared_memory.backends.postgres.server_search import ServerSearch
from autogen_shared_memory.core.types import EmbeddingModelMismatchError, Filters, ScopeRef
from autogen_shared_memory.search.text import query_terms
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")

CREW = ScopeRef("group", "crew")
ALICE = ScopeRef("agent", "alice")
GLOBAL = ScopeRef("global", "")
WORDS = "kafka heron mill tea coffee deploy friday build server port retention broker cluster night".split()
QUERIES = ["kafka retention", "heron by the mill", "coffee or tea", "deploy on friday night", "broker port", "zebra"]
FILTERS = [
    Filters(),
    Filters(tags=("ops",)),
    Filters(created_by=("bob",)),
    Filters(include_inactive=True),
    Filters(category="infra", min_confidence=0.5),
]


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def fill(store: SharedMemoryStore, rng: np.random.Generator) -> list[str]:
    """A crew scope of 80 facts by two agents (tags, categories, confidences), 6 of alice's own, 4 global; a
    few forgotten. Returns the forgotten ids."""
    op = store.operator
    op.add_member("crew", "alice")
    op.add_member("crew", "bob")
    forgotten = []
    for agent in ("alice", "bob"):
        handle = store.as_agent(agent, group="crew")
        facts = []
        for i in range(40):
            words = rng.choice(WORDS, size=5, replace=False)
            facts.append(
                {
                    "content": f"{agent} note {i}: " + " ".join(words),
                    "tags": ["ops"] if i % 3 == 0 else [],
                    "category": "infra" if i % 4 == 0 else None,
                    "confidence": 0.3 if i % 5 == 0 else 0.9,
                }
            )
        receipts = handle.remember_many(facts, "group")
        for receipt in receipts[::9]:
            handle.forget(receipt.id)
            forgotten.append(receipt.id)
    alice = store.as_agent("alice", group="crew")
    alice.remember_many([f"alice private {w} reminder" for w in WORDS[:6]], "agent")
    store.operator.remember_many([f"global policy on {w}" for w in WORDS[6:10]], "global")
    return forgotten


@pytest.fixture
def pair(pg_dsn: str) -> Iterator[tuple[PostgresBackend, PostgresBackend, str]]:
    """The same schema through an in-process backend (which wrote the facts) and a server-mode one."""
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, max_size=2), embedder=HashEmbedder())
    fill(store, np.random.default_rng(7))
    server = PostgresBackend(pg_dsn, schema=name, max_size=2, search="server")
    try:
        yield store.backend, server, name  # type: ignore[misc]
    finally:
        server.close()
        store.close()


def ranked(hits: list[tuple[ScopeRef, str, float]]) -> tuple[list[float], list[set[str]]]:
    """The scores in order, and the ids of each score but the lowest (rows tied at the cut may differ)."""
    scores = [round(s, 5) for _, _, s in hits]
    return scores, [{i for _, i, s in hits if round(s, 5) == v} for v in sorted(set(scores), reverse=True)[:-1]]


@pytest.mark.parametrize("scopes", [[CREW], [ALICE, CREW, GLOBAL]], ids=["group", "all"])
def test_both_legs_answer_what_the_in_process_search_answers(
    pair: tuple[PostgresBackend, PostgresBackend, str], scopes: list[ScopeRef]
) -> None:
    """Same facts through the same filters and status rule: the semantic leg's ranking and cosines are the
    exact search's; the lexical leg returns the same matches (its scores are ts_rank's, not BM25)."""
    process, server, _ = pair
    embed = HashEmbedder()
    for query in QUERIES:
        vector = embed.embed([query])[0]
        terms = query_terms(query)
        for filters in FILTERS:
            exact = process.semantic(scopes, vector, 20, filters)
            assert ranked(server.semantic(scopes, vector, 20, filters)) == ranked(exact), (query, filters)
            matched = {i for _, i, _ in process.lexical(scopes, terms, 200, filters)}
            assert {i for _, i, _ in server.lexical(scopes, terms, 200, filters)} == matched, (query, filters)
    assert server._caches == {}  # nothing per scope in the searching process


def test_forgotten_facts_follow_the_status_rule(pair: tuple[PostgresBackend, PostgresBackend, str]) -> None:
    _, server, name = pair
    with psycopg.connect(server.dsn) as conn:
        gone = {r[0] for r in conn.execute(f"SELECT id FROM {name}.asm_facts WHERE status <> 'active'")}
    assert gone
    vector = HashEmbedder().embed(["kafka"])[0]
    live = {i for _, i, _ in server.semantic([CREW], vector, 500, Filters())}
    everything = {i for _, i, _ in server.semantic([CREW], vector, 500, Filters(include_inactive=True))}
    assert not live & gone and gone <= everything
    lexical = {i for _, i, _ in server.lexical([CREW], WORDS, 500, Filters())}
    assert lexical and not lexical & gone


def test_a_store_searching_in_the_server_gives_hits_with_both_legs_ranks(pg_dsn: str) -> None:
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, search="server"), embedder=HashEmbedder())
    process = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    try:
        fill(process, np.random.default_rng(3))
        alice, same = store.as_agent("alice", group="crew"), process.as_agent("alice", group="crew")
        fact = same.remember("the zebra crossing is painted blue", "group")
        hits = alice.search("zebra crossing", top_k=3)
        assert hits[0].fact.id == fact.id and hits[0].lexical_rank == 1 and hits[0].semantic_rank == 1
        assert same.search("zebra crossing", top_k=3)[0].fact.id == fact.id
        bob = store.as_agent("bob", group="crew")
        assert not {h.fact.id for h in bob.search("alice private reminder", top_k=10)} & {
            h.fact.id for h in alice.search("alice private reminder", "agent", top_k=10)
        }  # the access policy sits above the backend: bob never sees alice's own scope
        assert store.backend._caches == {}  # type: ignore[attr-defined]  # it searched, and holds nothing per scope
    finally:
        store.close()
        process.close()


def test_server_mode_never_loads_in_process_search_state(
    pair: tuple[PostgresBackend, PostgresBackend, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe: every path that builds a scope's codes or postings fails the test if server mode takes it."""
    _, server, _ = pair

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("server mode loaded a scope's in-process search state")

    monkeypatch.setattr(PostgresBackend, "_refresh", refuse)
    monkeypatch.setattr(PostgresBackend, "_cache", refuse)
    vector = HashEmbedder().embed(["kafka retention"])[0]
    assert server.semantic([ALICE, CREW, GLOBAL], vector, 10, Filters())
    assert server.lexical([ALICE, CREW, GLOBAL], ["kafka", "retention"], 10, Filters(tags=("ops",)))
    assert server.build_ann(CREW) is False


def test_a_writer_builds_no_postings_and_fills_what_the_server_searches(
    pair: tuple[PostgresBackend, PostgresBackend, str],
) -> None:
    """A process that only writes (opened after server search was enabled) indexes no text in memory and
    stores each fact's stems itself, so no search has to fill them."""
    _, server, name = pair
    writer = SharedMemoryStore(PostgresBackend(server.dsn, schema=name, max_size=2), embedder=HashEmbedder())
    try:
        bob = writer.as_agent("bob", group="crew")
        bob.remember_many([f"late note {i} about the walrus colony" for i in range(30)], "group")
        caches = writer.backend._caches.values()  # type: ignore[attr-defined]
        assert all(c.postings.n == 0 for c in caches)  # no text was indexed in the writing process
        with psycopg.connect(server.dsn) as conn:
            missing = conn.execute(f"SELECT count(*) FROM {name}.asm_facts WHERE stems IS NULL").fetchone()
        assert missing == (0,)
        found = server.lexical([CREW], ["walrus"], 50, Filters())
        assert len(found) == 30
    finally:
        writer.close()


def test_a_schema_8_opens_as_9_and_facts_written_without_stems_are_found(pg_dsn: str) -> None:
    """A version-8 schema (no ``stems`` column) is upgraded when opened; server mode fills the stems of the
    facts already stored, and of facts a process that opened the schema before server search was enabled
    writes afterwards (the search fills them)."""
    name = schema()
    early = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, max_size=2), embedder=HashEmbedder())
    early.operator.add_member("crew", "alice")
    alice = early.as_agent("alice", group="crew")
    before = alice.remember("the lighthouse keeper logs the tide", "group")
    early.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 8
        conn.execute(f"ALTER TABLE {name}.asm_facts DROP COLUMN stems")
        conn.execute(f"UPDATE {name}.asm_schema SET version = 8")
    early = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, max_size=2), embedder=HashEmbedder())
    server = PostgresBackend(pg_dsn, schema=name, max_size=2, search="server")
    try:
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute(f"SELECT version FROM {name}.asm_schema").fetchone() == (9,)
        assert [i for _, i, _ in server.lexical([CREW], ["lighthouse"], 5, Filters())] == [before.id]
        after = early.as_agent("alice", group="crew").remember("the lighthouse lamp is replaced", "group")
        assert not early.backend._writes_stems  # type: ignore[attr-defined]  # it opened before: writes none
        assert {i for _, i, _ in server.lexical([CREW], ["lighthouse"], 5, Filters())} == {before.id, after.id}
    finally:
        server.close()
        early.close()


def test_big_scopes_are_answered_by_the_hnsw_index_and_small_ones_exactly(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``ann_min_facts`` low, the crew scope goes through the schema's HNSW index (iterative scan: the
    index spans every scope, and the status rule and filters still get ``limit`` rows) and gives the exact
    search's top 10; alice's small scope is scanned."""
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, max_size=2), embedder=HashEmbedder())
    fill(store, np.random.default_rng(11))
    server = PostgresBackend(pg_dsn, schema=name, max_size=2, search="server", ann_min_facts=50, ann_ef=10)
    calls: list[tuple[ScopeRef, bool]] = []
    nearest = ServerSearch._nearest

    def spy(conn: Any, scope: ScopeRef, *args: Any, indexed: bool) -> list[Any]:
        calls.append((scope, indexed))
        return nearest(conn, scope, *args, indexed=indexed)

    monkeypatch.setattr(ServerSearch, "_nearest", staticmethod(spy))
    try:
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT to_regclass(%s)", (f"{name}.asm_facts_hnsw_256",)).fetchone() != (None,)
        embed = HashEmbedder()
        for query in QUERIES:
            vector = embed.embed([query])[0]
            for filters in (Filters(), Filters(tags=("ops",))):
                exact = store.backend.semantic([CREW, ALICE], vector, 10, filters)
                assert ranked(server.semantic([CREW, ALICE], vector, 10, filters)) == ranked(exact)
        assert (CREW, True) in calls and (ALICE, False) in calls and (ALICE, True) not in calls
    finally:
        server.close()
        store.close()


def test_a_query_of_another_dimension_is_refused(pair: tuple[PostgresBackend, PostgresBackend, str]) -> None:
    _, server, _ = pair
    with pytest.raises(EmbeddingModelMismatchError):
        server.semantic([CREW], np.ones(8, dtype=np.float32) / np.sqrt(8), 5, Filters())


def test_unknown_or_unsupported_search_options_are_refused(pg_dsn: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="search must be"):
        PostgresBackend(pg_dsn, schema=schema(), search="cloud")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vector_index"):
        PostgresBackend(pg_dsn, schema=schema(), search="server", vector_index="hnsw")
    with pytest.raises(ValueError, match="ann_ef"):
        PostgresBackend(pg_dsn, schema=schema(), search="server", ann_ef=5000)
    with pytest.raises(ValueError, match="does not support search"):  # SQLite files are searched in the process
        open_backend(tmp_path / "files", search="server")
    assert not (tmp_path / "files").exists()


def test_enabling_twice_is_a_no_op(pair: tuple[PostgresBackend, PostgresBackend, str]) -> None:
    _, server, name = pair
    started = time.perf_counter()
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {server._search_path}")
        server_search_module.enable(conn, name)
        indexes = {
            r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (name,)).fetchall()
        }
    assert {"asm_facts_stems", "asm_facts_stems_missing", "asm_facts_hnsw_256"} <= indexes
    assert time.perf_counter() - started < 5


def test_a_role_that_may_only_read_and_write_searches_in_the_server_once_the_owner_enabled_it(pg_dsn: str) -> None:
    name, role = schema(), f"rw_{uuid.uuid4().hex[:8]}"
    owner = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name), embedder=HashEmbedder())
    owner.operator.remember("The deploy window is Thursday", "global")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT USAGE ON SCHEMA {name} TO {role}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {name} TO {role}")
        conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {name} TO {role}")
    dsn = make_conninfo(pg_dsn, user=role, password="pw")
    try:
        with pytest.raises(BackendUnavailableError, match="open it once with search='server'"):
            PostgresBackend(dsn, schema=name, search="server")
        PostgresBackend(pg_dsn, schema=name, search="server").close()  # the owner enables it
        app = SharedMemoryStore(PostgresBackend(dsn, schema=name, search="server"), embedder=HashEmbedder())
        fact = app.operator.remember("The freeze starts Friday", "global")
        assert [h.fact.id for h in app.operator.search("freeze friday", "global")] == [fact.id]
        app.close()
    finally:
        owner.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize(
    "text",
    [
        "It's John's café, possibly the best",  # "s" stems to "": no lexeme
        "word " * 300,  # more positions than PostgreSQL keeps for one lexeme
        "x" * 3000 + " after",  # a lexeme longer than PostgreSQL takes
        "é" * 600,  # 600 characters, 1,200 bytes
        "filler " * 5000,  # past 4,000 characters
    ],
    ids=["s", "positions", "long-word", "multibyte", "long-text"],
)
def test_a_facts_stems_keep_postgresqls_limits(text: str) -> None:
    """The short path of fact_stems gives what tsvector_of_terms (which keeps every limit) gives."""
    from autogen_shared_memory.backends.postgres.fulltext import tsvector_of_terms
    from autogen_shared_memory.search.text import stem, tokens

    assert server_search_module.fact_stems(text) == tsvector_of_terms([s for s in map(stem, tokens(text)) if s])


def test_a_rare_query_term_outweighs_a_common_one(pg_dsn: str) -> None:
    """The lexical leg weighs each term by its IDF over the searched scopes, as BM25 does: the one fact
    holding the rare term ranks above shorter facts holding the common term three times."""
    name = schema()
    store = SharedMemoryStore(PostgresBackend(pg_dsn, schema=name, max_size=2), embedder=HashEmbedder())
    server = PostgresBackend(pg_dsn, schema=name, max_size=2, search="server")
    try:
        op = store.as_operator("crew")
        op.remember_many([f"pipeline pipeline pipeline {i}" for i in range(30)], "group")
        rare = op.remember("the ocelot escaped from the city zoo on a sunny morning", "group")
        hits = server.lexical([CREW], ["pipeline", "ocelot"], 5, Filters())
        assert hits[0][1] == rare.id and len(hits) == 5
    finally:
        server.close()
        store.close()


def test_a_query_word_longer_than_postgresql_takes_is_no_error(
    pair: tuple[PostgresBackend, PostgresBackend, str],
) -> None:
    _, server, _ = pair
    assert server.lexical([CREW], ["x" * 3000], 5, Filters()) == []
    assert len(server.lexical([CREW], ["x" * 3000, "kafka"], 5, Filters())) == 5
