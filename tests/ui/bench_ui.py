"""One-run benchmark of the inspector on a scope of 100,000 facts: the server time of the facts page (with
each filter) and of a search page beyond the store's own search. Not a test (pytest does not collect it):
``python tests/ui/bench_ui.py [N]``. The facts page must answer within 300 ms, a search within 100 ms plus
the search itself."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.ui import create_app, open_inspector

WORDS = "deploy key release migration invoice refund staging branch review ticket customer plan".split()


def fill(root: Path, n: int) -> None:
    fast = DedupSettings(near_duplicate=2.0, similar=2.0)  # distinct texts: no similarity search per write
    with SharedMemoryStore(str(root), embedder=HashEmbedder(), dedup=fast) as store:
        writer = store.as_agent("writer", group="big", join=True)
        other = store.as_agent("other", group="big", join=True)
        batch = 5000
        for start in range(0, n, batch):
            items = [
                {
                    "content": f"fact {i}: {WORDS[i % 12]} {WORDS[(i * 7) % 12]} note number {i}",
                    "tags": ["even"] if i % 2 == 0 else ["odd"],
                }
                for i in range(start, min(n, start + batch))
            ]
            (writer if start // batch % 2 == 0 else other).remember_many(items, "group")
        old = writer.search("fact 17", "group", top_k=1)[0]
        writer.remember("fact 17, corrected", "group", supersedes=[old.id])


def timed(client: TestClient, path: str, params: dict[str, str], runs: int = 5) -> tuple[float, float]:
    """The median of ``runs`` requests: wall time, and the server time the page reports (facts, search)."""
    walls, servers = [], []
    for _ in range(runs):
        started = time.perf_counter()
        body = client.get(path, params=params).json()
        walls.append((time.perf_counter() - started) * 1000)
        servers.append(float(body.get("server_ms", 0.0)))
    return statistics.median(walls), statistics.median(servers)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    kept = Path(sys.argv[2]) if len(sys.argv) > 2 else None  # a folder to fill once and measure again
    with tempfile.TemporaryDirectory() as tmp:
        root = kept or Path(tmp) / "store"
        if not root.exists():
            started = time.perf_counter()
            fill(root, n)
            print(f"filled {n} facts in {time.perf_counter() - started:.1f} s")
        inspector = open_inspector(root, embedder=HashEmbedder())
        try:
            with TestClient(create_app(inspector), base_url="http://127.0.0.1") as client:
                client.get("/facts.json", params={"scope": "group:big"})  # first open of the file
                for label in ("overview, first", "overview, again"):
                    started = time.perf_counter()
                    client.get("/index.json")
                    print(f"{label:20s} wall {(time.perf_counter() - started) * 1000:7.1f} ms")
                for label, params in [
                    ("facts, page 1", {"scope": "group:big"}),
                    ("facts, page 1000", {"scope": "group:big", "page": "1000"}),
                    ("facts, active", {"scope": "group:big", "status": "active"}),
                    ("facts, superseded", {"scope": "group:big", "status": "superseded"}),
                    ("facts, author", {"scope": "group:big", "author": "other"}),
                    ("facts, tag", {"scope": "group:big", "tag": "even"}),
                    ("facts, since", {"scope": "group:big", "since": str(time.time() - 3600)}),
                    ("facts, expired", {"scope": "group:big", "status": "expired"}),
                ]:
                    wall, server = timed(client, "/facts.json", params)
                    print(f"{label:20s} wall {wall:7.1f} ms   page server time {server:7.1f} ms")
                for agent in ("", "writer"):
                    params = {"q": "refund review customer", "agent": agent, "group": "big" if agent else ""}
                    wall, search = timed(client, "/search.json", params)
                    label = f"search as {agent or 'operator'}"
                    print(
                        f"{label:20s} wall {wall:7.1f} ms   store search {search:7.1f} ms   "
                        f"page beyond the search {wall - search:6.1f} ms"
                    )
        finally:
            inspector.store.close()


if __name__ == "__main__":
    main()
