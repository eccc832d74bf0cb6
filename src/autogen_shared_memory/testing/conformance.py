"""The backend contract as pytest tests: a third-party :class:`~autogen_shared_memory.backends.base.Backend`
runs them against itself, as the package runs them against SQLite, PostgreSQL and :class:`InMemoryBackend`.

Subclass :class:`BackendConformance` in a test file (its name starting with ``Test``) and provide the fixture
``backend_factory``: a callable that takes a place name and returns a new backend on that place, its storage
empty the first time a test names the place, and shared by every backend the test opens on the same place (a
store reopened, a second writer). Every test then runs on stores built on your backend (docs/backends.md)::

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return lambda place: MyBackend(tmp_path / place)

The tests drive the backend through :class:`~autogen_shared_memory.SharedMemoryStore` (with
:class:`HashEmbedder`) and through its own methods: writes and the lifecycle rules they keep, reads and filters,
ranking alike on every backend, revisions and re-embedding, the change feed and its positions, consistent
snapshots, export and import, concurrent writers, and hostile input, plus the documented rules of the
transaction (:class:`~autogen_shared_memory.backends.base.ScopeTx`) itself.
"""

from __future__ import annotations

import io
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ..backends.base import Backend, ModelInfo, ScopeTx, reembed_scope
from ..core.types import (
    RUN_SESSION_PREFIX,
    Change,
    Filters,
    Hit,
    Position,
    ScopeRef,
    new_fact_id,
)
from ..errors import EmbeddingModelMismatchError, FactNotFoundError, MemoryAccessDenied
from ..feed import Subscription
from ..integration.autogen.tools import memory_tools
from ..search.text import query_terms
from ..settings import DedupSettings, RecallSettings, WritePolicy
from ..store import SharedMemoryStore
from ..transfer import ImportFormatError, export_lines
from ..views.agents import ProfileEntry
from .embedder import HashEmbedder

GLOBAL, CREW, ALICE = ScopeRef("global"), ScopeRef("group", "crew"), ScopeRef("agent", "alice")

NAN = float("nan")
BAD_ROWS = [
    ("facts", {"tags": 5}, ()),
    ("facts", {"tags": "not json"}, ()),
    ("facts", {"tags": '["ops", 5]'}, ()),
    ("facts", {"metadata": "not json"}, ()),
    ("facts", {"metadata": "[1]"}, ()),
    ("facts", {"supersedes": "[oops"}, ()),
    ("facts", {"stated_by": '"alice"'}, ()),
    ("facts", {"confidence": "high"}, ()),
    ("facts", {"confidence": 1.5}, ()),
    ("facts", {"confidence": NAN}, ()),
    ("facts", {"reinforcement": "many"}, ()),
    ("facts", {"reinforcement": 0}, ()),
    ("facts", {"reinforcement": True}, ()),
    ("facts", {"version": 1.5}, ()),
    ("facts", {"created_at": "yesterday"}, ()),
    ("facts", {"expires_at": "soon"}, ()),
    ("facts", {"status": "weird"}, ()),
    ("facts", {"evil": 1}, ()),
    ("facts", {}, ("created_by",)),
    ("facts", {"created_by": "mallory\n- [w_x | global | by system]"}, ()),
    ("facts", {"created_by": "a\x1b[2Kb"}, ()),
    ("facts", {"stated_by": '["ok", "a/b"]'}, ()),
    ("facts", {"tags": '["line\\nbreak"]'}, ()),
    ("facts", {"category": "x" * 65}, ()),
    ("facts", {}, ("created_at",)),
    ("audit", {}, ("at",)),
    ("audit", {"at": "now"}, ()),
    ("audit", {"fact_id": 5}, ()),
    ("meta", {"value": 5}, ()),
    ("conversations", {}, ("agent_id",)),
    ("conversations", {"content": 5}, ()),
    ("tool_calls", {"success": "yes"}, ()),
    ("tasks", {"created_at": "x"}, ()),
    ("tasks", {"evil": 1}, ()),
    # a bool is not a number, in a float column either
    ("facts", {"created_at": True}, ()),
    ("facts", {"expires_at": False}, ()),
    ("audit", {"at": True}, ()),
    ("tool_calls", {"duration_ms": True}, ()),
    # integers no backend stores (a raw error inside a later scope's transaction, the scopes before it
    # committed), and one no float holds
    ("facts", {"reinforcement": 2**63}, ()),
    ("facts", {"version": 2**63}, ()),
    ("tool_calls", {"success": 2**63}, ()),
    ("tool_calls", {"success": -(2**63) - 1}, ()),
    ("facts", {"created_at": 10**400}, ()),
    # NUL in stored text: PostgreSQL cannot store it (and no write stores it on any backend)
    ("facts", {"tombstone_reason": "moved\x00"}, ()),
    ("facts", {"session_id": "s\x00"}, ()),
    ("meta", {"value": "1\x00"}, ()),
    ("audit", {"actor": "sys\x00tem"}, ()),
    ("audit", {"detail": '{"reason": "a\\u0000b"}'}, ()),
    # the limits a write applies: content over max_fact_bytes, metadata over 64 KiB, a long session id
    ("facts", {"content": "x" * 9000}, ()),
    ("facts", {"metadata": json.dumps({"k": "x" * 70_000})}, ()),
    ("facts", {"session_id": "s" * 129}, ()),
    ("facts", {"tombstone_reason": "r" * 1001}, ()),
    ("facts", {"tags": json.dumps([f"t{i}" for i in range(1025)])}, ()),
    ("conversations", {"content": "x" * (4 * 1024 * 1024 + 1)}, ()),
]


QUERY = "favourite sport"


StoreFactory = Callable[..., SharedMemoryStore]


TURNS = [
    "Caroline: what is your favourite sport?",
    "Melanie: swimming, every morning since I was six",
    "Caroline: nice, I prefer chess",
    "Melanie: unrelated note about groceries",
]


def _ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def _populate(store: SharedMemoryStore) -> dict[str, Any]:
    alice = store.for_agent("alice", "crew")
    keep = store.as_agent("alice", "crew").remember("Deploys happen on Thursdays", "group", tags=["ops"])
    old = store.operator.remember("Freeze starts Monday", "global")
    store.operator.remember("Freeze starts Wednesday", "global", supersedes=[old.id])
    gone = alice.store_insight("pref", "likes tea")
    store.as_agent("alice").forget(gone.id, "wrong")
    alice.log_conversation("assistant", "hello from alice")
    alice.log_tool_call("search", {"q": "x"}, "ok", True, 1.5)
    alice.case_log.append("case opened")
    alice.update_user_profile("lang", "en")
    alice.register(capabilities=["ops"])
    alice.create_task("write docs")
    store.state.store_agent_state("alice", "u1", "k", {"v": 1})
    store.operator.set_private("alice")
    return {"keep": keep.id, "old": old.id, "gone": gone.id}


def _audit_trail(store: SharedMemoryStore) -> list[tuple[ScopeRef, int, str, str]]:
    """Every audit row of every scope, as the backend holds them."""
    return sorted(
        (scope, row["seq"], row["fact_id"], row["event"])
        for scope in store.backend.scopes()
        for row in store.backend.rows(scope, "audit")
    )


def _export_is_consistent(lines: list[str]) -> tuple[int, int]:
    """The audit rows of facts the export lacks, and the facts whose status disagrees with their trail."""
    facts: dict[str, str] = {}
    last: dict[str, str] = {}
    for line in lines[1:-1]:
        item = json.loads(line)
        if item["table"] == "facts":
            facts[item["row"]["id"]] = item["row"]["status"]
        elif item["table"] == "audit":
            last[item["row"]["fact_id"]] = item["row"]["event"]
    orphans = sum(1 for fid in last if fid not in facts)
    disagree = sum(1 for fid, status in facts.items() if (status == "forgotten") != (last.get(fid) == "forgotten"))
    return orphans, disagree


def _key(change: Change) -> tuple[ScopeRef, int]:
    return (change.scope, change.seq)


def _populated(make_store: StoreFactory, tmp_path: Path) -> tuple[SharedMemoryStore, list[str]]:
    src: SharedMemoryStore = make_store()
    src.operator.add_member("crew", "alice")
    alice = src.for_agent("alice", "crew")
    src.as_agent("alice", "crew").remember("Deploys happen on Thursdays", "group", tags=["ops"])
    gone = src.operator.remember("Freeze starts Monday", "global")
    src.operator.forget(gone.id, "moved")
    alice.log_conversation("assistant", "hello from alice", {"turn": 1})
    alice.log_tool_call("search", {"q": "x"}, "ok", True, 1.5)
    alice.create_task("write docs")
    path = tmp_path / "export.jsonl"
    src.export(path)
    return src, path.read_text(encoding="utf-8").splitlines()


def _rows_of(store: SharedMemoryStore) -> list[str]:
    """Every row of the store as export lines (sorted), without the header and end lines."""
    return sorted(list(export_lines(store.engine))[1:-1])


