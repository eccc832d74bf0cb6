"""The lexical leg's stages: which kept terms anchor the ranking, and the SQLite ranking they bound."""

from __future__ import annotations

import itertools

import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search.lexical import choose_terms, split_anchors
from autogen_shared_memory.testing import HashEmbedder

STEMS = {"alpha": "alpha", "beta": "beta", "betas": "beta", "gamma": "gamma", "delta": "delta"}


def test_anchors_are_the_rarest_terms_within_the_budget() -> None:
    df = {"alpha": 50, "beta": 300, "gamma": 700, "delta": 0}
    kept = ["gamma", "alpha", "beta", "delta"]
    assert split_anchors(kept, STEMS, df, 400) == (["alpha", "beta", "delta"], ["gamma"])  # 0 + 50 + 300
    assert split_anchors(kept, STEMS, df, 100) == (["alpha", "delta"], ["gamma", "beta"])  # query order kept
    assert split_anchors(kept, STEMS, df, 10**9) == (kept, [])  # everything fits: one ordinary query


def test_the_rarest_term_anchors_even_past_the_budget_and_stems_stay_together() -> None:
    df = {"alpha": 5000, "beta": 800, "gamma": 9000}
    assert split_anchors(["alpha", "beta", "gamma"], STEMS, df, 10) == (["beta"], ["alpha", "gamma"])
    both = split_anchors(["beta", "betas", "gamma"], STEMS, df, 1000)
    assert both == (["beta", "betas"], ["gamma"])  # one stem, one posting list: counted once
    assert split_anchors([], STEMS, df, 10) == ([], [])


GLOBAL = ScopeRef("global")


def has_alpha(i: int) -> bool:
    return i % 40 == 0


def fact(i: int) -> str:
    """alpha in 50 of 2,000 facts, beta in 286, gamma (once or twice) in 667; filler varies the lengths."""
    words = [f"item{i}"] + ["filler"] * (i % 9) + ["alpha"] * has_alpha(i) + ["beta"] * (i % 7 == 0)
    return " ".join(words + ["gamma"] * ((i % 3 == 0) + (i % 33 == 0)))


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> SQLiteBackend:
    root = tmp_path_factory.mktemp("lexical")
    backend = SQLiteBackend(root, max_common_term_ratio=1.0, max_lexical_postings=10**6)
    store = SharedMemoryStore(root, backend=backend, embedder=HashEmbedder(), near_duplicate_threshold=1.01)
    store.remember_many([fact(i) for i in range(2000)], "global")
    return backend


def ranked(backend: SQLiteBackend, anchor_budget: int, limit: int) -> dict[str, float]:
    """The lexical leg's hits for "alpha beta gamma" with ``max_ranked_postings = anchor_budget``."""
    default, backend.max_ranked_postings = backend.max_ranked_postings, anchor_budget
    try:
        hits = backend.lexical([GLOBAL], ["alpha", "beta", "gamma"], limit, Filters())
    finally:
        backend.max_ranked_postings = default
    assert [h[2] for h in hits] == sorted((h[2] for h in hits), reverse=True)
    return {fact_id: score for _, fact_id, score in hits}


def test_anchored_ranking_scores_every_term_of_the_facts_holding_an_anchor(backend: SQLiteBackend) -> None:
    everything = ranked(backend, 10**9, 10_000)  # the plain OR: every match, FTS5's BM25
    assert len(everything) == sum(has_alpha(i) or i % 7 == 0 or i % 3 == 0 for i in range(2000))
    alpha = {f.id for f in backend.get(GLOBAL, list(everything)) if "alpha" in f.content.split()}
    assert len(alpha) == 50
    top = ranked(backend, 100, 20)  # anchor: alpha (50 postings); beta and gamma still add to the scores
    assert len(top) == 20 and set(top) <= alpha
    assert all(top[fact_id] == pytest.approx(everything[fact_id], rel=1e-9) for fact_id in top)
    best = sorted((everything[fact_id] for fact_id in alpha), reverse=True)[:20]
    assert sorted(top.values(), reverse=True) == pytest.approx(best, rel=1e-9)
    # The approximation: with as many anchored facts as the limit, the others are not ranked, even those that
    # the plain OR puts in its top (here, short beta + gamma facts above the longest alpha ones).
    fifty = ranked(backend, 100, 50)
    assert set(fifty) == alpha and not set(ranked(backend, 10**9, 50)) <= alpha


def test_too_few_anchored_facts_rank_the_others_too_exactly_as_the_or(backend: SQLiteBackend) -> None:
    plain = ranked(backend, 10**9, 80)
    anchored = ranked(backend, 100, 80)  # 50 facts hold alpha, fewer than 80: every match competes
    assert sorted(anchored.values(), reverse=True) == pytest.approx(sorted(plain.values(), reverse=True), rel=1e-9)
    cut = min(plain.values()) + 1e-9  # ties at the cut may be broken either way
    assert {f for f, s in plain.items() if s > cut} == {f for f, s in anchored.items() if s > cut}


def test_one_plain_query_when_every_kept_term_fits_the_anchor_budget(backend: SQLiteBackend) -> None:
    assert ranked(backend, 10**6, 30) == ranked(backend, 10**9, 30)


@pytest.mark.parametrize("order", list(itertools.permutations(["deploy", "rollback", "canary", "freeze"])))
def test_tied_terms_go_to_the_query_order_not_the_hash_order(order: tuple[str, ...]) -> None:
    # Equally frequent terms and room for one: the query's first is kept (and is the one anchor), whatever
    # the process's hash seed (a set's iteration order made the same query rank differently per process).
    stems = {t: t for t in order}
    df = dict.fromkeys(order, 600)
    assert choose_terms(order, stems, 100_000, df, common_ratio=0.1, budget=1000) == [order[0]]
    assert split_anchors(order, stems, df, budget=1000) == ([order[0]], list(order[1:]))
