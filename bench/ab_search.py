"""The store's own work per search at 100k facts, a baseline revision against the current tree, side by side.

The two 100,000-fact stores of ``bench_store.py`` (one group scope; agent + group + global, a third each),
populated the same way (seed 1234: real core vectors + calibrated noise, cheap to build) and kept in
``--stores`` so that later runs reuse them (the first run builds them with the baseline's tree: ~5 minutes on 2
cores; stores built by a tree with a newer schema than the baseline's cannot be read by it). Each round
runs one fresh worker process per tree, alternating which goes first; a worker times 200 distinct searches
per store with ``bench_store.run_searches`` (blocks of searches alternating with blocks of queries embedded
alone, so "own work" = search p50 minus the query-embedding p50 of the same minutes), with the real default
embedder of its own tree. Before each worker it waits for other processes to leave the CPU idle and re-runs
a disturbed worker (``common.measure.Quiet``). Medians of the rounds::

    python bench/ab_search.py --baseline 08e1076 --rounds 4 --stores ~/.cache/asm-bench-stores

``--vector-index hnsw`` runs the current tree with ``vector_index="hnsw"`` (each scope's graph built before
the timing) against the baseline's exact scan, and reports how often the two give the same top 5: the data
for choosing between exactness and speed at this size::

    python bench/ab_search.py --baseline HEAD --vector-index hnsw --rounds 2 --stores ~/.cache/asm-bench-stores

``--baseline-vector-index hnsw`` gives the baseline the graphs too (two revisions of the HNSW path).
``--given-vectors`` gives every search its query's vector, computed up front: what is timed is the store's
work alone (both legs, fusion, reading the facts), a steadier measure of a change to it than "own work",
whose query embedding alone moves by ±30% within minutes on a shared host.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common.measure import Quiet, cpu_window, log
from common.revisions import REPO, extract

HERE = Path(__file__).resolve().parent
SIZE = 100_000

BUILD = r"""
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
"""

WORKER = r"""
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


def run(code: str, src: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-4000:])
    return proc.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="git revision to compare with")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--queries", type=int, default=200, help="timed searches per store and worker")
    p.add_argument("--stores", type=Path, required=True, help="where the 100k stores are kept (built if missing)")
    p.add_argument("--wait-quiet", type=float, default=60.0, help="wait up to this many s for quiet per worker")
    p.add_argument("--wait-budget", type=float, default=1800.0)
    p.add_argument("--retries", type=int, default=2, help="re-run a worker disturbed by >= 0.3 other cores")
    p.add_argument("--vector-index", choices=("exact", "hnsw"), default="exact", help="the current tree's vector index")
    p.add_argument("--baseline-vector-index", choices=("exact", "hnsw"), default="exact", help="the baseline's")
    p.add_argument(
        "--given-vectors",
        action="store_true",
        help="give each search its query's vector, computed up front: the store's work alone, without the "
        "embedding or the lexical leg's overlap with it (own work is then the search p50)",
    )
    args = p.parse_args()
    stores = args.stores.expanduser()
    with tempfile.TemporaryDirectory(prefix="ab-search-") as tmp:
        trees = {"baseline": extract(args.baseline, Path(tmp) / "baseline"), "now": REPO / "src"}
        if not (stores / "complete").exists():
            if stores.exists() and any(stores.iterdir()):
                raise SystemExit(f"{stores} holds an incomplete build: remove it")
            log(f"building the two {SIZE:,}-fact stores in {stores} (once)")
            # by the baseline's tree: a newer tree migrates an older file on open, never the reverse
            run(BUILD, trees["baseline"], str(stores), str(HERE), str(SIZE))
        copies = {}  # each tree reads its own copy (opening one may migrate it to a newer schema)
        for name in trees:
            copies[name] = Path(tmp) / f"stores-{name}"
            shutil.copytree(stores, copies[name])
        quiet = Quiet(args.wait_quiet, args.wait_budget, args.retries)
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
        for r in range(args.rounds):
            for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:

                def one(_mon: Any, name: str = name) -> tuple[dict[str, Any], float]:
                    index = args.vector_index if name == "now" else args.baseline_vector_index
                    with cpu_window() as w:
                        out = run(
                            WORKER,
                            trees[name],
                            str(copies[name]),
                            str(args.queries),
                            str(SIZE),
                            str(HERE),
                            index,
                            "1" if args.given_vectors else "0",
                        )
                    return json.loads(out.strip().splitlines()[-1]), w.other_cores

                res = quiet.measure(f"round {r + 1} {name}", one)
                res["other_cores"] = quiet.phases[-1]["other_cores"]
                results[name].append(res)
                own = {s: round(v["p50"] - v["embed"], 2) for s, v in res.items() if s != "other_cores"}
                log(f"round {r + 1} {name}: own work {own} (other processes {res['other_cores']:.2f} cores)")

    measures = {
        "search p50 ms": lambda v: v["p50"],
        "query embed alone p50 ms": lambda v: v["embed"],
        "**own work ms** (p50 − embed)": lambda v: v["p50"] - v["embed"],
        "embed phase inside search p50 ms": lambda v: v["phases"]["embed"],
        "lexical phase p50 ms": lambda v: v["phases"]["lexical"],
        "semantic phase p50 ms": lambda v: v["phases"]["semantic"],
    }
    print(
        f"{args.rounds} rounds, {args.queries} searches per store and worker, medians; baseline {args.baseline}"
        f" ({args.baseline_vector_index}), now ({args.vector_index})\n"
    )
    print("| scope | measure | baseline | now | now / baseline | per round, baseline | per round, now |")
    print("|---|---|---:|---:|---:|---|---|")
    for scope in ("group", "all"):
        for label, get in measures.items():
            per = {name: [get(x[scope]) for x in rows] for name, rows in results.items()}
            b, n = statistics.median(per["baseline"]), statistics.median(per["now"])
            rounds = {name: ", ".join(f"{v:.2f}" for v in vals) for name, vals in per.items()}
            print(f"| `{scope}` | {label} | {b:.2f} | {n:.2f} | {n / b:.2f} | {rounds['baseline']} | {rounds['now']} |")
    worst = max(x["other_cores"] for rows in results.values() for x in rows)
    print(f"\nOther processes used at most {worst:.2f} cores during a kept worker.")
    for scope in ("group", "all"):
        pairs = list(zip(results["baseline"][0][scope]["top5"], results["now"][0][scope]["top5"], strict=True))
        same = sum(a == b for a, b in pairs)
        shared = sum(len(set(a) & set(b)) for a, b in pairs) / max(1, sum(len(a) for a, _ in pairs))
        print(
            f"`{scope}`: the same top 5 (ids in order) for {same} of {len(pairs)} searches; "
            f"{shared:.3f} of the baseline's top-5 facts in now's."
        )


if __name__ == "__main__":
    main()
