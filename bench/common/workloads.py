"""Store workloads shared by the benchmarks: query-embedding series, population, cold start in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autogen_shared_memory.embedding import Embedder
from autogen_shared_memory.store import SharedMemoryStore
from common.measure import Monitor, cpu_window, summary_ms

COLD_QUERY = "which tool does the ledger team use for audit trails"
AGENT, GROUP = "a1", "g1"


def query_embed_series(embedder: Embedder, queries: list[str], mon: Monitor) -> tuple[dict[str, float], float]:
    for q in ("warm up query one", "warm up query two", "warm up query three"):
        embedder.embed([q])
    times: list[float] = []
    with cpu_window() as w:
        for q in queries:
            t = time.perf_counter()
            embedder.embed([q])
            times.append(time.perf_counter() - t)
            mon.check()
    return summary_ms(times), w.other_cores


def populate(store: SharedMemoryStore, facts: list[str], layout: str, batch: int) -> int:
    created = 0
    for lo in range(0, len(facts), batch):
        chunk = facts[lo : lo + batch]
        if layout == "single":
            receipts = store.as_operator(GROUP).remember_many(chunk, "group")
        else:  # split across agent, group and global by position (i % 3)
            items = [
                {"content": text, "scope": ("agent", "group", "global")[(lo + j) % 3]} for j, text in enumerate(chunk)
            ]
            receipts = store.as_agent(AGENT, GROUP).remember_many(items)
        created += sum(r.status == "created" for r in receipts)
    return created


COLD_CHILD = r"""
import json, sys, time
t_enter = time.time()
t0 = time.perf_counter()
from autogen_shared_memory import SharedMemoryStore
root, scope, query, kind = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if kind == "st":  # no longer the default: name it (its module imports no torch; the model load does)
    from autogen_shared_memory.embedding import SentenceTransformerEmbedder
    options = {"embedder": SentenceTransformerEmbedder()}
else:  # the default embedder
    options = {}
t_import = time.perf_counter() - t0
t = time.perf_counter()
store = SharedMemoryStore(root, **options)
t_open = time.perf_counter() - t
spent = {"load": 0.0, "semantic": 0.0, "lexical": 0.0}
def timed(name, fn):
    def run(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name] += time.perf_counter() - t
    return run
store.embedder.load = timed("load", store.embedder.load)
store.backend.semantic = timed("semantic", store.backend.semantic)
store.backend.lexical = timed("lexical", store.backend.lexical)
t = time.perf_counter()
hits = store.search(query, scope, agent_id="a1", group_id="g1", top_k=5)
t_first = time.perf_counter() - t
t_first_done = time.time()
first = dict(spent)
t = time.perf_counter()
store.search(query + " again", scope, agent_id="a1", group_id="g1", top_k=5)
t_second = time.perf_counter() - t
print(json.dumps({"t_enter": t_enter, "import_s": t_import, "open_s": t_open, "first_search_s": t_first,
                  "second_search_s": t_second, "hits": len(hits), "t_first_done": t_first_done,
                  "model_load_s": first["load"], "first_semantic_s": first["semantic"],
                  "first_lexical_s": first["lexical"], "embedder": type(store.embedder).__name__,
                  "torch": "torch" in sys.modules}))
"""


def cold_start(
    root: Path, scope: str, query: str, size: int, layout: str, kind: str = "onnx"
) -> tuple[dict[str, Any], float]:
    with cpu_window() as w:
        t_launch = time.time()
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", COLD_CHILD, str(root), scope, query, kind],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"cold-start child failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "size": size,
        "layout": layout,
        "scope": scope,
        "wall_s": wall,
        "interpreter_s": out["t_enter"] - t_launch,
        "to_first_result_s": out["t_first_done"] - t_launch,
        **{
            k: out[k]
            for k in (
                "import_s",
                "open_s",
                "first_search_s",
                "second_search_s",
                "hits",
                "model_load_s",
                "first_semantic_s",
                "first_lexical_s",
                "embedder",
                "torch",
            )
        },
    }, w.other_cores
