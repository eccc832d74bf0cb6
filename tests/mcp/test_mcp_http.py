"""The MCP server over streamable HTTP: bearer tokens mapped to identities, refused callers touch nothing."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import HttpServer, run_cli, text
from typer.testing import CliRunner

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.cli import app
from autogen_shared_memory.integration.toolkit import FORGET, REMEMBER, SEARCH
from autogen_shared_memory.mcp import Identity, TokenFile, create_token, token_hash
from autogen_shared_memory.mcp.http import is_loopback, parse_address
from autogen_shared_memory.testing import HashEmbedder

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def make_token(tokens: Path, agent: str, group: str | None = "crew", *extra: str) -> str:
    """A token made as a user makes one: with the CLI (which prints it once)."""
    done = run_cli(
        "mcp-token", "--tokens", str(tokens), "--agent", agent, *(["--group", group] if group else []), *extra
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("asm_") and "shown only this once" in done.stderr
    return token


def client(server: HttpServer, token: str) -> Client:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(server.url, http_client=http))


async def test_two_tokens_are_two_agents_and_a_read_only_token_cannot_write(
    tmp_path: Path, http_server: Callable[..., HttpServer]
) -> None:
    tokens = tmp_path / "tokens.json"
    alice = make_token(tokens, "alice")
    bob = create_token(tokens, Identity("bob", "crew"))
    viewer = create_token(tokens, Identity("carol", "crew", read_only=True))
    stored = tokens.read_text()
    for token in (alice, bob, viewer):  # the file keeps hashes only
        assert token not in stored and token_hash(token) in stored
    assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
    server = http_server("--tokens", str(tokens))
    async with client(server, alice) as a, client(server, bob) as b, client(server, viewer) as v:
        receipt = text(await a.call_tool(REMEMBER, {"fact": "Staging runs on port 8443", "scope": "group"}))
        assert receipt.startswith("created fact")
        assert "by alice" in text(await b.call_tool(SEARCH, {"query": "staging port"}))
        assert "by alice" in text(await v.call_tool(SEARCH, {"query": "staging port"}))
        assert [t.name for t in (await v.list_tools()).tools] == [SEARCH]
        for name, args in (
            (REMEMBER, {"fact": "Viewer wrote this", "scope": "agent"}),
            (FORGET, {"fact_id": receipt.split()[2]}),
        ):
            assert text(await v.call_tool(name, args)).startswith("DENIED: this connection is read-only")
        mine = text(await b.call_tool(REMEMBER, {"fact": "Bob prefers short reviews", "scope": "agent"}))
        assert "in scope agent:bob" in mine
    store = SharedMemoryStore(tmp_path / "store", embedder=HashEmbedder())
    try:
        assert sorted({c.actor for c in store.changes()}) == ["alice", "bob"]  # nothing by the read-only token
        assert store.operator.get(receipt.split()[2]).status == "active"
    finally:
        store.close()


def test_a_missing_or_unknown_token_gets_401_and_touches_nothing(
    tmp_path: Path, http_server: Callable[..., HttpServer]
) -> None:
    tokens = tmp_path / "tokens.json"
    good = create_token(tokens, Identity("alice", "crew"))
    store_dir = tmp_path / "store"
    server = http_server("--tokens", str(tokens))
    before = sorted(p.name for p in store_dir.iterdir())
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": REMEMBER, "arguments": {"fact": "intruder", "scope": "group"}}}  # fmt: skip
    wrong = [f"Bearer asm_{'x' * 43}", f"Bearer {good}x", f"Bearer {good.upper()}", f"Bearer {token_hash(good)}"]
    for authorization in [None, "Bearer", f"Basic {good}", good, *wrong]:
        for body in (INITIALIZE, call):
            response = server.post(authorization, body)
            assert response.status_code == 401, (authorization, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert "mcp-session-id" not in response.headers
    assert sorted(p.name for p in store_dir.iterdir()) == before  # no scope file made, no membership, no write
    opened = server.post(f"Bearer {good}", INITIALIZE)
    assert opened.status_code == 200
    # the session answers only the token that opened it
    other = create_token(tokens, Identity("bob", "crew"))
    headers = {
        "Authorization": f"Bearer {other}",
        "mcp-session-id": opened.headers["mcp-session-id"],
        "Accept": "application/json, text/event-stream",
    }
    listing: dict[str, Any] = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    assert httpx.post(server.url, json=listing, headers=headers, timeout=10).status_code == 404
    store = SharedMemoryStore(store_dir, embedder=HashEmbedder())
    try:
        assert store.changes() == []
    finally:
        store.close()


def refused(*args: str) -> str:
    """The command's error, run in process (CliRunner), which must fail with exit code 1."""
    result = CliRunner().invoke(app, list(args), env={"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"})
    assert result.exit_code == 1, result.output
    return result.output


def test_non_loopback_without_tokens_is_refused_and_tokens_files_are_checked(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    for host in ("0.0.0.0", "192.168.1.20", "[::]", "example.org"):
        assert "without tokens" in refused("--root", store, "mcp", "--http", f"{host}:0", "--agent", "alice")
    assert not (tmp_path / "s").exists()  # refused before the store is opened (without --create, a
    # check that let the command on would fail on the missing store, never serve)
    assert "no tokens file" in refused(
        "--root", store, "mcp", "--http", "0.0.0.0:0", "--tokens", str(tmp_path / "none.json")
    )
    (tmp_path / "bad.json").write_text(json.dumps({"tokens": [{"sha256": "abc", "agent_id": "alice"}]}))
    assert "sha256" in refused("--root", store, "mcp", "--http", "127.0.0.1:0", "--tokens", str(tmp_path / "bad.json"))
    (tmp_path / "empty.json").write_text(json.dumps({"tokens": []}))
    assert "holds no token" in refused(
        "--root", store, "mcp", "--http", "127.0.0.1:0", "--tokens", str(tmp_path / "empty.json")
    )


def test_loopback_addresses_and_address_syntax() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org", "localhost.evil.org"))
    assert parse_address("8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:80") == ("::1", 80) and parse_address("0.0.0.0:1") == ("0.0.0.0", 1)
    for bad in ("host:", "host:http", "1:99999", ""):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_the_tokens_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    first = create_token(path, Identity("alice", "crew"))
    tokens = TokenFile(path)
    assert tokens.grant(first) is not None and tokens.grant(first).identity == Identity("alice", "crew")  # type: ignore[union-attr]
    second = create_token(path, Identity("bob", None, read_only=True), label="bob's laptop")
    grant = tokens.grant(second)
    assert grant is not None and grant.identity == Identity("bob", None, True) and grant.label == "bob's laptop"
    path.write_text(json.dumps({"tokens": []}))  # revoked: the running server stops honouring them
    assert tokens.grant(first) is None and tokens.grant(second) is None
    path.write_text("{broken")
    assert tokens.grant(first) is None
