"""The fact lifecycle: remember, reinforce, supersede, forget, TTL, purge, history, stats, bad input."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from old_schemas import FACTS_FTS, SCHEMA_4_FACTS_FTS

from autogen_shared_memory import (
    EmbeddingModelMismatchError,
    FactNotFoundError,
    NotAStoreError,
    SharedMemoryStore,
)
from autogen_shared_memory.backends.base import reembed_scope
from autogen_shared_memory.backends.sqlite import MIGRATIONS, SCHEMA_VERSION
from autogen_shared_memory.core.records import TABLES
from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.testing import HashEmbedder

StoreFactory = Callable[..., SharedMemoryStore]


def db_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM facts").fetchone()[0])


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
    store.remember("global fact", "global")
    store.remember("group fact", "group", agent_id="alice", group_id="crew")
    store.remember("private fact", "agent", agent_id="alice")
    assert {p.name for p in root.glob("*.db")} == {"global.db", "group_crew.db", "agent_alice.db", "ids.db"}
    with sqlite3.connect(root / "global.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert meta["embedding_model"] == "test-hash-embedder" and meta["embedding_dim"] == "256"


def test_remember_returns_receipt_and_fact_has_every_field(store: SharedMemoryStore) -> None:
    r = store.remember(
        "Deploys happen on Thursdays",
        "group",
        agent_id="alice",
        group_id="crew",
        confidence=0.8,
        ttl_days=2,
        tags=["ops", "deploy"],
        category="process",
        metadata={"source": "standup"},
    )
    assert r.status == "created" and r.duplicate_of is None and r.id.startswith("g_")
    f = store.get(r.id)
    assert (f.content, f.created_by, f.owner, f.confidence) == (
        "Deploys happen on Thursdays",
        "alice",
        "crew",
        0.8,
    )
    assert f.tags == ("ops", "deploy") and f.category == "process" and f.metadata == {"source": "standup"}
    assert f.session_id == store.session_id and f.status == "active" and f.reinforcement == 1
    assert f.expires_at is not None and math.isclose(f.expires_at - f.created_at, 2 * 86400, abs_tol=5)
    assert f.version == 1 and len(f.content_hash) == 64 and f.supersedes == ()


def test_exact_duplicate_reinforces(store: SharedMemoryStore) -> None:
    a = store.remember("The API uses OAuth2", "global", confidence=0.5)
    b = store.remember("  the api uses   OAUTH2 ", "global", confidence=0.9)
    assert b.status == "reinforced" and b.id == a.id and b.duplicate_of == a.id
    f = store.get(a.id)
    assert f.reinforcement == 2 and f.confidence == 0.9 and f.version == 2
    assert store.stats()[0].counts["active"] == 1
    # the same text in another scope is a different fact
    c = store.remember("The API uses OAuth2", "agent", agent_id="alice")
    assert c.status == "created"


def test_near_duplicate_reinforces_with_threshold(make_store: StoreFactory) -> None:
    s = make_store(near_duplicate_threshold=0.8)
    a = s.remember("user prefers dark mode in the editor", "global")
    b = s.remember("User prefers: dark mode in editor", "global")  # the same wording, not the same text
    assert b.status == "reinforced" and b.duplicate_of == a.id and b.similarity is not None
    assert b.similarity >= 0.8
    c = s.remember("deploy on thursday", "global")
    assert c.status == "created"
    events = [e.event for e in s.history(a.id)]
    assert events == ["created", "reinforced"]
    off = make_store(near_duplicate_threshold=1.01)
    off.remember("user prefers dark mode in the editor", "global")
    assert off.remember("User prefers: dark mode in editor", "global").status == "created"


def test_duplicates_inside_one_batch(store: SharedMemoryStore) -> None:
    receipts = store.remember_many(["deploy key rotates", "Deploy  KEY rotates", "budget meeting friday"], "global")
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
    receipts = store.remember_many(items + mixed, "global", agent_id="lead", group_id="crew")
    assert embedder.calls == [52]
    assert [r.scope.kind for r in receipts[-2:]] == ["agent", "group"]
    with sqlite3.connect(store.root / "global.db") as conn:
        revs = {r[0] for r in conn.execute("SELECT rev FROM facts")}
    assert len(revs) == 1  # every global fact written by the same transaction


def test_supersede_keeps_the_chain(store: SharedMemoryStore) -> None:
    old = store.remember("Release freeze starts Monday", "group", agent_id="alice", group_id="crew")
    new = store.remember(
        "Release freeze moved to Wednesday", "group", agent_id="bob", group_id="crew", supersedes=[old.id]
    )
    assert new.superseded == (old.id,)
    o = store.get(old.id)
    assert o.status == "superseded" and o.superseded_by == new.id and o.tombstone_by == "bob"
    assert store.get(new.id).supersedes == (old.id,)
    hits = store.search("release freeze", "group", agent_id="alice", group_id="crew")
    assert [h.id for h in hits] == [new.id]
    all_hits = store.search("release freeze", "group", agent_id="alice", group_id="crew", include_inactive=True)
    assert {h.id for h in all_hits} == {old.id, new.id}
    trail = [(e.fact_id, e.event) for e in store.history(new.id)]
    assert (old.id, "created") in trail and (old.id, "superseded") in trail and (new.id, "created") in trail
    assert [e.event for e in store.history(old.id)] == [e.event for e in store.history(new.id)]


def test_supersede_errors_write_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(FactNotFoundError):
        store.remember("x", "global", supersedes=["w_0000000000000000dead"])
    with pytest.raises(ValueError, match="same scope"):
        store.remember("y", "global", supersedes=["g_0000000000000000dead"])
    with pytest.raises(ValueError, match="not a fact id"):
        store.remember("z", "global", supersedes=["nonsense"])
    assert store.search("x y z", "global") == []
    a = store.remember("a fact", "global")
    store.forget(a.id)
    with pytest.raises(ValueError, match="already forgotten"):
        store.remember("b fact", "global", supersedes=[a.id])
    assert store.stats()[0].counts["active"] == 0


def test_forget_is_a_tombstone(store: SharedMemoryStore) -> None:
    r = store.remember("temporary credentials are in vault path secret/x", "agent", agent_id="alice")
    f = store.forget(r.id, "rotated", agent_id="alice")
    assert (f.status, f.tombstone_by, f.tombstone_reason) == ("forgotten", "alice", "rotated")
    assert f.tombstone_at is not None
    assert store.search("vault credentials", "agent", agent_id="alice") == []
    assert store.stats()[0].counts == {"active": 0, "forgotten": 1, "superseded": 0, "expired": 0}
    assert [e.event for e in store.history(r.id)] == ["created", "forgotten"]
    assert store.forget(r.id, agent_id="alice").status == "forgotten"  # idempotent
    with pytest.raises(FactNotFoundError):
        store.forget("a_0000000000000000beef", agent_id="alice")


def test_forgetting_a_superseded_fact_leaves_its_history_as_it_was(store: SharedMemoryStore) -> None:
    store.add_group_member("crew", "alice")
    store.add_group_member("crew", "bob")
    old = store.remember("The launch is on Monday", "group", agent_id="alice", group_id="crew")
    time.sleep(0.01)
    new = store.remember("The launch moved to Wednesday", "group", agent_id="bob", group_id="crew", supersedes=[old.id])
    between = store.get(new.id, group_id="crew").created_at + 0.001
    closed = store.get(old.id, group_id="crew")
    believed = [h.fact.id for h in store.search("launch", "group", group_id="crew", as_of=between)]
    history = store.history(old.id, group_id="crew")
    time.sleep(0.01)
    after = store.forget(old.id, "cleanup", agent_id="alice", group_id="crew")
    assert after == closed  # status, superseded_by, tombstone (who, when, why): all as the correction left them
    assert (after.status, after.superseded_by, after.tombstone_by) == ("superseded", new.id, "bob")
    assert store.history(old.id, group_id="crew") == history and "forgotten" not in [e.event for e in history]
    assert [h.fact.id for h in store.search("launch", "group", group_id="crew", as_of=between)] == believed == [new.id]


def test_ttl_expiry_and_purge(store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    short = store.remember("standup moved to 10:30 today", "global", ttl_days=1)
    keep = store.remember("standup is daily", "global")
    gone = store.remember("old decision", "global")
    store.forget(gone.id)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 2 * 86400)
    assert store.get(short.id).status == "expired"
    assert [h.id for h in store.search("standup", "global")] == [keep.id]
    assert {h.id for h in store.search("standup", "global", include_inactive=True)} == {short.id, keep.id}
    counts = store.stats()[0].counts
    assert counts == {"active": 1, "forgotten": 1, "superseded": 0, "expired": 1}
    assert store.purge(older_than=1) == 2
    with pytest.raises(FactNotFoundError):
        store.get(short.id)
    assert store.get(keep.id).status == "active"
    assert [e.event for e in store.history(keep.id)] == ["created"]
    # the audit trail of a purged fact survives
    assert store.backend.history(short.scope if hasattr(short, "scope") else keep.scope, gone.id)[-1].event == "purged"


def test_history_of_a_purged_fact_is_its_trail_for_whoever_could_read_it(store: SharedMemoryStore) -> None:
    store.add_group_member("crew", "alice")
    store.set_agent_private("alice")
    facts = {
        "global": store.remember("an old global rule", "global"),
        "group": store.remember("an old crew rule", "group", agent_id="alice", group_id="crew"),
        "agent": store.remember("an old private note", "agent", agent_id="alice"),
    }
    for fact in facts.values():
        store.forget(fact.id)
    assert store.purge(older_than=0) == 3
    for kind, fact in facts.items():
        for caller in ({}, {"agent_id": "alice", "group_id": "crew"}):  # trusted code, and the owner
            trail = store.history(fact.id, **caller)
            assert [e.event for e in trail] == ["created", "forgotten", "purged"], (kind, caller)
        with pytest.raises(FactNotFoundError):
            store.get(fact.id)
    # one who could not read the fact learns nothing more now that it is gone (no oracle for private ids)
    store.add_group_member("other", "mallory")
    for fact in (facts["group"], facts["agent"]):
        with pytest.raises(FactNotFoundError):
            store.history(fact.id, agent_id="mallory", group_id="crew")
    with pytest.raises(FactNotFoundError):
        store.history("g_0193a1b2c3d4e5f60718", group_id="crew")  # never existed


def test_purge_keeps_recent_tombstones(store: SharedMemoryStore) -> None:
    r = store.remember("recent", "global")
    store.forget(r.id)
    assert store.purge(older_than=1) == 0
    assert store.purge(older_than=0) == 1
    with pytest.raises(ValueError):
        store.purge(older_than=-1)


def test_filters(store: SharedMemoryStore) -> None:
    store.remember(
        "deploy checklist step one",
        "group",
        agent_id="alice",
        group_id="crew",
        tags=["ops"],
        category="process",
        confidence=0.4,
    )
    store.remember(
        "deploy checklist step two",
        "group",
        agent_id="bob",
        group_id="crew",
        tags=["ops", "urgent"],
        category="process",
        confidence=0.9,
    )
    store.remember("deploy budget note", "group", agent_id="bob", group_id="crew", category="finance")
    q = {"scope": "group", "agent_id": "alice", "group_id": "crew", "top_k": 10}
    assert len(store.search("deploy", **q)) == 3
    assert {h.content for h in store.search("deploy", tags=["urgent"], **q)} == {"deploy checklist step two"}
    assert {h.fact.created_by for h in store.search("deploy", created_by="bob", **q)} == {"bob"}
    assert len(store.search("deploy", category="process", **q)) == 2
    assert [h.content for h in store.search("deploy", min_confidence=0.5, category="process", **q)] == [
        "deploy checklist step two"
    ]
    assert store.search("deploy", since=time.time() + 60, **q) == []
    assert len(store.search("deploy", until=time.time() + 60, **q)) == 3
    two = store.search("deploy", tags=["urgent"], **q)[0].fact
    assert [h.id for h in store.search("deploy", tags=["ops", "urgent"], **q)] == [two.id]  # every tag
    assert two.id in {h.id for h in store.search("deploy", since=two.created_at, **q)}  # since: inclusive
    assert two.id not in {h.id for h in store.search("deploy", until=two.created_at, **q)}  # until: exclusive


def test_hits_carry_provenance_and_reasons(store: SharedMemoryStore) -> None:
    store.remember("kafka retention is seven days", "global")
    hit = store.search("kafka retention", "global")[0]
    assert hit.lexical_rank == 1 and hit.semantic_rank == 1 and hit.cosine is not None
    assert hit.score == pytest.approx(1 / 6 + 0.5 / 6)  # rrf_k=5, weights 1 and 0.5
    assert hit.fact.scope.kind == "global" and hit.fact.created_by == "system"


def test_scope_all_fuses_the_callers_scopes(store: SharedMemoryStore) -> None:
    store.remember("alpha project codename is bluebird", "agent", agent_id="alice")
    store.remember("alpha project deadline is friday", "group", agent_id="alice", group_id="crew")
    store.remember("alpha project owner is dana", "global")
    store.remember("alpha project secret of bob", "agent", agent_id="bob")
    hits = store.search("alpha project", agent_id="alice", group_id="crew", top_k=10)
    assert {h.fact.scope.kind for h in hits} == {"agent", "group", "global"}
    assert all(h.fact.owner in ("alice", "crew", "") for h in hits)
    weighted = store.search("alpha project", agent_id="alice", group_id="crew", top_k=10, scope_weights={"global": 3.0})
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
        store.remember(**args)
    assert not store.backend.exists(ScopeRef("global"))


def test_bad_item_in_a_batch_writes_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(ValueError):
        store.remember_many(["fine", "also fine", ""], "global")
    assert not store.backend.exists(ScopeRef("global"))


@pytest.mark.sqlite_only
def test_file_that_is_not_a_database_is_left_untouched(store: SharedMemoryStore) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.root / "global.db"
    path.write_bytes(b"this is my diary, not a database\n" * 10)
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match="global.db"):
        store.remember("x", "global")
    with pytest.raises(NotAStoreError, match="global.db"):
        store.search("x", "global")
    assert path.read_bytes() == before


@pytest.mark.sqlite_only
def test_foreign_sqlite_database_is_refused_and_untouched(store: SharedMemoryStore) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    path = store.root / "global.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    before = path.read_bytes()
    with pytest.raises(NotAStoreError, match="not a memory store"):
        store.remember("x", "global")
    assert path.read_bytes() == before


def test_other_embedding_model_is_refused_then_reembed(make_store: StoreFactory) -> None:
    first = make_store(embedder=HashEmbedder(64, "model-a"))
    r = first.remember("the deploy key rotates monthly", "global")
    second = make_store(same_as=first, embedder=HashEmbedder(32, "model-b"), operator_id="migrator")
    with pytest.raises(EmbeddingModelMismatchError, match="reembed"):
        second.search("deploy key", "global")
    with pytest.raises(EmbeddingModelMismatchError):
        second.remember("another", "global")
    assert second.reembed() == 1
    assert second.search("deploy key", "global")[0].id == r.id
    assert second.stats()[0].embedding_model == "model-b"
    assert second.remember("another", "global").status == "created"
    assert [(e.event, e.actor) for e in second.history(r.id)] == [("created", "system"), ("reembedded", "migrator")]


G = ScopeRef("global", "")


def test_a_reembed_stopped_part_way_changes_nothing_and_runs_again(make_store: StoreFactory) -> None:
    """Its vectors and the model switch are one write: stopped after some batches (here, an error between
    them), the scope still holds the old model's vectors only, both old and new stores get clear answers, and
    the next reembed finishes (it used to leave two models' vectors of two sizes: nothing could search, write
    or re-embed the scope)."""
    old = make_store(embedder=HashEmbedder(64, "model-a"))
    facts = [r.id for r in old.remember_many([f"fact number {i} about llamas" for i in range(40)], "global")]
    new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))

    def stop(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        reembed_scope(new.backend, G, new.embedder.embed, new.model, batch_size=8, progress=stop)
    assert old.search("fact number 7 llamas", "global")[0].id == facts[7]
    assert old.remember("still written with model a", "global").status == "created"
    with pytest.raises(EmbeddingModelMismatchError):
        new.search("llamas", "global")
    assert new.reembed() == 41
    assert new.search("fact number 7 llamas", "global")[0].id == facts[7]
    assert new.stats()[0].embedding_model == "model-b"


def test_a_fact_written_with_the_old_model_during_a_reembed_gets_the_new_models_vector(
    make_store: StoreFactory,
) -> None:
    """A write that lands between the re-embed's batches (with the old model, which the scope still names) is
    re-embedded before the switch; it used to keep the old model's vector under the new model's name."""
    old = make_store(embedder=HashEmbedder(32, "model-a"))
    old.remember_many([f"fact number {i} about llamas" for i in range(20)], "global")
    new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
    late: list[str] = []
    switch = new.backend.replace_vectors

    def write_meanwhile(*args: Any) -> bool:  # after the last batch was listed, before the switch
        if not late:
            late.append(old.remember("The deploy key rotates every Friday at noon", "global").id)
        return switch(*args)

    new.backend.replace_vectors = write_meanwhile  # type: ignore[method-assign]
    assert reembed_scope(new.backend, G, new.embedder.embed, new.model, batch_size=8) == 21
    stored = np.frombuffer(new.backend.rows(G, "facts", {"id": late[0]})[0]["embedding"], np.float32)
    assert np.allclose(stored, new.embedder.embed(["The deploy key rotates every Friday at noon"])[0])
    assert [e.event for e in new.history(late[0])] == ["created", "reembedded"]


def test_a_fact_written_in_a_purged_facts_place_during_a_reembed_is_reembedded(make_store: StoreFactory) -> None:
    """SQLite gives a new row the highest rowid + 1: after the newest facts are purged, a fact written during
    the re-embed got a listed fact's seq, was not seen as late, kept the old model's vector (another size:
    every search and write of the scope failed afterwards)."""
    old = make_store(embedder=HashEmbedder(64, "model-a"))
    facts = [r.id for r in old.remember_many([f"fact number {i} about llamas" for i in range(6)], "global")]
    new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
    late: list[str] = []
    switch = new.backend.replace_vectors

    def purge_then_write(*args: Any) -> int | None:  # after the facts were listed and embedded
        if not late:
            for fact_id in facts[-2:]:
                old.forget(fact_id, "obsolete")
            old.purge(older_than=0)
            late.append(old.remember("The deploy key rotates every Friday at noon", "global").id)
        return switch(*args)

    new.backend.replace_vectors = purge_then_write  # type: ignore[method-assign]
    assert reembed_scope(new.backend, G, new.embedder.embed, new.model, batch_size=4) == 5
    assert [e.event for e in new.history(late[0])] == ["created", "reembedded"]
    assert new.search("deploy key rotates", "global")[0].id == late[0]
    assert new.remember("The deploy key rotates every Friday at noon", "global").status == "reinforced"


def test_a_fact_purged_during_a_reembed_gets_no_reembedded_event(make_store: StoreFactory) -> None:
    old = make_store(embedder=HashEmbedder(32, "model-a"))
    facts = [r.id for r in old.remember_many([f"fact number {i} about llamas" for i in range(10)], "global")]
    new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
    switch = new.backend.replace_vectors

    def purge_meanwhile(*args: Any) -> int | None:  # after the facts were listed and embedded
        old.forget(facts[3], "obsolete")
        old.purge(older_than=0)
        return switch(*args)

    new.backend.replace_vectors = purge_meanwhile  # type: ignore[method-assign]
    assert reembed_scope(new.backend, G, new.embedder.embed, new.model) == 9
    assert [e.event for e in new.history(facts[3])] == ["created", "forgotten", "purged"]
    assert [e.event for e in new.history(facts[4])] == ["created", "reembedded"]


@pytest.mark.sqlite_only
def test_content_is_immutable_in_the_database(store: SharedMemoryStore) -> None:
    r = store.remember("original text", "global")
    with (
        sqlite3.connect(store.root / "global.db") as conn,
        pytest.raises(sqlite3.IntegrityError, match="immutable"),
    ):
        conn.execute("UPDATE facts SET content = 'tampered' WHERE id = ?", (r.id,))


@pytest.mark.sqlite_only
def test_other_process_writes_are_seen_incrementally(tmp_path: Path) -> None:
    a = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    b = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    a.remember("first shared fact about zebras", "global")
    assert len(b.search("zebras", "global")) == 1
    r = a.remember("second shared fact about zebras", "global")
    assert len(b.search("zebras", "global")) == 2
    a.forget(r.id)
    assert len(b.search("zebras", "global")) == 1
    index = b.backend._index(b.scope_ref("global"))  # type: ignore[attr-defined]
    assert index.n == 2  # refreshed in place, not reloaded per search


def test_search_edge_cases(store: SharedMemoryStore) -> None:
    assert store.search("anything", "global") == []  # no scope file yet
    store.remember("something", "global")
    assert store.search("", "global") == []
    assert store.search("   ", "global") == []
    with pytest.raises(ValueError, match="top_k"):
        store.search("x", "global", top_k=0)
    with pytest.raises(ValueError, match="limit"):
        store.search("x" * 5000, "global")
    with pytest.raises(ValueError, match="needs agent_id"):
        store.search("x", "agent")


async def test_async_twins_run_off_the_loop(store: SharedMemoryStore) -> None:
    r = await store.aremember("async fact about herons", "global")
    many = await store.aremember_many(["heron one", "heron two"], "global")
    hits = await store.asearch("herons", "global")
    assert r.id in {h.id for h in hits} and len(many) == 2
    assert (await store.aget(r.id)).content == "async fact about herons"
    assert (await store.aforget(r.id)).status == "forgotten"
    assert len(await store.ahistory(r.id)) == 2
    # many concurrent tasks share one store
    results = await asyncio.gather(
        *(store.aremember(f"parallel fact {i} {i * 7} {i * 13}", "global") for i in range(20))
    )
    assert len({x.id for x in results}) == 20


@pytest.mark.sqlite_only
def test_forward_migration_keeps_data(tmp_path: Path) -> None:
    """A file written by schema version 1 is migrated in place on open, its facts intact; schema 3 recomputes
    the exact-duplicate hashes and rebuilds who stated each fact from the audit trail."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    r = store.remember("fact from the old schema", "global")
    store.remember("Fact from the old schema!", "global", agent_id=None)
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
    fact = reopened.get(r.id)
    assert fact.content == "fact from the old schema" and fact.stated_by == ("system", "bob")
    assert reopened.remember("FACT FROM THE OLD SCHEMA", "global").duplicate_of == r.id
    with sqlite3.connect(tmp_path / "global.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
        assert conn.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 0
        assert not conn.execute(FACTS_FTS).fetchall()


@pytest.mark.sqlite_only
def test_schema_5_drops_the_facts_full_text_index_and_keeps_everything_else(tmp_path: Path) -> None:
    """A version-4 file (facts indexed by FTS5 through triggers) loses the index, its vocabulary table and
    its triggers on open, in one transaction; the facts, their recall and the record tables' indexes stay."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    kept = store.remember("the heron nests by the old mill", "global")
    gone = store.remember("a fact that is forgotten and purged", "global")
    store.for_agent("lead").log_conversation("assistant", "the heron flew off")
    store.close()
    with sqlite3.connect(tmp_path / "global.db") as conn:  # back to schema 4: its index, built over the rows
        conn.executescript(SCHEMA_4_FACTS_FTS)
        conn.execute("INSERT INTO facts_fts (facts_fts) VALUES ('rebuild')")
        conn.execute("PRAGMA user_version = 4")
    reopened = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    assert [h.id for h in reopened.search("heron mill", "global")] == [kept.id]
    reopened.forget(gone.id)
    assert reopened.purge(0) == 1  # deletes a row: no trigger is left to write to the dropped index
    added = reopened.remember("herons return to the mill each spring", "global")
    assert {h.id for h in reopened.search("heron mill", "global")} == {kept.id, added.id}
    assert [r.content for r in reopened.conversation("lead", query="heron")] == ["the heron flew off"]
    with sqlite3.connect(tmp_path / "global.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert not conn.execute(FACTS_FTS).fetchall()
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'conversations_fts'").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (2,)


@pytest.mark.sqlite_only
def test_newer_schema_is_refused(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.remember("x", "global")
    store.close()
    with sqlite3.connect(tmp_path / "global.db") as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(NotAStoreError, match="newer than this package supports"):
        SharedMemoryStore(tmp_path, embedder=HashEmbedder()).search("x", "global")


def test_neighbour_context_pulls_in_the_turn_next_to_a_match(make_store: StoreFactory) -> None:
    store = make_store()
    turns = [
        "Caroline: what is your favourite sport?",
        "Melanie: swimming, every morning since I was six",
        "Caroline: nice, I prefer chess",
        "Melanie: unrelated note about groceries",
    ]
    receipts = store.remember_many(turns, "global", session_id="s1")
    store.remember("Other session: sport talk elsewhere", "global", session_id="s2")
    plain = store.search("favourite sport", "global", top_k=3)
    assert receipts[1].id not in [h.id for h in plain]  # the answer shares no word with the question
    hits = store.search("favourite sport", "global", top_k=3, context_weights=(0.3, 0.1))
    by_id = {h.id: h for h in hits}
    assert receipts[1].id in by_id and by_id[receipts[1].id].context_of == receipts[0].id
    assert by_id[receipts[0].id].context_of is None
    with pytest.raises(ValueError, match="context_weights"):
        make_store(context_weights=(2.0, 0.1))
    on = make_store(context_weights=(0.3, 0.1), same_as=store)
    assert receipts[1].id in [h.id for h in on.search("favourite sport", "global", top_k=3)]


def test_supersede_chain_lists_every_linked_fact_oldest_first(store: SharedMemoryStore) -> None:
    first = store.remember("The standup is at nine.", "global")
    second = store.remember("The standup is at ten.", "global", supersedes=[first.id])
    third = store.remember("The standup is at half past ten.", "global", supersedes=[second.id])
    chain = store.supersede_chain(first.id)
    assert [f.id for f in chain if not isinstance(f, str)] == [first.id, second.id, third.id]
    assert store.supersede_chain(third.id) == chain
    events = store.history(second.id)
    assert {e.fact_id for e in events} == {first.id, second.id, third.id}
    store.purge(older_than=0)
    assert store.supersede_chain(third.id) == [store.get(third.id), second.id]  # purged: a bare id, a dead end


def test_metadata_comes_back_as_it_was_written(store: SharedMemoryStore) -> None:
    """Numbers keep their type and sign, keys their order, on every backend (PostgreSQL kept a parsed form
    before schema 6: 1e20 came back as an int, -0.0 as 0.0, keys reordered); so does a restatement's."""
    import math

    metadata = {"zeta": 1e20, "alpha": -0.0, "mid": 2**63 - 1, "tiny": 5e-324, "nested": {"b": 1.0, "a": [0.1, -0.0]}}
    fact = store.remember("the rocket weighs a lot", "global", metadata=metadata)
    back = store.get(fact.id).metadata
    assert list(back) == list(metadata) and list(back["nested"]) == ["b", "a"]
    assert isinstance(back["zeta"], float) and back["zeta"] == 1e20 and isinstance(back["nested"]["b"], float)
    assert math.copysign(1.0, back["alpha"]) == -1.0 and math.copysign(1.0, back["nested"]["a"][1]) == -1.0
    assert back == metadata
    store.remember("The rocket weighs a lot.", "global", agent_id="lead", metadata={"y": -0.0, "x": 1e20})
    detail = store.history(fact.id)[-1].detail["metadata"]
    assert list(detail) == ["y", "x"] and isinstance(detail["x"], float) and math.copysign(1.0, detail["y"]) == -1.0
