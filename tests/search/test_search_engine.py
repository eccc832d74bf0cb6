"""The search pipeline's last stages, tested directly on a scripted backend: the two legs, fusion, ranking."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search import engine
from autogen_shared_memory.search.fusion import neighbour_context, rrf
from autogen_shared_memory.settings import RecallSettings

GROUP, GLOBAL = ScopeRef("group", "crew"), ScopeRef("global")


class Scripted:
    """A backend whose legs return fixed rankings (and record what they were asked)."""

    def __init__(
        self,
        lexical: list[tuple[ScopeRef, str, float]],
        semantic: list[tuple[ScopeRef, str, float]],
        neighbours: dict[str, tuple[str | None, str | None]] | None = None,
    ) -> None:
        self.lex, self.sem, self.next_to = lexical, semantic, neighbours or {}
        self.terms: list[str] = []

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        self.terms = list(terms)
        return self.lex[:limit]

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: npt.NDArray[np.float32], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        return self.sem[:limit]

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        return {f: self.next_to.get(f, (None, None)) for f in fact_ids}


def settings(**overrides: object) -> RecallSettings:
    base: dict[str, object] = {
        "search_depth": 50,
        "min_similarity": 0.15,
        "lexical_weight": 1.0,
        "semantic_weight": 0.5,
        "rrf_k": 5.0,
        "context_weights": None,
    }
    return RecallSettings(**{**base, **overrides})  # type: ignore[arg-type]


def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.ones((len(texts), 4), dtype=np.float32) / 2


def test_both_legs_fuse_by_reciprocal_rank_with_their_weights() -> None:
    backend = Scripted(
        lexical=[(GROUP, "a", 9.0), (GLOBAL, "b", 5.0)],
        semantic=[(GLOBAL, "b", 0.9), (GROUP, "c", 0.8), (GROUP, "low", 0.1)],
    )
    ranked = engine.search(backend, [GROUP, GLOBAL], "the deploy key", embed, settings(), 5, Filters())
    expected = rrf([([(GROUP, "a"), (GLOBAL, "b")], 1.0), ([(GLOBAL, "b"), (GROUP, "c")], 0.5)], k=5.0)
    assert [r.key for r in ranked] == sorted(expected, key=lambda k: -expected[k])
    assert {r.key: r.score for r in ranked} == pytest.approx(expected)
    b = next(r for r in ranked if r.key == (GLOBAL, "b"))
    assert (b.lexical_rank, b.semantic_rank, b.cosine) == (2, 1, 0.9)
    assert (GROUP, "low") not in {r.key for r in ranked}  # below min_similarity: noise, not recall
    assert backend.terms == ["deploy", "key"]  # stop words dropped before the lexical leg


def test_scope_weights_and_top_k_shape_the_ranking() -> None:
    backend = Scripted(lexical=[(GROUP, "a", 9.0), (GLOBAL, "b", 5.0)], semantic=[])
    weighted = settings(scope_weights={"agent": 1.0, "group": 0.1, "global": 1.0})
    ranked = engine.search(backend, [GROUP, GLOBAL], "deploy", embed, weighted, 1, Filters())
    assert [r.key for r in ranked] == [(GLOBAL, "b")]


def test_ties_are_broken_by_cosine() -> None:
    backend = Scripted(lexical=[(GROUP, "x", 3.0)], semantic=[(GROUP, "y", 0.7)])
    even = settings(semantic_weight=1.0)  # rank 1 of either leg: equal fused scores
    ranked = engine.search(backend, [GROUP], "deploy", embed, even, 5, Filters())
    assert ranked[0].score == ranked[1].score
    assert [r.key[1] for r in ranked] == ["y", "x"]


def test_neighbour_context_lends_credit_and_pulls_in_the_next_turn() -> None:
    base = {(GROUP, "q"): 1.0}
    final, lender = neighbour_context(base, (0.3, 0.1), Scripted([], [], {"q": ("before", "after")}).neighbours, True)
    assert final == pytest.approx({(GROUP, "q"): 1.0, (GROUP, "before"): 0.1, (GROUP, "after"): 0.3})
    assert lender == {(GROUP, "before"): "q", (GROUP, "after"): "q"}
    kept, _ = neighbour_context(base, (0.3, 0.1), Scripted([], [], {"q": ("before", "after")}).neighbours, False)
    assert kept == base  # a narrowed search never pulls in facts its filters did not select