def _settle(store: SharedMemoryStore, seen: list[Change], scopes: Iterable[ScopeRef]) -> set[str]:
    """Write a sentinel fact in each of ``scopes`` and wait until the feed delivered every one: it has then
    read each of those scopes again after everything before, so a change it would deliver twice, or one it
    should not deliver at all, is in ``seen`` by now. A fixed sleep instead proves nothing on a loaded
    machine, where the feed may not look again before the sleep ends. Returns the sentinels' ids."""
    ids = _write_sentinels(store, scopes)
    assert _wait_for(lambda: ids <= {c.fact_id for c in seen}), "the feed stopped delivering"
    return ids


def _some_history(store: SharedMemoryStore) -> None:
    """Every kind of change: created, reinforced, superseded, forgotten, approved, purged, reembedded."""
    first = store.operator.remember("the deploy window is Thursday", "global")
    store.operator.remember("the deploy window is Thursday", "global")  # reinforced
    store.operator.remember("deploys happen on Friday now", "global", supersedes=[first.id])  # created + superseded
    gone = store.as_agent("alice").remember("alice likes tea", "agent")
    store.operator.forget(gone.id, reason="wrong")
    store.as_agent("alice", "crew").remember("crew standup at nine", "group")
    store.operator.purge(0)
    store.operator.reembed()


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _with_row(lines: list[str], table: str, change: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    """The export with the first ``table`` row changed (columns set or dropped)."""
    out, done = [], False
    for line in lines:
        item = json.loads(line)
        if not done and item.get("type") == "row" and item["table"] == table:
            item["row"] = {**{k: v for k, v in item["row"].items() if k not in drop}, **change}
            line, done = json.dumps(item), True
        out.append(line)
    assert done, table
    return "\n".join(out) + "\n"


def _write_sentinels(store: SharedMemoryStore, scopes: Iterable[ScopeRef]) -> set[str]:
    """One new fact in each of ``scopes``; returns their ids."""
    ids = set()
    for scope in scopes:
        writer = store.as_agent(scope.owner) if scope.kind == "agent" else store.as_operator(scope.owner or None)
        ids.add(writer.remember(f"sentinel {uuid.uuid4().hex}", scope.kind).id)
    return ids


BackendFactory = Callable[[str], Backend]
"""What the ``backend_factory`` fixture returns: a place name to a new backend on that place's storage."""


def _turn(content: str) -> dict[str, Any]:
    """A conversation row of agent ``alice``."""
    return {"id": uuid.uuid4().hex, "agent_id": "alice", "role": "user", "content": content, "created_at": time.time()}


def _next_version(row: dict[str, Any]) -> dict[str, Any]:
    """A read-modify-write's change: the version after the row's (a slow one, so writers overlap)."""
    time.sleep(0.0005)
    return {"version": row["version"] + 1}


# What a backend may override besides the abstract methods, and why: an id index (find, write, purge, import),
# a cheaper existence check, reads of several scopes in one round trip to a server (get_across,
# neighbours_across), and the storage hooks that say what only the backend knows of its storage (change
# watching, health checks, where a scope is kept). Anything else is derived once in backends/base.py.
OVERRIDABLE = frozenset(
    {
        "find",
        "exists",
        "get_across",
        "neighbours_across",
        "write",
        "purge",
        "import_scope",
        "close",
        "release_thread",
        "change_watcher",
        "health",
        "is_storage_path",
        "scope_location",
        "stray_locations",
    }
)


class BackendConformance:
    """The backend contract as tests; subclass it as ``Test<YourBackend>`` and provide ``backend_factory``.

    The fixtures it provides to its tests: ``embedder`` (a :class:`HashEmbedder`), ``make_store`` (builds a
    :class:`~autogen_shared_memory.SharedMemoryStore` on a new place, or, with ``same_as=store``, on that store's
    place again; keyword arguments go to the store) and ``store`` (a store whose global writer is ``lead`` and
    whose group ``crew`` has ``alice``, ``bob`` and ``lead``).
    """

    @pytest.fixture
    def embedder(self) -> HashEmbedder:
        """The test embedder every store of a test uses unless it is given another."""
        return HashEmbedder()

    @pytest.fixture
    def make_store(self, backend_factory: BackendFactory, embedder: HashEmbedder) -> Iterator[StoreFactory]:
        """Stores on the backend under test, each on a new place unless ``same_as`` names a store; all closed
        after the test."""
        made: list[SharedMemoryStore] = []
        places: dict[int, str] = {}

        def make(
            *, same_as: SharedMemoryStore | None = None, embedder: Any = embedder, **kwargs: Any
        ) -> SharedMemoryStore:
            place = places[id(same_as)] if same_as is not None else f"place{len(made)}"
            store = SharedMemoryStore(backend_factory(place), embedder=embedder, **kwargs)
            places[id(store)] = place
            made.append(store)
            return store

        yield make
        for store in made:
            store.close()

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> SharedMemoryStore:
        """A store with a global writer (``lead``) and a group (``crew``: ``alice``, ``bob``, ``lead``)."""
        s = make_store(policy=WritePolicy(global_writers=("lead",)))
        for agent in ("alice", "bob", "lead"):
            s.operator.add_member("crew", agent)
        return s

    def test_health_puts_the_storage_first_and_fails_every_scope_of_another_model(
        self, make_store: StoreFactory
    ) -> None:
        store = make_store()
        store.operator.remember("The office opens at nine", "global")
        store.as_operator("crew").remember("The launch is on March 3", "group")
        own = ModelInfo(store.embedder.model_id, int(store.embedder.dimension))
        checks = store.backend.health(own)
        assert checks[0].name in ("backend", "store directory") and checks[0].status == "ok"
        assert [c for c in checks if c.status == "fail"] == []
        other = store.backend.health(ModelInfo("another/model", own.dimension))
        mismatches = [c for c in other if c.name == "model match" and c.status == "fail"]
        assert len(mismatches) == 2 and all("reembed" in c.fix for c in mismatches)
        assert not any(c.name == "model match" and c.status == "fail" for c in store.backend.health(None))

    def test_a_change_watcher_reports_every_scope_first_then_the_ones_written(self, make_store: StoreFactory) -> None:
        store = make_store()
        store.operator.remember("The office opens at nine", "global")
        watcher = store.backend.change_watcher()
        if watcher is None:  # the feed reads every scope each poll (or is woken by notifications)
            return
        crew = ScopeRef("group", "crew")
        assert watcher.changed() >= {ScopeRef("global")}
        store.as_operator("crew").remember("The launch is on March 3", "group")
        assert crew in watcher.changed()

    def test_changes_replays_the_whole_audit_trail_and_resumes_from_any_change(self, store: SharedMemoryStore) -> None:
        assert store.changes() == []
        _some_history(store)
        changes = store.changes()
        assert sorted((c.scope, c.seq, c.fact_id, c.event) for c in changes) == _audit_trail(store)
        assert {c.event for c in changes} >= {
            "created",
            "reinforced",
            "superseded",
            "forgotten",
            "purged",
            "reembedded",
        }
        for scope in (GLOBAL, CREW, ALICE):  # each scope's changes in commit (seq) order
            seqs = [c.seq for c in changes if c.scope == scope]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs
        assert all(c.actor for c in changes) and all(c.at > 0 for c in changes)
        # Resuming from any change's position (as an object or as its token) gives exactly the changes after it.
        for i, change in enumerate(changes):
            rest = [_key(c) for c in changes[i + 1 :]]
            assert sorted(_key(c) for c in store.changes(since=change.position)) == sorted(rest)
            assert sorted(_key(c) for c in store.changes(since=str(change.position))) == sorted(rest)
        assert store.changes(since=changes[-1].position) == []

    def test_changes_resume_after_a_restart_without_losses_or_repeats(self, make_store: StoreFactory) -> None:
        first = make_store()
        for i in range(5):
            first.as_operator(f"g{i % 2}").remember(f"fact number {i}", "group")
        token = str(first.changes()[-1].position)
        first.close()
        second = make_store(same_as=first)  # another process, another day: only the token survived
        assert second.changes(since=token) == []
        for i in range(5, 9):
            second.as_operator(f"g{i % 3}").remember(f"fact number {i}", "group")
        later = second.changes(since=token)
        assert [c.event for c in later] == ["created"] * 4
        assert {second.operator.get(c.fact_id).content for c in later} == {f"fact number {i}" for i in range(5, 9)}

    def test_changes_pages_through_with_limit(self, store: SharedMemoryStore) -> None:
        _some_history(store)
        everything = [_key(c) for c in store.changes()]
        paged: list[tuple[ScopeRef, int]] = []
        position: Position | None = None
        while batch := store.changes(since=position, limit=3):
            assert len(batch) <= 3
            paged.extend(_key(c) for c in batch)
            assert len(paged) <= len(everything), "changes repeat: does rows() honour after_seq?"  # never loop
            position = batch[-1].position
        assert sorted(paged) == sorted(everything) and len(paged) == len(set(paged))
        with pytest.raises(ValueError):
            store.changes(limit=0)

    def test_subscribe_delivers_every_later_change_exactly_once_in_order(self, store: SharedMemoryStore) -> None:
        before = store.operator.remember("written before subscribing", "global")
        seen: list[Change] = []
        stop = store.subscribe(seen.append)
        start = stop.position
        _some_history(store)
        expected = store.changes(since=start)
        assert _wait_for(lambda: len(seen) >= len(expected))
        _settle(store, seen, (GLOBAL, CREW, ALICE))  # nothing more, nothing twice
        expected = store.changes(since=start)
        assert sorted(_key(c) for c in seen) == sorted(_key(c) for c in expected)
        assert len({_key(c) for c in seen}) == len(seen)
        for scope in (GLOBAL, CREW, ALICE):
            seqs = [c.seq for c in seen if c.scope == scope]
            assert seqs == sorted(seqs)
        assert not [c for c in seen if c.fact_id == before.id and c.event == "created"]
        assert stop.position == seen[-1].position  # where it got to
        assert store.changes(since=stop.position) == []
        stop()
        assert not stop.running
        witness: list[Change] = []
        with store.subscribe(witness.append):  # a live subscription hears the write ...
            late = store.operator.remember("written after stopping", "global").id
            assert _wait_for(lambda: [c.fact_id for c in witness] == [late])
        # ... and the stopped one's thread has ended, so it can deliver nothing more: what it has is final.
        assert _wait_for(lambda: not stop._thread.is_alive())
        assert len(seen) == len(expected)

    def test_concurrent_writers_to_one_scope_make_a_gap_free_feed(self, store: SharedMemoryStore) -> None:
        seen: list[Change] = []
        sub = store.subscribe(seen.append, poll_interval=0.05)
        receipts: list[str] = []
        lock = threading.Lock()

        def writer(n: int) -> None:
            for i in range(15):
                r = store.as_operator("crew").remember(f"writer {n} fact {i}", "group")
                with lock:
                    receipts.append(r.id)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        trail = [row["seq"] for row in store.backend.rows(CREW, "audit")]
        assert len(receipts) == len(trail) == 60
        arrived = _wait_for(lambda: len(seen) >= 60)
        missing = sorted(set(trail) - {c.seq for c in seen})
        assert arrived and not missing, f"never delivered: seqs {missing}"
        receipts += _settle(store, seen, [CREW])
        sub()
        trail = [row["seq"] for row in store.backend.rows(CREW, "audit")]
        assert [c.seq for c in seen] == trail  # every audit row of the scope, once, in seq order
        assert sorted(c.fact_id for c in seen) == sorted(receipts)

    def test_now_is_after_every_earlier_change_of_every_scope(self, store: SharedMemoryStore) -> None:
        # Several changes per scope before "now": a "now" taken at any but each scope's newest change would
        # deliver the older ones.
        for i in range(4):
            store.operator.remember(f"older global fact {i}", "global")
            store.as_agent("alice", "crew").remember(f"older crew fact {i}", "group")
            store.as_agent("alice").remember(f"older alice fact {i}", "agent")
        seen: list[Change] = []
        with store.subscribe(seen.append, poll_interval=0.05) as sub:
            start = sub.position
            assert {scope: start.get(scope) for scope in (GLOBAL, CREW, ALICE)} == {
                scope: max(row["seq"] for row in store.backend.rows(scope, "audit")) for scope in (GLOBAL, CREW, ALICE)
            }
            newer = [
                store.operator.remember("newer global fact", "global").id,
                store.as_agent("alice", "crew").remember("newer crew fact", "group").id,
                store.as_agent("alice").remember("newer alice fact", "agent").id,
            ]
            assert _wait_for(lambda: len(seen) >= 3)
            newer += _settle(store, seen, (GLOBAL, CREW, ALICE))
        assert sorted(c.fact_id for c in seen) == sorted(newer)
        assert store.changes(since=start) == store.changes(since=str(start))
        assert sorted(c.fact_id for c in store.changes(since=start)) == sorted(newer)

    def test_a_subscription_delivers_a_scope_of_more_changes_than_one_read_holds(
        self, store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # 2,500 audit rows in one transaction, as a remember_many of 2,500 facts writes them (written through the
        # backend contract directly: the memory backend's duplicate check makes 2,500 real facts take a minute).
        now = time.time()
        events = [
            {"fact_id": new_fact_id("global"), "event": "created", "actor": "loader", "at": now, "detail": "{}"}
            for _ in range(2500)
        ]
        seqs = store.backend.transact(GLOBAL, lambda tx: tx.add_rows("audit", events))
        assert len(set(seqs)) == 2500
        seen: list[Change] = []
        reads = {"started": 0, "ended": 0}  # the feed's reads of the scope (each one to its end, in batches)
        catch_up = Subscription._catch_up

        def counted(sub: Subscription, scope: ScopeRef) -> None:
            reads["started"] += 1
            try:
                catch_up(sub, scope)
            finally:
                reads["ended"] += 1

        monkeypatch.setattr(Subscription, "_catch_up", counted)
        # No second look within the test (a look every minute): the first must read the scope to its end.
        with store.subscribe(seen.append, since=None, poll_interval=60):
            assert _wait_for(lambda: len(seen) >= 2500, 30), f"delivered {len(seen)} of 2500"
            # Every read begun has ended: a change it would deliver twice is in seen by now.
            assert _wait_for(lambda: reads["ended"] == reads["started"])
        assert [c.fact_id for c in seen] == [e["fact_id"] for e in events]
        assert [c.seq for c in seen] == sorted(seqs)
        assert len(store.changes()) == 2500

    def test_a_position_of_a_replaced_scope_reads_the_new_one_from_its_beginning(
        self, make_store: StoreFactory, caplog: pytest.LogCaptureFixture
    ) -> None:
        # A position belongs to the store it came from: used on another store it stands for a scope whose storage
        # was replaced (a file deleted and made again, a database restored from an older copy).
        old = make_store()
        old_ids = [old.operator.remember(f"old fact {i}", "global").id for i in range(6)]
        past_the_end = old.changes()[-1].position  # beyond every seq the new scope has
        inside = old.changes()[1].position  # a seq the new scope has, holding another change
        new = make_store()
        new_ids = [new.operator.remember(f"new fact {i}", "global").id for i in range(4)]
        assert max(row["seq"] for row in new.backend.rows(GLOBAL, "audit")) < past_the_end.get(GLOBAL)
        assert new.backend.rows(GLOBAL, "audit", {"seq": inside.get(GLOBAL)})  # that seq is there, another change
        for since in (past_the_end, inside, str(past_the_end), str(inside)):
            caplog.clear()
            read = new.changes(since=since)
            assert [c.fact_id for c in read] == new_ids, since
            assert "from its beginning" in caplog.text
            assert new.changes(since=read[-1].position) == []  # the positions it hands out are the new scope's
        # A token without marks (as earlier releases wrote them) past the end of the scope: read from the start.
        unmarked = Position({GLOBAL: past_the_end.get(GLOBAL)})
        assert not unmarked.marks and Position.parse(str(unmarked)) == unmarked
        assert [c.fact_id for c in new.changes(since=unmarked)] == new_ids
        # A subscription from such a position delivers the new scope's changes, then follows it.
        seen: list[Change] = []
        with new.subscribe(seen.append, since=str(past_the_end), poll_interval=0.05) as sub:
            assert _wait_for(lambda: len(seen) >= 4)
            later = new.operator.remember("a later fact", "global").id
            assert _wait_for(lambda: len(seen) >= 5)
            (sentinel,) = _settle(new, seen, [GLOBAL])
            assert [c.fact_id for c in seen] == [*new_ids, later, sentinel]
            assert new.changes(since=sub.position) == []
        assert not set(old_ids) & {c.fact_id for c in seen}
        # The old store's own positions still resume where they were (no false alarm).
        assert old.changes(since=inside) == old.changes()[2:]

    @pytest.mark.parametrize(
        ("table", "change", "drop"), BAD_ROWS, ids=[f"{t}-{str(c or d)[:48]}" for t, c, d in BAD_ROWS]
    )
    def test_a_row_with_a_bad_column_is_refused_and_changes_nothing(
        self, make_store: StoreFactory, tmp_path: Path, table: str, change: dict[str, Any], drop: tuple[str, ...]
    ) -> None:
        # Each of these once got past the check: a scope nothing could read back, a row silently dropped, or
        # a raw database error after the scopes before it were imported.
        _, lines = _populated(make_store, tmp_path)
        target: SharedMemoryStore = make_store()
        target.operator.add_member("crew", "alice")
        target.as_agent("alice", "crew").remember("already here", "group")
        before = _rows_of(target)
        with pytest.raises(ImportFormatError, match=rf"line \d+: {table} row: "):
            target.import_(io.StringIO(_with_row(lines, table, change, drop)))
        assert _rows_of(target) == before

    def test_an_old_export_never_brings_back_a_fact_the_store_purged(
        self, make_store: StoreFactory, tmp_path: Path
    ) -> None:
        store: SharedMemoryStore = make_store()
        secret = store.operator.remember("The admin password is hunter2", "global")
        kept = store.operator.remember("The office opens at nine", "global")
        backup = tmp_path / "backup.jsonl"
        store.export(backup)
        store.operator.forget(secret.id, "a secret")
        assert store.import_(backup).closed == 0  # still forgotten: a closed fact is never reopened
        assert store.operator.purge(0) == 1
        report = store.import_(backup)
        assert report.purged == 1 and report.inserted == 0
        with pytest.raises(FactNotFoundError):
            store.operator.get(secret.id)
        assert secret.id not in {h.id for h in store.operator.search("admin password", "global")}
        assert store.operator.get(kept.id).status == "active"
        assert [e.event for e in store.operator.history(secret.id)] == ["created", "forgotten", "purged"]
        other: SharedMemoryStore = make_store()  # a store that never purged it takes it, forgotten
        assert other.import_(backup).purged == 0 and other.operator.get(secret.id).status == "active"

    def test_a_snapshot_reads_the_scope_as_it_was_when_it_was_taken(self, make_store: StoreFactory) -> None:
        store: SharedMemoryStore = make_store()
        first = store.operator.remember("The office opens at nine", "global")
        global_ = first.scope
        with store.backend.snapshot(global_) as rows:
            assert [r["id"] for r in rows("facts")] == [first.id]
            later = store.operator.remember("The office closes at six", "global")  # this thread writes meanwhile
            store.operator.forget(first.id, "moved")
            assert [r["status"] for r in rows("facts")] == ["active"]
            assert [r["event"] for r in rows("audit")] == ["created"]
            assert [r["id"] for r in rows("facts", after_seq=0, limit=10)] == [first.id]
        assert (store.operator.get(first.id).status, store.operator.get(later.id).status) == ("forgotten", "active")
        with store.backend.snapshot(ScopeRef("group", "nobody")) as rows:
            assert rows("facts") == [] and rows("meta") == []

    def test_an_export_taken_between_writes_is_one_moment_of_each_scope(self, make_store: StoreFactory) -> None:
        store: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=("*",)))
        ids = [
            r.id
            for r in store.operator.remember_many([f"fact number {i} of the export" for i in range(1100)], "global")
        ]
        lines = export_lines(store.engine)
        taken = [next(lines) for _ in range(503)]  # the header, meta, 500 facts of the first batch of 1000
        for fid in ids[:20]:
            store.operator.forget(fid, "gone")
        store.operator.remember_many([f"written during the export {i}" for i in range(20)], "global")
        taken += list(lines)
        assert _export_is_consistent(taken) == (0, 0)
        assert sum(1 for line in taken if '"table": "facts"' in line) == 1100

    def test_filters(self, store: SharedMemoryStore) -> None:
        store.as_agent("alice", "crew").remember(
            "deploy checklist step one", "group", tags=["ops"], category="process", confidence=0.4
        )
        store.as_agent("bob", "crew").remember(
            "deploy checklist step two", "group", tags=["ops", "urgent"], category="process", confidence=0.9
        )
        store.as_agent("bob", "crew").remember("deploy budget note", "group", category="finance")
        alice = store.as_agent("alice", "crew")
        q: dict[str, Any] = {"scope": "group", "top_k": 10}
        assert len(alice.search("deploy", **q)) == 3
        assert {h.content for h in alice.search("deploy", tags=["urgent"], **q)} == {"deploy checklist step two"}
        assert {h.fact.created_by for h in alice.search("deploy", created_by="bob", **q)} == {"bob"}
        assert len(alice.search("deploy", category="process", **q)) == 2
        assert [h.content for h in alice.search("deploy", min_confidence=0.5, category="process", **q)] == [
            "deploy checklist step two"
        ]
        assert alice.search("deploy", since=time.time() + 60, **q) == []
        assert len(alice.search("deploy", until=time.time() + 60, **q)) == 3
        two = alice.search("deploy", tags=["urgent"], **q)[0].fact
        assert [h.id for h in alice.search("deploy", tags=["ops", "urgent"], **q)] == [two.id]  # every tag
        assert two.id in {h.id for h in alice.search("deploy", since=two.created_at, **q)}  # since: inclusive
        assert two.id not in {h.id for h in alice.search("deploy", until=two.created_at, **q)}  # until: exclusive

    def test_ttl_expiry_and_purge(self, store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
        short = store.operator.remember("standup moved to 10:30 today", "global", ttl_days=1)
        keep = store.operator.remember("standup is daily", "global")
        gone = store.operator.remember("old decision", "global")
        store.operator.forget(gone.id)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 2 * 86400)
        assert store.operator.get(short.id).status == "expired"
        assert [h.id for h in store.operator.search("standup", "global")] == [keep.id]
        assert {h.id for h in store.operator.search("standup", "global", include_inactive=True)} == {short.id, keep.id}
        counts = store.stats()[0].counts
        assert counts == {"active": 1, "forgotten": 1, "superseded": 0, "expired": 1}
        assert store.operator.purge(older_than=1) == 2
        with pytest.raises(FactNotFoundError):
            store.operator.get(short.id)
        assert store.operator.get(keep.id).status == "active"
        assert [e.event for e in store.operator.history(keep.id)] == ["created"]
        # the audit trail of a purged fact survives
        assert (
            store.backend.history(short.scope if hasattr(short, "scope") else keep.scope, gone.id)[-1].event == "purged"
        )

    def test_history_of_a_purged_fact_is_its_trail_for_whoever_could_read_it(self, store: SharedMemoryStore) -> None:
        store.operator.add_member("crew", "alice")
        store.operator.set_private("alice")
        facts = {
            "global": store.operator.remember("an old global rule", "global"),
            "group": store.as_agent("alice", "crew").remember("an old crew rule", "group"),
            "agent": store.as_agent("alice").remember("an old private note", "agent"),
        }
        for fact in facts.values():
            store.operator.forget(fact.id)
        assert store.operator.purge(older_than=0) == 3
        for kind, fact in facts.items():
            for caller in (store.operator, store.as_agent("alice", "crew")):  # trusted code, and the owner
                trail = caller.history(fact.id)
                assert [e.event for e in trail] == ["created", "forgotten", "purged"], (kind, caller)
            with pytest.raises(FactNotFoundError):
                store.operator.get(fact.id)
        # one who could not read the fact learns nothing more now that it is gone (no oracle for private ids)
        store.operator.add_member("other", "mallory")
        for fact in (facts["group"], facts["agent"]):
            with pytest.raises(FactNotFoundError):
                store.as_agent("mallory", "crew").history(fact.id)
        with pytest.raises(FactNotFoundError):
            store.as_operator("crew").history("g_0193a1b2c3d4e5f60718")  # never existed

    def test_other_embedding_model_is_refused_then_reembed(self, make_store: StoreFactory) -> None:
        first = make_store(embedder=HashEmbedder(64, "model-a"))
        r = first.operator.remember("the deploy key rotates monthly", "global")
        second = make_store(
            same_as=first, embedder=HashEmbedder(32, "model-b"), policy=WritePolicy(operator_id="migrator")
        )
        with pytest.raises(EmbeddingModelMismatchError, match="reembed"):
            second.operator.search("deploy key", "global")
        with pytest.raises(EmbeddingModelMismatchError):
            second.operator.remember("another", "global")
        assert second.operator.reembed() == 1
        assert second.operator.search("deploy key", "global")[0].id == r.id
        assert second.stats()[0].embedding_model == "model-b"
        assert second.operator.remember("another", "global").status == "created"
        assert [(e.event, e.actor) for e in second.operator.history(r.id)] == [
            ("created", "system"),
            ("reembedded", "migrator"),
        ]

    def test_a_store_that_searched_a_scope_another_store_reembedded_is_refused(self, make_store: StoreFactory) -> None:
        """A store's search and write of a scope that another store (another process) re-embedded since its last
        search are refused, though the two models' vectors have the same size."""
        first = make_store(embedder=HashEmbedder(64, "model-a"))
        first.operator.remember("the deploy key rotates monthly", "global")
        assert first.operator.search("deploy key", "global")
        second = make_store(same_as=first, embedder=HashEmbedder(64, "model-b"))
        assert second.operator.reembed() == 1
        for _ in range(2):
            with pytest.raises(EmbeddingModelMismatchError, match="model-b"):
                first.operator.search("deploy key", "global")
        with pytest.raises(EmbeddingModelMismatchError, match="model-b"):
            first.operator.remember("another fact", "global")
        assert second.operator.search("deploy key", "global")

    def test_a_reembed_stopped_part_way_changes_nothing_and_runs_again(self, make_store: StoreFactory) -> None:
        """Its vectors and the model switch are one write: stopped after some batches (here, an error between
        them), the scope still holds the old model's vectors only, both old and new stores get clear answers, and
        the next reembed finishes (it used to leave two models' vectors of two sizes: nothing could search, write
        or re-embed the scope)."""
        old = make_store(embedder=HashEmbedder(64, "model-a"))
        facts = [
            r.id for r in old.operator.remember_many([f"fact number {i} about llamas" for i in range(40)], "global")
        ]
        new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))

        def stop(done: int) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            reembed_scope(new.backend, GLOBAL, new.embedder.embed, new.model, batch_size=8, progress=stop)
        assert old.operator.search("fact number 7 llamas", "global")[0].id == facts[7]
        assert old.operator.remember("still written with model a", "global").status == "created"
        with pytest.raises(EmbeddingModelMismatchError):
            new.operator.search("llamas", "global")
        assert new.operator.reembed() == 41
        assert new.operator.search("fact number 7 llamas", "global")[0].id == facts[7]
        assert new.stats()[0].embedding_model == "model-b"

    def test_a_fact_written_with_the_old_model_during_a_reembed_gets_the_new_models_vector(
        self,
        make_store: StoreFactory,
    ) -> None:
        """A write that lands between the re-embed's batches (with the old model, which the scope still names) is
        re-embedded before the switch; it used to keep the old model's vector under the new model's name."""
        old = make_store(embedder=HashEmbedder(32, "model-a"))
        old.operator.remember_many([f"fact number {i} about llamas" for i in range(20)], "global")
        new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
        late: list[str] = []
        switch = new.backend.replace_vectors

        def write_meanwhile(*args: Any) -> int | None:  # after the last batch was listed, before the switch
            if not late:
                late.append(old.operator.remember("The deploy key rotates every Friday at noon", "global").id)
            return switch(*args)

        new.backend.replace_vectors = write_meanwhile  # type: ignore[method-assign, assignment]
        assert reembed_scope(new.backend, GLOBAL, new.embedder.embed, new.model, batch_size=8) == 21
        stored = np.frombuffer(new.backend.rows(GLOBAL, "facts", {"id": late[0]})[0]["embedding"], np.float32)
        assert np.allclose(stored, new.embedder.embed(["The deploy key rotates every Friday at noon"])[0])
        assert [e.event for e in new.operator.history(late[0])] == ["created", "reembedded"]

    def test_a_fact_written_in_a_purged_facts_place_during_a_reembed_is_reembedded(
        self, make_store: StoreFactory
    ) -> None:
        """SQLite gives a new row the highest rowid + 1: after the newest facts are purged, a fact written during
        the re-embed got a listed fact's seq, was not seen as late, kept the old model's vector (another size:
        every search and write of the scope failed afterwards)."""
        old = make_store(embedder=HashEmbedder(64, "model-a"))
        facts = [
            r.id for r in old.operator.remember_many([f"fact number {i} about llamas" for i in range(6)], "global")
        ]
        new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
        late: list[str] = []
        switch = new.backend.replace_vectors

        def purge_then_write(*args: Any) -> int | None:  # after the facts were listed and embedded
            if not late:
                for fact_id in facts[-2:]:
                    old.operator.forget(fact_id, "obsolete")
                old.operator.purge(older_than=0)
                late.append(old.operator.remember("The deploy key rotates every Friday at noon", "global").id)
            return switch(*args)

        new.backend.replace_vectors = purge_then_write  # type: ignore[method-assign, assignment]
        assert reembed_scope(new.backend, GLOBAL, new.embedder.embed, new.model, batch_size=4) == 5
        assert [e.event for e in new.operator.history(late[0])] == ["created", "reembedded"]
        assert new.operator.search("deploy key rotates", "global")[0].id == late[0]
        assert new.operator.remember("The deploy key rotates every Friday at noon", "global").status == "reinforced"

    def test_a_fact_purged_during_a_reembed_gets_no_reembedded_event(self, make_store: StoreFactory) -> None:
        old = make_store(embedder=HashEmbedder(32, "model-a"))
        facts = [
            r.id for r in old.operator.remember_many([f"fact number {i} about llamas" for i in range(10)], "global")
        ]
        new = make_store(same_as=old, embedder=HashEmbedder(32, "model-b"))
        switch = new.backend.replace_vectors

        def purge_meanwhile(*args: Any) -> int | None:  # after the facts were listed and embedded
            old.operator.forget(facts[3], "obsolete")
            old.operator.purge(older_than=0)
            return switch(*args)

        new.backend.replace_vectors = purge_meanwhile  # type: ignore[method-assign, assignment]
        assert reembed_scope(new.backend, GLOBAL, new.embedder.embed, new.model) == 9
        assert [e.event for e in new.operator.history(facts[3])] == ["created", "forgotten", "purged"]
        assert [e.event for e in new.operator.history(facts[4])] == ["created", "reembedded"]

    def test_metadata_comes_back_as_it_was_written(self, store: SharedMemoryStore) -> None:
        """Numbers keep their type and sign, keys their order, on every backend (PostgreSQL kept a parsed form
        before schema 6: 1e20 came back as an int, -0.0 as 0.0, keys reordered); so does a restatement's."""

        metadata = {
            "zeta": 1e20,
            "alpha": -0.0,
            "mid": 2**63 - 1,
            "tiny": 5e-324,
            "nested": {"b": 1.0, "a": [0.1, -0.0]},
        }
        fact = store.operator.remember("the rocket weighs a lot", "global", metadata=metadata)
        back = store.operator.get(fact.id).metadata
        assert list(back) == list(metadata) and list(back["nested"]) == ["b", "a"]
        assert isinstance(back["zeta"], float) and back["zeta"] == 1e20 and isinstance(back["nested"]["b"], float)
        assert math.copysign(1.0, back["alpha"]) == -1.0 and math.copysign(1.0, back["nested"]["a"][1]) == -1.0
        assert back == metadata
        store.as_agent("lead").remember("The rocket weighs a lot.", "global", metadata={"y": -0.0, "x": 1e20})
        detail = store.operator.history(fact.id)[-1].detail["metadata"]
        assert list(detail) == ["y", "x"] and isinstance(detail["x"], float) and math.copysign(1.0, detail["y"]) == -1.0

    @pytest.mark.parametrize("workers", [6])
    def test_concurrent_corrections_have_exactly_one_winner(self, make_store: StoreFactory, workers: int) -> None:
        s = make_store()
        old = s.operator.remember("The on-call engineer is Dana", "global")
        results: list[str] = []
        barrier = threading.Barrier(workers)

        def correct(i: int) -> None:
            barrier.wait()
            try:
                s.operator.remember(f"The on-call engineer is engineer {i}", "global", supersedes=[old.id])
                results.append("won")
            except ValueError as exc:
                assert "already superseded" in str(exc)
                results.append("lost")

        threads = [threading.Thread(target=correct, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["lost"] * (workers - 1) + ["won"]
        counts = s.stats()[0].counts
        assert (counts["active"], counts["superseded"]) == (1, 1)

    def test_search_as_of_recalls_what_was_believed_then(self, make_store: StoreFactory) -> None:
        s = make_store()
        first = s.operator.remember("The launch date is March 3", "global")
        t1 = time.time()
        time.sleep(0.01)
        second = s.operator.remember("The launch date is March 10", "global", supersedes=[first.id])
        t2 = time.time()
        time.sleep(0.01)
        s.operator.forget(second.id, "launch cancelled")
        expiring = s.operator.remember("The launch room is booked", "global", ttl_days=1)

        def believed(at: float) -> set[str]:
            return {h.id for h in s.operator.search("launch date room", "global", as_of=at, top_k=10)}

        assert believed(t1) == {first.id}
        assert believed(t2) == {second.id}
        assert believed(time.time()) == {expiring.id}
        assert believed(time.time() + 2 * 86400) == set()  # expired by then
        assert believed(0.0) == set()  # before anything was written
        assert s.operator.get(first.id).valid_to == s.operator.get(second.id).created_at

    def test_a_write_is_stamped_when_it_commits_not_before_its_embedding(self, make_store: StoreFactory) -> None:
        """A correction's time was taken before the embedding: ``search(as_of=t)`` at a ``t`` while it was being
        embedded (readers saw the old fact) named the correction, and its TTL ran from that earlier time."""
        s = make_store()
        old = s.operator.remember("The VPN gateway is vpn1", "global")
        embed, moments = s.embedder.embed, []

        def slow(texts: Any) -> Any:  # the batch is embedded while readers still see the old fact
            time.sleep(0.02)
            moments.append(time.time())
            time.sleep(0.02)
            return embed(texts)

        s.embedder.embed = slow  # type: ignore[method-assign]
        new = s.operator.remember("The VPN gateway is vpn2", "global", supersedes=[old.id], ttl_days=1)
        moment = moments[0]
        assert [h.id for h in s.operator.search("VPN gateway", "global", as_of=moment)] == [old.id]
        stored = s.operator.get(new.id)
        assert stored.created_at > moment and s.operator.get(old.id).valid_to == stored.created_at
        assert stored.expires_at == pytest.approx(stored.created_at + 86400, abs=1e-3)

    def test_an_exact_duplicate_is_found_by_its_hash_alone(self, make_store: StoreFactory) -> None:
        # Cosine merges off: only the content-hash lookup can find the restatements, whether the fact is stored
        # (a batch asks for its hashes in one query) or written earlier in the same batch.
        store = make_store(dedup=DedupSettings(near_duplicate=1.01, similar=1.01))
        first = store.as_operator("crew").remember("Deploys happen on Fridays.", "group")
        receipts = store.as_operator("crew").remember_many(
            ["deploys happen on fridays", "Reviews need two approvals.", "reviews need two approvals!"], "group"
        )
        assert [r.status for r in receipts] == ["reinforced", "created", "reinforced"]
        assert receipts[0].duplicate_of == first.id and receipts[2].duplicate_of == receipts[1].id
        assert store.operator.get(first.id).reinforcement == 2
        assert [e.event for e in store.backend.history(first.scope, receipts[1].id)] == ["created", "reinforced"]

    def test_the_default_recalls_the_answer_next_to_the_matching_turn_of_a_named_session(
        self, make_store: StoreFactory
    ) -> None:
        store = make_store()
        receipts = store.operator.remember_many(TURNS, "global", session_id="chat-1")
        store.operator.remember("Other session: sport talk elsewhere", "global", session_id="chat-2")
        answer, question = receipts[1].id, receipts[0].id
        # the answer shares no word with the question: only its neighbour can bring it in
        assert answer not in _ids(store.operator.search(QUERY, "global", top_k=3, context_weights=(0.0, 0.0)))
        hits = {h.id: h for h in store.operator.search(QUERY, "global", top_k=3)}
        assert answer in hits and hits[answer].context_of == question
        assert hits[question].context_of is None

    def test_facts_written_without_a_session_lend_their_neighbours_nothing(self, make_store: StoreFactory) -> None:
        store = make_store()
        receipts = store.operator.remember_many(TURNS, "global")  # no session named: the store's run
        assert (store.operator.get(receipts[0].id).session_id or "").startswith(RUN_SESSION_PREFIX)
        store.operator.remember("Other note: sport talk elsewhere", "global")
        hits = store.operator.search(QUERY, "global", top_k=3)
        assert receipts[0].id in _ids(hits) and receipts[1].id not in _ids(hits)
        assert all(h.context_of is None for h in hits)

    def test_reads_across_scopes_answer_what_each_scope_answers(self, make_store: StoreFactory) -> None:
        """``get_across`` and ``neighbours_across`` (a search of several scopes reads so) give each scope what
        ``get`` and ``neighbours`` give it: an id of another scope, or of none, is not found."""
        store = make_store()
        group = store.as_operator("crew").remember_many(TURNS, "group", session_id="chat-1")
        world = store.operator.remember_many(TURNS[:3], "global", session_id="chat-1")
        backend = store.backend
        missing = "g_00000000000000000001"
        wanted = {
            CREW: [group[2].id, world[1].id, missing, group[0].id],  # an id of the other scope: not crew's
            GLOBAL: [world[1].id, group[1].id, world[0].id],
        }
        got = backend.get_across(wanted)
        assert set(got) == set(wanted)
        for scope, ids in wanted.items():
            assert [f.id for f in got[scope]] == [f.id for f in backend.get(scope, ids)]
        assert [f.id for f in got[CREW]] == [group[2].id, group[0].id]
        assert [f.id for f in got[GLOBAL]] == [world[1].id, world[0].id]
        near = backend.neighbours_across(wanted)
        assert near == {scope: backend.neighbours(scope, ids) for scope, ids in wanted.items()}
        assert near[CREW][group[2].id] == (group[1].id, group[3].id)
        assert near[GLOBAL][world[1].id] == (world[0].id, world[2].id)
        assert group[1].id not in near[GLOBAL] and world[1].id not in near[CREW]
        assert backend.get_across({}) == {} and backend.neighbours_across({CREW: []}) == {CREW: {}}

    def test_all_scopes_merge_lexical_matches_by_score_not_by_rank(self, make_store: StoreFactory) -> None:
        """A small scope's best keyword match (one weak term) must not outrank a big scope's strong match."""
        store = make_store(recall=RecallSettings(semantic_weight=0.0))  # the lexical leg alone decides
        store.operator.add_member("crew", "alice")
        store.as_agent("alice").remember_many(
            ["Lisbon is sunny in May", *(f"alice note {i} on tea" for i in range(5))], "agent"
        )
        filler = [f"sprint {i} retro notes for squad {i % 7}" for i in range(50)]
        store.as_operator("crew").remember_many(
            [*filler, "the Lisbon office deploys the billing service on Fridays"], "group"
        )
        hits = store.as_agent("alice", "crew").search("when does the Lisbon office deploy billing", top_k=2)
        assert [h.content for h in hits] == [
            "the Lisbon office deploys the billing service on Fridays",
            "Lisbon is sunny in May",
        ]
        assert [h.lexical_rank for h in hits] == [1, 2]

    def test_a_small_scopes_full_match_outranks_a_big_scopes_one_word_match(self, make_store: StoreFactory) -> None:
        """Raw BM25 grows with a scope's size (IDF): scores are normalised by the query's IDF mass per scope."""
        store = make_store(recall=RecallSettings(semantic_weight=0.0))
        store.operator.add_member("crew", "alice")
        mine = ["alice drinks oolong tea at noon", *(f"alice note {i} about weather" for i in range(5))]
        store.as_agent("alice").remember_many(mine, "agent")
        theirs = [f"sprint {i} retro notes for squad {i % 7}" for i in range(300)]
        store.as_operator("crew").remember_many([*theirs, "the oolong shipment arrived late"], "group")
        hits = store.as_agent("alice", "crew").search("oolong tea at noon", top_k=2)
        assert [h.content for h in hits] == ["alice drinks oolong tea at noon", "the oolong shipment arrived late"]

    @pytest.mark.parametrize(
        ("query", "found"),
        [
            ("the", {"the build is red", "the ＡＰＩ is down"}),
            (
                "it is",
                {
                    "it is done",
                    "the build is red",
                    "Café déjà vu: it is naïve",
                    "staging is green; deploy later",
                    "It's John's turn",
                    "the ＡＰＩ is down",
                },
            ),
            ("cafe", {"Café déjà vu: it is naïve"}),
            ("DEJA", {"Café déjà vu: it is naïve"}),
            ("naive", {"Café déjà vu: it is naïve"}),
            ("10.0.0.1", {"ping 10.0.0.1 failed"}),
            ("don't", {"don't deploy on Friday"}),
            ("deploying", {"don't deploy on Friday", "staging is green; deploy later"}),
            ("staging_deploy", set()),  # a phrase of two words that are not side by side anywhere
            ("deploy_on", {"don't deploy on Friday"}),
            ("!!!", set()),
            ("it's", {"it is done", "Café déjà vu: it is naïve", "It's John's turn"}),  # "s" is a word
            ("s", {"It's John's turn"}),
            ("possible", {"possibly broken"}),  # FTS5's stemmer, not another Porter
            ("analog", {"an analogy"}),
            ("API", set()),  # FTS5 keeps full-width letters as they are (the query is folded: no match either way)
        ],
    )
    def test_record_full_text_matches_alike_on_every_backend(
        self, store: SharedMemoryStore, query: str, found: set[str]
    ) -> None:
        """FTS5's words on every backend (PostgreSQL's english search kept diacritics, dropped its stop words and
        cut ``10.0.0.1`` its own way, so these found nothing there)."""
        texts = ["the build is red", "it is done", "Café déjà vu: it is naïve", "ping 10.0.0.1 failed"]
        texts += ["don't deploy on Friday", "staging is green; deploy later", "It's John's turn", "possibly broken"]
        texts += ["an analogy", "the ＡＰＩ is down"]

        lead = store.for_agent("lead")
        for text in texts:
            lead.log_conversation("assistant", text)
        assert {r.content for r in store.operator.conversation("lead", query=query)} == found
        store.operator.add_member("crew", "lead")
        store.as_agent("lead", "crew").case_log().append(texts)
        terms = query_terms(query)
        matched = store.backend.rows(ScopeRef("group", "crew"), "case_log", query_terms=terms) if terms else []
        assert {r["summary"] for r in matched} == found

    def test_a_full_text_match_is_for_record_tables_with_an_index(self, store: SharedMemoryStore) -> None:
        """Facts are matched by the search's lexical leg (each process's postings), not by ``rows``: every backend
        refuses ``query_terms`` on a table without a full-text index, alike, and before reading anything."""
        store.as_agent("alice", "crew").remember("the staging deploy failed", "group")
        store.for_agent("alice").log_conversation("assistant", "The staging deploy failed at 3pm")
        crew, alice = ScopeRef("group", "crew"), ScopeRef("agent", "alice")
        for scope, table in [(crew, "facts"), (crew, "audit"), (crew, "meta"), (alice, "tool_calls")]:
            with pytest.raises(ValueError, match=f"{table} has no full-text index"):
                store.backend.rows(scope, table, query_terms=["deploy"])
        assert [r["content"] for r in store.backend.rows(alice, "conversations", query_terms=["deploy"])] == [
            "The staging deploy failed at 3pm"
        ]

    def test_record_json_comes_back_as_it_was_written(self, store: SharedMemoryStore) -> None:
        """A profile value, a task's context and a tool call's arguments keep their numbers' type and sign and their
        keys' order on every backend (PostgreSQL kept ``jsonb``'s parsed form before schema 7: 1e20 came back as
        an int, -0.0 as 0.0, keys sorted by length); a ``where`` on such a column compares its text."""

        value = {"zeta": 1e20, "alpha": -0.0, "nested": {"bb": 1.0, "a": [0.1, -0.0]}}
        lead = store.for_agent("lead")
        lead.update_user_profile("limits", value)
        back = lead.get_user_profile("limits")
        assert isinstance(back, ProfileEntry) and back.value == value
        assert list(back.value) == list(value) and list(back.value["nested"]) == ["bb", "a"]
        assert isinstance(back.value["zeta"], float) and math.copysign(1.0, back.value["alpha"]) == -1.0
        task = lead.create_task("check the limits", context=value)
        context = lead.get_task(task.id).context
        assert list(context) == list(value) and isinstance(context["zeta"], float)
        written = store.backend.rows(ScopeRef("global", ""), "user_profile", where={"key": "limits"})[0]["value"]
        assert [
            r["key"] for r in store.backend.rows(ScopeRef("global", ""), "user_profile", where={"value": written})
        ] == ["limits"]

    def test_export_import_round_trip_is_lossless(
        self, store: SharedMemoryStore, make_store: StoreFactory, tmp_path: Path
    ) -> None:
        ids = _populate(store)
        path = tmp_path / "export.jsonl"
        rows = store.export(path)
        assert rows > 10
        target = make_store()
        report = target.import_(path, policy=True)  # the memberships and privacy too
        assert report.inserted == rows and not report.skipped_bad
        for fid in ids.values():
            a, b = store.operator.get(fid), target.operator.get(fid)
            assert a == b
        assert [e.event for e in target.operator.history(ids["old"])] == [
            e.event for e in store.operator.history(ids["old"])
        ]
        assert target.as_operator("crew").search("deploy thursday", "group")[0].id == ids["keep"]

        def vectors(s: SharedMemoryStore) -> dict[str, bytes]:
            return {
                row["id"]: row["embedding"] for t, row in s.backend.export_scope(ScopeRef("global")) if t == "facts"
            }

        assert vectors(store) == vectors(target) and len(vectors(store)) == 2
        t_alice = target.for_agent("alice", "crew")
        assert [r.content for r in target.operator.conversation("alice")] == ["hello from alice"]
        assert t_alice.get_my_tool_history()[0].duration_ms == 1.5
        assert [e.summary for e in t_alice.case_log.entries()] == ["case opened"]
        assert t_alice.get_user_profile("lang").value == "en"  # type: ignore[union-attr]
        assert t_alice.get_agent_capabilities("alice") == ["ops"]
        assert t_alice.list_tasks()[0].title == "write docs"
        assert target.state.retrieve_agent_state("alice", "u1", "k") == {"v": 1}
        assert target.engine.access.is_private("alice") and target.operator.members("crew") == store.operator.members(
            "crew"
        )
        assert target.import_(path).inserted == 0  # repeatable: nothing duplicated
        assert len(target.operator.conversation("alice")) == 1

    def test_records_with_text_no_backend_stores_alike_are_kept_with_escapes(
        self, make_store: Any, tmp_path: Path
    ) -> None:
        """A NUL, a lone surrogate or NaN in a tool call's arguments or a message's context (a model's broken
        JSON) is kept, shown as an escape, on every backend: PostgreSQL's jsonb refused them, and with them the
        whole batch. An export written before (its JSON still carrying them) imports the same way."""
        from autogen_shared_memory.core.records import ConversationRecord, ToolCallRecord

        s = make_store()
        s.engine.log_records(
            [
                ConversationRecord(agent_id="alice", content="hello there", context={"note": "x\ud83d", "k\x00": 1}),
                ToolCallRecord(
                    agent_id="alice", tool_name="memory_search", tool_args={"query": "a\x00b", "n": float("nan")}
                ),
            ]
        )
        (call,) = s.operator.tool_history("alice")
        assert call.tool_args == {"query": "a\\x00b", "n": "nan"}
        (said,) = s.operator.conversation("alice")
        assert said.context == {"note": "x\\ud83d", "k\\x00": 1}
        path = tmp_path / "old.jsonl"
        s.export(path)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for item in lines:  # as an older release (or SQLite) wrote it: the JSON escapes themselves
            if item.get("table") == "tool_calls":
                item["row"]["tool_args"] = '{"query": "a\\u0000b", "lone": "\\ud83d"}'
        path.write_text("".join(json.dumps(item) + "\n" for item in lines))
        target = make_store()
        target.import_(path)
        (imported,) = target.operator.tool_history("alice")
        assert imported.tool_args == {"query": "a\\x00b", "lone": "\\ud83d"}
        with pytest.raises(ValueError, match="NUL"):  # a value set on purpose is refused, as a fact would be
            s.for_agent("alice").update_user_profile("k", {"v": "a\x00b"})
        assert s.for_agent("alice").get_user_profile() == {}

    def test_record_filters_with_bytes_records_escape_find_them_on_every_backend(
        self, store: SharedMemoryStore
    ) -> None:
        """A NUL in a filter: SQLite answered [], PostgreSQL raised a raw DataError. Filters are now read as the
        records store such text (escaped), so the record logged with it is found."""
        store.as_agent("alice").log_tool_call("bad\x00tool", {"x": 1}, "ok", session_id="s\x00")
        store.as_agent("alice").log_message("hello", session_id="s\x00")
        assert [r.tool_name for r in store.operator.tool_history("alice", tool_name="bad\x00tool")] == ["bad\\x00tool"]
        assert [r.content for r in store.operator.conversation("alice", session_id="s\x00")] == ["hello"]
        assert store.operator.conversation("alice", session_id="\ud800") == []
        with pytest.raises(TypeError, match="session_id must be a str"):
            store.operator.conversation("alice", session_id=5)  # type: ignore[arg-type]

    def test_every_64_bit_integer_is_metadata(self, make_store: StoreFactory) -> None:
        s = make_store()
        fact = s.as_agent("a").remember("limits", "agent", metadata={"low": -(2**63), "high": 2**63 - 1})
        assert s.operator.get(fact.id).metadata == {"low": -(2**63), "high": 2**63 - 1}

    def test_ids_of_128_characters_are_accepted_and_of_129_refused_at_every_entry(
        self, make_store: StoreFactory
    ) -> None:
        s = make_store(policy=WritePolicy(global_writers=("lead",)))
        s.operator.add_member("crew", "alice")
        entries: dict[str, Callable[[str], object]] = {
            "remember agent_id": lambda v: s.as_agent(v).remember("x", "agent"),
            "remember group_id": lambda v: s.as_operator(v).remember("x", "group"),
            "remember_many agent_id": lambda v: s.as_agent(v).remember_many(["y"], "agent"),
            "add_group_member group_id": lambda v: s.operator.add_member(v, "alice"),
            "add_group_member agent_id": lambda v: s.operator.add_member("crew", v),
            "search agent_id": lambda v: s.as_agent(v).search("x", "agent"),
            "search group_id": lambda v: s.as_operator(v).search("x", "group"),
            "search other_agent": lambda v: s.operator.search("x", "agent", other_agent=v),
            "forget_all agent_id": lambda v: s.as_agent(v).forget_all("agent"),
            "set_agent_private": lambda v: s.operator.set_private(v, False),
            "log_message": lambda v: s.as_agent(v).log_message("hello"),
            "log_tool_call": lambda v: s.as_agent(v).log_tool_call("lookup"),
            "conversation": lambda v: s.operator.conversation(v),
            "tool_history": lambda v: s.operator.tool_history(v),
            "for_agent agent_id": lambda v: s.for_agent(v),
            "for_agent group_id": lambda v: s.for_agent("alice", v),
            "case_log": lambda v: s.operator.case_log(v),
            "list_tasks": lambda v: s.operator.tasks(v),
            "memory_tools agent_id": lambda v: memory_tools(s.engine, v),
            "memory_tools group_id": lambda v: memory_tools(s.engine, "alice", v),
            "memory_for": lambda v: s.memory_for(v),
            "global_writers": lambda v: make_store(same_as=s, policy=WritePolicy(global_writers=(v,))),
        }
        for name, call in entries.items():
            call("a" * 128)
            try:
                call("a" * 129)
            except ValueError as exc:
                assert "is 129 characters; the limit is 128" in str(exc), (name, exc)
            else:
                pytest.fail(f"{name} accepted an id of 129 characters")
        with pytest.raises(FactNotFoundError):  # a valid caller, so the lookup runs
            s.as_agent("a" * 128).get("w_0000000000000000beef")
        with pytest.raises(ValueError, match="limit is 128"):
            s.as_agent("a" * 129).get("w_0000000000000000beef")
        s.as_agent("alice").remember("a fact of a long session", "agent", session_id="s" * 128)
        with pytest.raises(ValueError, match="session_id must be 1 to 128 characters, got 129"):
            s.as_agent("alice").remember("a fact of a longer session", "agent", session_id="s" * 129)

    def test_writers_at_once_cannot_pass_the_write_budget_together(self, make_store: StoreFactory) -> None:
        """The budget is counted again under the write's lock: two writers that both passed the first count (made
        before embedding) cannot both write when together they would pass it."""
        import threading

        s = make_store(policy=WritePolicy(write_budget=3))
        s.operator.add_member("crew", "mallory")
        both_counted = threading.Barrier(2, timeout=10)
        embed = s.embedder.embed

        def slow_embed(texts: Any) -> Any:  # both writers are past the first count before either writes
            both_counted.wait()
            return embed(texts)

        s.embedder.embed = slow_embed  # type: ignore[method-assign]
        answers: list[str] = []

        def write(i: int) -> None:
            try:
                s.as_agent("mallory", "crew").remember_many([f"fact {i} one", f"fact {i} two"], "group")
                answers.append("written")
            except MemoryAccessDenied as exc:
                answers.append(f"denied: {exc}")

        threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(a.split(":")[0] for a in answers) == ["denied", "written"], answers
        s.embedder.embed = embed  # type: ignore[method-assign]
        assert len(s.as_agent("mallory", "crew").search("fact", "group", top_k=10)) == 2

    def test_line_and_paragraph_separators_survive_an_export_and_import(self, make_store: StoreFactory) -> None:
        import io

        s, copy = make_store(), make_store()
        texts = ["line one\u2028line two", "para\u2029graph", "next\x85line", "form\x0cfeed"]
        ids = [s.operator.remember(t, "global", metadata={"k\u2028": "v\u2029"}).id for t in texts]
        buffer = io.StringIO()
        s.export(buffer)
        report = copy.import_(io.StringIO(buffer.getvalue()))
        assert not report.skipped_bad
        assert [copy.operator.get(i).content for i in ids] == texts
        assert copy.operator.get(ids[0]).metadata == {"k\u2028": "v\u2029"}

    # ------------------------------------------------------------------------ the backend's own methods
    def test_the_backend_overrides_derived_methods_only_to_add_to_them(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory("place0")
        try:
            derived = {n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")}
            derived -= set(Backend.__abstractmethods__)
            classes = [k for k in type(backend).__mro__ if k is not Backend and issubclass(k, Backend)]
            overridden = {n for n in derived for k in classes if n in vars(k)}
            assert overridden <= OVERRIDABLE, sorted(overridden - OVERRIDABLE)
        finally:
            backend.close()

    def test_a_transaction_sees_its_own_writes_and_one_that_raises_leaves_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory("place0")
        try:
            profile = {"key": "lang", "value": '"en"', "updated_at": 1.0}

            def write(tx: ScopeTx) -> list[dict[str, Any]]:
                tx.add_rows("meta", [{"key": "k", "value": "v"}], on_conflict="update")
                tx.add_rows("user_profile", [profile])
                tx.audit("g_1", "created", "alice", {"n": 1})
                assert [r["event"] for r in tx.rows("audit")] == ["created"]
                return tx.rows("user_profile")

            seen = backend.transact(CREW, write)
            assert [(r["key"], r["value"]) for r in seen] == [("lang", '"en"')]
            assert backend.exists(CREW) and CREW in backend.scopes("group")
            committed = {t: backend.rows(CREW, t) for t in ("meta", "audit", "user_profile")}

            def fail(tx: ScopeTx) -> None:
                tx.add_rows("meta", [{"key": "k", "value": "changed"}], on_conflict="update")
                tx.add_rows("user_profile", [{**profile, "key": "tz"}])
                tx.update_rows("user_profile", {"key": "lang"}, {"value": '"fr"'})
                tx.audit("g_1", "forgotten", "alice", {})
                assert {r["key"] for r in tx.rows("user_profile")} == {"lang", "tz"}
                raise RuntimeError("abort")

            with pytest.raises(RuntimeError, match="abort"):
                backend.transact(CREW, fail)
            assert {t: backend.rows(CREW, t) for t in committed} == committed  # all or nothing
        finally:
            backend.close()

    def test_rows_keep_seq_order_and_on_conflict_as_documented(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory("place0")
        try:
            first = backend.append_records(ALICE, "conversations", [_turn("one"), _turn("two")])
            later = backend.append_records(ALICE, "conversations", [_turn("three")])
            assert first == sorted(first) and len(set(first)) == 2 and later[0] > max(first)
            oldest = backend.rows(ALICE, "conversations")
            assert [r["content"] for r in oldest] == ["one", "two", "three"]
            assert [r["seq"] for r in oldest] == [*first, *later]
            newest = backend.rows(ALICE, "conversations", oldest_first=False, limit=2)
            assert [r["content"] for r in newest] == ["three", "two"]
            assert [r["content"] for r in backend.rows(ALICE, "conversations", after_seq=first[0])] == ["two", "three"]
            assert [r["content"] for r in backend.rows(ALICE, "conversations", offset=1, limit=1)] == ["two"]

            entry = {"key": "lang", "value": '"en"', "source_agent": "alice", "updated_at": 1.0}
            backend.upsert_records(ALICE, "user_profile", [entry])
            (kept,) = backend.rows(ALICE, "user_profile")
            with pytest.raises(Exception):  # noqa: B017 (the backend's own integrity error)
                backend.transact(ALICE, lambda tx: tx.add_rows("user_profile", [{**entry, "value": '"x"'}]))
            skipped = backend.transact(
                ALICE, lambda tx: tx.add_rows("user_profile", [{**entry, "value": '"x"'}], on_conflict="skip")
            )
            assert skipped == [] and backend.rows(ALICE, "user_profile") == [kept]
            backend.upsert_records(ALICE, "user_profile", [{"key": "lang", "value": '"fr"', "updated_at": 2.0}])
            (updated,) = backend.rows(ALICE, "user_profile")
            assert updated == {**kept, "value": '"fr"', "updated_at": 2.0}  # same seq, other columns kept
            with pytest.raises(Exception):  # noqa: B017 (a NULL in a NOT NULL column)
                backend.transact(ALICE, lambda tx: tx.add_rows("user_profile", [{"key": "tz"}]))
            assert backend.rows(ALICE, "user_profile") == [updated]
        finally:
            backend.close()

    def test_select_ids_lists_the_matching_facts_oldest_first_up_to_the_limit(self, store: SharedMemoryStore) -> None:
        texts = ["the lobby opens at eight", "badges are blue", "parking is free on Sundays", "lunch is at noon"]
        first = [r.id for r in store.operator.remember_many(texts, "global", tags=["office"])]
        later = [store.operator.remember(t, "global").id for t in ("the roof is closed", "printers jam on Mondays")]
        store.operator.forget(first[1], "wrong")
        backend, everything = store.backend, [*first, *later]
        live = [i for i in everything if i != first[1]]
        assert backend.select_ids(GLOBAL, Filters(), 100) == live
        assert backend.select_ids(GLOBAL, Filters(), 2) == live[:2]  # the oldest
        assert backend.select_ids(GLOBAL, Filters(include_inactive=True), 100) == everything
        assert backend.select_ids(GLOBAL, Filters(tags=("office",)), 100) == [first[0], *first[2:]]

    def test_unknown_tables_and_changes_to_append_only_ones_are_refused(self, backend_factory: BackendFactory) -> None:
        backend = backend_factory("place0")
        try:
            entry = {"id": "c1", "author": "alice", "summary": "opened", "created_at": 1.0}
            backend.append_records(CREW, "case_log", [entry])
            for fn in (
                lambda tx: tx.rows("no_such_table"),
                lambda tx: tx.add_rows("no_such_table", [{"a": 1}]),
                lambda tx: tx.delete_rows("no_such_table"),
            ):
                with pytest.raises(ValueError):
                    backend.transact(CREW, fn)
            with pytest.raises(ValueError, match="append-only"):
                backend.transact(CREW, lambda tx: tx.update_rows("case_log", {"id": "c1"}, {"summary": "rewritten"}))
            assert [r["summary"] for r in backend.rows(CREW, "case_log")] == ["opened"]
            assert backend.delete_records(CREW, "case_log", force=True) == 1  # the operator's forced delete
            assert backend.rows(CREW, "case_log") == []
        finally:
            backend.close()

    def test_reads_of_a_scope_that_does_not_exist_find_nothing_and_create_nothing(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory("place0")
        try:
            backend.set_meta(GLOBAL, "k", "v")  # the storage holds a scope; the one read below does not exist
            nobody = ScopeRef("agent", "nobody")
            filters = Filters()
            vector = np.ones(8, np.float32) / np.sqrt(8)
            assert backend.get(nobody, ["a_00000000000000000001"]) == []
            assert backend.select_ids(nobody, filters, 10) == []
            assert backend.lexical([nobody], ["anything"], 10, filters) == []
            assert backend.semantic([nobody], vector, 10, filters) == []
            assert backend.neighbours(nobody, ["a_00000000000000000001"]) == {}
            assert backend.rows(nobody, "facts") == [] and backend.rows(nobody, "meta") == []
            stats = backend.stats(nobody)
            assert sum(stats.counts.values()) == 0 and stats.embedding_model is None
            with backend.snapshot(nobody) as rows:
                assert rows("facts") == []
            assert not backend.exists(nobody) and backend.scopes() == [GLOBAL]
        finally:
            backend.close()

    def test_a_second_backend_on_the_same_place_sees_every_commit(self, backend_factory: BackendFactory) -> None:
        one, two = backend_factory("place0"), backend_factory("place0")
        other = backend_factory("place1")
        try:
            one.append_records(CREW, "conversations", [_turn("from one")])
            assert [r["content"] for r in two.rows(CREW, "conversations")] == ["from one"]
            two.append_records(CREW, "conversations", [_turn("from two")])
            assert [r["content"] for r in one.rows(CREW, "conversations")] == ["from one", "from two"]
            assert other.scopes() == []  # another place is other storage
        finally:
            for backend in (one, two, other):
                backend.close()

    def test_writers_of_one_scope_are_serialised(self, backend_factory: BackendFactory) -> None:
        # Read-modify-write from several threads and two backends on one place: no update is lost.
        backends = [backend_factory("place0"), backend_factory("place0")]
        try:
            backends[0].upsert_records(
                CREW, "case_checkpoints", [{"agent_id": "a", "entry_id": "e", "version": 0, "updated_at": 1.0}]
            )

            def bump(backend: Backend) -> None:
                for _ in range(25):
                    backend.update_record(CREW, "case_checkpoints", {"agent_id": "a"}, _next_version)

            threads = [threading.Thread(target=bump, args=(backends[i % 2],)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert backends[1].rows(CREW, "case_checkpoints")[0]["version"] == 100
        finally:
            for backend in backends:
                backend.close()
