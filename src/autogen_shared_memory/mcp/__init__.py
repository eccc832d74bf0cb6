"""An MCP server for the shared memory (``autogen-shared-memory mcp``; the ``[mcp]`` extra).

Any MCP client (a desktop assistant, an IDE, an agent of any framework) gets the same three memory tools the
framework adapters give, bound to an identity chosen outside the model: at launch over stdio, by bearer
token over streamable HTTP. See docs/mcp.md.
"""

from __future__ import annotations

from typing import Any

from .server import Binding, Identity, MemoryServer, fact_uri, scaffolding, scope_uri, serve_stdio, stdio_binding
from .tokens import Grant, TokenFile, create_token, read_grants, token_hash

_HTTP = ("BearerTokens", "http_app", "is_loopback", "parse_address", "serve_http", "token_binding")


def __getattr__(name: str) -> Any:
    """The HTTP server's names, imported when first used: a stdio server never loads Starlette and the auth."""
    if name in _HTTP:
        from . import http

        return getattr(http, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BearerTokens",
    "Binding",
    "Grant",
    "Identity",
    "MemoryServer",
    "TokenFile",
    "create_token",
    "fact_uri",
    "http_app",
    "is_loopback",
    "parse_address",
    "read_grants",
    "scaffolding",
    "scope_uri",
    "serve_http",
    "serve_stdio",
    "stdio_binding",
    "token_binding",
    "token_hash",
]
