"""PostgreSQL search in the process or in the server (``PostgresBackend(search=...)``): recall, latency, memory.

Run from the repository root::

    nice python bench/pg_server_search.py --size 100000 --json bench/results/pg_server_search.json \\
        --markdown bench/results/pg_server_search.md
    python bench/pg_server_search.py --size 5000 --queries 30 --rounds 1          # quick check

One group scope of ``--size`` facts (bench/common's corpus: the real all-MiniLM-L6-v2 vector of each fact's core
sentence plus calibrated noise; queries embedded by the real model, ahead of the timed calls) is written in
process mode, then opened with ``search="server"`` (which builds the server's indexes: timed). Then:

* recall: top-10 overlap of each leg (semantic depth 50 as the store asks, lexical) and of the fused
  ``search`` (top_k=10) in server mode against in-process search (the semantic leg in process is exact);
* latency: p50/p95 of each leg and of ``search`` (top_k=5), modes interleaved over ``--rounds`` rounds,
  medians of the rounds' p50 and p95;
* memory: a new process per mode (interleaved, twice) opens the backend, searches ``--worker-queries``
  queries (both legs) and reports its RSS and its first search's time; a new process that only writes 2,000
  facts (default thresholds) reports its RSS;
* writes: batches of 250 (near-duplicate check off) into the scope before the server's indexes exist and
  after (every writer pays for the HNSW and GIN entries once they exist), before/after/before again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
from common.corpus import make_corpus, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import current_rss_mb, log, machine_info, pct
from common.pgserver import pg_server, server_settings

from autogen_shared_memory import OnnxEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search.text import query_terms
from autogen_shared_memory.settings import DedupSettings

GROUP = "bench"
REF = ScopeRef("group", GROUP)
FILTERS = Filters()
DEPTH = 50  # the store's search depth per leg


def series(items: Sequence[Any], fn: Callable[[Any], Any]) -> dict[str, float]:
    times = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": statistics.median(times), "p95_ms": pct(times, 95)}


def overlap(a: Sequence[str], b: Sequence[str], k: int = 10) -> float:
    top = set(a[:k])
    return len(top & set(b[:k])) / max(len(top), 1) if top else 1.0


class RandomEmbedder:
    """A random unit vector per text under the real model's id: a writing worker without a model's memory."""

    def __init__(self, model_id: str) -> None:
        self.model_id, self.dimension = model_id, 384
        self._rng = np.random.default_rng(5)

    def embed(self, texts: Sequence[str]) -> Any:
        v = self._rng.standard_normal((len(texts), self.dimension)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def worker(args: argparse.Namespace) -> None:
    """A new process: open the backend in one mode, search (or write), report RSS and the first search's time."""
    base = current_rss_mb()
    backend = PostgresBackend(
        args.dsn, schema=args.schema, search=args.mode, **({"ann_ef": args.ef} if args.mode == "server" else {})
    )
    out: dict[str, Any] = {"rss_open_mb": current_rss_mb(), "rss_start_mb": base}
    if args.worker == "search":
        data = np.load(args.vectors)
        queries = json.loads(Path(args.queries_file).read_text())
        t0 = time.perf_counter()
        backend.semantic([REF], data[0], DEPTH, FILTERS)
        backend.lexical([REF], query_terms(queries[0]), DEPTH, FILTERS)
        out["first_search_s"] = time.perf_counter() - t0
        for q, v in zip(queries[1:], data[1:], strict=True):
            backend.semantic([REF], v, DEPTH, FILTERS)
            backend.lexical([REF], query_terms(q), DEPTH, FILTERS)
    else:
        store = SharedMemoryStore(backend, embedder=RandomEmbedder(OnnxEmbedder().model_id))
        texts = [f"worker note {i}: the {uuid.uuid4().hex[:6]} rollout waits on review" for i in range(2000)]
        t0 = time.perf_counter()
        for i in range(0, len(texts), 250):
            store.as_operator(GROUP).remember_many(texts[i : i + 250], "group")
        out["write_s"] = time.perf_counter() - t0
    out["rss_mb"] = current_rss_mb()
    backend.close()
    print(json.dumps(out))


