"""The fact lifecycle: remember, reinforce, supersede, forget, TTL, purge, history, stats, bad input."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from old_schemas import FACTS_FTS, SCHEMA_4_FACTS_FTS

from autogen_shared_memory import (
    FactNotFoundError,
    NotAStoreError,
    SharedMemoryStore,
)
from autogen_shared_memory.backends.sqlite import MIGRATIONS, SCHEMA_VERSION
from autogen_shared_memory.core.records import TABLES
from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.settings import DedupSettings, RecallSettings
from autogen_shared_memory.testing import HashEmbedder

StoreFactory = Callable[..., SharedMemoryStore]


def test_root_from_env_and_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AUTOGEN_SHARED_MEMORY_DIR", str(tmp_path / "env-root"))
    assert SharedMemoryStore(embedder=HashEmbedder()).root == tmp_path / "env-root"
    monkeypatch.delenv("AUTOGEN_SHARED_MEMORY_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert SharedMemoryStore(embedder=HashEmbedder()).root == tmp_path / "home/.autogen/shared_memory"


@pytest.mark.sqlite_only
def test_files_are_created_on_first_use(store: SharedMemoryStore) -> None:
    root = store.root
    assert not (root / "global.db").exists()
    store.operator.remember("global fact", "global")
    store.as_agent("alice", "crew").remember("group fact", "group")
    store.as_agent("alice").remember("private fact", "agent")
    assert {p.name for p in root.glob("*.db")} == {"global.db", "group_crew.db", "agent_alice.db", "ids.db"}
    with sqlite3.connect(root / "global.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert meta["embedding_model"] == "test-hash-embedder" and meta["embedding_dim"] == "256"


def test_remember_returns_receipt_and_fact_has_every_field(store: SharedMemoryStore) -> None:
    r = store.as_agent("alice", "crew").remember(
        "Deploys happen on Thursdays",
        "group",
        confidence=0.8,
        ttl_days=2,
        tags=["ops", "deploy"],
        category="process",
        metadata={"source": "standup"},
    )
    assert r.status == "created" and r.duplicate_of is None and r.id.startswith("g_")
    f = store.operator.get(r.id)
    assert (f.content, f.created_by, f.owner, f.confidence) == (
        "Deploys happen on Thursdays",
        "alice",
        "crew",
        0.8,
    )
    assert f.tags == ("ops", "deploy") and f.category == "process" and f.metadata == {"source": "standup"}
    assert f.session_id == store.engine.session_id and f.status == "active" and f.reinforcement == 1
    assert f.expires_at is not None and math.isclose(f.expires_at - f.created_at, 2 * 86400, abs_tol=5)
    assert f.version == 1 and len(f.content_hash) == 64 and f.supersedes == ()


def test_exact_duplicate_reinforces(store: SharedMemoryStore) -> None:
    a = store.operator.remember("The API uses OAuth2", "global", confidence=0.5)
    b = store.operator.remember("  the api uses   OAUTH2 ", "global", confidence=0.9)
    assert b.status == "reinforced" and b.id == a.id and b.duplicate_of == a.id
    f = store.operator.get(a.id)
    assert f.reinforcement == 2 and f.confidence == 0.9 and f.version == 2
    assert store.stats()[0].counts["active"] == 1
    # the same text in another scope is a different fact
    c = store.as_agent("alice").remember("The API uses OAuth2", "agent")
    assert c.status == "created"


def test_near_duplicate_reinforces_with_threshold(make_store: StoreFactory) -> None:
    s = make_store(dedup=DedupSettings(near_duplicate=0.8))
    a = s.operator.remember("user prefers dark mode in the editor", "global")
    b = s.operator.remember("User prefers: dark mode in editor", "global")  # the same wording, not the same text
    assert b.status == "reinforced" and b.duplicate_of == a.id and b.similarity is not None
    assert b.similarity >= 0.8
    c = s.operator.remember("deploy on thursday", "global")
    assert c.status == "created"
    events = [e.event for e in s.operator.history(a.id)]
    assert events == ["created", "reinforced"]
    off = make_store(dedup=DedupSettings(near_duplicate=1.01))
    off.operator.remember("user prefers dark mode in the editor", "global")
    assert off.operator.remember("User prefers: dark mode in editor", "global").status == "created"


def test_duplicates_inside_one_batch(store: SharedMemoryStore) -> None:
    receipts = store.operator.remember_many(
        ["deploy key rotates", "Deploy  KEY rotates", "budget meeting friday"], "global"
    )
    assert [r.status for r in receipts] == ["created", "reinforced", "created"]
    assert receipts[1].id == receipts[0].id


@pytest.mark.sqlite_only
def test_remember_many_one_embedding_call_one_transaction_per_scope(
    store: SharedMemoryStore, embedder: HashEmbedder
) -> None:
    embedder.calls.clear()
    items = [f"fact number {i} about topic {i % 7}" for i in range(50)]
    mixed = [
        {"content": "agent note", "scope": "agent"},
        {"fact": "group note", "scope": "group", "tags": ["x"]},
    ]
    receipts = store.as_agent("lead", "crew").remember_many(items + mixed, "global")
    assert embedder.calls == [52]
    assert [r.scope.kind for r in receipts[-2:]] == ["agent", "group"]
    with sqlite3.connect(store.root / "global.db") as conn:
        revs = {r[0] for r in conn.execute("SELECT rev FROM facts")}
    assert len(revs) == 1  # every global fact written by the same transaction


def test_supersede_keeps_the_chain(store: SharedMemoryStore) -> None:
    old = store.as_agent("alice", "crew").remember("Release freeze starts Monday", "group")
    new = store.as_agent("bob", "crew").remember("Release freeze moved to Wednesday", "group", supersedes=[old.id])
    assert new.superseded == (old.id,)
    o = store.operator.get(old.id)
    assert o.status == "superseded" and o.superseded_by == new.id and o.tombstone_by == "bob"
    assert store.operator.get(new.id).supersedes == (old.id,)
    hits = store.as_agent("alice", "crew").search("release freeze", "group")
    assert [h.id for h in hits] == [new.id]
    all_hits = store.as_agent("alice", "crew").search("release freeze", "group", include_inactive=True)
    assert {h.id for h in all_hits} == {old.id, new.id}
    trail = [(e.fact_id, e.event) for e in store.operator.history(new.id)]
    assert (old.id, "created") in trail and (old.id, "superseded") in trail and (new.id, "created") in trail
    assert [e.event for e in store.operator.history(old.id)] == [e.event for e in store.operator.history(new.id)]


def test_supersede_errors_write_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(FactNotFoundError):
        store.operator.remember("x", "global", supersedes=["w_0000000000000000dead"])
    with pytest.raises(ValueError, match="same scope"):
        store.operator.remember("y", "global", supersedes=["g_0000000000000000dead"])
    with pytest.raises(ValueError, match="not a fact id"):
        store.operator.remember("z", "global", supersedes=["nonsense"])
    assert store.operator.search("x y z", "global") == []
    a = store.operator.remember("a fact", "global")
    store.operator.forget(a.id)
    with pytest.raises(ValueError, match="already forgotten"):
        store.operator.remember("b fact", "global", supersedes=[a.id])
    assert store.stats()[0].counts["active"] == 0


def test_forget_is_a_tombstone(store: SharedMemoryStore) -> None:
    r = store.as_agent("alice").remember("temporary credentials are in vault path secret/x", "agent")
    f = store.as_agent("alice").forget(r.id, "rotated")
    assert (f.status, f.tombstone_by, f.tombstone_reason) == ("forgotten", "alice", "rotated")
    assert f.tombstone_at is not None
    assert store.as_agent("alice").search("vault credentials", "agent") == []
    assert store.stats()[0].counts == {"active": 0, "forgotten": 1, "superseded": 0, "expired": 0}
    assert [e.event for e in store.operator.history(r.id)] == ["created", "forgotten"]
    assert store.as_agent("alice").forget(r.id).status == "forgotten"  # idempotent
    with pytest.raises(FactNotFoundError):
        store.as_agent("alice").forget("a_0000000000000000beef")


def test_forgetting_a_superseded_fact_leaves_its_history_as_it_was(store: SharedMemoryStore) -> None:
    store.operator.add_member("crew", "alice")
    store.operator.add_member("crew", "bob")
    old = store.as_agent("alice", "crew").remember("The launch is on Monday", "group")
    time.sleep(0.01)
    new = store.as_agent("bob", "crew").remember("The launch moved to Wednesday", "group", supersedes=[old.id])
    between = store.as_operator("crew").get(new.id).created_at + 0.001
    closed = store.as_operator("crew").get(old.id)
    believed = [h.fact.id for h in store.as_operator("crew").search("launch", "group", as_of=between)]
    history = store.as_operator("crew").history(old.id)
    time.sleep(0.01)
    after = store.as_agent("alice", "crew").forget(old.id, "cleanup")
    assert after == closed  # status, superseded_by, tombstone (who, when, why): all as the correction left them
    assert (after.status, after.superseded_by, after.tombstone_by) == ("superseded", new.id, "bob")
    assert store.as_operator("crew").history(old.id) == history and "forgotten" not in [e.event for e in history]
    assert (
        [h.fact.id for h in store.as_operator("crew").search("launch", "group", as_of=between)] == believed == [new.id]
    )


def test_purge_keeps_recent_tombstones(store: SharedMemoryStore) -> None:
    r = store.operator.remember("recent", "global")
    store.operator.forget(r.id)
    assert store.operator.purge(older_than=1) == 0
    assert store.operator.purge(older_than=0) == 1
    with pytest.raises(ValueError):
        store.operator.purge(older_than=-1)


def test_hits_carry_provenance_and_reasons(store: SharedMemoryStore) -> None:
    store.operator.remember("kafka retention is seven days", "global")
    hit = store.operator.search("kafka retention", "global")[0]
    assert hit.lexical_rank == 1 and hit.semantic_rank == 1 and hit.cosine is not None
    assert hit.score == pytest.approx(1 / 6 + 0.5 / 6)  # rrf_k=5, weights 1 and 0.5
    assert hit.fact.scope.kind == "global" and hit.fact.created_by == "system"


def test_scope_all_fuses_the_callers_scopes(store: SharedMemoryStore) -> None:
    store.as_agent("alice").remember("alpha project codename is bluebird", "agent")
    store.as_agent("alice", "crew").remember("alpha project deadline is friday", "group")
    store.operator.remember("alpha project owner is dana", "global")
    store.as_agent("bob").remember("alpha project secret of bob", "agent")
    hits = store.as_agent("alice", "crew").search("alpha project", top_k=10)
    assert {h.fact.scope.kind for h in hits} == {"agent", "group", "global"}
    assert all(h.fact.owner in ("alice", "crew", "") for h in hits)
    weighted = store.as_agent("alice", "crew").search("alpha project", top_k=10, scope_weights={"global": 3.0})
    assert weighted[0].fact.scope.kind == "global"


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"content": ""}, ValueError, "empty"),
        ({"content": "   \n\t"}, ValueError, "whitespace"),
        ({"content": "x" * 9000}, ValueError, "limit is 8192"),
        ({"content": 42}, TypeError, "must be a str"),
        ({"content": None}, TypeError, "must be a str"),
        ({"confidence": 1.5}, ValueError, r"\[0, 1\]"),
        ({"confidence": -0.1}, ValueError, r"\[0, 1\]"),
        ({"confidence": float("nan")}, ValueError, r"\[0, 1\]"),
        ({"confidence": "high"}, TypeError, "number"),
        ({"ttl_days": -1}, ValueError, "positive"),
        ({"ttl_days": 0}, ValueError, "positive"),
        ({"ttl_days": float("inf")}, ValueError, "finite"),
        ({"tags": "ops"}, TypeError, "list of strings"),
        ({"tags": [""]}, ValueError, "non-blank"),
        ({"scope": "team"}, ValueError, "scope must be one of"),
    ],
)
def test_bad_input_is_rejected_and_nothing_written(
    store: SharedMemoryStore, kwargs: dict, exc: type, match: str
) -> None:
    args = {"content": "valid fact", "scope": "global", **kwargs}
    with pytest.raises(exc, match=match):
        store.operator.remember(**args)
    assert not store.backend.exists(ScopeRef("global"))


def test_bad_item_in_a_batch_writes_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(ValueError):
        store.operator.remember_many(["fine", "also fine", ""], "global")
    assert not store.backend.exists(ScopeRef("global"))


@pytest.mark.sqlite_only
def test_file_that_is_not_a_database_is_left_untouched(store: SharedMemoryStore) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.root / "global.db"
    path.write_bytes(b"this is my diary, not a database\n" * 10)
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match="global.db"):
        store.operator.remember("x", "global")
    with pytest.raises(NotAStoreError, match="global.db"):
        store.operator.search("x", "global")
    assert path.read_bytes() == before


@pytest.mark.sqlite_only
def test_foreign_sqlite_database_is_refused_and_untouched(store: SharedMemoryStore) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.root / "global.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match="not a memory store"):
        store.operator.remember("x", "global")
    assert path.read_bytes() == before


G = ScopeRef("global", "")


@pytest.mark.sqlite_only
def test_content_is_immutable_in_the_database(store: SharedMemoryStore) -> None:
    r = store.operator.remember("original text", "global")
    with (
        sqlite3.connect(store.root / "global.db") as conn,
        pytest.raises(sqlite3.IntegrityError, match="immutable"),
    ):
        conn.execute("UPDATE facts SET content = 'tampered' WHERE id = ?", (r.id,))


@pytest.mark.sqlite_only
def test_other_process_writes_are_seen_incrementally(tmp_path: Path) -> None:
    a = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    b = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    a.operator.remember("first shared fact about zebras", "global")
    assert len(b.operator.search("zebras", "global")) == 1
    r = a.operator.remember("second shared fact about zebras", "global")
    assert len(b.operator.search("zebras", "global")) == 2
    a.operator.forget(r.id)
    assert len(b.operator.search("zebras", "global")) == 1
    index = b.backend._index(b.engine.scope_ref("global"))  # type: ignore[attr-defined]
    assert index.n == 2  # refreshed in place, not reloaded per search


def test_search_edge_cases(store: SharedMemoryStore) -> None:
    assert store.operator.search("anything", "global") == []  # no scope file yet
    store.operator.remember("something", "global")
    assert store.operator.search("", "global") == []
    assert store.operator.search("   ", "global") == []
    with pytest.raises(ValueError, match="top_k"):
        store.operator.search("x", "global", top_k=0)
    with pytest.raises(ValueError, match="limit"):
        store.operator.search("x" * 5000, "global")
    with pytest.raises(ValueError, match="needs agent_id"):
        store.operator.search("x", "agent")


async def test_async_twins_run_off_the_loop(store: SharedMemoryStore) -> None:
    r = await store.operator.aremember("async fact about herons", "global")
    many = await store.operator.aremember_many(["heron one", "heron two"], "global")
    hits = await store.operator.asearch("herons", "global")
    assert r.id in {h.id for h in hits} and len(many) == 2
    assert (await store.operator.aget(r.id)).content == "async fact about herons"
    assert (await store.operator.aforget(r.id)).status == "forgotten"
    assert len(await store.operator.ahistory(r.id)) == 2
    # many concurrent tasks share one store
    results = await asyncio.gather(
        *(store.operator.aremember(f"parallel fact {i} {i * 7} {i * 13}", "global") for i in range(20))
    )
    assert len({x.id for x in results}) == 20


@pytest.mark.sqlite_only
def test_forward_migration_keeps_data(tmp_path: Path) -> None:
    """A file written by schema version 1 is migrated in place on open, its facts intact; schema 3 recomputes
    the exact-duplicate hashes and rebuilds who stated each fact from the audit trail."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    r = store.operator.remember("fact from the old schema", "global")
    store.operator.remember("Fact from the old schema!", "global")
    store.close()
    with sqlite3.connect(tmp_path / "global.db") as conn:  # roll the file back to a v1 layout
        for spec in TABLES.values():
            if spec.fts:
                conn.execute(f"DROP TABLE {spec.name}_fts")
            conn.execute(f"DROP TABLE {spec.name}")
        conn.execute("ALTER TABLE facts DROP COLUMN stated_by")
        conn.execute("UPDATE facts SET content_hash = 'old-rule'")
        conn.execute("INSERT INTO audit (fact_id, event, actor, at) VALUES (?, 'reinforced', 'bob', 0)", (r.id,))
        conn.execute("PRAGMA user_version = 1")
    reopened = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    fact = reopened.operator.get(r.id)
    assert fact.content == "fact from the old schema" and fact.stated_by == ("system", "bob")
    assert reopened.operator.remember("FACT FROM THE OLD SCHEMA", "global").duplicate_of == r.id
    with sqlite3.connect(tmp_path / "global.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
        assert conn.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 0
        assert not conn.execute(FACTS_FTS).fetchall()


@pytest.mark.sqlite_only
def test_schema_5_drops_the_facts_full_text_index_and_keeps_everything_else(tmp_path: Path) -> None:
    """A version-4 file (facts indexed by FTS5 through triggers) loses the index, its vocabulary table and
    its triggers on open, in one transaction; the facts, their recall and the record tables' indexes stay."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    kept = store.operator.remember("the heron nests by the old mill", "global")
    gone = store.operator.remember("a fact that is forgotten and purged", "global")
    store.for_agent("lead").log_conversation("assistant", "the heron flew off")
    store.close()
    with sqlite3.connect(tmp_path / "global.db") as conn:  # back to schema 4: its index, built over the rows
        conn.executescript(SCHEMA_4_FACTS_FTS)
        conn.execute("INSERT INTO facts_fts (facts_fts) VALUES ('rebuild')")
        conn.execute("PRAGMA user_version = 4")
    reopened = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    assert [h.id for h in reopened.operator.search("heron mill", "global")] == [kept.id]
    reopened.operator.forget(gone.id)
    assert reopened.operator.purge(0) == 1  # deletes a row: no trigger is left to write to the dropped index
    added = reopened.operator.remember("herons return to the mill each spring", "global")
    assert {h.id for h in reopened.operator.search("heron mill", "global")} == {kept.id, added.id}
    assert [r.content for r in reopened.operator.conversation("lead", query="heron")] == ["the heron flew off"]
    with sqlite3.connect(tmp_path / "global.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert not conn.execute(FACTS_FTS).fetchall()
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'conversations_fts'").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (2,)


@pytest.mark.sqlite_only
def test_newer_schema_is_refused(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.operator.remember("x", "global")
    store.close()
    with sqlite3.connect(tmp_path / "global.db") as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(NotAStoreError, match="newer than this package supports"):
        SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.search("x", "global")


def test_neighbour_context_pulls_in_the_turn_next_to_a_match(make_store: StoreFactory) -> None:
    store = make_store()
    turns = [
        "Caroline: what is your favourite sport?",
        "Melanie: swimming, every morning since I was six",
        "Caroline: nice, I prefer chess",
        "Melanie: unrelated note about groceries",
    ]
    receipts = store.operator.remember_many(turns, "global", session_id="s1")
    store.operator.remember("Other session: sport talk elsewhere", "global", session_id="s2")
    plain = store.operator.search("favourite sport", "global", top_k=3, context_weights=(0.0, 0.0))
    assert receipts[1].id not in [h.id for h in plain]  # the answer shares no word with the question
    hits = store.operator.search("favourite sport", "global", top_k=3, context_weights=(0.3, 0.1))
    by_id = {h.id: h for h in hits}
    assert receipts[1].id in by_id and by_id[receipts[1].id].context_of == receipts[0].id
    assert by_id[receipts[0].id].context_of is None
    with pytest.raises(ValueError, match="context_weights"):
        make_store(recall=RecallSettings(context_weights=(2.0, 0.1)))
    on = make_store(same_as=store, recall=RecallSettings(context_weights=(0.3, 0.1)))
    assert receipts[1].id in [h.id for h in on.operator.search("favourite sport", "global", top_k=3)]


def test_supersede_chain_lists_every_linked_fact_oldest_first(store: SharedMemoryStore) -> None:
    first = store.operator.remember("The standup is at nine.", "global")
    second = store.operator.remember("The standup is at ten.", "global", supersedes=[first.id])
    third = store.operator.remember("The standup is at half past ten.", "global", supersedes=[second.id])
    chain = store.operator.supersede_chain(first.id)
    assert [f.id for f in chain if not isinstance(f, str)] == [first.id, second.id, third.id]
    assert store.operator.supersede_chain(third.id) == chain
    events = store.operator.history(second.id)
    assert {e.fact_id for e in events} == {first.id, second.id, third.id}
    store.operator.purge(older_than=0)
    assert store.operator.supersede_chain(third.id) == [
        store.operator.get(third.id),
        second.id,
    ]  # purged: a bare id, a dead end
