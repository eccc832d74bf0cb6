"""Reciprocal Rank Fusion of the lexical and semantic rankings."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def rrf(ranked_lists: Sequence[tuple[Sequence[K], float]], k: float = 5.0) -> dict[K, float]:
    """Reciprocal Rank Fusion: ``sum(weight / (k + rank))`` over the lists an item is in (ranks from 1)."""
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    scores: dict[K, float] = {}
    for items, weight in ranked_lists:
        for rank, key in enumerate(items, start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    return scores
