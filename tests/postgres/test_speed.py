"""The PostgreSQL backend's speed machinery (issue 18): each process's copy of a scope's vectors refreshed by
revision, batched writes, the lexical postings budget, statistics without a manual ANALYZE, schemas 4 and 5."""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import psycopg
import pytest

from autogen_shared_memory import DedupSettings, FactNotFoundError, ScopeRef, SharedMemoryStore
from autogen_shared_memory.backends.postgres import SCHEMA_VERSION, PostgresBackend
from autogen_shared_memory.core.types import Filters
from autogen_shared_memory.search.text import query_terms
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")
G = ScopeRef("group", "crew")

# The facts' full text as schemas 1 to 4 kept it (the column and its index), and schema 4's term counts.
FACTS_TSV = """
ALTER TABLE asm_facts ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
CREATE INDEX asm_facts_tsv ON asm_facts USING gin (tsv);
"""
SCHEMA_4_TERMS = """
CREATE TABLE asm_terms (
    scope_kind text NOT NULL, owner text NOT NULL, lexeme text NOT NULL, df bigint NOT NULL,
    PRIMARY KEY (scope_kind, owner, lexeme));
CREATE FUNCTION asm_terms_added() RETURNS trigger AS $$ BEGIN
  INSERT INTO asm_terms AS t (scope_kind, owner, lexeme, df)
  SELECT n.scope_kind, n.owner, l.lexeme, count(*) FROM added n, unnest(tsvector_to_array(n.tsv)) AS l(lexeme)
  GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (scope_kind, owner, lexeme) DO UPDATE SET df = t.df + excluded.df;
  RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE FUNCTION asm_terms_removed() RETURNS trigger AS $$ BEGIN
  UPDATE asm_terms AS t SET df = t.df - d.n FROM (
    SELECT o.scope_kind, o.owner, l.lexeme, count(*) AS n FROM removed o,
    unnest(tsvector_to_array(o.tsv)) AS l(lexeme) GROUP BY 1, 2, 3) d
  WHERE t.scope_kind = d.scope_kind AND t.owner = d.owner AND t.lexeme = d.lexeme;
  RETURN NULL; END $$ LANGUAGE plpgsql;
CREATE TRIGGER asm_facts_terms_added AFTER INSERT ON asm_facts REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION asm_terms_added();
CREATE TRIGGER asm_facts_terms_removed AFTER DELETE ON asm_facts REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION asm_terms_removed();
INSERT INTO asm_terms (scope_kind, owner, lexeme, df)
SELECT f.scope_kind, f.owner, l.lexeme, count(*)
FROM asm_facts f, unnest(tsvector_to_array(f.tsv)) AS l(lexeme) GROUP BY 1, 2, 3;
"""


def schema() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


def open_store(dsn: str, name: str, **kwargs: Any) -> SharedMemoryStore:
    return SharedMemoryStore(PostgresBackend(dsn, schema=name), embedder=HashEmbedder(), **kwargs)


def semantic_ids(store: SharedMemoryStore, text: str, k: int = 10) -> list[str]:
    vector = store.embedder.embed([text])[0]
    return [fid for _, fid, _ in store.backend.semantic([G], vector, k, Filters())]


def lexical_ids(store: SharedMemoryStore, text: str, k: int = 10) -> list[str]:
    return [fid for _, fid, _ in store.backend.lexical([G], query_terms(text), k, Filters())]


