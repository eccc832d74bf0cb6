"""Scale benchmark: one group scope grown to 1M facts, exact scan vs the optional HNSW index.

Run from the repository root::

    python bench/bench_scale.py --out docs/benchmarks.md --json bench/results/scale.json   # 10k/100k/1M
    python bench/bench_scale.py --sizes 2000,20000 --real 3000                            # quick check

Measured in ONE process and ONE run, one group scope grown incrementally to each of ``--sizes``:

* search p50/p95 (``store.search(q, "group", ...)``, top_k=5, the real model embeds every query at search
  time) with the default exact index and with ``vector_index="hnsw"`` (a second ``SQLiteBackend`` on the same
  files, its graph built synchronously with ``build_ann`` and timed), with where the time goes (phases inside
  the search, and the lexical and semantic legs alone on pre-embedded queries); the query embedding alone is
  the reference;
* process RSS after the exact searches and after the HNSW build, and peak RSS;
* remember throughput into the big scope (real model, default near-duplicate check);
* cold start: a new process opens the store and returns its first search result (exact);
* recall@10 (and @50, the depth a search takes) of the HNSW semantic leg against the exact scan, on the
  pooled-noise vectors at each size and on ``--real`` facts embedded by the real model, for several ``ef``.

How the facts and vectors are made is bench_store.py's (``bench/common``, shared, not copied): facts from word-list
templates, vectors = the real all-MiniLM-L6-v2 vector of the fact's *core* sentence (``--pool`` of them) +
Gaussian noise calibrated in the same run. Population goes through ``remember_many`` with near-duplicate
detection off. The machine is not assumed quiet: every phase records how many cores other processes used.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from autogen_shared_memory import DedupSettings, WritePolicy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from common.corpus import make_corpus, make_facts, make_queries
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import (
    Monitor,
    PhaseTimer,
    busy_cpu_seconds,
    cpu_window,
    current_rss_mb,
    machine_info,
    own_cpu_seconds,
    pct,
    peak_rss_mb,
    summary_ms,
)
from common.report import table, write_section
from common.workloads import AGENT, COLD_QUERY, GROUP, cold_start, query_embed_series

import autogen_shared_memory.backends.sqlite.backend as sqlite_backend
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.embedding import SentenceTransformerEmbedder, Vectors
from autogen_shared_memory.search.index import Ann
from autogen_shared_memory.search.text import query_terms
from autogen_shared_memory.store import SharedMemoryStore

SECTION = "## Scale to 1M facts"
REAL_GROUP = "g-real"
T0 = time.perf_counter()


def log(msg: str) -> None:
    el = time.perf_counter() - T0
    print(f"[{time.strftime('%H:%M:%S')} +{el / 60:5.1f} min] {msg}", file=sys.stderr, flush=True)


def quiet_monitor() -> Monitor:
    """The shared workloads (``common.workloads``) take a Monitor; this one never aborts (we only record)."""
    return Monitor(0, 0.3, may_abort=False)


@contextlib.contextmanager
def phase(rec: dict[str, Any], name: str) -> Iterator[None]:
    """Record the wall time and the other processes' CPU use (cores) of a phase into ``rec[name]``."""
    with cpu_window() as w:
        yield
    rec[name] = {"wall_s": w.wall, "other_cores": w.other_cores}


def scope_file_mb(backend: SQLiteBackend, ref: ScopeRef) -> float:
    base = backend.path_of(ref)
    return sum(p.stat().st_size for p in base.parent.glob(base.name + "*")) / 1e6


# --------------------------------------------------------------------------------------------- measuring
def search_series(
    store: SharedMemoryStore, queries: Sequence[str], warmup: Sequence[str], embed_p50: float
) -> tuple[dict[str, Any], list[list[str]]]:
    """Timed ``store.search`` of each query (group scope, top_k=5) with a per-phase breakdown; the hit ids."""
    kwargs: dict[str, Any] = {"agent_id": AGENT, "group_id": GROUP, "top_k": 5}
    t = time.perf_counter()
    store.operator.search(warmup[0], "group", **kwargs)
    first_ms = (time.perf_counter() - t) * 1000
    for q in warmup[1:]:
        store.operator.search(q, "group", **kwargs)
    timer = PhaseTimer()
    times: list[float] = []
    phases: dict[str, list[float]] = {p: [] for p in PhaseTimer.PHASES}
    ids: list[list[str]] = []
    with timer.attached(store), cpu_window() as w:
        for q in queries:
            t = time.perf_counter()
            hits = store.operator.search(q, "group", **kwargs)
            times.append(time.perf_counter() - t)
            for p, v in timer.take().items():
                phases[p].append(v)
            ids.append([h.id for h in hits])
    lat = summary_ms(times)
    return {
        "latency": lat,
        "ratio_p50_to_embed_p50": lat["p50_ms"] / embed_p50,
        "phases_p50_ms": {p: pct(v, 50) * 1000 for p, v in phases.items()},
        "first_search_ms": first_ms,
        "mean_hits": float(np.mean([len(i) for i in ids])),
        "other_cores": w.other_cores,
    }, ids


Ranked = list[tuple[str, float]]  # (fact id, cosine), best first


def semantic(backend: SQLiteBackend, ref: ScopeRef, vector: Vectors, k: int, filters: Filters) -> Ranked:
    """The semantic leg over one scope."""
    return [(fid, cos) for _, fid, cos in backend.semantic([ref], vector, k, filters)]


def legs_alone(
    backend: SQLiteBackend, ref: ScopeRef, queries: Sequence[str], vectors: Vectors, depth: int
) -> tuple[dict[str, Any], list[Ranked]]:
    """The lexical leg (FTS5, query terms) and the semantic leg (pre-embedded query, ``depth`` candidates)
    called directly, as ``search`` calls them; the semantic results for recall."""
    filters = Filters()
    lex_t: list[float] = []
    sem_t: list[float] = []
    sem_ids: list[Ranked] = []
    with cpu_window() as w:
        for q, v in zip(queries, vectors, strict=True):
            terms = query_terms(q)
            t = time.perf_counter()
            backend.lexical([ref], terms, depth, filters)
            lex_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            found = semantic(backend, ref, v, depth, filters)
            sem_t.append(time.perf_counter() - t)
            sem_ids.append(found)
    return {
        "lexical": summary_ms(lex_t),
        "semantic": summary_ms(sem_t),
        "depth": depth,
        "other_cores": w.other_cores,
    }, sem_ids


def recall_at(truth: Sequence[Ranked], approx: Sequence[Ranked], k: int) -> float:
    got = []
    for t, a in zip(truth, approx, strict=True):
        want = {fid for fid, _ in t[:k]}
        got.append(len(want & {fid for fid, _ in a[:k]}) / max(1, len(want)))
    return float(np.mean(got))


def mean_cos(ranked: Sequence[Ranked], k: int) -> float:
    return float(np.mean([np.mean([c for _, c in r[:k]]) for r in ranked if r]))


