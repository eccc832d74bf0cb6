"""The store's speed at a baseline revision and now, side by side: search, remember, remember_many, cold start.

For a change that should not change speed (a move of modules, say). Each round runs one fresh worker process
per tree, alternating (A B A B); each worker fills its own store (20,000 facts in agent, group and global; the
fill uses a cheap embedder under the real model's id), then times, with the real default embedder: the first
search of the process, 200 searches with distinct queries (scope "all"), 100 single ``remember`` calls and one
``remember_many`` of 1,000 facts. Medians of the rounds:

    python bench/ab_store.py --baseline c4295a0 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from common.revisions import REPO, extract, run_worker

WORKER = r"""
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
fill = SharedMemoryStore(root, embedder=HashEmbedder(384, DEFAULT_MODEL_ID), near_duplicate_threshold=1.01,
                         similar_threshold=1.01)
fill.add_group_member("crew", "alice")
for scope, n in (("global", 10000), ("group", 6000), ("agent", 4000)):
    fill.remember_many([sentence(i) for i in range(n)], scope, agent_id="alice" if scope != "global" else None,
                       group_id="crew")
fill.close()
store = SharedMemoryStore(root, global_writers=["alice"])
t = time.perf_counter()
store.search("who owns the billing database", "all", agent_id="alice", group_id="crew")
first = time.perf_counter() - t
times = []
for i in range(200):
    t = time.perf_counter()
    store.search(sentence(100000 + i), "all", agent_id="alice", group_id="crew")
    times.append(time.perf_counter() - t)
t = time.perf_counter()
for i in range(100):
    store.remember(sentence(200000 + i), "group", agent_id="alice", group_id="crew")
single = 100 / (time.perf_counter() - t)
t = time.perf_counter()
store.remember_many([sentence(300000 + i) for i in range(1000)], "group", agent_id="alice", group_id="crew")
batch = 1000 / (time.perf_counter() - t)
print(json.dumps({"import": imported, "first": first * 1e3, "p50": statistics.median(times) * 1e3,
                  "p95": statistics.quantiles(times, n=20)[18] * 1e3, "single": single, "batch": batch}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"baseline": extract(args.baseline, Path(tmp) / "baseline"), "now": REPO / "src"}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
        for _ in range(args.rounds):
            for name, src in sources.items():  # A B A B
                runs[name].append(run_worker(WORKER, src))
    rows = [
        ("import the package (s)", "import", "{:.2f}"),
        ("first search of the process, model load included (ms)", "first", "{:.0f}"),
        ("search p50, scope all, 20k facts (ms)", "p50", "{:.2f}"),
        ("search p95 (ms)", "p95", "{:.2f}"),
        ("single `remember` (facts/s)", "single", "{:.0f}"),
        ("`remember_many` of 1,000 (facts/s)", "batch", "{:.0f}"),
    ]
    print(f"medians of {args.rounds} alternating rounds (A B A B), one fresh process per tree and round\n")
    print(f"| measure | baseline {args.baseline} | now | now / baseline |")
    print("| --- | --- | --- | --- |")
    for label, key, fmt in rows:
        base = statistics.median(r[key] for r in runs["baseline"])
        now = statistics.median(r[key] for r in runs["now"])
        print(f"| {label} | {fmt.format(base)} | {fmt.format(now)} | {now / base:.2f} |")


if __name__ == "__main__":
    main()
