"""Resources: one per readable scope, whose subscribers hear another process's writes; one per fact, answering
only what the caller may read."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_helpers import stdio_params, text

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.toolkit import REMEMBER
from autogen_shared_memory.mcp import Identity, MemoryServer, stdio_binding
from autogen_shared_memory.testing import HashEmbedder


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_subscribers_hear_a_write_made_by_another_process(tmp_path: Path) -> None:
    """A 2026 client (``subscriptions/listen``) and a 2025 client (``resources/subscribe``), served here; the
    write comes from a server process of its own."""
    root = tmp_path / "store"
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    heard: list[str] = []
    got = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            heard.append(str(message.params.uri))
            got.set()

    bob = MemoryServer(store, stdio_binding(store, Identity("bob", "crew"))).server
    carol = MemoryServer(store, stdio_binding(store, Identity("carol", "crew"))).server
    try:
        async with Client(bob) as modern, Client(carol, mode="legacy", message_handler=on_message) as legacy:
            uris = [r.uri for r in (await modern.list_resources()).resources]
            assert uris == ["memory://agent/bob", "memory://group/crew", "memory://global"]
            await legacy.session.subscribe_resource("memory://group/crew")  # type: ignore[attr-defined]
            with pytest.raises(MCPError, match="Resource not found"):  # a group carol is not bound to
                await legacy.session.subscribe_resource("memory://group/other")  # type: ignore[attr-defined]
            async with modern.listen(resource_subscriptions=["memory://group/crew"]) as subscription:
                async with Client(stdio_params(root, "alice")) as alice:  # another process writes
                    await alice.call_tool(REMEMBER, {"fact": "My own note", "scope": "agent"})
                    receipt = text(await alice.call_tool(REMEMBER, {"fact": "Lunch is at noon", "scope": "group"}))
                with anyio.fail_after(15):
                    async for event in subscription:
                        assert event.uri == "memory://group/crew"  # type: ignore[union-attr]
                        break
                    await got.wait()
            read = await modern.read_resource("memory://group/crew")
    finally:
        store.close()
    assert set(heard) == {"memory://group/crew"}  # nothing of alice's private scope
    facts = json.loads(read.contents[0].text)  # type: ignore[union-attr]
    assert [(f["id"], f["created_by"], f["content"]) for f in facts] == [
        (receipt.split()[2], "alice", "Lunch is at noon")
    ]


async def test_a_fact_resource_answers_unreadable_and_missing_alike(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path / "store", embedder=HashEmbedder())

    def server(agent: str, group: str | None) -> MemoryServer:
        return MemoryServer(store, stdio_binding(store, Identity(agent, group)))

    try:
        async with Client(server("alice", "crew").server) as alice, Client(server("zed", "other").server) as zed:
            shared = text(await alice.call_tool(REMEMBER, {"fact": "Crew secret plan", "scope": "group"})).split()[2]
            mine = text(await alice.call_tool(REMEMBER, {"fact": "Alice's note", "scope": "agent"})).split()[2]
            other = text(await zed.call_tool(REMEMBER, {"fact": "Other team plan", "scope": "group"})).split()[2]
            async with Client(server("bob", "crew").server) as bob:
                open_note = text(await bob.call_tool(REMEMBER, {"fact": "Bob's open note", "scope": "agent"})).split()[
                    2
                ]
            store.operator.set_private("alice")
            store.operator.add_member("crew", "zed")  # a member of crew too, but its tools are bound to "other"
            read = await alice.read_resource(f"memory://fact/{shared}")
            fact = json.loads(read.contents[0].text)  # type: ignore[union-attr]
            assert (fact["content"], fact["created_by"], fact["scope"]) == ("Crew secret plan", "alice", "group:crew")
            answers = []
            for fact_id in (shared, mine, open_note, "g_00000000000000000001", "nonsense", other.replace("g_", "a_")):
                with pytest.raises(MCPError) as refused:
                    await zed.read_resource(f"memory://fact/{fact_id}")
                answers.append((refused.value.code, refused.value.error.message.replace(fact_id, "ID")))
            assert len(set(answers)) == 1, answers  # unreadable and missing: the same answer
            for uri in ("memory://group/crew", "memory://agent/alice", "memory://elsewhere"):
                with pytest.raises(MCPError, match="Resource not found"):
                    await zed.read_resource(uri)
            with pytest.raises(MCPError, match="Resource not found"):
                async with zed.listen(resource_subscriptions=["memory://group/crew"]):
                    pass
            with pytest.raises(MCPError, match="Resource not found"):  # another agent's notes, as search has it
                await alice.read_resource(f"memory://fact/{open_note}")
            own = json.loads((await zed.read_resource(f"memory://fact/{other}")).contents[0].text)  # type: ignore[union-attr]
            assert own["content"] == "Other team plan"
    finally:
        store.close()
