"""The change feed, on every backend: every change to a fact exactly once, in order per scope, resumable."""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing as mp
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.core.types import Change, Position, PositionError, ScopeRef
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.testing.conformance import _key as key
from autogen_shared_memory.testing.conformance import _settle as settle
from autogen_shared_memory.testing.conformance import _wait_for as wait_for
from autogen_shared_memory.testing.conformance import _write_sentinels as write_sentinels

StoreFactory = Callable[..., SharedMemoryStore]
GLOBAL, CREW, ALICE = ScopeRef("global"), ScopeRef("group", "crew"), ScopeRef("agent", "alice")


def test_subscribe_from_a_position_catches_up_then_follows(make_store: StoreFactory) -> None:
    first = make_store()
    first.operator.remember("one", "global")
    mark = first.changes()[-1].position
    first.operator.remember("two", "global")
    first.as_operator("crew").remember("three", "group")
    first.close()
    store = make_store(same_as=first)
    seen: list[Change] = []
    with store.subscribe(seen.append, since=str(mark)) as sub:
        assert wait_for(lambda: len(seen) >= 2)
        store.as_agent("alice").remember("four", "agent")
        assert wait_for(lambda: len(seen) >= 3)
        sentinels = settle(store, seen, (GLOBAL, CREW, ALICE))
        assert [store.operator.get(c.fact_id).content for c in seen if c.fact_id not in sentinels] in (
            ["two", "three", "four"],
            ["three", "two", "four"],  # scopes are not ordered against each other
        )
        assert len(seen) == 6 and sub.position == seen[-1].position
    everything: list[Change] = []
    with store.subscribe(everything.append, since=None):  # from the beginning
        assert wait_for(lambda: len(everything) >= 7)
        settle(store, everything, (GLOBAL, CREW, ALICE))
    assert sorted(key(c) for c in everything) == sorted(key(c) for c in store.changes())


