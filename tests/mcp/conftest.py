"""Fixtures of the MCP server tests (helpers: mcp_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import HttpServer


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Any]:
    started: list[HttpServer] = []

    def start(*args: str, root: Path | None = None) -> HttpServer:
        server = HttpServer(root or tmp_path / "store", *args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
