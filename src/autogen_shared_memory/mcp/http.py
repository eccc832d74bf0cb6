"""Streamable HTTP: one server for many MCP clients, each acting as the identity its bearer token grants.

Every request is checked before the SDK sees it: a request without a token, or with one the tokens file does
not hold, gets ``401`` and reaches nothing (no session is made, the store is not touched). A request with a
token carries its grant to the handlers, which bind the tools to the grant's identity; the SDK also ties each
session to the token that opened it (another token gets ``404`` for it). Without a tokens file the server
serves one identity chosen at launch, and only on a loopback address (anyone who can reach the port would
act as that agent).
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from ..store import SharedMemoryStore
from .server import Binding, Identity, MemoryServer, Resolve, stdio_binding
from .tokens import Grant, TokenFile

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only.

    Args:
        host: the address to bind.

    Returns:
        True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1).
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def parse_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6), or ``PORT`` alone on 127.0.0.1.

    Args:
        value: the address.

    Returns:
        The host and the port.

    Raises:
        ValueError: not an address with a port in 0..65535.
    """
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8765)")
    return host, int(port)


class _TokenUser(AuthenticatedUser):
    """The SDK's authenticated user, carrying the grant of its token."""

    def __init__(self, grant: Grant) -> None:
        # client_id is the token's hash: the SDK ties a session to it, so no other token can use the session
        super().__init__(AccessToken(token="", client_id=grant.sha256, scopes=[]))
        self.grant = grant


def _unauthorized(description: str) -> ASGIApp:
    body = json.dumps({"error": "invalid_token", "error_description": description}).encode()

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", f'Bearer error="invalid_token", error_description="{description}"'.encode()),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return respond


class BearerTokens:
    """ASGI middleware: every HTTP request needs a bearer token the tokens file holds, else ``401``.

    Args:
        app: the application behind it.
        tokens: the tokens file.
    """

    def __init__(self, app: ASGIApp, tokens: TokenFile) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the server's start and stop
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b"")
        scheme, _, token = header.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            await _unauthorized("a bearer token is required")(scope, receive, send)
            return
        grant = self.tokens.grant(token.strip())
        if grant is None:
            await _unauthorized("unknown token")(scope, receive, send)
            return
        scope["user"] = _TokenUser(grant)
        await self.app(scope, receive, send)


def token_binding(store: SharedMemoryStore) -> Resolve:
    """The resolver of an HTTP server with tokens: each request's binding is its token's.

    Args:
        store: the store.

    Returns:
        A resolver reading the grant :class:`BearerTokens` put on the request.
    """
    bindings: dict[Identity, Binding] = {}
    lock = threading.Lock()

    def resolve(ctx: ServerRequestContext[Any, Any]) -> Binding:
        request = ctx.request
        user = getattr(request, "scope", {}).get("user") if request is not None else None
        if not isinstance(user, _TokenUser):  # the middleware lets no such request through
            raise MCPError(INVALID_REQUEST, "this request carries no token")
        identity = user.grant.identity
        with lock:
            if identity not in bindings:
                bindings[identity] = Binding(store, identity)
            return bindings[identity]

    return resolve


def http_app(store: SharedMemoryStore, *, tokens: TokenFile | None, identity: Identity | None, host: str) -> Any:
    """The ASGI application of the HTTP server (Starlette), at ``/mcp``.

    Args:
        store: the store.
        tokens: the tokens file (None: serve ``identity`` to every caller, on a loopback host only).
        identity: the one identity of a server without tokens.
        host: the address it will be bound to (the SDK protects loopback servers from DNS rebinding).

    Returns:
        The application.

    Raises:
        ValueError: no tokens on an address other machines can reach, or neither tokens nor an identity.
    """
    if tokens is None:
        if not is_loopback(host):
            raise ValueError(
                f"refusing to serve {host} without tokens: anyone who reaches it would act as the agent; "
                "pass --tokens FILE (make tokens with `autogen-shared-memory mcp-token`) or bind 127.0.0.1"
            )
        if identity is None:
            raise ValueError("an HTTP server without tokens needs --agent (the identity it serves)")
        memory = MemoryServer(store, stdio_binding(store, identity))
        return memory.server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    memory = MemoryServer(store, token_binding(store))
    return BearerTokens(memory.server.streamable_http_app(streamable_http_path=MCP_PATH, host=host), tokens)


def serve_http(
    store: SharedMemoryStore, host: str, port: int, *, tokens: TokenFile | None, identity: Identity | None = None
) -> None:
    """Serve the memory over streamable HTTP at ``http://host:port/mcp`` until interrupted.

    Args:
        store: the store.
        host: the address to bind.
        port: the port (0: any free port).
        tokens: the tokens file (None: see :func:`http_app`).
        identity: the one identity of a server without tokens.

    Raises:
        ValueError: see :func:`http_app`.
    """
    import uvicorn

    app = http_app(store, tokens=tokens, identity=identity, host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="on")
