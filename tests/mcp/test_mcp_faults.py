"""Faults: server processes writing one store at once, a client that dies mid-call, a flooding token."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import HttpServer, stdio_params, text
from typer.testing import CliRunner

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.cli import app
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.integration.toolkit import REMEMBER
from autogen_shared_memory.mcp import Identity, create_token
from autogen_shared_memory.testing import HashEmbedder

GROUP = ScopeRef("group", "crew")


def group_facts(root: Path) -> list[tuple[str, str]]:
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    try:
        ids = store.backend.select_ids(GROUP, Filters(include_inactive=True), 10**9)
        return [(f.created_by, f.content) for f in store.backend.get(GROUP, ids)]
    finally:
        store.close()


async def test_four_server_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    root, servers, each = tmp_path / "store", 4, 40
    receipts: list[str] = []

    async def writer(n: int) -> None:
        async with Client(stdio_params(root, f"agent{n}")) as client:

            async def remember(i: int) -> None:
                fact = f"Worker {n} measured batch {i} at {i * 7 + n} ms"
                receipts.append(text(await client.call_tool(REMEMBER, {"fact": fact, "scope": "group"})))

            async with anyio.create_task_group() as calls:
                for i in range(each):
                    calls.start_soon(remember, i)

    async with anyio.create_task_group() as group:
        for n in range(servers):
            group.start_soon(writer, n)
    assert len(receipts) == servers * each and all(r.startswith("created fact") for r in receipts), receipts[:3]
    stored = group_facts(root)
    expected = {
        (f"agent{n}", f"Worker {n} measured batch {i} at {i * 7 + n} ms") for n in range(servers) for i in range(each)
    }
    assert len(stored) == servers * each and set(stored) == expected


def test_a_client_killed_mid_call_leaves_nothing_half_written(tmp_path: Path) -> None:
    root = tmp_path / "store"
    params = stdio_params(root, "alice")
    server = subprocess.Popen(
        [params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=params.env
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, object]) -> None:
        server.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]

    client_info = {"name": "dying-client", "version": "0"}
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client_info}})  # fmt: skip
    assert json.loads(server.stdout.readline())["id"] == 0
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    calls = 60
    for i in range(1, calls + 1):
        arguments = {"fact": f"Step {i} of the migration is done", "scope": "group", "tags": ["migration"]}
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": REMEMBER, "arguments": arguments}})
    answered = json.loads(server.stdout.readline())  # the client dies with calls in flight
    assert answered["result"]["content"][0]["text"].startswith("created fact")
    server.stdin.close()
    server.stdout.close()
    server.wait(30)  # the server notices and ends, no orphan
    stored = group_facts(root)
    assert 1 <= len(stored) <= calls
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    try:
        created = [c for c in store.changes() if c.event == "created"]
        assert len(created) == len(stored)  # every fact has its audit row, every audit row its fact
        for change in created:
            fact = store.operator.get(change.fact_id)
            assert fact.status == "active" and fact.tags == ("migration",) and fact.content.startswith("Step ")
        hits = store.as_operator("crew").search("migration step done", "group", top_k=calls)
        assert len(hits) == len(stored)  # each one indexed and embedded
    finally:
        store.close()
    doctor = CliRunner().invoke(
        app, ["--root", str(root), "doctor"], env={"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"}
    )
    assert doctor.exit_code == 0, doctor.output


async def test_a_flood_from_one_token_is_bounded_by_the_write_budget(
    tmp_path: Path, http_server: Callable[..., HttpServer]
) -> None:
    tokens = tmp_path / "tokens.json"
    flood, other = create_token(tokens, Identity("mallory", "crew")), create_token(tokens, Identity("alice", "crew"))
    server = http_server("--tokens", str(tokens), "--write-budget", "5")

    def client(token: str) -> Client:
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        return Client(streamable_http_client(server.url, http_client=http))

    started = time.monotonic()
    async with client(flood) as mallory, client(other) as alice:
        answers = [
            text(await mallory.call_tool(REMEMBER, {"fact": f"Spam number {i} buy now", "scope": "group"}))
            for i in range(20)
        ]
        assert text(await alice.call_tool(REMEMBER, {"fact": "Alice still writes", "scope": "group"})).startswith(
            "created"
        )
    assert sum(a.startswith("created fact") for a in answers) == 5
    assert all(a.startswith("DENIED:") and "write budget is 5" in a for a in answers[5:]), answers[5:7]
    assert time.monotonic() - started < 60
    stored = group_facts(tmp_path / "store")
    assert sum(author == "mallory" for author, _ in stored) == 5 and ("alice", "Alice still writes") in stored
