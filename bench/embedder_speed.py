"""OnnxEmbedder vs SentenceTransformerEmbedder: start-up, memory, query latency, batch throughput.

Every round starts one fresh worker process per embedder, in turn (A B A B ...), so drift in the machine's
state hits both alike; the table shows medians over the rounds. A worker reports:

* start to first vector: from just before the parent spawns it to its first embedding (interpreter, imports,
  model load, one embed), on the parent's clock;
* RSS after that first embedding;
* single-query p50 over distinct texts (the query LRU cache never hits), for two series timed in
  alternating blocks of 20: search queries (``common.corpus.make_queries``, ~8 words: the queries
  ``bench_store.py`` embeds alone and searches with) and memory-like sentences (~18 words);
* batch throughput embedding ~1,000 sentences in one call, the median of ``--batch-repeats`` such calls.

The ONNX graph cache is warmed once before the rounds; a third worker kind starts with an empty cache each
round, so the one-off cost of building the graph is shown too (``--no-cold`` skips it). ``--baseline REV``
adds the OnnxEmbedder of an older revision (its ``src/`` extracted with ``git archive``, its own warm graph
cache) as one more worker per round (repeat it for several revisions), so a change to the embedder is
measured side by side with sentence-transformers and with what it replaces. ``--wait-quiet S`` waits (up to
S seconds, at most ``--wait-budget`` in all) before each worker until other processes leave the CPU idle, and
records the cores they used during each worker; a worker that saw >= 0.3 such cores is run again
(``--retries``), keeping the quietest attempt.

    HF_HUB_OFFLINE=1 python bench/embedder_speed.py            # 5 rounds, markdown on stdout
    HF_HUB_OFFLINE=1 python bench/embedder_speed.py --rounds 3 --queries 100
    HF_HUB_OFFLINE=1 python bench/embedder_speed.py --baseline 08e1076 --no-cold --wait-quiet 60 --retries 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common.corpus import make_queries  # noqa: E402
from common.measure import Quiet, cpu_window  # noqa: E402
from common.revisions import extract  # noqa: E402

WORKER = r"""
import json, sys, time
spawned, kind, cache, queries_n = float(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
batch_repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 1
texts = json.loads(sys.stdin.read())
if kind == "st":
    from autogen_shared_memory.embedding import SentenceTransformerEmbedder
    embedder = SentenceTransformerEmbedder(cache_size=0)
else:
    from autogen_shared_memory.onnx_embedding import OnnxEmbedder
    embedder = OnnxEmbedder(cache_dir=cache, cache_size=0)
embedder.embed(["the first query of the process"])
first = time.time() - spawned
rss = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
out = {"first": first, "rss": rss}
if queries_n:
    corpus = texts["corpus"]
    series = {"p50_ms": texts["queries"][:queries_n], "search_p50_ms": texts["search"][:queries_n]}
    for q in [*series["p50_ms"][:10], *series["search_p50_ms"][:10]]:
        embedder.embed([q + " (warm-up)"])
    lat = {key: [] for key in series}
    for lo in range(0, queries_n, 20):  # the two series in alternating blocks: drift hits both alike
        for key, texts_ in series.items():
            for q in texts_[lo : lo + 20]:
                t = time.perf_counter()
                embedder.embed([q])
                lat[key].append(time.perf_counter() - t)
    for key, times in lat.items():
        times.sort()
        out[key] = times[len(times) // 2] * 1e3
    rates = []
    for _ in range(batch_repeats):  # the median of several calls: one call's rate moved by +-15% alone
        t = time.perf_counter()
        embedder.embed(corpus)
        rates.append(len(corpus) / (time.perf_counter() - t))
    out["batch_per_s"] = sorted(rates)[len(rates) // 2]
    out["batch_rates"] = rates
    out["rss_end"] = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
out["heavy"] = [m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules]
print(json.dumps(out))
"""

PEOPLE = ["Priya", "Tom", "Aiko", "Lena", "Omar", "Sofia", "Jonas", "Mei", "Carlos", "Nadia", "Ravi", "Elsa"]
TEAMS = ["payments", "search", "mobile", "platform", "billing", "growth", "infra", "support", "data", "security"]
TOOLS = ["Postgres", "Kafka", "Redis", "Terraform", "Grafana", "Airflow", "Kubernetes", "dbt", "Sentry", "Vault"]
TASKS = [
    "the quarterly capacity review",
    "on-call handover notes",
    "the incident postmortem for the outage",
    "customer onboarding emails",
    "the migration of legacy invoices",
    "nightly backups of the reporting database",
    "latency budgets for the public API",
    "the release checklist",
]
DETAILS = [
    "confirmed in the Monday stand-up",
    "see ticket OPS-{n} for the full discussion",
    "as agreed with the customer in {city}",
    "until the end of sprint {n}",
    "because the previous approach doubled the cloud bill",
    "after two failed attempts last quarter",
    "",
]
CITIES = ["Lisbon", "Osaka", "Nairobi", "Toronto", "Berlin", "Lima", "Hanoi", "Oslo"]


def sentences(n: int, seed: int) -> list[str]:
    """Distinct, realistic memory-like sentences of about 10-45 tokens."""
    rng = random.Random(seed)
    corpus = json.loads((HERE / "dedup_corpus.json").read_text(encoding="utf-8"))
    pool = [t for section in corpus.values() for pair in section for t in pair.values() if t not in ("",)]
    pool = [t for t in pool if isinstance(t, str) and len(t.split()) > 3]
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        if rng.random() < 0.3 and pool:
            text = rng.choice(pool)
        else:
            detail = rng.choice(DETAILS).format(n=rng.randint(100, 9999), city=rng.choice(CITIES))
            text = (
                f"{rng.choice(PEOPLE)} on the {rng.choice(TEAMS)} team uses {rng.choice(TOOLS)} for "
                f"{rng.choice(TASKS)}{', ' + detail if detail else ''}."
            )
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def run_worker(
    kind: str, cache: str, queries: int, payload: str, src: Path | None = None, repeats: int = 1
) -> dict[str, Any]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    spawned = time.time()
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, repr(spawned), kind, cache, str(queries), str(repeats)],
        input=payload,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--queries", type=int, default=200, help="distinct single queries timed per worker")
    p.add_argument("--batch", type=int, default=1000, help="sentences embedded in one call")
    p.add_argument("--batch-repeats", type=int, default=3, help="batch calls per worker; their median is its rate")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument(
        "--baseline", action="append", default=[], help="also run the OnnxEmbedder of this git revision (repeatable)"
    )
    p.add_argument("--no-cold", dest="cold", action="store_false", help="skip the empty-cache (graph build) worker")
    p.add_argument("--wait-quiet", type=float, default=0.0, help="wait up to this many s for quiet per worker")
    p.add_argument("--wait-budget", type=float, default=900.0, help="total seconds spent waiting for quiet")
    p.add_argument("--retries", type=int, default=0, help="re-run a worker disturbed by >= 0.3 other cores")
    args = p.parse_args(argv)

    all_texts = sentences(args.batch + args.queries + 10, args.seed)
    payload = json.dumps(
        {
            "corpus": all_texts[: args.batch],
            "queries": all_texts[args.batch :],
            "search": make_queries(args.queries, args.seed),  # bench_store's search queries (~8 words)
        }
    )
    quiet = Quiet(args.wait_quiet, args.wait_budget, args.retries)
    bases = {f"onnx@{rev}": rev for rev in args.baseline}
    kinds = ["st", "onnx", *bases] + (["onnx-cold"] if args.cold else [])
    others: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="onnx-bench-") as tmp:
        warm = str(Path(tmp) / "warm")
        run_worker("onnx", warm, 0, payload)  # builds the graph once: the rounds below start warm
        base_src: dict[str, Path] = {}
        for i, kind in enumerate(bases):  # each revision gets its own source tree and warm graph cache
            base_src[kind] = extract(bases[kind], Path(tmp) / f"baseline{i}")
            run_worker("onnx", str(base_src[kind].parent / "warm"), 0, payload, base_src[kind])
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for r in range(args.rounds):
            for kind in kinds:

                def one(_mon: Any, kind: str = kind, r: int = r) -> tuple[dict[str, Any], float]:
                    with cpu_window() as w:
                        if kind == "onnx-cold":
                            res = run_worker("onnx", str(Path(tmp) / f"cold{r}"), 0, payload)
                        elif kind in bases:
                            src = base_src[kind]
                            res = run_worker(
                                "onnx", str(src.parent / "warm"), args.queries, payload, src, args.batch_repeats
                            )
                        else:
                            res = run_worker(kind, warm, args.queries, payload, repeats=args.batch_repeats)
                    return res, w.other_cores

                res = quiet.measure(f"round {r + 1} {kind}", one)
                others[kind].append(quiet.phases[-1]["other_cores"])
                results[kind].append(res)
                print(
                    f"round {r + 1}/{args.rounds} {kind}: {json.dumps(res)} "
                    f"(other processes {others[kind][-1]:.2f} cores)",
                    file=sys.stderr,
                )

    def med(kind: str, key: str) -> float:
        return statistics.median(float(x[key]) for x in results[kind])

    def cell(kind: str, key: str, fmt: str) -> str:
        return format(med(kind, key), fmt) if key in results[kind][0] else "—"

    names = {
        **{kind: f"OnnxEmbedder at {rev} (graph cached)" for kind, rev in bases.items()},
        "st": "SentenceTransformerEmbedder (torch)",
        "onnx": "OnnxEmbedder (graph cached)",
        "onnx-cold": "OnnxEmbedder (empty cache: builds)",
    }
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{args.rounds} interleaved rounds, medians; {args.queries} distinct single queries, "
        f"batch of {args.batch} sentences (median of {args.batch_repeats} calls per worker).\n"
    )
    print(
        "| embedder | start to first vector (s) | RSS after first vector (MB) | search query p50 (ms) "
        "| memory sentence p50 (ms) | batch (texts/s) | other processes' cores (max) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        print(
            f"| {names[kind]} | {cell(kind, 'first', '.2f')} | {cell(kind, 'rss', '.0f')} | "
            f"{cell(kind, 'search_p50_ms', '.2f')} | {cell(kind, 'p50_ms', '.2f')} | "
            f"{cell(kind, 'batch_per_s', '.0f')} | {max(others[kind]):.2f} |"
        )
    st_first, onnx_first = med("st", "first"), med("onnx", "first")
    print(
        f"\nStart-up {st_first / onnx_first:.1f}x faster, "
        f"RSS {med('st', 'rss') - med('onnx', 'rss'):.0f} MB lower, "
        f"search query {med('onnx', 'search_p50_ms') / med('st', 'search_p50_ms'):.2f}x torch's p50, "
        f"memory sentence {med('onnx', 'p50_ms') / med('st', 'p50_ms'):.2f}x, "
        f"batch {med('onnx', 'batch_per_s') / med('st', 'batch_per_s'):.2f}x torch's rate "
        f"(ONNX / torch); RSS after the batch: torch {med('st', 'rss_end'):.0f} MB, "
        f"ONNX {med('onnx', 'rss_end'):.0f} MB."
    )
    for kind, rev in bases.items():
        print(
            f"Baseline {rev}: search query {med(kind, 'search_p50_ms') / med('st', 'search_p50_ms'):.2f}x "
            f"torch's, memory sentence {med(kind, 'p50_ms') / med('st', 'p50_ms'):.2f}x, "
            f"batch {med(kind, 'batch_per_s') / med('st', 'batch_per_s'):.2f}x; now / baseline: search query "
            f"{med('onnx', 'search_p50_ms') / med(kind, 'search_p50_ms'):.2f}x, "
            f"memory sentence {med('onnx', 'p50_ms') / med(kind, 'p50_ms'):.2f}x, "
            f"batch {med('onnx', 'batch_per_s') / med(kind, 'batch_per_s'):.2f}x."
        )
    for kind in kinds:
        per_round = ", ".join(
            f"{x.get('search_p50_ms', float('nan')):.2f} / {x.get('p50_ms', float('nan')):.2f} ms / "
            f"{x.get('batch_per_s', float('nan')):.0f} per s"
            for x in results[kind]
        )
        print(f"\nPer round (search query / memory sentence p50, batch), {names[kind]}: {per_round}", end="")
    print()
    heavy = {m for k in kinds if k.startswith("onnx") for x in results[k] for m in x["heavy"]}
    if heavy:
        print(f"\nWARNING: the ONNX workers imported {sorted(heavy)}")


if __name__ == "__main__":
    main()