def ef_sweep(
    backend: SQLiteBackend, ref: ScopeRef, vectors: Vectors, truth: Sequence[Ranked], efs: Sequence[int]
) -> list[dict[str, Any]]:
    """Recall@10 (semantic leg asked for 10) and @50 (asked for 50, as a search does) of the HNSW leg vs the
    exact scan's ``truth`` (top 50 per query), with the leg's latency and the mean cosine of its top 10
    against the exact top 10's (near-ties swap ids at almost no cost in similarity), for each ``ef``."""
    filters = Filters()
    old = backend.ann_ef
    out: list[dict[str, Any]] = []
    try:
        for ef in efs:
            backend.ann_ef = ef
            row: dict[str, Any] = {"ef": ef}
            for k in (10, 50):
                found: list[Ranked] = []
                times: list[float] = []
                for v in vectors:
                    t = time.perf_counter()
                    found.append(semantic(backend, ref, v, k, filters))
                    times.append(time.perf_counter() - t)
                row[f"recall@{k}"] = recall_at(truth, found, k)
                row[f"mean_cos@{k}"] = mean_cos(found, k)
                row[f"exact_mean_cos@{k}"] = mean_cos(truth, k)
                row[f"p50_ms@{k}"] = pct(times, 50) * 1000
                row[f"p95_ms@{k}"] = pct(times, 95) * 1000
            out.append(row)
    finally:
        backend.ann_ef = old
    return out


def agreement(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]) -> dict[str, float]:
    """How far two stores' fused top-5 lists agree: mean overlap, and the share of identical lists."""
    overlap = [len(set(x) & set(y)) / max(1, len(x)) for x, y in zip(a, b, strict=True)]
    return {
        "top5_overlap": float(np.mean(overlap)),
        "identical_top5": float(np.mean([list(x) == list(y) for x, y in zip(a, b, strict=True)])),
        "n": len(overlap),
    }


def open_hnsw(root: Path, ref: ScopeRef, probe: Vectors, ef: int) -> tuple[SQLiteBackend, float, float]:
    """A second backend on ``root`` with ``vector_index="hnsw"``: load the scope's vectors from the file (an
    exact search with the graph held off), then build the graph synchronously. Returns (backend, load s,
    build s)."""
    backend = SQLiteBackend(root, vector_index="hnsw", ann_min_facts=10**12, ann_ef=ef)
    t = time.perf_counter()
    semantic(backend, ref, probe, 1, Filters())  # loads the matrix, exact scan (graph held off)
    load_s = time.perf_counter() - t
    backend.ann_min_facts = 1  # the graph answers at every size measured here (library default: 20,000+)
    t = time.perf_counter()
    if not backend.build_ann(ref):
        raise RuntimeError("build_ann built nothing")
    return backend, load_s, time.perf_counter() - t


@contextlib.contextmanager
def write_path_timer(store: SharedMemoryStore) -> Iterator[dict[str, float]]:
    """Attribute remember time to embed / backend write / near-duplicate scan (bench-only wrapping; the
    ``NearestExisting`` as the SQLite backend module imports it is wrapped to time it, nothing else changes)."""
    spent = {"embed": 0.0, "write": 0.0, "near_dup_scan": 0.0}
    real_near = sqlite_backend.NearestExisting

    def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t

        return run

    store.embedder.embed = timed("embed", store.embedder.embed)  # type: ignore[method-assign]
    store.backend.write = timed("write", store.backend.write)  # type: ignore[method-assign]
    sqlite_backend.NearestExisting = timed("near_dup_scan", real_near)  # type: ignore[misc,assignment]
    try:
        yield spent
    finally:
        sqlite_backend.NearestExisting = real_near  # type: ignore[misc]
        for obj, attr in ((store.embedder, "embed"), (store.backend, "write")):
            with contextlib.suppress(AttributeError):
                delattr(obj, attr)


def remember_into(
    store: SharedMemoryStore,
    embedder: SentenceTransformerEmbedder,
    singles: list[str],
    batched: list[str],
    batch: int,
    n_before: int,
) -> dict[str, Any]:
    """Real-model writes into the big scope with the default near-duplicate check: the model's own batch rate
    on the batched texts, then ``remember_many`` of them, then single ``remember`` calls."""
    t = time.perf_counter()
    embedder.embed(batched)
    model_rate = len(batched) / (time.perf_counter() - t)
    created = 0
    per_batch: list[dict[str, float]] = []
    with cpu_window() as w, write_path_timer(store) as spent:
        t = time.perf_counter()
        for lo in range(0, len(batched), batch):
            for k in spent:
                spent[k] = 0.0
            tb = time.perf_counter()
            receipts = store.as_operator(GROUP).remember_many(batched[lo : lo + batch], "group")
            per_batch.append({"seconds": time.perf_counter() - tb, **spent})
            created += sum(r.status == "created" for r in receipts)
        batch_s = time.perf_counter() - t
        times: list[float] = []
        parts: dict[str, list[float]] = {k: [] for k in spent}
        for text in singles:
            for k in spent:
                spent[k] = 0.0
            t = time.perf_counter()
            r = store.as_operator(GROUP).remember(text, "group")
            times.append(time.perf_counter() - t)
            created += r.status == "created"
            for k, v in spent.items():
                parts[k].append(v)
    rate = len(batched) / batch_s
    return {
        "n_before": n_before,
        "model_rate": model_rate,
        "batched": {
            "n": len(batched),
            "batch": batch,
            "seconds": batch_s,
            "rate": rate,
            "ratio_to_model": rate / model_rate,
            "per_batch_mean_s": {k: float(np.mean([b[k] for b in per_batch])) for k in per_batch[0]},
        },
        "single": {**summary_ms(times), "p50_parts_ms": {k: pct(v, 50) * 1000 for k, v in parts.items()}},
        "created": int(created),
        "written": len(batched) + len(singles),
        "other_cores": w.other_cores,
    }


def log_remember(size: int, index: str, rm: dict[str, Any]) -> None:
    log(
        f"@{size:,} remember ({index}): model {rm['model_rate']:.0f} texts/s, remember_many "
        f"{rm['batched']['rate']:.0f}/s (near-dup lookup "
        f"{rm['batched']['per_batch_mean_s']['near_dup_scan'] * 1000:.0f} ms per batch), single p50 "
        f"{rm['single']['p50_ms']:.1f} ms " + " ".join(f"{k} {v:.1f}" for k, v in rm["single"]["p50_parts_ms"].items())
    )


def populate(store: SharedMemoryStore, facts: Sequence[str], batch: int, every: float = 30.0) -> int:
    created = 0
    last = time.perf_counter()
    for lo in range(0, len(facts), batch):
        receipts = store.as_operator(GROUP).remember_many(list(facts[lo : lo + batch]), "group")
        created += sum(r.status == "created" for r in receipts)
        if time.perf_counter() - last > every:
            last = time.perf_counter()
            log(f"  populated {lo + batch:,} of {len(facts):,}")
    return created


