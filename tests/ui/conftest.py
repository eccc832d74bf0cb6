"""Fixtures of the inspector's tests: a seeded store in a private folder, the app on it, a real uvicorn server on
a free loopback port, and Debian's Chromium driven by Playwright (skipped, with the reason, when absent)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.ui import create_app, open_inspector
from autogen_shared_memory.ui.data import Inspector

TOKEN = "operator-token-for-tests-0123456789"
OPERATOR = "ops-lead"
POLICY = WritePolicy(review_global_writes=True, max_fact_bytes=256 * 1024, operator_id=OPERATOR)
HOSTILE_AGENT = "<img src=x onerror=alert(5)>"
HOSTILE = {
    "script": "<script>window.__pwned = 1; alert(1)</script> plain words after the script",
    "onerror": '<img src=x onerror="window.__pwned = 2; alert(2)"> picture caption',
    "javascript": '[click](javascript:alert(3)) <a href="javascript:alert(4)">a javascript: link</a>',
    "bidi": "invoice \u202egpj.exe\u202c total due",
    "control": "bell\x07 escape\x1b[31mred\x1b[0m backspace\x08 separator\u2028end",
    "long": "L" * 65536,
}


@dataclass
class Seeded:
    """What the seeded store holds, for the tests to look for."""

    root: Path
    old_group_fact: str  # alice's, superseded by bob's
    group_fact: str  # bob's correction
    bob_private: str
    held: list[str]  # global writes held for review (alice's)
    hostile: dict[str, str]  # name -> fact id
    expired: str
    task_title: str
    case_entry: str


def seed(root: Path, backend: Any = None) -> Seeded:
    """A store with a group of two agents (and an outsider), a supersede chain, private facts, held global
    writes, hostile texts, an expired fact and records of every kind: the SQLite files in ``root``, or
    ``backend`` (closed after)."""
    store = SharedMemoryStore(backend or str(root), embedder=HashEmbedder(), policy=POLICY)
    try:
        expired = store.operator.remember("a short-lived note about the canteen menu", "global", ttl_days=1e-7)
        alice = store.as_agent("alice", group="team", join=True)
        bob = store.as_agent("bob", group="team", join=True)
        carol = store.as_agent("carol")
        old = alice.remember("The staging deploy key rotates every Friday.", "group", tags=["ops"])
        new = bob.remember(
            "The staging deploy key rotates every Friday at 17:00 UTC.", "group", supersedes=[old.id], tags=["ops"]
        )
        private = bob.remember("bob's private note: the staging deploy password hint is blue", "agent")
        carol.remember("carol keeps her own deploy checklist", "agent")
        held = [
            alice.remember("All deploys need two approvals.", "global").id,
            alice.remember("Deploy freezes start on December 20.", "global").id,
            alice.remember("Rollbacks are announced in the ops channel.", "global").id,
        ]
        weird = store.as_agent(HOSTILE_AGENT, group="team", join=True)
        weird.remember("a note by an agent with a hostile name", "group")
        hostile = {name: store.operator.remember(text, "global").id for name, text in HOSTILE.items()}
        alice.log_message("Please rotate the staging deploy key.", role="user", source="ops")
        alice.log_tool_call("memory_search", {"query": "deploy key"}, "1 hit", duration_ms=12.0)
        task_title = "Rotate the staging deploy key"
        store.for_agent("alice", "team").create_task(task_title, assignee="bob")
        store.for_agent("alice", "team").register(display_name="Alice", capabilities=["ops", "deploys"])
        case_entry = "Decided: the deploy key rotates weekly."
        alice.case_log().append(case_entry)
    finally:
        store.close()
    return Seeded(root, old.id, new.id, private.id, held, hostile, expired.id, task_title, case_entry)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """A seeded store shared by a module's tests that change nothing."""
    return seed(tmp_path_factory.mktemp("ui") / "store")


@pytest.fixture
def fresh(tmp_path: Path) -> Seeded:
    """A seeded store of the test's own, for a test that approves, rejects or checks files."""
    return seed(tmp_path / "store")


def make_inspector(root: Path, writable: bool = True) -> Inspector:
    return open_inspector(root, embedder=HashEmbedder(), policy=POLICY, writable=writable)


def app_client(root: Path) -> Iterator[TestClient]:
    inspector = make_inspector(root)
    try:
        with TestClient(create_app(inspector, token=TOKEN), base_url="http://127.0.0.1") as client:
            yield client
    finally:
        inspector.store.close()


@pytest.fixture(scope="module")
def client(seeded: Seeded) -> Iterator[TestClient]:
    yield from app_client(seeded.root)


@pytest.fixture
def fresh_client(fresh: Seeded) -> Iterator[TestClient]:
    yield from app_client(fresh.root)


def operator_store(root: Path) -> SharedMemoryStore:
    """The store opened read-write, to check what an action changed."""
    return SharedMemoryStore(str(root), embedder=HashEmbedder(), policy=POLICY)


# ----------------------------------------------------------------------------------------- a real server
@dataclass
class Server:
    url: str
    seeded: Seeded
    inspector: Inspector


def serve(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn in a thread on a free loopback port; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    seeded = seed(tmp_path_factory.mktemp("ui") / "store")
    inspector = make_inspector(seeded.root)
    try:
        for url in serve(create_app(inspector, token=TOKEN)):
            yield Server(url, seeded, inspector)
    finally:
        inspector.store.close()


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the [dev] extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()
