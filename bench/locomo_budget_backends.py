"""Does the lexical postings budget cost recall on PostgreSQL as it does not on SQLite? LoCoMo in a 100k haystack.

    python bench/locomo_budget_backends.py --data ../shared/data/locomo/locomo_dev.json \\
        --markdown bench/results/locomo_budget_backends.md --json bench/results/locomo_budget_backends.json

For each backend (``--backends``): ONE group scope holding ``--haystack`` generated crew-memory facts
(bench_store.py's corpus, pooled real-model vectors + calibrated noise) and then the turns of every LoCoMo
conversation (one fact per turn, ``date+speaker+caption`` text as in locomo.py, written by its speaker, real
all-MiniLM-L6-v2 vectors, cached). Every question with evidence is searched in that scope (top_k=20) with the
library's default settings and ``max_lexical_postings`` = 10**9 (``none``: only the 10% common-term rule) or
the default 5,000, hybrid and lexical leg alone (``semantic_weight=0``), interleaved question by question.
Metrics: locomo.py's (Recall@5/@10, MRR over the evidence turns), paired ΔR@10 vs ``none`` with a 95% bootstrap
interval, and the lexical leg's own latency. This differs from locomo_haystack.py (one scope per conversation,
each with its own copy of the haystack, SQLite only): here the five conversations share one scope, so they
are each other's distractors too. The data set is read from ``--data`` and never copied.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common.corpus import make_corpus
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import PhaseTimer, log, pct
from common.pgserver import pg_server
from locomo import MAIN_TEXT, CachingEmbedder, Conversation, Ranking, _prev_in_session, load, score_one, text_variant

from autogen_shared_memory import SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.backends.sqlite import SQLiteBackend

GROUP = "locomo-all"
BUDGETS = (("none", 10**9), ("5000", 5000), ("2500", 2500))


def bootstrap(a: list[float], b: list[float], n: int = 2000, seed: int = 5) -> tuple[float, float, float]:
    d = np.asarray(b) - np.asarray(a)
    rng = np.random.default_rng(seed)
    means = [float(np.mean(d[rng.integers(0, len(d), len(d))])) for _ in range(n)]
    return float(np.mean(d)), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--haystack", type=int, default=100_000)
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument("--conversations", type=int, help="only the first K conversations (a quick check)")
    p.add_argument("--dsn")
    p.add_argument("--markdown", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    started = time.time()
    conversations = load(args.data, args.conversations)
    questions = [(c, q) for c in conversations for q in c.questions]
    # the conversations share one scope: a turn is named by its conversation and dia id
    relevant = {q.qid: tuple(f"{c.sample_id}#{e}" for e in q.evidence) for c, q in questions}
    model = SentenceTransformerEmbedder()
    model.load()
    cached = CachingEmbedder(model)
    render = text_variant(MAIN_TEXT)
    contents = {
        (c.sample_id, t.dia_id): render(t, _prev_in_session(c.turns, i))
        for c in conversations
        for i, t in enumerate(c.turns)
    }
    cached.embed(list(contents.values()))
    cached.embed([q.text for _, q in questions])
    corpus = make_corpus(args.haystack, n_cores=5000, seed=7)
    cores = model.embed(corpus.cores)
    sigma = calibrate_noise(model, corpus, cores, 256, seed=7)["sigma"]
    pooled = PooledNoiseEmbedder(model.model_id, cores, corpus.core_of, sigma, seed=7)

    class Embedder(PooledNoiseEmbedder):
        def embed(self, texts: Any) -> Any:
            return pooled.embed(texts) if texts[0] in corpus.core_of else cached.embed(texts)

    def embedder() -> Embedder:
        return Embedder(model.model_id, cores, corpus.core_of, sigma, seed=7)

    report: dict[str, Any] = {"haystack": args.haystack, "questions": len(questions), "backends": {}}
    names = args.backends.split(",")
    with pg_server(args.dsn) if "postgres" in names else _null() as dsn:
        for name in names:
            backend: Any = (
                SQLiteBackend(tempfile.mkdtemp(prefix="locomo-budget-"))
                if name == "sqlite"
                else PostgresBackend(dsn, schema=f"locomo_{uuid.uuid4().hex[:8]}")
            )
            writer = SharedMemoryStore(backend=backend, embedder=embedder(), near_duplicate_threshold=1.01)
            t0 = time.perf_counter()
            for i in range(0, args.haystack, 5000):
                writer.remember_many(corpus.facts[i : i + 5000], "group", group_id=GROUP)
            log(f"{name}: haystack in {time.perf_counter() - t0:.0f} s")
            dia_of: dict[str, tuple[str, ...]] = {}
            for conv in conversations:
                for speaker in conv.speakers:
                    writer.add_group_member(GROUP, speaker)
                _write_turns(writer, conv, contents, dia_of)
            reader = SharedMemoryStore(backend=backend, embedder=embedder())
            lexical = SharedMemoryStore(backend=backend, embedder=embedder(), semantic_weight=0.0)
            timer = PhaseTimer()
            methods: dict[str, Callable[[str], list[tuple[str, ...]]]] = {}
            for label, budget in BUDGETS:
                for leg, store in (("hybrid", reader), ("lexical", lexical)):

                    def search(
                        text: str,
                        budget: int = budget,
                        store: SharedMemoryStore = store,
                        leg: str = leg,
                        backend: Any = backend,
                        dia_of: dict[str, tuple[str, ...]] = dia_of,
                    ) -> Any:
                        backend.max_lexical_postings = budget
                        hits = store.search(text, "group", group_id=GROUP, top_k=20)
                        if leg == "lexical":
                            hits = [h for h in hits if h.lexical_rank is not None]
                        return [dia_of.get(h.fact.id, ()) for h in hits]

                    methods[f"{label}/{leg}"] = search
            rankings: dict[str, list[Ranking]] = {m: [] for m in methods}
            lex_ms: dict[str, list[float]] = {m: [] for m in methods}
            order = list(methods)
            with timer.attached(reader):  # both stores share the backend: its calls are timed once
                for n, (_, q) in enumerate(questions):
                    for j in range(len(order)):
                        m = order[(n + j) % len(order)]
                        timer.take()
                        t1 = time.perf_counter()
                        ranked = methods[m](q.text)
                        rankings[m].append(Ranking(q, ranked, time.perf_counter() - t1))
                        lex_ms[m].append(timer.take()["lexical"] * 1000)
            rows = {}
            for m, rs in rankings.items():
                scores = [score_one(r.ranked, relevant[r.question.qid]) for r in rs]
                rows[m] = {
                    "R@5": statistics.fmean(s["R@5"] for s in scores),
                    "R@10": statistics.fmean(s["R@10"] for s in scores),
                    "MRR": statistics.fmean(s["MRR"] for s in scores),
                    "r10": [s["R@10"] for s in scores],
                    "search_p50_ms": statistics.median(r.seconds for r in rs) * 1000,
                    "lexical_p50_ms": statistics.median(lex_ms[m]),
                    "lexical_p95_ms": pct(lex_ms[m], 95),
                }
            for leg in ("hybrid", "lexical"):
                base = rows[f"none/{leg}"]["r10"]
                for label, _ in BUDGETS[1:]:
                    rows[f"{label}/{leg}"]["dR@10"] = bootstrap(base, rows[f"{label}/{leg}"]["r10"])
            for r in rows.values():
                del r["r10"]
            report["backends"][name] = rows
            log(f"{name}: {json.dumps(rows)}")
            writer.close()
    report["run_minutes"] = (time.time() - started) / 60
    text = render_md(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if args.markdown:
        args.markdown.write_text(text)


class _null:
    def __enter__(self) -> str:
        return ""

    def __exit__(self, *exc: object) -> None:
        return None


def _write_turns(
    store: SharedMemoryStore,
    conv: Conversation,
    contents: dict[tuple[str, str], str],
    dia_of: dict[str, tuple[str, ...]],
) -> None:
    """A conversation's turns in dialogue order, runs of one speaker per call (as locomo.build_index)."""
    i = 0
    while i < len(conv.turns):
        j = i
        while (
            j < len(conv.turns)
            and conv.turns[j].speaker == conv.turns[i].speaker
            and conv.turns[j].session == conv.turns[i].session
        ):
            j += 1
        items = [
            {
                "content": contents[(conv.sample_id, conv.turns[n].dia_id)],
                "session_id": f"{conv.sample_id}:session_{conv.turns[n].session}",
            }
            for n in range(i, j)
        ]
        receipts = store.remember_many(items, "group", agent_id=conv.turns[i].speaker, group_id=GROUP)
        for n, receipt in zip(range(i, j), receipts, strict=True):
            dia_of[receipt.id] = (*dia_of.get(receipt.id, ()), f"{conv.sample_id}#{conv.turns[n].dia_id}")
        i = j


def render_md(report: dict[str, Any]) -> str:
    lines = [
        "| backend | budget | leg | R@5 | R@10 | MRR | ΔR@10 vs none [95% CI] | search p50 ms "
        "| lexical leg p50 / p95 ms |",
        "|---|---|---|---:|---:|---:|---|---:|---|",
    ]
    for name, rows in report["backends"].items():
        for m, r in rows.items():
            label, leg = m.split("/")
            d = r.get("dR@10")
            ci = f"{d[0]:+.4f} [{d[1]:+.4f}, {d[2]:+.4f}]" if d else "–"
            lines.append(
                f"| {name} | {label} | {leg} | {r['R@5']:.3f} | {r['R@10']:.3f} | {r['MRR']:.3f} | {ci} "
                f"| {r['search_p50_ms']:.1f} | {r['lexical_p50_ms']:.2f} / {r['lexical_p95_ms']:.2f} |"
            )
    lines += [
        "",
        f"{report['questions']} questions, haystack {report['haystack']:,}; run {report['run_minutes']:.1f} min.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    random.seed(0)
    main()
