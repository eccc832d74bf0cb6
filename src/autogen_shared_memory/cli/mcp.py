"""``mcp`` (serve the memory to MCP clients, over stdio or streamable HTTP) and ``mcp-token`` (make a bearer
token for the HTTP server). The server itself is :mod:`autogen_shared_memory.mcp` (the ``[mcp]`` extra)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import logging
from pathlib import Path
from typing import Annotated

import typer

from .app import _CliError, _owner, _settings, command, emit_json

_NO_SDK = "the MCP server needs the MCP SDK: pip install 'autogen-shared-memory[mcp]'"


def _need_sdk() -> None:
    if importlib.util.find_spec("mcp") is None:
        raise _CliError(_NO_SDK)


@command("mcp")
def mcp_cmd(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option(help="The agent the client acts as (stdio; HTTP without --tokens).", callback=_owner("agent id")),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            help="The agent's group: its tools read and write this team's scope.", callback=_owner("group id")
        ),
    ] = None,
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (PORT alone: on 127.0.0.1).",
            show_default=False,
        ),
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option(
            help="The tokens file of the HTTP server: each bearer token acts as the agent it was made for "
            "(`mcp-token`). Required to bind an address other machines can reach.",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    write_budget: Annotated[
        int | None,
        typer.Option(
            "--write-budget",
            min=1,
            help="At most this many facts an agent may write into one scope in 24 hours (default: no limit).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the memory to MCP clients: the tools memory_search, memory_remember and memory_forget, bound to
    an identity chosen here (never by the model), the scaffolding as instructions and a prompt, and a resource
    per readable scope whose subscribers hear every change. stdio by default (one client, --agent and
    --group); --http for many clients, each with its own token."""
    _need_sdk()
    from ..mcp import Identity, TokenFile, serve_stdio

    if http is None and tokens is not None:
        raise typer.BadParameter("--tokens is for the HTTP server (--http HOST:PORT)", param_hint="--tokens")
    if agent is None and (http is None or tokens is None):
        raise typer.BadParameter("the agent the client acts as is required (--agent ID)", param_hint="--agent")
    if tokens is not None and (agent is not None or group is not None):
        raise typer.BadParameter("with --tokens each token names its agent and group", param_hint="--agent")
    identity = None if agent is None else Identity(agent, group)
    address = None
    if http is not None:
        try:
            from ..mcp.http import parse_address

            address = parse_address(http)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--http") from None
    grants = None if tokens is None else TokenFile(tokens)
    if address is not None and grants is None:
        from ..mcp.http import is_loopback

        if not is_loopback(address[0]):
            raise _CliError(
                f"refusing to serve {address[0]} without tokens: anyone who reaches it would act as {agent!r}; "
                "pass --tokens FILE (make tokens with `autogen-shared-memory mcp-token`) or bind 127.0.0.1"
            )
    store = _settings(ctx).open_store()
    if write_budget is not None:
        store.engine.policy = dataclasses.replace(store.engine.policy, write_budget=write_budget)
    logging.basicConfig(level=logging.WARNING)  # on stderr: stdout is the protocol's over stdio
    if address is None:
        assert identity is not None
        asyncio.run(serve_stdio(store, identity))
    else:
        from ..mcp.http import serve_http

        serve_http(store, *address, tokens=grants, identity=identity)


@command("mcp-token")
def mcp_token_cmd(
    ctx: typer.Context,
    tokens: Annotated[
        Path, typer.Option(help="The tokens file (made if missing; it keeps only token hashes).", dir_okay=False)
    ],
    agent: Annotated[str, typer.Option(help="The agent the token acts as.", callback=_owner("agent id"))],
    group: Annotated[
        str | None, typer.Option(help="The agent's group (its tools' team).", callback=_owner("group id"))
    ] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="The token may search and read, not write.")] = False,
    label: Annotated[str | None, typer.Option(help="A note on whom the token is for.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the token and its grant as JSON.")] = False,
) -> None:
    """Make a bearer token for the HTTP MCP server and print it, once: the tokens file keeps only its SHA-256,
    so it cannot be shown again (make another one if it is lost)."""
    _need_sdk()
    from ..mcp import Identity, create_token

    assert agent is not None
    identity = Identity(agent, group, read_only)
    token = create_token(tokens, identity, label=label)
    if as_json:
        emit_json({"token": token, "agent_id": agent, "group_id": group, "read_only": read_only, "tokens": str(tokens)})
        return
    typer.echo(token)
    typer.echo(
        f"token for agent {agent!r}"
        + (f" in group {group!r}" if group else "")
        + (" (read-only)" if read_only else "")
        + f" added to {tokens}; it is shown only this once",
        err=True,
    )