def test_a_failing_callback_is_logged_and_the_feed_goes_on(
    store: SharedMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def fragile(change: Change) -> None:
        seen.append(change.fact_id)
        if len(seen) == 1:
            raise RuntimeError("callback bug")

    with store.subscribe(fragile):
        store.operator.remember("first", "global")
        store.operator.remember("second", "global")
        assert wait_for(lambda: len(seen) >= 2)
    assert "callback bug" in caplog.text or any(r.exc_info for r in caplog.records)


def test_close_stops_subscriptions(make_store: StoreFactory) -> None:
    store = make_store()
    sub = store.subscribe(lambda change: None)
    assert sub.running
    store.close()
    assert not sub.running


def test_bad_positions_are_refused(store: SharedMemoryStore) -> None:
    for bad in ("", "now-ish", "p1.!!!", "p1.eJzLSM3JyQcABiwCFQ"):  # the last: valid zlib of "hello"
        with pytest.raises(ValueError, match="position"):
            store.changes(since=bad)
    with pytest.raises(TypeError):
        store.changes(since=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_interval"):
        store.subscribe(print, poll_interval=0)


async def test_async_twins(store: SharedMemoryStore) -> None:
    seen: list[Any] = []
    loop = asyncio.get_running_loop()

    async def on_change(change: Change) -> None:
        assert asyncio.get_running_loop() is loop  # a coroutine callback runs on the subscriber's loop
        seen.append(change.fact_id)

    sub = await store.engine.asubscribe(on_change)
    receipt = await store.operator.aremember("async fact", "global")
    for _ in range(500):
        if seen:
            break
        await asyncio.sleep(0.02)
    assert seen == [receipt.id]
    assert [c.fact_id for c in await store.achanges()] == [receipt.id]
    await asyncio.to_thread(sub.stop)


def token_of(entries: Any) -> str:
    """A position token made by hand, as an attacker or a damaged file could."""
    packed = zlib.compress(json.dumps(entries).encode() if not isinstance(entries, bytes) else entries)
    return "p1." + base64.urlsafe_b64encode(packed).decode().rstrip("=")


def test_malformed_positions_get_a_clear_error_naming_the_problem(store: SharedMemoryStore) -> None:
    store.operator.remember("a fact", "global")
    before = store.changes()
    cases = {
        token_of(b"[" * 100_000 + b"]" * 100_000): "nested too deeply",
        token_of([["global", "", 2**100]]): "2**63",
        token_of([["global", "", -1]]): "2**63",
        token_of([["global", "", 1.5]]): "2**63",
        token_of([["global", "", True]]): "2**63",
        token_of([["global", "", 1, "NOT HEX"]]): "mark",
        token_of([["global", "", 1, 7]]): "mark",
        token_of([["global", "", 1, "ab", "extra"]]): "entry",
        token_of([["planet", "x", 1]]): "scope",
        token_of([5]): "entry",
        token_of({"global": 1}): "not a list",
    }
    for token, problem in cases.items():
        for call in (lambda t=token: store.changes(since=t), lambda t=token: store.subscribe(print, since=t)):
            with pytest.raises(PositionError, match="position") as raised:
                call()
            assert isinstance(raised.value, ValueError) and problem in str(raised.value)
    with pytest.raises(PositionError, match="2\\*\\*63"):
        Position({GLOBAL: 2**63})
    assert Position({GLOBAL: 2**63 - 1}).get(GLOBAL) == 2**63 - 1
    assert store.changes() == before  # nothing changed


def test_a_scope_that_cannot_be_read_does_not_stall_the_others(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # ALICE sorts before the other scopes: a feed that gives up its round at the first failure starves them.
    assert sorted([GLOBAL, CREW, ALICE])[0] == ALICE
    broken = threading.Event()
    broken.set()
    reads = {"failed": 0}
    rows = store.backend.rows

    def failing_rows(scope: ScopeRef, table: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        if scope == ALICE and table == "audit" and broken.is_set():
            reads["failed"] += 1
            raise OSError("the scope's storage cannot be read")
        return rows(scope, table, *args, **kwargs)

    monkeypatch.setattr(store.backend, "rows", failing_rows)
    seen: list[Change] = []
    # The default poll_interval: PostgreSQL then reads only what it is notified of, and the failing scope
    # arrives only if the feed retries it by itself.
    with store.subscribe(seen.append, since=None):
        alice = store.as_agent("alice").remember("alice's fact", "agent").id
        others = {
            store.operator.remember("a global fact", "global").id,
            store.as_agent("alice", "crew").remember("a crew fact", "group").id,
        }
        assert wait_for(lambda: {c.fact_id for c in seen} == others, 10), "the scopes after the failing one stalled"
        more = store.operator.remember("another global fact", "global").id
        assert wait_for(lambda: more in {c.fact_id for c in seen}, 10)
        assert wait_for(lambda: reads["failed"] >= 2, 10)  # the failing scope is tried again
        assert alice not in {c.fact_id for c in seen}
        assert f"could not read {ALICE}" in caplog.text
        broken.clear()  # the scope can be read again: its changes arrive
        assert wait_for(lambda: alice in {c.fact_id for c in seen}, 15)
        sentinels = settle(store, seen, (GLOBAL, CREW, ALICE))
    assert sorted(c.fact_id for c in seen) == sorted([alice, *others, more, *sentinels])


# --------------------------------------------------------------------------- across processes and restarts
def place_of(store: SharedMemoryStore) -> tuple[str, ...]:
    """What another process needs to open the same memory."""
    backend: Any = store.backend
    return ("postgres", backend.dsn, backend.schema) if hasattr(backend, "dsn") else ("sqlite", str(store.root))


def open_place(place: tuple[str, ...]) -> SharedMemoryStore:
    if place[0] == "sqlite":
        return SharedMemoryStore(place[1], embedder=HashEmbedder())
    from autogen_shared_memory.backends.postgres import PostgresBackend

    return SharedMemoryStore(PostgresBackend(place[1], schema=place[2], max_size=2), embedder=HashEmbedder())


def _write(place: tuple[str, ...], tag: str, n: int) -> None:
    store = open_place(place)
    for i in range(n):
        group = {0: f"{tag}-{i}", 1: "shared", 2: tag}[i % 3]
        store.as_operator(group).remember(f"{tag} fact {i}", "group")
        time.sleep(0.01)
    store.close()


def _follow(place: tuple[str, ...], since: str | None, log: str) -> None:
    """A consumer that records each change with its position in one line: handling and recording its place
    are one step, so after a crash it resumes from the last line it wrote."""
    store = open_place(place)
    with open(log, "a") as out:

        def handle(change: Change) -> None:
            out.write(json.dumps([str(change.scope), change.seq, change.fact_id, str(change.position)]) + "\n")
            out.flush()

        store.subscribe(handle, since=since)
        time.sleep(600)  # until killed


def complete_lines(log: Path) -> list[list[Any]]:
    text = log.read_text() if log.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1]]  # a line cut short by the kill is dropped


@pytest.mark.processes
def test_a_consumer_killed_mid_feed_resumes_from_its_last_position_without_losses_or_repeats(
    store: SharedMemoryStore, tmp_path: Path
) -> None:
    place, log = place_of(store), tmp_path / "consumed.jsonl"
    ctx = mp.get_context("spawn")
    first = ctx.Process(target=_follow, args=(place, None, str(log)))
    first.start()
    assert wait_for(log.exists, 120)  # the consumer is up
    writers = [ctx.Process(target=_write, args=(place, tag, 45)) for tag in ("w1", "w2")]
    for w in writers:
        w.start()
    assert wait_for(lambda: len(complete_lines(log)) >= 20, 120)
    first.kill()  # SIGKILL while the writers write: no clean-up, maybe half a line
    first.join(timeout=30)
    lines = complete_lines(log)
    assert len(lines) < 90
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    second = ctx.Process(target=_follow, args=(place, lines[-1][3], str(log)))
    second.start()
    try:
        for w in writers:
            w.join(timeout=180)
        assert len(store.changes()) >= 90  # the group membership writes of the fixture are not fact changes
        # A sentinel in every scope, once the writers are done: when the consumer has handled them all, it
        # has read every scope again after everything else (see settle).
        sentinels = write_sentinels(store, store.backend.scopes())
        assert wait_for(lambda: sentinels <= {fact_id for _, _, fact_id, _ in complete_lines(log)}, 60)
        expected = sorted((str(c.scope), c.seq) for c in store.changes())
    finally:
        second.kill()
        second.join(timeout=30)
    consumed = [(scope, seq) for scope, seq, _, _ in complete_lines(log)]
    assert len(consumed) == len(set(consumed)), "a change was handled twice"
    assert sorted(consumed) == expected, "a change was never handled"
    for scope in {s for s, _ in consumed}:
        seqs = [seq for s, seq in consumed if s == scope]
        assert seqs == sorted(seqs)


def test_positions_keep_marks_through_their_tokens_and_accept_tokens_without() -> None:
    marked = Position({GLOBAL: 7, CREW: 3}, {GLOBAL: "0123456789ab"})
    assert Position.parse(str(marked)) == marked and Position.parse(str(marked)).marks == {GLOBAL: "0123456789ab"}
    moved = marked.advanced(CREW, 5, "ba9876543210").advanced(GLOBAL, 8)
    assert moved.seqs == {GLOBAL: 8, CREW: 5} and moved.marks == {CREW: "ba9876543210"}  # GLOBAL's mark was of seq 7
    assert Position.parse(str(moved)) == moved and moved != Position({GLOBAL: 8, CREW: 5})
    assert moved.advanced(CREW, 0).seqs == {GLOBAL: 8} and moved.advanced(CREW, 0).marks == {}  # read from start
    old_token = token_of([["global", "", 7], ["group", "crew", 3]])  # as earlier releases wrote them
    assert Position.parse(old_token) == Position({GLOBAL: 7, CREW: 3}) and Position.parse(old_token).marks == {}
    with pytest.raises(PositionError, match="no seq"):
        Position({GLOBAL: 1}, {CREW: "ab"})