def test_a_second_process_sees_every_kind_of_write_through_its_refreshed_copy(pg_dsn: str) -> None:
    name = schema()
    a, b = open_store(pg_dsn, name), open_store(pg_dsn, name)
    first = a.as_operator("crew").remember("the deploy window is friday evening", "group")
    assert semantic_ids(b, "the deploy window is friday evening")[:1] == [first.id]  # b loads the scope
    assert lexical_ids(b, "friday deploy") == [first.id]  # b indexes the scope's text
    second = a.as_operator("crew").remember("the staging database runs on port 5433", "group")
    assert second.id in semantic_ids(b, "the staging database runs on port 5433")  # new row, by revision
    assert lexical_ids(b, "staging 5433") == [second.id]
    a.as_operator("crew").forget(first.id)
    assert first.id not in semantic_ids(b, "the deploy window is friday evening")  # status change
    assert lexical_ids(b, "friday deploy") == []
    a.operator.purge(0)
    assert first.id not in semantic_ids(b, "the deploy window is friday evening")  # rows gone: reload
    assert b.as_operator("crew").search("staging database port", "group", top_k=1)[0].fact.id == second.id
    a.close()
    b.close()


def test_a_search_of_several_scopes_sees_each_scope_s_writes_after_reading_their_states_at_once(
    pg_dsn: str,
) -> None:
    """A search of several scopes reads their revisions in one round trip; a copy at that revision is used as
    it is, any other is refreshed: another process's writes to any of the scopes are seen by both legs."""
    name = schema()
    a, b = open_store(pg_dsn, name), open_store(pg_dsn, name)
    both = [G, ScopeRef("global")]
    crew = a.as_operator("crew")
    kept = crew.remember("the deploy window is friday evening", "group")
    crew_ops = b.as_operator("crew")
    assert [h.fact.id for h in crew_ops.search("deploy window friday", "all")][:1] == [kept.id]  # b loads both
    for _ in range(2):  # the second time, b's copies are at the states it reads: no refresh of their own
        vector = b.embedder.embed(["the staging database runs on port 5433"])[0]
        assert [fid for _, fid, _ in b.backend.semantic(both, vector, 5, Filters())] == [kept.id]
    added = a.operator.remember("the staging database runs on port 5433", "global")
    crew.forget(kept.id)
    vector = b.embedder.embed(["the staging database runs on port 5433"])[0]
    assert [fid for _, fid, _ in b.backend.semantic(both, vector, 5, Filters())] == [added.id]
    assert [fid for _, fid, _ in b.backend.lexical(both, ["staging", "deploy"], 5, Filters())] == [added.id]
    assert [h.fact.id for h in crew_ops.search("staging database deploy window", "all")] == [added.id]
    a.close()
    b.close()


def test_a_batch_sees_its_own_earlier_drafts_and_stored_duplicates(pg_dsn: str) -> None:
    store = open_store(pg_dsn, schema())
    texts = [f"fact number {i} about the payments service" for i in range(300)]
    receipts = store.as_operator("crew").remember_many([*texts, "Fact number 7 about the payments service."], "group")
    assert [r.status for r in receipts[:300]] == ["created"] * 300
    assert receipts[300].status == "reinforced" and receipts[300].duplicate_of == receipts[7].id
    again = store.as_operator("crew").remember_many(
        ["fact number 3 about the payments service", "a brand new fact"], "group"
    )
    assert again[0].duplicate_of == receipts[3].id and again[1].status == "created"
    assert store.backend.stats(G).counts["active"] == 301
    seqs = [r["seq"] for r in store.backend.rows(G, "facts")]
    assert seqs == sorted(seqs)  # written in order
    store.close()


def test_a_failed_write_leaves_no_trace_in_the_copy(pg_dsn: str) -> None:
    store = open_store(pg_dsn, schema())
    kept = store.as_operator("crew").remember("the release train leaves on tuesdays", "group")
    bogus = kept.id[:-4] + ("0000" if not kept.id.endswith("0000") else "1111")
    with pytest.raises(FactNotFoundError):  # the second draft fails: the whole batch is rolled back
        store.as_operator("crew").remember_many(
            ["a fact that is rolled back", {"content": "bad", "supersedes": [bogus]}], "group"
        )
    assert semantic_ids(store, "a fact that is rolled back")[0] == kept.id
    assert store.backend.stats(G).counts["active"] == 1
    store.close()