def predict_build_s(prev: tuple[int, float] | None, n: int) -> float | None:
    """HNSW insertion is ~O(log n) per element: scale the last measured build by n log n."""
    if prev is None:
        return None
    n0, s0 = prev
    return s0 * (n / n0) * (math.log(n) / math.log(max(n0, 2)))


# --------------------------------------------------------------------------------------------- phases
def run_real(args: argparse.Namespace, embedder: SentenceTransformerEmbedder, exclude: set[str]) -> dict[str, Any]:
    """HNSW recall on REAL MiniLM vectors: ``--real`` facts embedded by the model into their own scope."""
    rec: dict[str, Any] = {"n": args.real, "queries": args.real_queries}
    texts = make_facts(args.real, args.seed + 11, exclude)
    queries = make_queries(args.real_queries, args.seed + 12)
    root = args.root / "real"
    ref = ScopeRef("group", REAL_GROUP)
    writer = SharedMemoryStore(root, embedder=embedder, dedup=DedupSettings(near_duplicate=1.01))
    writer.operator.add_member(REAL_GROUP, AGENT)
    log(f"real vectors: embedding {len(texts):,} facts with the model into their own scope")
    created = 0
    with phase(rec, "populate"):
        last = time.perf_counter()
        for lo in range(0, len(texts), 512):
            created += sum(
                r.status == "created"
                for r in writer.as_operator(REAL_GROUP).remember_many(texts[lo : lo + 512], "group")
            )
            if time.perf_counter() - last > 30:
                last = time.perf_counter()
                log(f"  embedded {lo + 512:,} of {len(texts):,}")
    rec["created"] = created
    rec["populate_rate"] = len(texts) / rec["populate"]["wall_s"]
    log(f"real vectors: {created:,} facts in {rec['populate']['wall_s']:.0f} s ({rec['populate_rate']:.0f}/s)")
    t = time.perf_counter()
    qv = embedder.embed(queries)
    rec["query_embed_batch_s"] = time.perf_counter() - t

    exact = writer.backend
    assert isinstance(exact, SQLiteBackend)
    legs_x, truth = legs_alone(exact, ref, queries, qv, 50)
    hnsw, load_s, build_s = open_hnsw(root, ref, qv[0], args.ef)
    rec.update(load_vectors_s=load_s, build_s=build_s, build_rate=args.real / build_s)
    log(f"real vectors: hnsw graph of {args.real:,} built in {build_s:.1f} s")
    legs_h, approx = legs_alone(hnsw, ref, queries, qv, 50)
    legs_h["recall@50_vs_exact"] = recall_at(truth, approx, 50)
    rec["legs"] = {"exact": legs_x, "hnsw": legs_h}
    rec["sweep"] = ef_sweep(hnsw, ref, qv, truth, args.efs)
    for row in rec["sweep"]:
        log(
            f"real vectors ef={row['ef']}: recall@10 {row['recall@10']:.4f} ({row['p50_ms@10']:.2f} ms), "
            f"recall@50 {row['recall@50']:.4f} ({row['p50_ms@50']:.2f} ms)"
        )
    # End to end: the fused top 5 of a default exact store and an hnsw store on the same queries.
    reader_x = SharedMemoryStore(exact, embedder=embedder)
    reader_h = SharedMemoryStore(hnsw, embedder=embedder)
    kwargs: dict[str, Any] = {"agent_id": AGENT, "group_id": REAL_GROUP, "top_k": 5}
    fused: dict[str, list[list[str]]] = {"exact": [], "hnsw": []}
    lat: dict[str, list[float]] = {"exact": [], "hnsw": []}
    with phase(rec, "fused"):
        for q in queries:
            for name, store in (("exact", reader_x), ("hnsw", reader_h)):
                t = time.perf_counter()
                fused[name].append([h.id for h in store.operator.search(q, "group", **kwargs)])
                lat[name].append(time.perf_counter() - t)
    rec["fused"] = {**agreement(fused["exact"], fused["hnsw"]), **{k: summary_ms(v) for k, v in lat.items()}}
    log(
        f"real vectors: fused top-5 overlap {rec['fused']['top5_overlap']:.4f}, identical "
        f"{rec['fused']['identical_top5']:.3f}"
    )
    hnsw.close()
    writer.close()
    shutil.rmtree(root, ignore_errors=True)
    return rec


