"""Reciprocal Rank Fusion of the lexical and semantic rankings."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Hashable)  # a scope, or whatever stands for one in the caller's keys


def rrf(ranked_lists: Sequence[tuple[Sequence[K], float]], k: float = 5.0) -> dict[K, float]:
    """Reciprocal Rank Fusion: ``sum(weight / (k + rank))`` over the lists an item is in (ranks from 1)."""
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[K, float] = {}
    for items, weight in ranked_lists:
        for rank, key in enumerate(items, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return scores


def neighbour_context(
    base: dict[tuple[S, str], float],
    weights: tuple[float, float],
    neighbours: Callable[[Mapping[S, Sequence[str]]], Mapping[S, Mapping[str, tuple[str | None, str | None]]]],
    pull_in: bool,
    lenders: int | None = None,
) -> tuple[dict[tuple[S, str], float], dict[tuple[S, str], str]]:
    """``score(f) + b_prev * score(prev(f)) + b_next * score(next(f))``, prev/next being the facts written
    just before/after ``f`` in the same session: a turn recalled for a question lends credit to the
    turns around it (an answer often sits next to the turn that matches the words). ``pull_in``: facts that
    neither leg found may enter through their neighbours (returned in the second dict with their lender).
    ``lenders``: only the best this many facts of ``base`` lend (None: all of them). ``neighbours`` looks up
    the lenders of every scope at once: ``{scope: ids}`` to ``{scope: {id: (prev, next)}}``."""
    b_prev, b_next = weights
    final = dict(base)
    context_of: dict[tuple[S, str], str] = {}
    by_scope: dict[S, list[str]] = {}
    lending = base if lenders is None else heapq.nlargest(lenders, base, key=base.__getitem__)
    for ref, fid in lending:
        by_scope.setdefault(ref, []).append(fid)
    found = neighbours(by_scope) if by_scope else {}
    for ref in by_scope:
        for fid, (prev, nxt) in found.get(ref, {}).items():
            credit = base[(ref, fid)]
            for other, weight in ((prev, b_next), (nxt, b_prev)):  # prev(f)'s next is f, and so on
                key = (ref, other) if other is not None else None
                if key is None or not weight or (key not in base and not pull_in):
                    continue
                final[key] = final.get(key, 0.0) + weight * credit
                if key not in base:
                    context_of.setdefault(key, fid)
    return final, context_of