def test_the_lexical_leg_scores_a_bounded_set_of_postings(pg_dsn: str) -> None:
    store = open_store(pg_dsn, schema(), dedup=DedupSettings(near_duplicate=1.01))
    store.as_operator("crew").remember_many([f"team note {i}: the team met" for i in range(1500)], "group")
    rare = store.as_operator("crew").remember("the team chose zookeeper for leader election", "group")
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    hits = backend.lexical([G], ["team", "zookeeper"], 5, Filters())
    assert [h[1] for h in hits] == [rare.id]  # "team" (in every fact) is dropped: only the rare term is ranked
    backend.max_common_term_ratio = 1.0
    backend.max_lexical_postings = 10**9
    assert len(backend.lexical([G], ["team", "zookeeper"], 5, Filters())) == 5  # without the budget
    only = backend.lexical([G], ["the"], 5, Filters())  # a stop word is a term, as in FTS5: it weighs ~nothing
    assert len(only) == 5 and all(score < 1e-3 for _, _, score in only)
    store.close()


def test_statistics_are_taken_after_the_table_grows(pg_dsn: str) -> None:
    name = schema()
    store = open_store(pg_dsn, name, dedup=DedupSettings(near_duplicate=1.01))
    store.as_operator("crew").remember_many([f"fact {i} of the first load" for i in range(1200)], "group")
    deadline = time.monotonic() + 30
    tuples = -1.0
    while time.monotonic() < deadline and tuples < 1000:  # VACUUM ANALYZE runs in the background
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(f"SELECT reltuples FROM pg_class WHERE oid = '{name}.asm_facts'::regclass").fetchone()
        tuples = float(row[0]) if row else -1.0
        time.sleep(0.1)
    assert tuples >= 1000  # analyzed by the write, not by hand
    store.close()


def test_hnsw_vector_index_answers_like_the_exact_scan(pg_dsn: str) -> None:
    pytest.importorskip("hnswlib")
    name = schema()
    store = open_store(pg_dsn, name, dedup=DedupSettings(near_duplicate=1.01))
    texts = [f"service {i} is owned by team {i % 7} and deployed in region {i % 5}" for i in range(400)]
    store.as_operator("crew").remember_many(texts, "group")
    graph = PostgresBackend(pg_dsn, schema=name, vector_index="hnsw", ann_min_facts=100)
    assert graph.build_ann(G)
    for text in texts[:20]:
        vector = store.embedder.embed([text])[0]
        exact = [h[1] for h in store.backend.semantic([G], vector, 5, Filters())]
        assert [h[1] for h in graph.semantic([G], vector, 5, Filters())][:1] == exact[:1]
    graph.close()
    store.close()