def run(args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python " + shlex.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
            "args": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out", "json")
            },
            "hnsw_params": {"M": Ann.M, "ef_construction": Ann.EF_CONSTRUCTION, "ef_search": args.ef},
        },
        "model": {},
        "sizes": [],
    }
    busy0, own0 = busy_cpu_seconds(), own_cpu_seconds()
    sizes: list[int] = args.sizes
    biggest = max(sizes)
    pool = min(args.pool, biggest)
    t = time.perf_counter()
    corpus = make_corpus(biggest, pool, args.seed)
    used = set(corpus.facts)
    per_remember = args.remember_batches * args.remember_batch + args.single_calls
    n_extra = 2 * len(sizes) * per_remember  # exact and hnsw stores
    extra = make_facts(n_extra, args.seed + 4, used)
    used |= set(extra)
    all_q = make_queries(args.embed_queries + args.warmup + args.queries, args.seed + 1)
    embed_q = all_q[: args.embed_queries]
    warm_q = all_q[args.embed_queries : args.embed_queries + args.warmup]
    queries = all_q[args.embed_queries + args.warmup :]
    res["meta"]["generate_s"] = time.perf_counter() - t
    log(f"generated {len(corpus.facts):,} facts over {pool:,} cores in {res['meta']['generate_s']:.1f} s")

    embedder = SentenceTransformerEmbedder(cache_size=0)  # every embed is real work
    res["meta"]["machine"] = machine_info("st", embedder)
    t = time.perf_counter()
    embedder.load()
    res["model"]["load_s"] = time.perf_counter() - t
    embedder.embed(["warm up the model once", "and with a batch of two"])

    if args.real:
        res["real"] = run_real(args, embedder, used)
        gc.collect()

    t = time.perf_counter()
    core_vectors = embedder.embed(corpus.cores)
    pool_s = time.perf_counter() - t
    noise = calibrate_noise(embedder, corpus, core_vectors, 256, args.seed)
    noise.update(pool=pool, pool_embed_s=pool_s)
    res["meta"]["noise"] = noise
    res["model"]["pool_rate"] = pool / pool_s
    log(f"pool of {pool:,} cores embedded in {pool_s:.1f} s; sigma {noise['sigma']:.4f}")
    fake = PooledNoiseEmbedder(embedder.model_id, core_vectors, corpus.core_of, noise["sigma"], args.seed)
    t = time.perf_counter()
    qv = embedder.embed(queries)  # the same queries, pre-embedded for the legs called alone and for recall
    res["model"]["query_batch_s"] = time.perf_counter() - t

    root = args.root / "scale"
    ref = ScopeRef("group", GROUP)

    def open_exact() -> tuple[SharedMemoryStore, SharedMemoryStore, SQLiteBackend]:
        """The population store (pooled vectors, near-duplicate check off) and, on the same backend object,
        the measured store (real model, default settings)."""
        writer = SharedMemoryStore(
            root, embedder=fake, policy=WritePolicy(global_writers=[AGENT]), dedup=DedupSettings(near_duplicate=1.01)
        )
        writer.operator.add_member(GROUP, AGENT)
        assert isinstance(writer.backend, SQLiteBackend)
        return writer, SharedMemoryStore(writer.backend, embedder=embedder), writer.backend

    writer, reader, exact = open_exact()
    depth = reader.search_depth

    done = n_facts = 0
    last_build: tuple[int, float] | None = None
    fresh = iter(extra)

    def texts() -> tuple[list[str], list[str]]:
        """(single-call texts, batched texts), never used before."""
        singles = [next(fresh) for _ in range(args.single_calls)]
        return singles, [next(fresh) for _ in range(args.remember_batches * args.remember_batch)]

    for size in sizes:
        row: dict[str, Any] = {"size": size}
        res["sizes"].append(row)
        new = corpus.facts[done:size]
        with phase(row, "populate"):
            created = populate(writer, new, args.populate_batch)
        if created != len(new):
            raise RuntimeError(f"only {created} of {len(new)} generated facts were created")
        n_facts += created
        done = size
        row["n_facts"] = n_facts
        row["populate_rate"] = len(new) / row["populate"]["wall_s"]
        row["file_mb"] = scope_file_mb(exact, ref)
        log(
            f"@{size:,}: populated {len(new):,} in {row['populate']['wall_s']:.1f} s ({row['populate_rate']:.0f}/s);"
            f" scope holds {n_facts:,} facts, file {row['file_mb']:,.0f} MB"
        )

        row["query_embed"], row["query_embed_other_cores"] = query_embed_series(embedder, embed_q, quiet_monitor())
        embed_p50 = row["query_embed"]["p50_ms"]
        row["exact"], exact_ids = search_series(reader, queries, warm_q, embed_p50)
        ex = row["exact"]
        log(
            f"@{size:,} exact: search p50 {ex['latency']['p50_ms']:.1f} ms p95 {ex['latency']['p95_ms']:.1f} ms "
            f"(embed alone p50 {embed_p50:.1f} ms; phases "
            + " ".join(f"{k} {v:.1f}" for k, v in ex["phases_p50_ms"].items())
            + ")"
        )
        row["legs_exact"], truth = legs_alone(exact, ref, queries, qv, depth)
        log(
            f"@{size:,} exact legs alone: lexical p50 {row['legs_exact']['lexical']['p50_ms']:.1f} ms, semantic p50 "
            f"{row['legs_exact']['semantic']['p50_ms']:.1f} ms"
        )
        gc.collect()
        row["rss_after_exact_mb"] = current_rss_mb()

        predicted = predict_build_s(last_build, n_facts)
        row["hnsw_build_predicted_s"] = predicted
        skip = None
        if args.hnsw_max_size and size > args.hnsw_max_size:
            skip = f"--hnsw-max-size {args.hnsw_max_size:,}"
        elif predicted is not None and predicted > args.max_build_min * 60:
            skip = f"predicted build {predicted / 60:.1f} min > --max-build-min {args.max_build_min:g}"
        if skip:
            row["hnsw_skipped"] = skip
            log(f"@{size:,} hnsw SKIPPED: {skip}")
        else:
            if predicted is not None:
                log(f"@{size:,} hnsw: building, predicted {predicted:.0f} s from the previous size")
            hnsw, load_s, build_s = open_hnsw(root, ref, qv[0], args.ef)
            last_build = (n_facts, build_s)
            row["hnsw_load_vectors_s"], row["hnsw_build_s"] = load_s, build_s
            row["hnsw_build_rate"] = n_facts / build_s
            gc.collect()
            row["rss_after_hnsw_mb"] = current_rss_mb()
            log(
                f"@{size:,} hnsw: vectors loaded in {load_s:.1f} s, graph built in {build_s:.1f} s "
                f"({n_facts / build_s:.0f} facts/s); RSS {row['rss_after_exact_mb']:,.0f} -> "
                f"{row['rss_after_hnsw_mb']:,.0f} MB"
            )
            store_h = SharedMemoryStore(hnsw, embedder=embedder)
            row["hnsw"], hnsw_ids = search_series(store_h, queries, warm_q, embed_p50)
            row["hnsw"]["agreement_with_exact"] = agreement(exact_ids, hnsw_ids)
            hx = row["hnsw"]
            log(
                f"@{size:,} hnsw: search p50 {hx['latency']['p50_ms']:.1f} ms p95 {hx['latency']['p95_ms']:.1f} ms "
                f"(phases " + " ".join(f"{k} {v:.1f}" for k, v in hx["phases_p50_ms"].items()) + "); top-5 "
                f"overlap with exact {hx['agreement_with_exact']['top5_overlap']:.3f}"
            )
            row["legs_hnsw"], approx = legs_alone(hnsw, ref, queries, qv, depth)
            row["legs_hnsw"]["recall@50_vs_exact"] = recall_at(truth, approx, 50)
            row["sweep"] = ef_sweep(hnsw, ref, qv, truth, args.efs)
            log(
                f"@{size:,} hnsw legs alone: semantic p50 {row['legs_hnsw']['semantic']['p50_ms']:.2f} ms; "
                + ", ".join(f"ef {r['ef']}: recall@10 {r['recall@10']:.3f}" for r in row["sweep"])
            )
            row["peak_rss_mb"] = peak_rss_mb()
            semantic(hnsw, ref, qv[0], depth, Filters())  # leave the graph at the store's own ef, as after a search
            row["remember_hnsw"] = remember_into(store_h, embedder, *texts(), args.remember_batch, n_facts)
            n_facts += row["remember_hnsw"]["created"]
            log_remember(size, "hnsw", row["remember_hnsw"])
            hnsw.close()
            del store_h, hnsw
            gc.collect()
        row["peak_rss_mb"] = max(row.get("peak_rss_mb", 0.0), peak_rss_mb())

        row["remember"] = remember_into(reader, embedder, *texts(), args.remember_batch, n_facts)
        n_facts += row["remember"]["created"]
        log_remember(size, "exact", row["remember"])
        # Every connection of this process is closed before the child runs, then reopened: opening the second
        # (HNSW) backend's connection drops this process's POSIX locks on the file (SQLiteBackend's
        # _check_sqlite_file open()s and close()s the file), and the child, seeing no other reader, would
        # then checkpoint and delete the WAL under the still-open connections (observed: a corrupted file).
        writer.close()
        cs, other = cold_start(root, "group", COLD_QUERY, n_facts, "single")  # the default embedder: ONNX
        row["cold_start"] = {**cs, "other_cores": other}
        if size != biggest:
            writer, reader, exact = open_exact()
            t = time.perf_counter()
            semantic(exact, ref, qv[0], 1, Filters())  # reload the vectors now, not inside the next population
            row["exact_reload_s"] = time.perf_counter() - t
        log(
            f"@{size:,} cold start: {cs['to_first_result_s']:.2f} s to first result (import {cs['import_s']:.2f}, "
            f"model {cs['model_load_s']:.2f}, vectors+scan {cs['first_semantic_s']:.2f}, first search "
            f"{cs['first_search_s']:.2f})"
        )
        row["rss_end_mb"] = current_rss_mb()
        row["peak_rss_mb"] = max(row["peak_rss_mb"], peak_rss_mb())

    res["meta"]["runtime_s"] = time.perf_counter() - T0
    wall = res["meta"]["runtime_s"]
    res["meta"]["other_cores_whole_run"] = max(0.0, busy_cpu_seconds() - busy0 - (own_cpu_seconds() - own0)) / wall
    res["meta"]["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    res["meta"]["peak_rss_mb"] = peak_rss_mb()
    return res


# --------------------------------------------------------------------------------------------- markdown
def _ms(x: float) -> str:
    return f"{x:,.2f}" if x < 10 else f"{x:,.1f}"


def _mb(x: float) -> str:
    return f"{x:,.0f} MB"


def render(res: dict[str, Any]) -> str:
    meta, m, args = res["meta"], res["meta"]["machine"], res["meta"]["args"]
    noise, hp = meta["noise"], meta["hnsw_params"]
    rows = res["sizes"]
    lines = [SECTION, ""]
    lines += [
        f"Measured {meta['date']} with `{meta['command']}` (run time {meta['runtime_s'] / 60:.1f} min, one process, "
        "one run). One group scope is grown to each size in turn and measured there; the same "
        f"{rows[0]['exact']['latency']['n']} queries are searched at every size, first through the default exact "
        'index, then through a second `SQLiteBackend(root, vector_index="hnsw")` on the same files. '
        "**The machine was shared**: another benchmark ran on it at the same time (the *other cores* columns "
        f"and the *Interference* note say how busy), so timings are indicative, not best-case.",
        "",
    ]
    lines += table(
        ["machine", "value"],
        [
            [
                "CPU",
                f"{m['cpu']} — nproc {m['nproc']}, torch threads {m['torch_threads']}; "
                f"thread pools: {m['thread_pools']}",
            ],
            ["RAM", f"{m['ram_gb']} GB"],
            ["library", f"autogen-shared-memory at git {m['library']}"],
            [
                "software",
                f"Python {m['python']}, torch {m['torch']}, numpy {m['numpy']}, SQLite {m['sqlite']}, "
                f"sentence-transformers {m['sentence_transformers']}, hnswlib (chroma-hnswlib), Linux {m['kernel']}",
            ],
            ["load average", f"{' '.join(m['loadavg_start'])} at start, {' '.join(m['loadavg_end'])} at end"],
            [
                "other processes",
                f"{meta['other_cores_whole_run']:.2f} cores busy on average outside this benchmark over the run",
            ],
            [
                "HNSW parameters",
                f"M={hp['M']}, ef_construction={hp['ef_construction']} (`search.index.Ann` class attributes), "
                f"ef={hp['ef_search']} at search (`ann_ef`, library default 128); built with `build_ann` on "
                f"{m['nproc']} threads; `ann_min_facts=1` so the graph answers at every size measured "
                "(library default: scopes of 20,000+ facts)",
            ],
        ],
    )

    # ---------------------------------------------------------------- search latency
    lines += ["", "### Search latency: exact scan vs HNSW (real model embeds every query; top_k=5)", ""]
    trows = []
    for r in rows:
        for name in ("exact", "hnsw"):
            s = r.get(name)
            if s is None:
                trows.append([f"{r['n_facts']:,}", name, "skipped: " + r.get("hnsw_skipped", "")] + [""] * 7)
                continue
            legs = r[f"legs_{name}"]
            ph = s["phases_p50_ms"]
            agree = s.operator.get("agreement_with_exact")
            trows.append(
                [
                    f"{r['n_facts']:,}",
                    name if name == "exact" else f"hnsw (ef {hp['ef_search']})",
                    f"**{_ms(s['latency']['p50_ms'])}**",
                    _ms(s["latency"]["p95_ms"]),
                    f"{s['ratio_p50_to_embed_p50']:.2f}",
                    f"{_ms(r['query_embed']['p50_ms'])}",
                    " / ".join(_ms(ph[k]) for k in ("embed", "lexical", "semantic", "get")),
                    f"{_ms(legs['lexical']['p50_ms'])} / {_ms(legs['semantic']['p50_ms'])}",
                    "—" if agree is None else f"{agree['top5_overlap']:.3f} ({agree['identical_top5']:.0%} identical)",
                    f"{s['other_cores']:.2f}",
                ]
            )
    lines += table(
        [
            "facts",
            "index",
            "search p50 ms",
            "p95 ms",
            "p50 / embed p50",
            "query embed alone p50 ms",
            "inside search, p50 ms: embed / lexical / semantic / get",
            "legs alone p50 ms: lexical / semantic",
            "fused top-5 overlap with exact",
            "other cores",
        ],
        trows,
    )
    lines += [
        "",
        f"{rows[0]['exact']['latency']['n']} distinct queries per row after {args['warmup']} warm-up searches; the "
        "query embedding alone is re-measured at every size (200 other queries, cache off). *Inside search*: "
        "time spent in `embedder.embed`, `backend.lexical`, `backend.semantic`, `backend.get` during the timed "
        "searches (the store embeds the query on a helper thread while the lexical leg runs, so embed and "
        "lexical overlap and the parts add up to more than the total). *Legs alone*: the same backend calls "
        f"made directly on pre-embedded queries (semantic leg asked for {rows[0]['legs_exact']['depth']} "
        "candidates, the store's `search_depth`). *Fused top-5 overlap*: mean share of the exact store's "
        "top 5 that the HNSW store also returns for the same query (and the share of queries whose top 5 is "
        "identical, in order).",
    ]

    # ---------------------------------------------------------------- memory and build
    lines += ["", "### Memory, HNSW build time and file size", ""]
    mrows = []
    for r in rows:
        built = "hnsw_build_s" in r
        pred = r.get("hnsw_build_predicted_s")
        mrows.append(
            [
                f"{r['n_facts']:,}",
                f"{r['file_mb']:,.0f} MB",
                _mb(r["rss_after_exact_mb"]),
                (
                    f"{_mb(r['rss_after_hnsw_mb'])} (+{r['rss_after_hnsw_mb'] - r['rss_after_exact_mb']:,.0f})"
                    if built
                    else "—"
                ),
                _mb(r["peak_rss_mb"]),
                f"{r['hnsw_load_vectors_s']:.1f} s" if built else "—",
                (
                    f"**{r['hnsw_build_s']:.1f} s** ({r['hnsw_build_rate']:,.0f} facts/s)"
                    if built
                    else f"skipped ({r.get('hnsw_skipped', '')})"
                ),
                "—" if pred is None else f"{pred:.0f} s",
                f"{r['populate_rate']:,.0f} facts/s ({r['populate']['wall_s']:.0f} s)",
            ]
        )
    lines += table(
        [
            "facts",
            "scope file (db + wal)",
            "RSS after exact searches",
            "RSS after HNSW load + build (+ increase)",
            "peak RSS so far",
            "HNSW backend: load vectors from file",
            "HNSW build (`build_ann`)",
            "build predicted from previous size (n log n)",
            "population of this step (pooled vectors)",
        ],
        mrows,
    )
    lines += [
        "",
        "RSS is the whole benchmark process (VmRSS): torch + the loaded model (~0.7 GB), the generated fact "
        "texts, the exact backend's vector index (n x 384 x 2 int8 codes, capacity doubling) and, after the build, "
        "the second backend's own copy of the codes plus the hnswlib graph (which stores the vectors again, "
        "plus 2M links per node on level 0). The HNSW backend is closed after each size, so the next size's "
        "RSS starts without it (freed memory is not always returned to the OS). Peak RSS is `ru_maxrss` of the "
        "process so far.",
    ]

    # ---------------------------------------------------------------- recall
    lines += ["", "### Recall of the HNSW semantic leg against the exact scan", ""]
    rrows = []
    scopes = [(f"{r['n_facts']:,} pooled-noise vectors", r["sweep"], r["legs_exact"]) for r in rows if "sweep" in r]
    real = res.get("real")
    if real:
        scopes.append((f"**{real['n']:,} real MiniLM vectors**", real["sweep"], real["legs"]["exact"]))
    for label, sweep, legs_x in scopes:
        for s in sweep:
            rrows.append(
                [
                    label,
                    str(s["ef"]),
                    f"**{s['recall@10']:.4f}**",
                    f"{s['mean_cos@10']:.4f} / {s['exact_mean_cos@10']:.4f}",
                    _ms(s["p50_ms@10"]),
                    f"{s['recall@50']:.4f}",
                    _ms(s["p50_ms@50"]),
                    _ms(legs_x["semantic"]["p50_ms"]),
                ]
            )
    lines += table(
        [
            "scope",
            "ef",
            "recall@10",
            "mean cosine of the top 10: HNSW / exact",
            "p50 ms (10 asked)",
            "recall@50",
            "p50 ms (50 asked, as in search)",
            "exact scan p50 ms (50)",
        ],
        rrows,
    )
    lines += [
        "",
        "recall@k = mean over queries of |HNSW top k ∩ exact top k| / k, semantic leg only "
        "(`backend.semantic` on the query vector; the HNSW backend over-fetches 2k candidates from the graph "
        "and drops inactive ones). Pooled-noise rows: the same "
        f"{rows[0]['exact']['latency']['n']} queries as the latency table, embedded by the real model.",
    ]
    if real:
        fz = real["fused"]
        lines += [
            "",
            f"Real vectors: {real['n']:,} generated facts (all distinct, each with its own random core sentence) "
            f"embedded by all-MiniLM-L6-v2 through `remember_many` into their own group scope "
            f"({real['populate']['wall_s']:.0f} s, {real['populate_rate']:.0f} facts/s end to end while other "
            f"processes used {real['populate']['other_cores']:.2f} cores), "
            f"{real['queries']} generated questions embedded by the model. Graph built in "
            f"{real['build_s']:.1f} s ({real['build_rate']:,.0f} facts/s). End to end, a default exact store and an "
            f"HNSW store (ef {hp['ef_search']}) on this scope return the same fused top 5 for "
            f"{fz['identical_top5']:.1%} of the {fz['n']} queries (mean top-5 overlap {fz['top5_overlap']:.4f}); "
            f"search p50 {_ms(fz['exact']['p50_ms'])} ms exact vs {_ms(fz['hnsw']['p50_ms'])} ms HNSW.",
        ]

    # ---------------------------------------------------------------- remember
    lines += ["", "### Remember throughput into the big scope (real model, default near-duplicate check)", ""]
    wrows = []
    for rm, name in ((r[k], k) for r in rows for k in ("remember_hnsw", "remember") if k in r):
        b, s = rm["batched"], rm["single"]
        pb, parts = b["per_batch_mean_s"], s["p50_parts_ms"]
        wrows.append(
            [
                f"{rm['n_before']:,}",
                "hnsw (graph built)" if name == "remember_hnsw" else "exact",
                f"{rm['model_rate']:,.0f} texts/s",
                f"**{b['rate']:,.0f} facts/s** ({b['ratio_to_model']:.2f} of the model)",
                f"{pb['seconds'] * 1000:,.0f} ms: embed {pb['embed'] * 1000:,.0f}, write "
                f"{pb['write'] * 1000:,.0f} (near-dup lookup {pb['near_dup_scan'] * 1000:,.0f})",
                f"**{_ms(s['p50_ms'])}** / {_ms(s['p95_ms'])}",
                f"embed {_ms(parts['embed'])}, write {_ms(parts['write'])} (near-dup lookup "
                f"{_ms(parts['near_dup_scan'])})",
                f"{rm['created']:,} of {rm['written']:,}",
                f"{rm['other_cores']:.2f}",
            ]
        )
    r0 = rows[0]["remember"]
    lines += table(
        [
            "facts in scope",
            "store",
            "model batch encode (same texts, one call)",
            f"`remember_many`, {r0['batched']['n'] // r0['batched']['batch']} batches of {r0['batched']['batch']}",
            "per batch (mean)",
            f"single `remember` p50 / p95 ms ({r0['single']['n']} calls)",
            "single: p50 of its parts, ms",
            "created (rest reinforced)",
            "other cores",
        ],
        wrows,
    )
    lines += [
        "",
        "New generated facts (not in the scope, different ones for each row), embedded by the real model "
        "inside `remember`, with default settings (`near_duplicate_threshold=0.95`): at each size first into "
        "the HNSW store while its graph exists, then into the exact store. *Near-dup lookup* is the "
        "construction of the backend's near-duplicate lookup for the call (`NearestExisting`, timed by "
        "wrapping it; part of *write*): with the exact index one matrix product of the new vectors against "
        "every vector of the scope, with a built graph an HNSW query (8 neighbours) per new vector. These "
        "writes stay in the scope, so the next size holds a few more facts than its nominal size (the *facts* "
        "columns give the real counts).",
    ]

    # ---------------------------------------------------------------- cold start
    lines += ["", "### Cold start: a new process, to its first search result (exact index)", ""]
    lines += table(
        [
            "facts",
            "launch to first result",
            "interpreter",
            "import package",
            "open store",
            "first search",
            "of which: model load / vectors load + scan / FTS",
            "second search",
            "other cores",
        ],
        [
            [
                f"{c['size']:,}",
                f"**{c['to_first_result_s']:.2f} s**",
                f"{c['interpreter_s']:.2f} s",
                f"{c['import_s']:.2f} s",
                f"{c['open_s'] * 1000:.0f} ms",
                f"{c['first_search_s']:.2f} s",
                f"{c['model_load_s']:.2f} s / {c['first_semantic_s']:.2f} s / {c['first_lexical_s'] * 1000:.0f} ms",
                f"{c['second_search_s'] * 1000:.1f} ms",
                f"{c['other_cores']:.2f}",
            ]
            for c in (r["cold_start"] for r in rows)
        ],
    )
    lines += [
        "",
        "The child is bench_store.py's (`bench/common/workloads.py`): `python -c` with the default "
        "`SharedMemoryStore(root)` (default "
        "embedder, lazy model load including the torch import), one `search` in the group scope, then a second "
        "one. *Vectors load + scan* is the first `backend.semantic`: it reads every embedding blob from SQLite "
        "into the int8 codes, then scans them. The files were in the OS page cache (a cold process, not a cold "
        "disk).",
    ]

    # ---------------------------------------------------------------- how generated
    lines += [
        "",
        "### How the facts and vectors are generated",
        "",
        f"* Facts come from `bench/common/corpus.py` (`make_corpus`, seed {args['seed']}): a *core* sentence from 12 "
        "templates over word lists (people, teams, tools, tasks, projects, customers, regions, ...) plus a "
        '*detail* clause from 7 templates (dates, cities, ticket and sprint numbers, ...), e.g. "Priya Novak on '
        'the payments team prefers Postgres for billing reports, confirmed by Tom Berg in Lisbon." Every fact '
        f"text is distinct ({max(args['sizes']):,} generated in {meta['generate_s']:.0f} s). Queries come from 13 "
        "question templates over the same word lists.",
        f"* Vectors: {noise['pool']:,} distinct core sentences are embedded by the real model "
        f"({noise['pool_embed_s']:.0f} s); fact i uses core i for the first {noise['pool']:,} facts, then a random "
        "core, so at 1M facts each core has ~200 facts. A fact's vector is its core's real vector plus "
        "deterministic Gaussian noise, re-normalised, with sigma calibrated in the same run so that "
        f"cos(noisy, core) matches the real model's mean cos(fact, core) = {noise['cos_real_fact_to_core_mean']:.3f} "
        f"on {noise['sample']} facts (sigma {noise['sigma']:.4f}). These are realistic 384-d unit vectors, but "
        "clustered around 5,000 points: a harder case for HNSW than real text (many near-ties), which is why "
        "the recall is also measured on real vectors.",
        f"* Population: `remember_many` in batches of {args['populate_batch']:,} with near-duplicate detection off "
        "(`near_duplicate_threshold=1.01`), every fact checked to be `created`. Searches and the remember "
        "measurements go through a second `SharedMemoryStore` with the real model and default settings on the "
        "same backend object. The HNSW store is a separate `SQLiteBackend` on the same files, opened and built "
        "afresh at each size.",
    ]

    # ---------------------------------------------------------------- what it means
    lines += ["", "### What the numbers mean", ""]
    lines += meaning(res)
    lines += ["", "![Search latency exact vs HNSW, and RSS, against facts](img/scale.png)", ""]
    lines += ["### Interference", ""]
    ph = []
    for r in rows:
        ph.append(f"{r['n_facts']:,}: populate {r['populate']['other_cores']:.2f}")
    lines.append(
        "Average number of cores used by other processes during each timed phase is in the *other cores* "
        "columns (from /proc/stat minus this process's own CPU time; 2 cores in all). Population: "
        + "; ".join(ph)
        + f". Whole run: {meta['other_cores_whole_run']:.2f} cores."
    )
    return "\n".join(lines) + "\n"


def meaning(res: dict[str, Any]) -> list[str]:
    rows = res["sizes"]
    big = rows[-1]
    ef = res["meta"]["hnsw_params"]["ef_search"]
    out: list[str] = []
    ex = big["exact"]["latency"]
    emb = big["query_embed"]["p50_ms"]
    sem_x = big["legs_exact"]["semantic"]["p50_ms"]
    lex = big["legs_exact"]["lexical"]["p50_ms"]
    out.append(
        f"* **Exact search grows with the scope, HNSW search much less.** At {big['n_facts']:,} facts the exact "
        f"store's search p50 is {_ms(ex['p50_ms'])} ms ({big['exact']['ratio_p50_to_embed_p50']:.1f}x the "
        f"{_ms(emb)} ms query embedding): the semantic leg alone (a scan of every vector) takes {_ms(sem_x)} ms p50, "
        f"the lexical leg alone {_ms(lex)} ms."
    )
    if "hnsw" in big:
        hx = big["hnsw"]["latency"]
        sem_h = big["legs_hnsw"]["semantic"]["p50_ms"]
        out[-1] += (
            f" With HNSW the semantic leg is {_ms(sem_h)} ms and search p50 / p95 {_ms(hx['p50_ms'])} / "
            f"{_ms(hx['p95_ms'])} ms ({big['hnsw']['ratio_p50_to_embed_p50']:.1f}x the embedding; exact: "
            f"{_ms(ex['p50_ms'])} / {_ms(ex['p95_ms'])} ms). What is left is the query embedding and the FTS5 "
            f"lexical leg ({_ms(big['hnsw']['phases_p50_ms']['lexical'])} ms p50 inside the search), which now "
            "dominate."
        )
        by_size = [(r["n_facts"], next(x for x in r["sweep"] if x["ef"] == ef)) for r in rows if "sweep" in r]
        curve = ", ".join(f"{x['recall@10']:.3f} at {n:,}" for n, x in by_size)
        last = by_size[-1][1]
        best = max(big["sweep"], key=lambda x: x["ef"])
        text = (
            f"* **The price is recall, and it falls with the scope size.** recall@10 of the HNSW semantic leg "
            f"against the exact scan at ef {ef} (M={res['meta']['hnsw_params']['M']}, "
            f"ef_construction={res['meta']['hnsw_params']['ef_construction']}): {curve} facts on the pooled-noise "
            f"vectors; at {big['n_facts']:,} the mean cosine of the top 10 drops from {last['exact_mean_cos@10']:.3f} "
            f"(exact) to {last['mean_cos@10']:.3f}, so the graph misses genuinely closer facts, not just near-ties. "
            f"ef {best['ef']} gives {best['recall@10']:.3f} for {_ms(best['p50_ms@10'])} ms. End to end the lexical "
            f"leg and the fusion soften it: the fused top 5 overlaps the exact store's by "
            f"{big['hnsw']['agreement_with_exact']['top5_overlap']:.3f} "
            f"({big['hnsw']['agreement_with_exact']['identical_top5']:.0%} of the queries get the identical top 5)."
        )
        real = res.get("real")
        if real:
            rx = next(x for x in real["sweep"] if x["ef"] == ef)
            text += (
                f" On {real['n']:,} REAL MiniLM vectors recall@10 is "
                + ", ".join(f"{x['recall@10']:.3f} at ef {x['ef']}" for x in real["sweep"])
                + f" (between the pooled-vector values at the sizes around it), and "
                f"{real['fused']['identical_top5']:.1%} of {real['fused']['n']} queries get the identical fused "
                f"top 5 at ef {ef} (recall@10 {rx['recall@10']:.3f}). Real vectors at 1M could not be measured "
                "here (embedding 1M texts takes over an hour on this machine), so how far real text falls at 1M "
                "is open; the pooled vectors (~200 noisy copies of each of 5,000 core sentences at 1M) may well "
                "be harder for a graph than real text. Either way, at 1M facts the default graph parameters need "
                "a larger ef or larger M / ef_construction, chosen by measuring on the real data."
            )
        out.append(text)
        inc = big["rss_after_hnsw_mb"] - big["rss_after_exact_mb"]
        out.append(
            f"* **Build and memory.** The graph takes {big['hnsw_build_s']:.0f} s to build at {big['n_facts']:,} facts "
            f"on 2 cores (in the background on the first search unless `build_ann` is called; searches are "
            f"answered by the exact scan meanwhile), after {big['hnsw_load_vectors_s']:.0f} s to load the vectors "
            f"from the file. RSS rose by {inc:,.0f} MB when the second backend loaded its codes and built the "
            "graph: hnswlib keeps its own float32 copy of every vector (1.5 KB per fact) next to the backend's "
            "int8 codes (0.77 KB), so the HNSW option about triples the vector memory (plus links and slack)."
        )
    else:
        built = [r for r in rows if "hnsw_build_s" in r]
        out.append(
            f"* HNSW was not built at {big['n_facts']:,} facts in this run ({big.operator.get('hnsw_skipped')})"
            + (
                f"; scaling the {built[-1]['n_facts']:,}-fact build ({built[-1]['hnsw_build_s']:.0f} s) by n log n "
                f"predicts {big['hnsw_build_predicted_s'] / 60:.1f} min."
                if built and big.operator.get("hnsw_build_predicted_s")
                else "."
            )
        )
    rm = big["remember"]
    text = (
        f"* **Writes into a big scope are slow with the exact index**: the default near-duplicate check compares "
        f"every new vector with every vector of the scope. At {rm['n_before']:,} facts `remember_many` runs at "
        f"{rm['batched']['rate']:,.0f} facts/s ({rm['batched']['ratio_to_model']:.2f} of the model's batch rate; "
        f"near-dup lookup {rm['batched']['per_batch_mean_s']['near_dup_scan'] * 1000:,.0f} ms per batch of "
        f"{rm['batched']['batch']}) and a single `remember` takes {_ms(rm['single']['p50_ms'])} ms p50 (lookup "
        f"{_ms(rm['single']['p50_parts_ms']['near_dup_scan'])} ms)."
    )
    rh = big.operator.get("remember_hnsw")
    if rh:
        text += (
            f" With a built graph the lookup asks the graph instead: {rh['batched']['rate']:,.0f} facts/s "
            f"({rh['batched']['ratio_to_model']:.2f} of the model; lookup "
            f"{rh['batched']['per_batch_mean_s']['near_dup_scan'] * 1000:,.0f} ms per batch), single "
            f"{_ms(rh['single']['p50_ms'])} ms p50."
        )
    out.append(text)
    cs = big["cold_start"]
    out.append(
        f"* **Cold start** at {cs['size']:,} facts: {cs['to_first_result_s']:.1f} s from launch to the first result, "
        f"of which {cs['first_semantic_s']:.1f} s read every vector from SQLite into the int8 codes "
        f"and {cs['model_load_s']:.1f} s load the model; up to ~100k facts the model load dominates."
    )
    out.append(
        f"* **Memory**: peak RSS of this process {big['peak_rss_mb']:,.0f} MB at {big['n_facts']:,} facts, with the "
        "model, a million generated texts and, during the HNSW part, two vector indexes and a graph; "
        f"{big['rss_after_exact_mb']:,.0f} MB with the exact index alone. Everything fitted in this machine's "
        f"{res['meta']['machine']['ram_gb']} GB; the scope file is {big['file_mb']:,.0f} MB."
    )
    return out


# --------------------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="sizes grown incrementally (default %(default)s)")
    p.add_argument("--real", type=int, default=20000, help="facts embedded for real for the recall check (0: skip)")
    p.add_argument("--real-queries", type=int, default=500, help="queries for the real-vector recall check")
    p.add_argument("--queries", type=int, default=200, help="timed searches per size and index (default 200)")
    p.add_argument("--warmup", type=int, default=5, help="untimed searches before each timed series")
    p.add_argument("--embed-queries", type=int, default=200, help="queries for the embedding reference")
    p.add_argument("--efs", default="64,128,256", help="ann_ef values for the recall sweep (default %(default)s)")
    p.add_argument("--ef", type=int, default=128, help="ann_ef of the HNSW store's searches (default 128)")
    p.add_argument("--remember-batches", type=int, default=5, help="remember_many batches per size (default 5)")
    p.add_argument("--remember-batch", type=int, default=256, help="remember_many batch size (default 256)")
    p.add_argument("--single-calls", type=int, default=50, help="single remember calls per size (default 50)")
    p.add_argument("--populate-batch", type=int, default=5000, help="population batch size (default 5000)")
    p.add_argument("--pool", type=int, default=5000, help="distinct core sentences embedded for real")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--hnsw-max-size", type=int, default=0, help="skip the HNSW part above this size (default 0: no limit)"
    )
    p.add_argument(
        "--max-build-min",
        type=float,
        default=15.0,
        help="skip the HNSW part at a size whose build, predicted from the previous size (n log n), would take "
        "longer than this many minutes (default %(default)s)",
    )
    p.add_argument("--root", type=Path, default=None, help="directory for the stores (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the stores (a temp root is deleted otherwise)")
    p.add_argument("--out", type=Path, default=None, help=f"markdown file whose '{SECTION}' section to write")
    p.add_argument("--json", type=Path, default=None, help="write all results as JSON here")
    p.add_argument("--from-json", type=Path, default=None, help="render the markdown of a saved run; measure nothing")
    args = p.parse_args(argv)
    args.sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    args.efs = [int(e) for e in args.efs.split(",") if e.strip()]
    if not args.sizes or min(args.sizes) < 10:
        p.error("--sizes needs sizes >= 10")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        res = json.loads(args.from_json.read_text())
    else:
        temp = args.root is None
        args.root = Path(tempfile.mkdtemp(prefix="asm-scale-")) if temp else args.root.expanduser()
        args.root.mkdir(parents=True, exist_ok=True)
        if any(args.root.iterdir()):
            print(f"{args.root} is not empty; use an empty --root", file=sys.stderr)
            return 2
        log(f"stores under {args.root}")
        try:
            res = run(args)
        finally:
            if not args.keep:  # the stores take several GB at 1M facts
                for sub in ("scale", "real"):
                    shutil.rmtree(args.root / sub, ignore_errors=True)
                if temp:
                    shutil.rmtree(args.root, ignore_errors=True)
        log(f"done in {res['meta']['runtime_s'] / 60:.1f} min")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
    md = render(res)
    if args.out:
        write_section(args.out, md, heading=SECTION)
        log(f"wrote {args.out}")
    else:
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
