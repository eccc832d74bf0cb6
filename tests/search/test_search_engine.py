"""The search pipeline's last stages, tested directly on a scripted backend: the two legs, fusion, ranking."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from autogen_shared_memory.core.types import Fact, Filters, ScopeRef
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

    def neighbours_across(
        self, wanted: Mapping[ScopeRef, Sequence[str]]
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]:
        return {scope: {f: self.next_to.get(f, (None, None)) for f in ids} for scope, ids in wanted.items()}


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
    final, lender = neighbour_context(
        base, (0.3, 0.1), Scripted([], [], {"q": ("before", "after")}).neighbours_across, True
    )
    assert final == pytest.approx({(GROUP, "q"): 1.0, (GROUP, "before"): 0.1, (GROUP, "after"): 0.3})
    assert lender == {(GROUP, "before"): "q", (GROUP, "after"): "q"}
    kept, _ = neighbour_context(base, (0.3, 0.1), Scripted([], [], {"q": ("before", "after")}).neighbours_across, False)
    assert kept == base  # a narrowed search never pulls in facts its filters did not select


class Fetched:
    """``fetch`` over a dict of facts, recording each call's ids."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.stored = {i: make_fact(i) for i in ids}
        self.calls: list[list[str]] = []

    def __call__(self, wanted: Mapping[ScopeRef, Sequence[str]]) -> dict[ScopeRef, list[Fact]]:
        self.calls.extend(list(ids) for ids in wanted.values())
        return {scope: [self.stored[i] for i in ids if i in self.stored] for scope, ids in wanted.items()}


def make_fact(fact_id: str) -> Fact:
    return Fact(
        fact_id,
        GROUP,
        f"text of {fact_id}",
        "system",
        0.0,
        1.0,
        (),
        None,
        {},
        None,
        None,
        (),
        None,
        "active",
        None,
        None,
        None,
        0,
        "",
        1,
        0.0,
    )


def test_fetch_reads_the_likely_results_beside_the_neighbours_and_the_pulled_in_ones_after() -> None:
    backend = Scripted(
        lexical=[(GROUP, "a", 9.0), (GROUP, "b", 5.0), (GROUP, "c", 4.0)],
        semantic=[],
        neighbours={"a": (None, "after")},
    )
    fetch = Fetched(["a", "b", "after"])  # "c" is gone since the legs ran
    ranked = engine.search(
        backend, [GROUP], "deploy", embed, settings(context_weights=(0.9, 0.0)), 4, Filters(), fetch=fetch
    )
    assert [r.key[1] for r in ranked] == ["a", "after", "b"]  # c's fact is gone: left out
    assert [r.fact.id if r.fact else None for r in ranked] == ["a", "after", "b"]
    assert fetch.calls == [["a", "b", "c"], ["after"]]  # the best before context, then only what was missing


def test_without_fetch_results_carry_no_fact_and_nothing_is_left_out() -> None:
    backend = Scripted(lexical=[(GROUP, "a", 9.0)], semantic=[])
    ranked = engine.search(backend, [GROUP], "deploy", embed, settings(context_weights=(0.5, 0.5)), 3, Filters())
    assert [(r.key[1], r.fact) for r in ranked] == [("a", None)]


class Refused(Exception):
    pass


def test_the_check_runs_once_beside_the_legs_and_its_refusal_is_the_search_s() -> None:
    runs: list[str] = []

    def check() -> None:
        runs.append("check")

    backend = Scripted(lexical=[(GROUP, "a", 9.0)], semantic=[])
    assert [
        r.key[1] for r in engine.search(backend, [GROUP], "deploy", embed, settings(), 3, Filters(), check=check)
    ] == ["a"]
    assert runs == ["check"]

    def refuse() -> None:
        runs.append("refuse")
        raise Refused("another model: run reembed")

    with pytest.raises(Refused):
        engine.search(backend, [GROUP], "deploy", embed, settings(), 3, Filters(), check=refuse)


class SemanticFails(Scripted):
    def semantic(
        self, scopes: Sequence[ScopeRef], vector: npt.NDArray[np.float32], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        raise ValueError("vectors of another size")


def test_a_leg_that_fails_before_the_check_ran_still_gets_the_check_s_refusal() -> None:
    """With every helper thread busy, the lexical leg (and the check before it) never starts before the semantic
    leg fails: the check then runs on the caller, and its refusal is what the search raises."""
    release = threading.Event()
    busy = [engine.helper_pool().submit(release.wait) for _ in range(4)]
    runs: list[str] = []

    def refuse() -> None:
        runs.append("refuse")
        raise Refused("another model: run reembed")

    def accept() -> None:
        runs.append("accept")

    try:
        with pytest.raises(Refused):
            engine.search(SemanticFails([], []), [GROUP], "deploy", embed, settings(), 3, Filters(), check=refuse)
        with pytest.raises(ValueError, match="another size"):  # the check passed: the leg's own error
            engine.search(SemanticFails([], []), [GROUP], "deploy", embed, settings(), 3, Filters(), check=accept)
    finally:
        release.set()
        for future in busy:
            future.result()
    assert runs == ["refuse", "accept"]