def test_the_4bit_first_pass_answers_like_the_exact_scan(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from autogen_shared_memory.search import index as index_module

    monkeypatch.setattr(index_module, "PACKED_FROM", 300)  # 262,144 facts by default
    name = schema()
    store = open_store(pg_dsn, name, dedup=DedupSettings(near_duplicate=1.01))
    texts = [f"service {i} is owned by team {i % 7} and deployed in region {i % 5} since {i % 11}" for i in range(500)]
    store.as_operator("crew").remember_many(texts, "group")
    exact = PostgresBackend(pg_dsn, schema=name, vector_index="exact")
    assert store.backend.vector_index == "int4" and store.backend.build_ann(G)  # type: ignore[attr-defined]
    assert not exact.build_ann(G)
    for text in texts[:40:2]:
        vector = store.embedder.embed([text])[0]
        want = [round(h[2], 5) for h in exact.semantic([G], vector, 10, Filters())]
        assert [round(h[2], 5) for h in store.backend.semantic([G], vector, 10, Filters())] == want
    assert store.backend._cache(G).packed is not None  # type: ignore[attr-defined]
    exact.close()
    store.close()


def layout(conn: psycopg.Connection[Any], name: str) -> dict[str, list[Any]]:
    """What a schema holds besides rows: the columns of every table, its indexes, triggers and functions."""
    queries = {
        "columns": "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY 1, 2",
        "indexes": "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1, 2",
        "triggers": "SELECT event_object_table, trigger_name, event_manipulation FROM information_schema.triggers "
        "WHERE trigger_schema = %s ORDER BY 1, 2, 3",
        "functions": "SELECT proname FROM pg_proc WHERE pronamespace = %s::regnamespace ORDER BY 1",
    }
    return {what: conn.execute(sql, (name,)).fetchall() for what, sql in queries.items()}


def test_schema_3_is_migrated(pg_dsn: str) -> None:
    name = schema()
    store = open_store(pg_dsn, name)
    fact = store.as_operator("crew").remember("kafka retention is seven days", "group")
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 3, with its HNSW index and tsvector
        conn.execute(f"SET search_path TO {name}, public")
        conn.execute(FACTS_TSV)
        conn.execute("ALTER TABLE asm_facts DROP COLUMN rev")
        conn.execute("ALTER TABLE asm_scopes DROP COLUMN rev, DROP COLUMN epoch")
        conn.execute(
            "CREATE INDEX asm_facts_hnsw_8 ON asm_facts USING hnsw ((embedding::vector(8)) vector_cosine_ops) "
            "WHERE vector_dims(embedding) = 8"
        )
        conn.execute("UPDATE asm_schema SET version = 3")
    reopened = open_store(pg_dsn, name)
    assert reopened.as_operator("crew").search("kafka retention", "group")[0].fact.id == fact.id
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(f"SET search_path TO {name}, public")
        assert conn.execute("SELECT version FROM asm_schema").fetchone() == (SCHEMA_VERSION,)
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (name,))}
        assert conn.execute("SELECT to_regclass('asm_terms')").fetchone() == (None,)
    assert "asm_facts_hnsw_8" not in names and "asm_facts_rev" in names and "asm_facts_tsv" not in names
    second = reopened.as_operator("crew").remember("kafka brokers run version 3.7", "group")
    assert second.id in semantic_ids(reopened, "kafka brokers run version 3.7")
    reopened.close()


def test_schema_5_drops_the_facts_full_text_and_term_counts_and_keeps_everything_else(pg_dsn: str) -> None:
    """A version-4 schema (facts with a GIN-indexed tsvector, term counts kept by statement triggers) loses
    all of it on open and then looks like a new schema; the facts, their recall, and the record tables'
    full text stay."""
    name, fresh = schema(), schema()
    open_store(pg_dsn, fresh).close()
    store = open_store(pg_dsn, name)
    kept = store.as_operator("crew").remember("the heron nests by the old mill", "group")
    gone = store.as_operator("crew").remember("a fact that is forgotten and purged", "group")
    store.for_agent("lead").log_conversation("assistant", "the heron flew off")
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 4, its counts taken over the rows
        conn.execute(f"SET search_path TO {name}, public")
        conn.execute(FACTS_TSV)
        conn.execute(SCHEMA_4_TERMS)
        conn.execute("UPDATE asm_schema SET version = 4")
        assert conn.execute("SELECT df FROM asm_terms WHERE lexeme = 'heron'").fetchone() == (1,)
    reopened = open_store(pg_dsn, name)
    assert [h.fact.id for h in reopened.as_operator("crew").search("heron mill", "group")] == [kept.id]
    reopened.as_operator("crew").forget(gone.id)
    assert reopened.operator.purge(0) == 1  # deletes a row: no trigger is left to count into a dropped table
    added = reopened.as_operator("crew").remember("herons return to the mill each spring", "group")
    assert {h.fact.id for h in reopened.as_operator("crew").search("heron mill", "group")} == {kept.id, added.id}
    assert [r.content for r in reopened.operator.conversation("lead", query="heron")] == ["the heron flew off"]
    found = reopened.backend.rows(ScopeRef("agent", "lead"), "conversations", query_terms=["heron"])
    assert [r["content"] for r in found] == ["the heron flew off"]
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT version FROM {name}.asm_schema").fetchone() == (SCHEMA_VERSION,) == (9,)
        assert conn.execute(f"SELECT count(*) FROM {name}.asm_facts").fetchone() == (2,)
        migrated, new = layout(conn, name), layout(conn, fresh)
    assert migrated == new  # nothing of the facts' full text is left, and nothing else went
    assert ("asm_facts", "tsv", "tsvector") not in migrated["columns"]
    assert ("asm_conversations", "tsv", "tsvector") in migrated["columns"]
    assert ("asm_conversations", "asm_conversations_tsv") in migrated["indexes"]
    assert not [f for f in migrated["functions"] if "terms" in f[0]]
    reopened.close()


