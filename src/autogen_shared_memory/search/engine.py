"""One query over several scopes: the lexical and the semantic leg side by side, fused, ranked.

The backend runs each leg's storage work (BM25 over its postings; the vector index); this module decides how
the two legs overlap and how their rankings become one. It knows the backend only by the three calls it makes
(and the caller's ``check`` and ``fetch``, which it runs beside them).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ..core.types import Fact, Filters, ScopeRef
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

    def neighbours_across(
        self, wanted: Mapping[ScopeRef, Sequence[str]]
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]: ...


@dataclass(frozen=True)
class Ranked:
    key: Key
    score: float
    lexical_rank: int | None
    semantic_rank: int | None
    cosine: float | None
    context_of: str | None  # the fact whose score it borrowed (neighbour context)
    fact: Fact | None = None  # the fact itself, when the search was given ``fetch``


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
    *,
    check: Callable[[], None] | None = None,
    fetch: Callable[[Mapping[ScopeRef, Sequence[str]]], Mapping[ScopeRef, Sequence[Fact]]] | None = None,
) -> list[Ranked]:
    """The ``top_k`` facts of ``refs`` for ``query``, best first, ranked as ``settings`` say (each leg takes
    ``max(settings.search_depth, top_k)`` candidates).

    Args:
        backend: the two legs and the neighbour lookup.
        refs: the scopes to search, in the order their facts are keyed.
        query: the query text.
        embed: embeds the query.
        settings: the ranking.
        top_k: at most this many results.
        filters: what the legs let through.
        check: run before the lexical leg, on its thread: beside the query's embedding and the vector scan
            (the scopes' model check, whose round trips to a server then cost no time of their own).
        fetch: ``fetch({ref: ids})``: ``{ref: facts}``, the facts of those ids that still exist in each
            scope (:meth:`~autogen_shared_memory.backends.base.Backend.get_across`). Given, each result carries
            its fact and a result whose fact is gone is left out; the facts of the ``top_k`` best before
            neighbour context are fetched beside its lookups, the others after.

    Returns:
        The results, best first.

    Raises:
        Whatever ``check``, ``embed``, ``fetch`` or the legs raise.
    """
    terms = query_terms(query)
    depth = max(settings.search_depth, top_k)

    checked: list[bool] = []

    def lexical_leg() -> list[tuple[ScopeRef, str, float]]:
        if check is not None:
            checked.append(True)
            check()
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
    try:
        semantic, lexical = side_by_side([semantic_leg, lexical_leg])
    except Exception:
        # A leg that failed before the check ran (such as the semantic leg on a scope of vectors of another
        # size): the check's refusal says why, and what to do, better. When both raise, the check's wins too
        # (side_by_side raises the helper's exception last).
        if check is not None and not checked:
            check()
        raise
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
    fetched: dict[tuple[int, str], Fact] = {}
    asked: set[tuple[int, str]] = set()

    def across(
        call: Callable[[dict[ScopeRef, list[str]]], Mapping[ScopeRef, Any]], wanted: Mapping[int, Sequence[str]]
    ) -> dict[int, Any]:
        """``call`` (a backend's read of several scopes at once) with the engine's scope slots."""
        answers = call({refs[i]: list(ids) for i, ids in wanted.items()})
        return {i: answers.get(refs[i], {}) for i in wanted}

    def fetch_facts(keys: Sequence[tuple[int, str]]) -> None:
        assert fetch is not None
        asked.update(keys)
        by_scope: dict[int, list[str]] = {}
        for i, fid in keys:
            by_scope.setdefault(i, []).append(fid)
        if by_scope:
            for i, facts in across(fetch, by_scope).items():
                fetched.update(((i, fact.id), fact) for fact in facts)

    def order(scores: dict[tuple[int, str], float]) -> list[tuple[tuple[int, str], float]]:
        return sorted(scores.items(), key=lambda t: (-t[1], -cosine.get(t[0], -1.0)))

    weights = settings.context_weights
    if weights and any(weights):  # (0, 0): off, no neighbour query

        def context() -> Any:
            # Only the best 2 * top_k (at least 20) candidates lend: looking a fact's neighbours up costs two
            # index seeks (~12 us each on SQLite, 1.2 ms for 100 candidates), and a fact lent to only by
            # candidates ranked below top_k gets less than the top_k-th score when prev + next <= 1 (the
            # default 0.7): it could not enter the results anyway. Lenders between top_k and 2 * top_k still
            # lift candidates.
            return neighbour_context(
                base,
                weights,
                lambda wanted: across(backend.neighbours_across, wanted),
                pull_in=not filters.narrows,
                lenders=max(2 * top_k, 20),
            )

        if fetch is None:
            final, context_of = context()
        else:  # the likely results' facts are read while the neighbours are looked up (two round trips in one)
            likely = [key for key, _ in order(base)[:top_k]]
            final, context_of = side_by_side([context, lambda: fetch_facts(likely)])[0]
    scored = order(final)[:top_k]
    if fetch is not None:
        fetch_facts([key for key, _ in scored if key not in asked])
    lex_rank = {key: i for i, key in enumerate(lex_list, start=1)}
    sem_rank = {key: i for i, key in enumerate(sem_list, start=1)}
    return [
        Ranked(
            (refs[key[0]], key[1]),
            score,
            lex_rank.get(key),
            sem_rank.get(key),
            cosine.get(key),
            context_of.get(key),
            fetched.get(key),
        )
        for key, score in scored
        if fetch is None or key in fetched
    ]
