"""One query over several scopes: the lexical and the semantic leg side by side, fused, ranked.

The backend runs each leg's storage work (BM25 over its postings; the vector index); this module decides how
the two legs overlap and how their rankings become one. It knows the backend only by the three calls it makes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ..core.types import Filters, ScopeRef
from ..settings import RecallSettings
from .fusion import neighbour_context, rrf
from .text import query_terms

Key = tuple[ScopeRef, str]
T = TypeVar("T")


class Legs(Protocol):
    """What a search asks of a backend (see :class:`~autogen_shared_memory.backends.base.Backend`)."""

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]: ...

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: npt.NDArray[np.float32], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]: ...

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]: ...


@dataclass(frozen=True)
class Ranked:
    key: Key
    score: float
    lexical_rank: int | None
    semantic_rank: int | None
    cosine: float | None
    context_of: str | None  # the fact whose score it borrowed (neighbour context)


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def helper_pool() -> ThreadPoolExecutor:
    """A small per-process thread pool for work that overlaps inside one call (never shared across a fork)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="shared-memory"))
    return _POOL[1]


def side_by_side(jobs: Sequence[Callable[[], T]], threads: int = 2, pool: ThreadPoolExecutor | None = None) -> list[T]:
    """The results of ``jobs``, run on the calling thread and up to ``threads - 1`` threads of ``pool`` (the
    helper pool by default), each taking the next job when free (pass the longest first). The caller works
    too, so the jobs finish even when every thread of the pool is busy (one that has not started is
    cancelled), and a single job costs no hand-off. The caller takes the first job before any helper can
    (a search's semantic leg: the caller's thread embeds and scans)."""
    results: list[T | None] = [None] * len(jobs)
    todo = iter(range(len(jobs)))
    lock = threading.Lock()

    def drain(i: int | None = None) -> None:
        while True:
            if i is None:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
            results[i] = jobs[i]()
            i = None

    first = next(todo, None)
    pool = pool or helper_pool()
    helpers = [pool.submit(drain) for _ in range(min(threads, len(jobs)) - 1)]
    try:
        if first is not None:
            drain(first)
    finally:
        for helper in helpers:
            if not helper.cancel():
                helper.result()
    return results  # type: ignore[return-value]  # every job has run


def search(
    backend: Legs,
    refs: Sequence[ScopeRef],
    query: str,
    embed: Callable[[Sequence[str]], npt.NDArray[np.float32]],
    settings: RecallSettings,
    top_k: int,
    filters: Filters,
) -> list[Ranked]:
    """The ``top_k`` facts of ``refs`` for ``query``, best first, ranked as ``settings`` say (each leg takes
    ``max(settings.search_depth, top_k)`` candidates)."""
    terms = query_terms(query)
    depth = max(settings.search_depth, top_k)

    def lexical_leg() -> list[tuple[ScopeRef, str, float]]:
        return backend.lexical(refs, terms, depth, filters)

    def semantic_leg() -> list[tuple[ScopeRef, str, float]]:
        vector = embed([query])[0]
        hits = backend.semantic(refs, vector, depth, filters)
        return [h for h in hits if h[2] >= settings.min_similarity]

    # The two legs run side by side (SQLite, ONNX Runtime, torch and numpy release the GIL): this thread
    # embeds the query, then scans the vectors on every core, while a helper thread runs the full-text leg
    # (shorter than the embedding: waiting for it costs nothing, and neither hand-off is on the critical path;
    # with every helper busy, this thread runs it after).
    # Measured on 2 cores, 100k global + 10k group facts, scope "all", medians of 6 alternating rounds:
    # OnnxEmbedder on 2 threads 8.3 ms side by side, 8.5 ms embedding first; on 1 thread 10.6 / 11.6 ms
    # (query embedding alone: 3.6 ms on 2 threads, 5.2 ms on 1). Running the semantic leg here rather than on
    # the helper: 100k facts, one scope, own work 0.85x. A torch embedder keeps the user's thread setting
    # (``torch.set_num_threads`` is process-wide): 100k facts, one scope, 15.1 ms side by side or one leg
    # after the other, 16.0 ms with torch on one thread.
    semantic, lexical = side_by_side([semantic_leg, lexical_leg])
    # Per leg, one list across scopes, ranked by score, never by per-scope rank (interleaving would put a
    # small scope's weak keyword match level with a big scope's best): the backend ranks the hits of all
    # scopes together (lexical: comparable BM25; semantic: cosine, one model). Inside, a fact is keyed by its
    # scope's position in ``refs``: a ScopeRef hashes in Python (~0.3 us), and fusion makes ~1,000 lookups.
    slot = {ref: i for i, ref in enumerate(refs)}
    lex_list = [(slot[ref], fid) for ref, fid, _ in lexical]
    sem_list = [(slot[ref], fid) for ref, fid, _ in semantic]
    cosine = {key: cos for key, (_, _, cos) in zip(sem_list, semantic, strict=True)}
    fused = rrf([(lex_list, settings.lexical_weight), (sem_list, settings.semantic_weight)], k=settings.rrf_k)
    weight = [settings.scope_weights[ref.kind] for ref in refs]
    base = {key: score * weight[key[0]] for key, score in fused.items()}
    context_of: dict[tuple[int, str], str] = {}
    final = base
    if settings.context_weights and any(settings.context_weights):  # (0, 0): off, no neighbour query
        # Only the best 2 * top_k (at least 20) candidates lend: looking a fact's neighbours up costs two index
        # seeks (~12 us each on SQLite, 1.2 ms for 100 candidates), and a fact lent to only by candidates
        # ranked below top_k gets less than the top_k-th score when prev + next <= 1 (the default 0.7): it
        # could not enter the results anyway. Lenders between top_k and 2 * top_k still lift candidates.
        final, context_of = neighbour_context(
            base,
            settings.context_weights,
            lambda i, ids: backend.neighbours(refs[i], ids),
            pull_in=not filters.narrows,
            lenders=max(2 * top_k, 20),
        )
    scored = sorted(final.items(), key=lambda t: (-t[1], -cosine.get(t[0], -1.0)))[:top_k]
    lex_rank = {key: i for i, key in enumerate(lex_list, start=1)}
    sem_rank = {key: i for i, key in enumerate(sem_list, start=1)}
    return [
        Ranked(
            (refs[key[0]], key[1]), score, lex_rank.get(key), sem_rank.get(key), cosine.get(key), context_of.get(key)
        )
        for key, score in scored
    ]