def test_schema_7_keeps_record_json_as_written_and_reads_what_jsonb_kept(pg_dsn: str) -> None:
    """A version-6 schema (record tables' JSON columns ``jsonb``) opens as version 7 with the fresh layout; a
    value written before keeps ``jsonb``'s form, one written after comes back as written."""
    name, fresh = schema(), schema()
    open_store(pg_dsn, fresh).close()
    store = open_store(pg_dsn, name)
    store.for_agent("lead").update_user_profile("old", {"b": 1e20, "a": 1})
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 6
        conn.execute(f"SET search_path TO {name}, public")
        for table, column in [("user_profile", "value"), ("tasks", "context"), ("tool_calls", "tool_args")]:
            conn.execute(f'ALTER TABLE asm_{table} ALTER COLUMN "{column}" TYPE jsonb USING "{column}"::jsonb')
        conn.execute("UPDATE asm_schema SET version = 6")
    reopened = open_store(pg_dsn, name)
    lead = reopened.for_agent("lead")
    old = lead.get_user_profile("old")
    assert old is not None and old.value == {"b": 1e20, "a": 1}
    lead.update_user_profile("new", {"b": 1e20, "a": 1})
    new = lead.get_user_profile("new")
    assert new is not None and list(new.value) == ["b", "a"] and isinstance(new.value["b"], float)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT version FROM {name}.asm_schema").fetchone() == (SCHEMA_VERSION,) == (9,)
        migrated, made = layout(conn, name), layout(conn, fresh)
    assert migrated == made and ("asm_user_profile", "value", "json") in migrated["columns"]
    reopened.close()


def test_schema_8_writes_record_full_text_as_fts5_reads_it_and_fills_existing_rows(pg_dsn: str) -> None:
    """A version-7 schema (record tables' ``tsv`` generated by ``to_tsvector('english', ...)``) opens as
    version 8 with the fresh layout, and rows written before it, the append-only case log's too, are found
    by the words SQLite finds them by."""
    name, fresh = schema(), schema()
    open_store(pg_dsn, fresh).close()
    store = open_store(pg_dsn, name)
    store.for_agent("lead").log_conversation("assistant", "Café déjà vu: the build is red")
    store.for_agent("lead").log_conversation("assistant", "It's John's turn")  # "s": a word of one letter
    store.operator.add_member("crew", "lead")
    store.as_agent("lead", "crew").case_log().append("the café opens at nine")
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to schema 7
        conn.execute(f"SET search_path TO {name}, public")
        for table, column in [("conversations", "content"), ("case_log", "summary")]:
            conn.execute(f"ALTER TABLE asm_{table} DROP COLUMN tsv")
            conn.execute(
                f"ALTER TABLE asm_{table} ADD COLUMN tsv tsvector GENERATED ALWAYS AS "
                f"(to_tsvector('english', coalesce(\"{column}\", ''))) STORED"
            )
            conn.execute(f"CREATE INDEX asm_{table}_tsv ON asm_{table} USING gin (tsv)")
        conn.execute("UPDATE asm_schema SET version = 7")
        assert conn.execute("SELECT count(*) FROM asm_conversations WHERE tsv @@ 'cafe'::tsquery").fetchone() == (0,)
    reopened = open_store(pg_dsn, name)
    assert [r.content for r in reopened.operator.conversation("lead", query="cafe the")] == [
        "Café déjà vu: the build is red"
    ]
    assert [r.content for r in reopened.operator.conversation("lead", query="john")] == ["It's John's turn"]
    found = reopened.backend.rows(ScopeRef("group", "crew"), "case_log", query_terms=["cafe"])
    assert [r["summary"] for r in found] == ["the café opens at nine"]
    reopened.as_agent("lead", "crew").case_log().append("the café closes at six")  # the append-only guard is back
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT version FROM {name}.asm_schema").fetchone() == (SCHEMA_VERSION,) == (9,)
        migrated, made = layout(conn, name), layout(conn, fresh)
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute(f"UPDATE {name}.asm_case_log SET summary = 'x'")
    assert migrated == made
    reopened.close()


