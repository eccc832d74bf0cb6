"""LoCoMo in a haystack: does the lexical postings budget cost recall when the turns hide among 100k facts?

Run from the repository root (HF_HUB_OFFLINE=1 is set; nothing is downloaded)::

    python bench/locomo_haystack.py --data ../shared/data/locomo/locomo_dev.json \\
        --json bench/results/locomo_haystack.json --markdown bench/results/locomo_haystack.md

Quick check: ``--conversations 1 --haystack 0,10000``. The data set (LoCoMo, CC BY-NC 4.0) is read from
``--data`` and never copied: the outputs hold only numbers, question ids and category names.

What it measures. ``SQLiteBackend.max_lexical_postings`` bounds the lexical work of a search (the library's
term chooser, ``search.lexical.choose_terms``): query terms are kept rarest first while their
posting lists add up to at most the budget. The rarest term is always kept, terms in more than
``max_common_term_ratio`` (10%) of the facts are dropped anyway, and nothing is pruned in scopes under 1,000
facts. The question: at 10k and 100k facts, does a budget of 20,000 / 10,000 / 5,000 postings lower recall
compared with no budget (``none`` = 10**9, only the 10% rule)? ``--budgets`` takes any list (e.g.
``none,2000,1000,500`` to find where it starts to cost), ``--max-common-term-ratio 1.0`` turns the 10% rule off.
Δ compares with the largest budget of the same leg. Three legs: ``hybrid`` (the library's defaults, neighbour
context included: the turns are written in named sessions, the haystack without one), ``no-context`` (the same
without neighbour context: does context cost recall among 100k facts?) and ``lexical`` (BM25 alone).

Setup, per haystack size N (``--haystack``, default 0, 10,000 and 100,000) and per conversation:

* one store root (temp dir) whose group scope ``locomo-<sample_id>`` holds N haystack facts and then the
  conversation's turns, nothing else. Turns are written by ``locomo.build_index`` (one fact per dialogue turn,
  content ``[date] Speaker: text [shares a photo: caption]``, ``near_duplicate_threshold=1.01``, each turn
  written by its speaker, in dialogue order), embedded by the REAL all-MiniLM-L6-v2 model (a text -> vector
  cache in front of it, so each turn is embedded once per run).
* the haystack: ``common.corpus``'s generated crew-memory facts (``make_corpus``: a core sentence from 12
  templates plus a detail clause, e.g. "Priya Novak on the payments team prefers Postgres for billing reports,
  confirmed by Tom Berg in Lisbon."), the first N of one deterministic corpus (``--seed``). Their vectors come
  from ``PooledNoiseEmbedder``: the real model's vector of the fact's core sentence (``--pool`` cores, 5,000 by
  default, embedded by the real model) plus Gaussian noise whose sigma is calibrated in this run
  (``calibrate_noise``: the noisy vector is as close to its core as a real fact vector is). They are written
  with ``common.workloads.populate`` (``remember_many`` in batches, ``near_duplicate_threshold=1.01``) into ONE
  template group file, grown 0 -> 10k -> 100k; each conversation gets an SQLite backup copy of the template
  (its ``scope_owner`` meta renamed to the conversation's group) before its turns are added.
* queries: every LoCoMo question with evidence (``--questions`` samples fewer per conversation), as
  ``store.search(question, "group", group_id=..., top_k=20)`` through a store with the library's default
  settings sharing the backend; the question is embedded by the real model (cached: every budget reuses the
  same vector, so latencies below are the store's own work, without the ~10 ms query embedding). For each
  budget, ``store.backend.max_lexical_postings`` is set and the same questions are searched on the same store;
  budgets and legs are interleaved question by question (rotating order) so machine load hits them alike.
* the lexical leg alone: a ``semantic_weight=0`` store (no neighbour context) sharing the backend, keeping
  only the hits the lexical leg found (semantic-only hits get a fused score of 0 and would otherwise pad the
  list).
* metrics (``locomo.summarise``): Recall@5/@10, MRR, NDCG@10 over the evidence turns, overall and per LoCoMo
  category; paired differences vs ``none`` with a 95% bootstrap interval (``locomo.paired_bootstrap``);
  search latency p50, the lexical leg's own p50 / p95 (``common.measure.PhaseTimer``), the terms kept, the
  postings scored (document frequencies of the kept stems) and how many haystack facts reach the top 10.

A full run (5 conversations, 997 questions, haystack up to 100k, 4 budgets) takes about 5 minutes on 2 cores,
half of it embedding the 5,000 core sentences and the 2,760 turns.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import re
import shlex
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autogen_shared_memory import DedupSettings, RecallSettings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common.corpus import Corpus, make_corpus
from common.embedders import PooledNoiseEmbedder, calibrate_noise
from common.measure import PhaseTimer, cpu_window, library_revision
from common.workloads import GROUP, populate
from locomo import (
    CATEGORIES,
    CATEGORY_NAMES,
    MAIN_TEXT,
    TOP_K,
    CachingEmbedder,
    Conversation,
    Index,
    Rank,
    Ranking,
    Result,
    build_index,
    load,
    machine,
    make_result,
    paired_bootstrap,
    run_interleaved,
)

from autogen_shared_memory.backends.sqlite import SQLiteBackend, scope_file_name
from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.embedding import SentenceTransformerEmbedder
from autogen_shared_memory.search import postings
from autogen_shared_memory.search.text import query_terms, stem, stems_of
from autogen_shared_memory.store import SharedMemoryStore

NO_BUDGET = 10**9
LEGS = ("hybrid", "no-context", "lexical")  # the defaults; the defaults without neighbour context; BM25 alone
HAYSTACK_PREFIX = "haystack:"

if "max_lexical_postings" not in inspect.signature(SQLiteBackend).parameters:  # pragma: no cover
    raise RuntimeError("SQLiteBackend has no max_lexical_postings: this benchmark measures that budget")


def source_digest() -> str:
    """SHA-1 of the library's source files as imported (src/ is edited by others: this names the exact code)."""
    import autogen_shared_memory

    digest = hashlib.sha1()
    for path in sorted(Path(autogen_shared_memory.__file__).parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- haystack
class Haystack:
    """One template group file, grown to each haystack size in turn (facts[:size] of one corpus)."""

    def __init__(self, root: Path, corpus: Corpus, embedder: PooledNoiseEmbedder, batch: int) -> None:
        self.root, self.corpus, self.embedder, self.batch = root, corpus, embedder, batch
        self.size = 0
        self.path = root / scope_file_name(ScopeRef("group", GROUP))

    def grow(self, size: int) -> dict[str, Any]:
        facts = self.corpus.facts[self.size : size]
        store = SharedMemoryStore(self.root, embedder=self.embedder, dedup=DedupSettings(near_duplicate=1.01))
        try:
            with cpu_window() as w:
                created = populate(store, facts, "single", self.batch)
        finally:
            store.close()  # last connection closed: the WAL is checkpointed into the file
        if created != len(facts):
            raise RuntimeError(f"haystack: only {created} of {len(facts)} generated facts were created")
        self.size = size
        mb = self.path.stat().st_size / 1e6
        log(f"haystack grown to {size:,} facts (+{len(facts):,} in {w.wall:.1f}s); template {mb:.0f} MB")
        return {"size": size, "added": len(facts), "seconds": round(w.wall, 2), "file_mb": round(mb, 1)}

    def copy_to(self, dest: Path, group_id: str) -> float:
        """An SQLite backup of the template at ``dest``, relabelled as the scope file of ``group_id``."""
        started = time.perf_counter()
        dest.parent.mkdir(parents=True, exist_ok=True)
        src, dst = sqlite3.connect(self.path), sqlite3.connect(dest)
        try:
            src.backup(dst)
            dst.execute("UPDATE meta SET value = ? WHERE key = 'scope_owner'", (group_id,))
            dst.commit()
        finally:
            src.close()
            dst.close()
        return time.perf_counter() - started


def index_root(tmp: Path) -> Path:
    """Where ``locomo.build_index`` puts the store of MAIN_TEXT under ``tmp`` (checked after the build)."""
    return tmp / f"store-{re.sub(r'[^a-z0-9]+', '_', MAIN_TEXT)}"


# ------------------------------------------------------------------------------------------- searching
class PruneLog:
    """Records the terms the library kept in the last lexical query (a wrap of the one term chooser,
    ``search.postings.choose_terms``, for this process)."""

    def __init__(self, backend: SQLiteBackend) -> None:
        self.kept: list[str] | None = None
        original = postings.choose_terms

        def logged(*args: Any, **kwargs: Any) -> list[str]:
            kept: list[str] = original(*args, **kwargs)
            self.kept = [str(t) for t in kept]
            return kept

        postings.choose_terms = logged  # type: ignore[assignment]


@dataclass
class Method:
    budget_label: str
    budget: int
    leg: str

    @property
    def name(self) -> str:
        return f"budget={self.budget_label} {self.leg}"


@dataclass
class Notes:
    """Per question (qid), what one method saw besides the ranking."""

    lexical_ms: dict[str, float] = field(default_factory=dict)
    terms: dict[str, list[str]] = field(default_factory=dict)
    kept: dict[str, list[str] | None] = field(default_factory=dict)
    haystack_top10: dict[str, int] = field(default_factory=dict)
    postings: dict[str, int] = field(default_factory=dict)
    postings_all_terms: dict[str, int] = field(default_factory=dict)


Searcher = Callable[[Conversation, Any], list[Rank]]


def make_searcher(
    store: SharedMemoryStore, index: Index, method: Method, prune: PruneLog, timer: PhaseTimer, notes: Notes
) -> Searcher:
    def search(conv: Conversation, q: Any) -> list[Rank]:
        index.backend.max_lexical_postings = method.budget
        prune.kept = None
        hits = store.as_operator(conv.group_id).search(q.text, "group", top_k=TOP_K)
        phases = timer.take()
        if method.leg == "lexical":  # the lexical leg alone: drop the 0-score semantic-only padding
            hits = [h for h in hits if h.lexical_rank is not None]
        # a turn fact stands for every dia id merged into it (verbatim repeats): one rank, a hit for each
        ranked = [tuple(index.dia_of.get(h.id, ())) or (HAYSTACK_PREFIX + h.id,) for h in hits]
        notes.lexical_ms[q.qid] = phases["lexical"] * 1000
        notes.kept[q.qid] = prune.kept
        notes.haystack_top10[q.qid] = sum(r[0].startswith(HAYSTACK_PREFIX) for r in ranked[:10])
        return ranked

    return search


def document_frequencies(path: Path, stems: set[str]) -> dict[str, int]:
    """df of each stem in one scope file (read-only connection, outside any timing): the facts holding it,
    tokenized and stemmed as the lexical leg does (:func:`~autogen_shared_memory.search.text.stems_of`)."""
    if not stems:
        return {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        df: dict[str, int] = dict.fromkeys(stems, 0)
        for (content,) in conn.execute("SELECT content FROM facts"):
            for term in stems_of(content) & stems:
                df[term] += 1
        return df
    finally:
        conn.close()


def run_conversation(
    conv: Conversation,
    size: int,
    haystack: Haystack | None,
    embedder: CachingEmbedder,
    methods: Sequence[Method],
    tmp: Path,
    common_ratio: float | None = None,
) -> tuple[dict[str, list[Ranking]], dict[str, Notes], dict[str, Any]]:
    root = index_root(tmp)
    ref = ScopeRef("group", conv.group_id)
    copy_s = haystack.copy_to(root / scope_file_name(ref), conv.group_id) if haystack and size else 0.0
    index = build_index(MAIN_TEXT, [conv], embedder, tmp)
    if common_ratio is not None:
        index.backend.max_common_term_ratio = common_ratio
    try:
        if index.root != root:
            raise RuntimeError(f"build_index used {index.root}, expected {root}: update index_root()")
        counts = index.backend.stats(ref).counts
        turn_facts = len(conv.turns) - index.merged_turns
        if counts["active"] != size + turn_facts or sum(map(len, index.dia_of.values())) != len(conv.turns):
            raise RuntimeError(f"{conv.group_id}: {counts} facts, expected {size} haystack + {turn_facts} turn facts")
        reader = SharedMemoryStore(index.backend, embedder=embedder)  # library defaults
        stores = {
            "hybrid": reader,
            "no-context": SharedMemoryStore(
                index.backend, embedder=embedder, recall=RecallSettings(context_weights=None)
            ),
            "lexical": SharedMemoryStore(
                index.backend, embedder=embedder, recall=RecallSettings(semantic_weight=0.0, context_weights=None)
            ),
        }
        prune = PruneLog(index.backend)
        timer = PhaseTimer()
        notes = {m.name: Notes() for m in methods}
        searchers = {m.name: make_searcher(stores[m.leg], index, m, prune, timer, notes[m.name]) for m in methods}
        with timer.attached(reader), cpu_window() as w:
            rankings = run_interleaved([conv], searchers)
        # postings: the document frequencies of the stems each query kept (and of all its terms, for scale)
        terms = {q.qid: query_terms(q.text) for q in conv.questions}
        stems = {stem(t) for ts in terms.values() for t in ts}
        df = document_frequencies(index.backend.path_of(ref), stems)
        for n in notes.values():
            for q in conv.questions:
                n.terms[q.qid] = terms[q.qid]
                n.postings_all_terms[q.qid] = sum(df.get(s, 0) for s in {stem(t) for t in terms[q.qid]})
                kept = n.kept.get(q.qid)
                n.postings[q.qid] = sum(df.get(s, 0) for s in {stem(t) for t in (kept or [])})
        info = {
            "conversation": conv.sample_id,
            "facts": counts["active"],
            "turns": len(conv.turns),
            "merged_turns": index.merged_turns,
            "questions": len(conv.questions),
            "copy_s": round(copy_s, 2),
            "build_s": round(index.build_seconds, 2),
            "search_s": round(w.wall, 2),
            "other_cores": round(w.other_cores, 2),
        }
        return rankings, notes, info
    finally:
        index.backend.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------- summary
def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _p50(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if xs else None


def note_summary(notes: Sequence[Notes], methods_none: Sequence[Notes] | None) -> dict[str, Any]:
    merged = Notes()
    for n in notes:
        for name in ("lexical_ms", "terms", "kept", "haystack_top10", "postings", "postings_all_terms"):
            getattr(merged, name).update(getattr(n, name))
    qids = sorted(merged.terms)
    kept_n = [len(merged.kept[q] or []) for q in qids if merged.kept.get(q) is not None]
    out: dict[str, Any] = {
        "lexical_p50_ms": _p50(list(merged.lexical_ms.values())),
        "lexical_p95_ms": _pct(list(merged.lexical_ms.values()), 95),
        "query_terms_mean": _mean([len(merged.terms[q]) for q in qids]),
        "kept_terms_mean": _mean(kept_n),
        "postings_p50": _p50([merged.postings[q] for q in qids]),
        "postings_mean": _mean([merged.postings[q] for q in qids]),
        "postings_max": max((merged.postings[q] for q in qids), default=None),
        "postings_all_terms_p50": _p50([merged.postings_all_terms[q] for q in qids]),
        "haystack_in_top10_mean": _mean([merged.haystack_top10[q] for q in qids]),
    }
    if methods_none is not None:  # questions whose kept terms differ from the no-budget run
        ref: dict[str, list[str] | None] = {}
        for n in methods_none:
            ref.update(n.kept)
        out["queries_pruned_more_than_none"] = sum(
            1 for q in qids if sorted(merged.kept.get(q) or []) != sorted(ref.get(q) or [])
        )
    return out


# ------------------------------------------------------------------------------------------- markdown
def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}" if isinstance(x, float) else f"{x:,}"


def _cat(key: str) -> str:
    n = int(key[3:])
    return f"{n} {CATEGORY_NAMES.get(n, '?')}"


def render_markdown(report: dict[str, Any]) -> str:
    d = report["data"]
    noise = report.get("noise") or {}
    ratio = report["setup"]["max_common_term_ratio"]
    ratio = 0.1 if ratio is None else ratio
    lines = [
        "# LoCoMo in a haystack: the lexical postings budget",
        "",
        f"Command: `{report['command']}` ({report['wall_seconds']:.0f} s wall, {report['machine'].get('cpus')} "
        f"CPUs, shared machine: latencies are indicative). Library: {report['library']['revision']} "
        f"(source SHA-1 {report['library']['src_sha1']}), {report['date']}.",
        "",
        f"Data: {d['conversations']} conversations, {d['turns']} turns, {d['questions']} questions with evidence "
        f"(of {d['questions_available']}). Each conversation is searched in its own group scope holding N "
        "generated haystack facts plus its turns; top_k=20, library default store settings, query vectors "
        "from the real model (cached, so latencies exclude query embedding).",
    ]
    if noise:
        lines.append(
            f"Haystack vectors: real MiniLM vector of one of {noise['pool']:,} core sentences + noise, sigma "
            f"{noise['sigma']:.4f} (cos to core {noise['cos_noisy_to_core_mean']:.3f}, target "
            f"{noise['cos_real_fact_to_core_mean']:.3f})."
        )
    lines += [
        "",
        f"`none` = max_lexical_postings 10^9 (only the common-term rule: terms in more than {ratio:g} of the facts "
        "are dropped); Δ = paired difference vs `none` of the "
        "same leg, 95% bootstrap interval over questions, questions better/worse; queries pruned beyond none = "
        "questions whose kept terms differ from the `none` run. `lexical` = the lexical leg "
        "alone (semantic_weight=0, lexical hits only). Postings = sum of the document frequencies of the kept "
        "terms (all terms: before any pruning). Haystack@10 = haystack facts among the top 10.",
        "",
    ]
    for size_block in report["sizes"]:
        size = size_block["size"]
        lines += [f"## Haystack {size:,} facts", ""]
        lines += [
            "| budget | leg | R@5 | R@10 | MRR | NDCG@10 | ΔR@10 vs none [95% CI] | better/worse | ΔMRR vs none "
            "| queries pruned beyond none | search p50 ms | lexical leg p50 / p95 ms | terms kept / query "
            "| postings p50 (max) | all-terms postings p50 | haystack@10 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in size_block["results"]:
            s, x = row["summary"], row["notes"]
            dr = row.get("vs_none", {}).get("R@10")
            dm = row.get("vs_none", {}).get("MRR")
            ci = f"{dr['mean']:+.4f} [{dr['lo']:+.4f}, {dr['hi']:+.4f}]" if dr else "–"
            bw = f"{dr['better']} / {dr['worse']}" if dr else "–"
            dmrr = f"{dm['mean']:+.4f}" if dm else "–"
            lines.append(
                f"| {row['budget']} | {row['leg']} | {_f(s['all']['R@5'])} | {_f(s['all']['R@10'])} | "
                f"{_f(s['all']['MRR'])} | {_f(s['all']['NDCG@10'])} | {ci} | {bw} | "
                f"{dmrr} | {_f(x.get('queries_pruned_more_than_none'))} | {_f(s['latency_p50_ms'], 1)} | "
                f"{_f(x['lexical_p50_ms'], 2)} / {_f(x['lexical_p95_ms'], 2)} | "
                f"{_f(x['kept_terms_mean'], 2)} / {_f(x['query_terms_mean'], 2)} | "
                f"{_f(x['postings_p50'], 0)} ({_f(x['postings_max'])}) | {_f(x['postings_all_terms_p50'], 0)} | "
                f"{_f(x['haystack_in_top10_mean'], 2)} |"
            )
        lines += ["", f"R@10 per category (questions: {size_block['per_category_n']}):", ""]
        lines += ["| budget | leg | " + " | ".join(_cat(c) for c in CATEGORIES) + " |"]
        lines += ["|---|---|" + "---|" * len(CATEGORIES)]
        for row in size_block["results"]:
            s = row["summary"]
            cells = [_f(s[c]["R@10"]) if c in s else "–" for c in CATEGORIES]
            lines.append(f"| {row['budget']} | {row['leg']} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Per conversation: "
            + "; ".join(
                f"{c['conversation']} {c['facts']:,} facts (copy {c['copy_s']}s, turns {c['build_s']}s, searches "
                f"{c['search_s']}s, other processes {c['other_cores']} cores)"
                for c in size_block["conversations"]
            ),
            "",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- main
def parse_budgets(text: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item:
            out.append(("none", NO_BUDGET) if item == "none" else (f"{int(item):,}", int(item)))
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON (read only, never copied)")
    parser.add_argument("--haystack", default="0,10000,100000", help="haystack sizes, comma-separated")
    parser.add_argument("--conversations", type=int, help="only the first K conversations")
    parser.add_argument("--questions", type=int, help="at most this many questions per conversation (sampled)")
    parser.add_argument("--budgets", default="none,20000,10000,5000", help="max_lexical_postings values ('none')")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--markdown", type=Path, help="write the tables here (else: stdout)")
    parser.add_argument("--seed", type=int, default=7, help="haystack corpus, noise and question sample")
    parser.add_argument("--pool", type=int, default=5000, help="distinct core sentences embedded by the model")
    parser.add_argument("--populate-batch", type=int, default=2000, help="remember_many batch for the haystack")
    parser.add_argument(
        "--max-common-term-ratio",
        type=float,
        help="override SQLiteBackend.max_common_term_ratio (default: the library's, 0.1; 1.0 turns the rule off)",
    )
    parser.add_argument("--tmp", type=Path, help="parent of the temp dir (default: the system's)")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(x) for x in args.haystack.split(",") if x.strip()})
    args.budget_list = parse_budgets(args.budgets)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    conversations = load(args.data, args.conversations)
    available = sum(len(c.questions) for c in conversations)
    if args.questions:
        rng = random.Random(args.seed)
        for conv in conversations:
            if len(conv.questions) > args.questions:
                keep = sorted(rng.sample(range(len(conv.questions)), args.questions))
                conv.questions = [conv.questions[i] for i in keep]
    data_info = {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "questions": sum(len(c.questions) for c in conversations),
        "questions_available": available,
    }
    log(f"data: {data_info}")
    methods = [Method(label, budget, leg) for label, budget in args.budget_list for leg in LEGS]

    base = SentenceTransformerEmbedder(cache_size=0)
    embedder = CachingEmbedder(base)
    t = time.perf_counter()
    embedder.embed([q.text for c in conversations for q in c.questions])  # one batched pass, cached
    log(f"embedded {data_info['questions']} questions in {time.perf_counter() - t:.1f}s")

    tmp = Path(tempfile.mkdtemp(prefix="locomo-haystack-", dir=args.tmp))
    report: dict[str, Any] = {
        "command": "python "
        + shlex.join([os.path.relpath(sys.argv[0]), *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": machine(),
        "library": {"revision": library_revision(), "src_sha1": source_digest()},
        "data": data_info,
        "setup": {
            "top_k": TOP_K,
            "indexed_text": MAIN_TEXT,
            "budgets": dict(args.budget_list),
            "sizes": args.sizes,
            "seed": args.seed,
            "questions_per_conversation": args.questions,
            "max_common_term_ratio": args.max_common_term_ratio,  # None: the library's (0.1)
        },
        "sizes": [],
    }
    haystack: Haystack | None = None
    try:
        biggest = max(args.sizes)
        if biggest:
            pool = min(args.pool, biggest)
            corpus = make_corpus(biggest, pool, args.seed)
            t = time.perf_counter()
            core_vectors = base.embed(corpus.cores)
            noise = calibrate_noise(base, corpus, core_vectors, 256, args.seed)
            noise.update(pool=pool, pool_embed_s=round(time.perf_counter() - t, 1))
            report["noise"] = noise
            log(f"{pool} cores embedded + noise calibrated in {noise['pool_embed_s']}s; sigma {noise['sigma']:.4f}")
            fake = PooledNoiseEmbedder(base.model_id, core_vectors, corpus.core_of, noise["sigma"], args.seed)
            haystack = Haystack(tmp / "haystack", corpus, fake, args.populate_batch)

        for size in args.sizes:
            block: dict[str, Any] = {"size": size, "conversations": []}
            if size and haystack is not None:
                block["population"] = haystack.grow(size)
            rankings: dict[str, list[Ranking]] = {m.name: [] for m in methods}
            notes: dict[str, list[Notes]] = {m.name: [] for m in methods}
            started = time.perf_counter()
            for i, conv in enumerate(conversations):
                r, n, info = run_conversation(
                    conv, size, haystack, embedder, methods, tmp / f"conv{i}", args.max_common_term_ratio
                )
                for name in rankings:
                    rankings[name].extend(r[name])
                    notes[name].append(n[name])
                block["conversations"].append(info)
                log(f"haystack {size:,} {conv.sample_id}: {info}")
            seconds = time.perf_counter() - started
            results: dict[str, Result] = {
                m.name: make_result(f"haystack={size}", m.name, MAIN_TEXT, m.leg, rankings[m.name], seconds)
                for m in methods
            }

            def reference(leg: str) -> Method | None:  # the largest budget
                return max((m for m in methods if m.leg == leg), key=lambda m: m.budget, default=None)

            none_of = {leg: reference(leg) for leg in LEGS}
            rows = []
            for m in methods:
                ref = none_of[m.leg]
                row: dict[str, Any] = {
                    "budget": m.budget_label,
                    "max_lexical_postings": m.budget,
                    "leg": m.leg,
                    "summary": results[m.name].summary,
                    "notes": note_summary(notes[m.name], notes[ref.name] if ref else None),
                }
                if ref is not None and ref.name != m.name:
                    row["vs_none"] = {
                        metric: paired_bootstrap(results[m.name], results[ref.name], metric)
                        for metric in ("R@5", "R@10", "MRR")
                    }
                rows.append(row)
                s = row["summary"]["all"]
                log(
                    f"haystack {size:,} {m.name}: R@5 {s['R@5']:.3f} R@10 {s['R@10']:.3f} MRR {s['MRR']:.3f} "
                    f"p50 {row['summary']['latency_p50_ms']:.1f} ms, lexical {row['notes']['lexical_p50_ms']:.2f} ms"
                )
            block["results"] = rows
            hybrid, plain = none_of["hybrid"], none_of["no-context"]
            if hybrid is not None and plain is not None:
                block["defaults_vs_no_context"] = {
                    metric: paired_bootstrap(results[hybrid.name], results[plain.name], metric)
                    for metric in ("R@5", "R@10", "MRR")
                }
                log(f"haystack {size:,} defaults - no context: {block['defaults_vs_no_context']}")
            first = results[methods[0].name].summary
            block["per_category_n"] = ", ".join(f"{_cat(c)} {first[c]['n']}" for c in CATEGORIES if c in first)
            report["sizes"].append(block)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    report["wall_seconds"] = time.perf_counter() - wall
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    markdown = render_markdown(report)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown)
    print(markdown)
    log(f"done in {report['wall_seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