def spawn(kind: str, mode: str, dsn: str, schema: str, vectors: Path, queries: Path, ef: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        kind,
        "--mode",
        mode,
        "--dsn",
        dsn,
        "--schema",
        schema,
        "--ef",
        str(ef),
    ]
    cmd += ["--vectors", str(vectors), "--queries-file", str(queries)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--worker-queries", type=int, default=50)
    p.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    p.add_argument("--reuse", help="an existing schema this benchmark filled: measure search only")
    p.add_argument("--ef", type=int, default=128, help="ann_ef (hnsw.ef_search) of the server mode")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    p.add_argument("--worker", choices=["search", "write"], help=argparse.SUPPRESS)
    p.add_argument("--mode", default="process", help=argparse.SUPPRESS)
    p.add_argument("--schema", help=argparse.SUPPRESS)
    p.add_argument("--vectors", help=argparse.SUPPRESS)
    p.add_argument("--queries-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return

    model = OnnxEmbedder()
    model.load()
    corpus = make_corpus(args.size + 20_000, n_cores=5000, seed=1234)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 256, seed=1234)["sigma"]
    facts, fresh = corpus.facts[: args.size], corpus.facts[args.size :]
    queries = make_queries(args.queries, seed=11)
    qvec = {q: model.embed([q])[0] for q in queries}

    class Embedder(PooledNoiseEmbedder):
        def embed(self, texts: Any) -> Any:
            if texts[0] in corpus.core_of:
                return super().embed(texts)
            return np.stack([qvec[t] if t in qvec else model.embed([t])[0] for t in texts])

    res: dict[str, Any] = {
        "machine": machine_info("onnx", model),
        "size": args.size,
        "queries": len(queries),
        "ef": args.ef,
    }
    with pg_server(args.dsn) as dsn:
        res["server"] = server_settings(dsn)
        schema = args.reuse or f"srv_{uuid.uuid4().hex[:8]}"
        process = PostgresBackend(dsn, schema=schema)
        off = DedupSettings(near_duplicate=1.01, similar=1.01)
        writer = SharedMemoryStore(
            process, embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, 1234), dedup=off
        )
        t0 = time.perf_counter()
        for i in range(0, 0 if args.reuse else len(facts), 5000):
            writer.as_operator(GROUP).remember_many(facts[i : i + 5000], "group")
        res["populate_s"] = time.perf_counter() - t0
        log(f"{args.size:,} facts in {res['populate_s']:.0f} s")
        chunks = iter([fresh[i : i + 1000] for i in range(0, len(fresh), 1000)])

        def write_rate(store: SharedMemoryStore) -> float:
            batch = next(chunks)
            t0 = time.perf_counter()
            for i in range(0, len(batch), 250):
                store.as_operator(GROUP).remember_many(batch[i : i + 250], "group")
            return len(batch) / (time.perf_counter() - t0)

        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {schema}.asm_facts")
        res["write_per_s_plain"] = [] if args.reuse else [write_rate(writer)]
        t0 = time.perf_counter()
        server = PostgresBackend(dsn, schema=schema, search="server", ann_ef=args.ef)
        res["enable_s"] = time.perf_counter() - t0
        with psycopg.connect(dsn, autocommit=True) as conn:
            res["index_mb"] = {
                name: conn.execute("SELECT pg_relation_size(%s::regclass)", (f"{schema}.{name}",)).fetchone()[0] / 1e6  # type: ignore[index]
                for name in ("asm_facts_stems", "asm_facts_hnsw_384", "asm_facts_stems_missing")
            }
        log(f"server search enabled in {res['enable_s']:.0f} s: {res['index_mb']}")
        indexed = SharedMemoryStore(
            PostgresBackend(dsn, schema=schema),
            embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, 1234),
            dedup=off,
        )
        if not args.reuse:
            res["write_per_s_indexed"] = [write_rate(indexed), write_rate(indexed)]
            res["write_per_s_plain"].append(write_rate(writer))  # an old writer: no stems, but the indexes' entries

        in_process = SharedMemoryStore(process, embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, 1234))
        in_server = SharedMemoryStore(server, embedder=Embedder(model.model_id, cores, corpus.core_of, sigma, 1234))
        for q in queries[:5]:  # warm: the in-process copy of the scope is loaded here
            in_process.as_operator(GROUP).search(q, "group")
            in_server.as_operator(GROUP).search(q, "group")
        quality: dict[str, list[float]] = {"semantic": [], "lexical": [], "search": [], "semantic_at_50": []}
        for q in queries:
            a = [i for _, i, _ in process.semantic([REF], qvec[q], DEPTH, FILTERS)]
            b = [i for _, i, _ in server.semantic([REF], qvec[q], DEPTH, FILTERS)]
            quality["semantic"].append(overlap(a, b))
            quality["semantic_at_50"].append(overlap(a, b, DEPTH))
            terms = query_terms(q)
            quality["lexical"].append(
                overlap(
                    [i for _, i, _ in process.lexical([REF], terms, DEPTH, FILTERS)],
                    [i for _, i, _ in server.lexical([REF], terms, DEPTH, FILTERS)],
                )
            )
            quality["search"].append(
                overlap(
                    [h.fact.id for h in in_process.as_operator(GROUP).search(q, "group", top_k=10)],
                    [h.fact.id for h in in_server.as_operator(GROUP).search(q, "group", top_k=10)],
                )
            )
        res["top10_overlap"] = {k: statistics.mean(v) for k, v in quality.items()}
        log(f"overlap {res['top10_overlap']}")

        rounds: dict[str, list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for mode, backend, store in (("process", process, in_process), ("server", server, in_server)):
                for leg, fn in (
                    ("semantic", lambda q, b=backend: b.semantic([REF], qvec[q], DEPTH, FILTERS)),
                    ("lexical", lambda q, b=backend: b.lexical([REF], query_terms(q), DEPTH, FILTERS)),
                    ("search", lambda q, s=store: s.as_operator(GROUP).search(q, "group", top_k=5)),
                ):
                    rounds.setdefault(f"{mode}.{leg}", []).append(series(queries, fn))
            log(f"latency round {r + 1}: { ({k: round(v[-1]['p50_ms'], 2) for k, v in rounds.items()}) }")
        res["latency_ms"] = {
            k: {m: statistics.median(x[m] for x in v) for m in ("p50_ms", "p95_ms")} for k, v in rounds.items()
        }

        tmp = Path(f"/tmp/pg_server_search_{uuid.uuid4().hex[:6]}")
        tmp.mkdir()
        worker_queries = queries[: args.worker_queries]
        np.save(tmp / "v.npy", np.stack([qvec[q] for q in worker_queries]))
        (tmp / "q.json").write_text(json.dumps(worker_queries))
        workers: dict[str, list[dict[str, Any]]] = {}
        for _ in range(2):
            for mode in ("process", "server"):
                workers.setdefault(f"search.{mode}", []).append(
                    spawn("search", mode, dsn, schema, tmp / "v.npy", tmp / "q.json", args.ef)
                )
        for mode in ("process", "server"):
            workers.setdefault(f"write.{mode}", []).append(
                spawn("write", mode, dsn, schema, tmp / "v.npy", tmp / "q.json", args.ef)
            )
        res["workers"] = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in workers.items()}
        log(f"workers {res['workers']}")
        for b in (server, process):
            b.close()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    lines = table(res)
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")