def test_a_record_of_many_distinct_words_is_stored_and_found_by_them(pg_dsn: str) -> None:
    """A record near the size limit, 37,000 distinct words: stored, and found by its words (its tsvector is
    written from FTS5's terms, within what PostgreSQL accepts)."""
    store = open_store(pg_dsn, schema())
    words = [chr(0x4E00 + i // 400) + chr(0x4E00 + i % 400) for i in range(37_000)]
    text = " ".join(words)
    assert len(text.encode()) > 250_000
    lead = store.for_agent("lead")
    lead.log_conversation("assistant", text)
    lead.log_conversation("assistant", "It's John's turn")
    assert [r.content[:5] for r in store.operator.conversation("lead", query=words[3])] == [text[:5]]
    assert [r.content for r in store.operator.conversation("lead", query="it's")] == ["It's John's turn"]
    store.close()


def test_vectors_round_trip_exactly_through_the_copy(pg_dsn: str) -> None:
    store = open_store(pg_dsn, schema())
    store.as_operator("crew").remember("an exact vector", "group")
    rows = store.backend.rows(G, "facts")
    stored = np.frombuffer(rows[0]["embedding"], dtype=np.float32)
    assert np.array_equal(stored, store.embedder.embed(["an exact vector"])[0].astype(np.float32))
    store.close()


def test_the_lexical_leg_ranks_as_sqlite_does(pg_dsn: str, tmp_path: Any) -> None:
    words = "deploy window friday kafka broker lag alert payments ledger staging café migration on-call pager".split()
    rng = np.random.default_rng(3)
    items = [
        {"content": " ".join(rng.choice(words, int(rng.integers(2, 9)))) + f" note {i}", "tags": ["ops"] * (i % 3 == 0)}
        for i in range(400)
    ]
    stores = [
        open_store(pg_dsn, schema(), dedup=DedupSettings(near_duplicate=1.01)),
        SharedMemoryStore(tmp_path, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01)),
    ]
    for store in stores:
        store.as_operator("crew").remember_many(items, "group")
        gone = store.as_operator("crew").search("note 7", "group", top_k=1)[0].fact
        store.as_operator("crew").forget(gone.id)

    def ranked(store: SharedMemoryStore, query: str, filters: Filters) -> list[tuple[str, float]]:
        hits = store.backend.lexical([G], query_terms(query), 30, filters)
        text = {f.id: f.content for f in store.backend.get(G, [h[1] for h in hits])}
        return [(text[fid], round(score, 9)) for _, fid, score in hits]

    for query in ("kafka lag", "friday deploy window", "cafe pager", "ledger 7"):
        for filters in (Filters(), Filters(tags=("ops",)), Filters(include_inactive=True)):
            assert ranked(stores[0], query, filters) == ranked(stores[1], query, filters), (query, filters)
    for store in stores:
        store.close()
