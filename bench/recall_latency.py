"""Search latency of two recall settings side by side, in one process: the previous defaults (no neighbour
context) against the library's defaults, on the same store, interleaved query by query.

Run from the repository root::

    python bench/recall_latency.py --sizes 10000,100000 --queries 300

Per size N, one SQLite store (temp dir; ``--dsn`` for PostgreSQL) holds N generated crew-memory facts
(``common.corpus.make_facts``) in one group scope, in two layouts: ``run`` (written without a session: the
store's run, which neighbour context never links) and ``sessions`` (written in named sessions of
``--session-size`` consecutive facts, so every candidate has neighbours to look up and lend to: the worst
case). Facts are embedded by ``HashEmbedder`` under the real model's id and dimension, so the fill costs no
model time; queries (``common.corpus.make_queries``) are embedded by the real default model
(``OnnxEmbedder``, its query cache off), so "search" is what a caller waits for. "Own work" repeats the
searches with the query's vector computed beforehand (a cache in front of the model): the store's work
alone, the stricter ratio. Each query runs once per setting, the order alternating (A B, B A, ...), after one
warm-up each. Both clocks are reported: wall time, and the process's CPU time per search (every thread: both
legs, and the model's), which a machine shared with other work inflates far less.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common.corpus import make_facts, make_queries

from autogen_shared_memory import DedupSettings, RecallSettings
from autogen_shared_memory.embedding import Vectors
from autogen_shared_memory.onnx_embedding import OnnxEmbedder
from autogen_shared_memory.store import SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder

GROUP = "crew"
SETTINGS = {"previous (no context)": RecallSettings(context_weights=None), "default": RecallSettings()}


class CachedQueries:
    """The real model behind a query -> vector cache (filled before the timed rounds)."""

    def __init__(self, base: OnnxEmbedder) -> None:
        self.base, self.cache = base, {}  # type: ignore[var-annotated]

    @property
    def model_id(self) -> str:
        return self.base.model_id

    @property
    def dimension(self) -> int:
        return self.base.dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [t for t in texts if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.base.embed(missing), strict=True))
        import numpy as np

        return np.stack([self.cache[t] for t in texts])


def fill(location: Any, n: int, layout: str, session_size: int, model: OnnxEmbedder) -> None:
    filler = HashEmbedder(dimension=model.dimension, model_id=model.model_id)
    store = SharedMemoryStore(location, embedder=filler, dedup=DedupSettings(near_duplicate=1.01, similar=1.01))
    agent = store.as_agent("writer", group=GROUP, join=True)
    facts = make_facts(n, seed=11)
    for lo in range(0, n, 2000):
        chunk = facts[lo : lo + 2000]
        if layout == "sessions":
            items: list[Any] = [
                {"content": t, "session_id": f"s{(lo + i) // session_size}"} for i, t in enumerate(chunk)
            ]
        else:
            items = list(chunk)
        agent.remember_many(items, "group")
    store.close()


def measure(location: Any, queries: list[str], embedder: Any) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    stores = {name: SharedMemoryStore(location, embedder=embedder, recall=s) for name, s in SETTINGS.items()}
    handles = {name: st.as_agent("writer", group=GROUP) for name, st in stores.items()}
    names = list(handles)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        handles[name].search(queries[0], "group", top_k=10)
    for i, q in enumerate(queries):
        for name in names if i % 2 == 0 else names[::-1]:
            t, c = time.perf_counter(), time.process_time()
            handles[name].search(q, "group", top_k=10)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    for st in stores.values():
        st.close()
    return times, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--session-size", type=int, default=20)
    parser.add_argument("--layouts", default="run,sessions")
    parser.add_argument("--dsn", help="PostgreSQL DSN (one schema per size and layout); default: SQLite files")
    args = parser.parse_args(argv)
    model = OnnxEmbedder(cache_size=0)  # every timed "search" embeds its query
    queries = make_queries(args.queries, seed=3)
    cached = CachedQueries(model)
    cached.embed(queries)
    rows = []
    with tempfile.TemporaryDirectory(prefix="recall-latency-") as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            for layout in args.layouts.split(","):
                if args.dsn:
                    from autogen_shared_memory.backends.postgres import PostgresBackend

                    def location(n: int = n, layout: str = layout) -> Any:
                        return PostgresBackend(args.dsn, schema=f"lat_{layout}_{n}")
                else:

                    def location(n: int = n, layout: str = layout) -> Any:
                        return Path(tmp) / f"{layout}-{n}"

                started = time.perf_counter()
                fill(location(), n, layout, args.session_size, model)
                print(f"filled {n} ({layout}) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
                for kind, embedder in (("search", model), ("own work", cached)):
                    wall, cpu = measure(location(), queries, embedder)
                    for clock, times in (("wall", wall), ("CPU", cpu)):
                        p50 = {name: statistics.median(v) * 1000 for name, v in times.items()}
                        old, new = p50["previous (no context)"], p50["default"]
                        rows.append((n, layout, f"{kind}, {clock}", old, new, new / old))
                        print(
                            f"{n} {layout} {kind} {clock}: {old:.2f} -> {new:.2f} ms ({new / old:.2f}x)",
                            file=sys.stderr,
                        )
    print("| facts | layout | measure | p50 previous defaults (ms) | p50 defaults (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for n, layout, kind, old, new, ratio in rows:
        print(f"| {n:,} | {layout} | {kind} | {old:.2f} | {new:.2f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