def table(res: dict[str, Any]) -> list[str]:
    lat, w, o = res["latency_ms"], res["workers"], res["top10_overlap"]
    rows = [
        f"PostgreSQL search in the process vs in the server, one group scope of {res['size']:,} facts, "
        f"{res['queries']} queries (medians of rounds)",
        "",
        "| | process | server | server / process |",
        "|---|---:|---:|---:|",
    ]
    for leg in ("semantic", "lexical", "search"):
        for m in ("p50_ms", "p95_ms"):
            a, b = lat[f"process.{leg}"][m], lat[f"server.{leg}"][m]
            rows.append(f"| {leg} {m[:3]} (ms) | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
    a, b = w["search.process"], w["search.server"]
    rows.append(
        f"| searching worker RSS (MB) | {a['rss_mb']:.0f} | {b['rss_mb']:.0f} | {b['rss_mb'] / a['rss_mb']:.2f}x |"
    )
    rows.append(
        f"| new process's first search (s) | {a['first_search_s']:.2f} | {b['first_search_s']:.2f} | "
        f"{b['first_search_s'] / a['first_search_s']:.2f}x |"
    )
    a, b = w["write.process"], w["write.server"]
    rows.append(f"| writing worker RSS (MB) | {a['rss_mb']:.0f} | {b['rss_mb']:.0f} | |")
    if res.get("write_per_s_indexed"):
        plain, idx = statistics.median(res["write_per_s_plain"]), statistics.median(res["write_per_s_indexed"])
        rows.append(f"| batched writes (facts/s, check off) | {plain:,.0f} | {idx:,.0f} | {idx / plain:.2f}x |")
    rows += [
        "",
        f"Top-10 overlap with in-process search: semantic leg {o['semantic']:.3f} (top 50: {o['semantic_at_50']:.3f}), "
        f"lexical leg {o['lexical']:.3f}, fused search {o['search']:.3f} (hnsw.ef_search {res['ef']})."
        + (
            f" Enabling server search on the {res['size']:,} facts took {res['enable_s']:.0f} s; indexes (MB): "
            + ", ".join(f"{k} {v:.0f}" for k, v in res["index_mb"].items())
            if res.get("write_per_s_indexed")
            else ""
        ),
    ]
    return rows


if __name__ == "__main__":
    main()
