"""Helpers of the MCP server tests: server processes launched as an MCP client config launches them (the
``autogen-shared-memory`` CLI, as ``python -m autogen_shared_memory``), on a store of SQLite files with the
fast test embedder, and HTTP servers on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from mcp import StdioServerParameters

import autogen_shared_memory

SRC = str(Path(autogen_shared_memory.__file__).resolve().parents[1])
# The Python that runs the servers: this one, unless a test run names another (a client whose environment
# holds the 1.x MCP SDK, like autogen-ext 0.7's, then talks to a server on the 2.x SDK, as in a real install).
PYTHON = os.environ.get("AUTOGEN_SHARED_MEMORY_TEST_SERVER_PYTHON", sys.executable)


def server_env(**extra: str) -> dict[str, str]:
    """The environment of a server process: this checkout's package, the hash test embedder."""
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash", **extra}


def cli(*args: str) -> list[str]:
    return [PYTHON, "-m", "autogen_shared_memory", *args]


def stdio_params(root: Path, agent: str, group: str | None = "crew", *extra: str) -> StdioServerParameters:
    """How an MCP client launches a stdio server bound to ``agent`` (and ``group``) on ``root``."""
    args = ["--root", str(root), "--create", "mcp", "--agent", agent, *(["--group", group] if group else []), *extra]
    return StdioServerParameters(command=PYTHON, args=["-m", "autogen_shared_memory", *args], env=server_env())


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*args), capture_output=True, text=True, env=env or server_env(), timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """An HTTP MCP server process; ``url`` is its endpoint."""

    def __init__(self, root: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        command = cli("--root", str(root), "--create", "mcp", "--http", f"127.0.0.1:{self.port}", *args)
        self.process = subprocess.Popen(command, env=server_env(), stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.process.stderr.read() if self.process.stderr else ''}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("the server did not start listening")

    def post(self, authorization: str | None, body: dict[str, Any]) -> httpx.Response:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        return httpx.post(self.url, json=body, headers=headers, timeout=10)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def text(result: Any) -> str:
    """The text of a tool result."""
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")
