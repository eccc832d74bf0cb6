"""The in-memory lexical index (search/postings.py): FTS5's tokens and BM25, checked against SQLite's FTS5."""

from __future__ import annotations

import random
import sqlite3

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autogen_shared_memory.search.lexical import idf
from autogen_shared_memory.search.postings import Postings, bm25, top
from autogen_shared_memory.search.text import stem, tokens

WORDS = (
    "deploy deployed deploying window friday kafka broker brokers lag alert team teams payments ledger "
    "Postgres réplica café on-call rotation pager schema migration the a of for with staging 5433"
).split()


def corpus(n: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14))) for _ in range(n)]


def fts5(texts: list[str]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')")
    conn.executemany("INSERT INTO t (rowid, content) VALUES (?, ?)", [(i, t) for i, t in enumerate(texts)])
    return conn


def ranked(index: Postings, query: list[str], allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
    stems = list(dict.fromkeys(stem(w) for t in query for w in tokens(t)))
    found = {s: index.lookup(s) for s in stems}
    weights = {s: idf(index.n, len(found[s][0])) for s in stems}
    positions, scores = bm25(found, weights, index.lengths[: index.n], index.avgdl)
    return top(positions, scores, np.ones(index.n, dtype=bool) if allowed is None else allowed, 10**6)


@pytest.mark.parametrize("query", [["kafka"], ["deploy", "friday"], ["café", "ledger", "brokers"], ["5433", "lag"]])
def test_scores_and_order_equal_fts5_bm25(query: list[str]) -> None:
    texts = corpus(400)
    index = Postings()
    for lo in range(0, len(texts), 37):  # in batches and one by one: the tail and merges
        index.add(texts[lo : lo + 37])
    match = " OR ".join(f'"{t}"' for t in query)
    expected = fts5(texts).execute("SELECT rowid, -bm25(t) FROM t WHERE t MATCH ? ORDER BY rank", (match,)).fetchall()
    got = ranked(index, query)
    assert [p for p, _ in got] == [r for r, _ in expected]
    assert np.allclose([s for _, s in got], [s for _, s in expected], rtol=1e-9)


def test_incremental_adds_and_merges_equal_one_batch() -> None:
    texts = corpus(3000, seed=2)
    whole, pieces = Postings(), Postings()
    whole.add(texts)
    for text in texts[:50]:
        pieces.add([text])
    pieces.add(texts[50:2000])
    pieces._merge()
    pieces.add(texts[2000:])
    assert pieces.n == whole.n == 3000 and pieces.tokens == whole.tokens
    for word in WORDS:
        a, b = whole.lookup(stem(word.lower())), pieces.lookup(stem(word.lower()))
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert np.all(np.diff(b[0]) > 0)  # positions ascending, each once


def test_top_keeps_only_allowed_facts_and_breaks_ties_by_position() -> None:
    index = Postings()
    index.add(["kafka lag", "kafka lag", "kafka lag", "payments"])
    allowed = np.array([True, False, True, True])
    assert [p for p, _ in ranked(index, ["kafka"], allowed)] == [0, 2]
    assert ranked(index, ["kafka"], np.zeros(4, dtype=bool)) == []


def test_unknown_and_empty_terms_score_nothing() -> None:
    index = Postings()
    index.add(["", "kafka"])
    assert index.lookup("zookeeper")[0].size == 0
    assert ranked(index, ["zookeeper"]) == []
    assert index.lengths[:2].tolist() == [0.0, 1.0]


def test_a_text_holding_a_nul_is_still_one_fact() -> None:
    index = Postings()
    index.add(["kafka\x00lag", "kafka"])
    assert index.n == 2 and index.lengths[:2].tolist() == [2.0, 1.0]
    assert index.lookup("kafka")[0].tolist() == [0, 1] and index.lookup("lag")[0].tolist() == [0]


@given(
    st.lists(st.integers(0, 5), min_size=0, max_size=60),  # few distinct scores: many ties
    st.integers(0, 70),
    st.integers(0, 2**32 - 1),
)
def test_top_is_the_full_sort_cut_to_the_limit(levels: list[int], limit: int, seed: int) -> None:
    """``top`` looks only at the rows that can make the limit (ties at the cut included): the same rows, in
    the same order (score, then position), as sorting everything."""
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.choice(1000, size=len(levels), replace=False)).astype(np.int64)
    scores = np.array(levels, dtype=np.float64) / 4
    allowed = rng.random(1000) < 0.8
    keep = allowed[positions]
    reference = sorted(zip(positions[keep].tolist(), scores[keep].tolist(), strict=True), key=lambda p: (-p[1], p[0]))
    assert top(positions, scores, allowed, limit) == reference[:limit]


@given(st.integers(1, 400), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_sparse_and_dense_sums_are_the_same_to_the_last_bit(n: int, query: list[str], seed: int) -> None:
    """Few postings for the scope's size are summed over their distinct positions, many over every position:
    the same positions and the same float sums either way (weights added in the same order)."""
    from autogen_shared_memory.search import postings

    index = Postings()
    index.add(corpus(n, seed))
    stems = list(dict.fromkeys(stem(w) for t in query for w in tokens(t)))
    found = {s: index.lookup(s) for s in stems}
    weights = {s: idf(index.n, len(found[s][0])) + 0.1 for s in stems}
    lengths = index.lengths[: index.n]
    answers = []
    for sparse in (0, 10**9):  # every call sparse, then every call dense
        old, postings.SPARSE = postings.SPARSE, sparse
        try:
            answers.append(bm25(found, weights, lengths, index.avgdl))
        finally:
            postings.SPARSE = old
    (p1, s1), (p2, s2) = answers
    assert p1.dtype == p2.dtype == np.int64 and s1.dtype == s2.dtype == np.float64
    assert np.array_equal(p1, p2) and np.array_equal(s1, s2)
