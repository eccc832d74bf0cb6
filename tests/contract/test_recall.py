"""Lexical query safety (property-tested against a real FTS5 index), common-term pruning, and RRF."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from autogen_core import CancellationToken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import fts5_expression
from autogen_shared_memory.core.types import Filters
from autogen_shared_memory.facts import MAX_QUERY_CHARS
from autogen_shared_memory.integration.autogen.tools import memory_tools
from autogen_shared_memory.search.fusion import rrf
from autogen_shared_memory.search.text import query_terms, stem, stems_of
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import HashEmbedder

NASTY = [
    '"',
    '""',
    "'",
    "-",
    "-x",
    "a:b",
    "col:value",
    "*",
    "pre*",
    "^start",
    "NEAR(a b)",
    "NEAR(",
    "a AND b",
    "a OR b",
    "NOT a",
    "AND",
    "OR",
    "NOT",
    "(",
    ")",
    "{a b}",
    "a + b",
    "🙂🙂",
    "🚀",
    "",
    "   ",
    "\x00",
    'he said "hi" -- NOT AND OR',
    "content:secret",
    "rank:1",
    "facts_fts",
    "\\",
    "%_",
    "a'b\"c",
]


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')")
    conn.executemany("INSERT INTO t VALUES (?)", [("alpha beta",), ("and or not near",), ("naïve café",)])
    yield conn
    conn.close()


def run(conn: sqlite3.Connection, text: str) -> list[str]:
    expr = fts5_expression(query_terms(text))
    if not expr:
        return []
    return [r[0] for r in conn.execute("SELECT content FROM t WHERE t MATCH ? ORDER BY rank", (expr,))]


@pytest.mark.parametrize("text", NASTY)
def test_nasty_inputs_never_raise(fts: sqlite3.Connection, text: str) -> None:
    run(fts, text)


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80))
def test_any_text_is_a_safe_expression(fts: sqlite3.Connection, text: str) -> None:
    run(fts, text)


@given(st.text(max_size=80))
def test_expression_is_only_quoted_literals_joined_by_or(text: str) -> None:
    expr = fts5_expression(query_terms(text))
    if not expr:
        return
    for part in expr.split(" OR "):
        assert part.startswith('"') and part.endswith('"')
        assert '"' not in part[1:-1].replace('""', "")


def test_operators_are_literals_not_syntax(fts: sqlite3.Connection) -> None:
    assert run(fts, "NOT alpha") == ["alpha beta"]  # NOT is a stop word here, never an operator
    assert run(fts, "NEAR(and or)") == ["and or not near"]
    assert run(fts, "naive cafe") == ["naïve café"]  # diacritics folded on both sides
    assert run(fts, "🚀") == []


def test_query_terms_drop_stop_words_unless_nothing_else() -> None:
    assert query_terms("What is the deploy schedule?") == ["deploy", "schedule"]
    assert query_terms("who are you") == ["who", "are", "you"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


def test_stem_matches_fts5_porter() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(c, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
    words = ["running", "preferences", "happily", "generalization", "deploys", "relational", "caresses"]
    conn.execute("INSERT INTO t VALUES (?)", (" ".join(words),))
    assert {r[0] for r in conn.execute("SELECT term FROM v")} == {stem(w) for w in words}


def test_common_terms_are_pruned_from_large_scopes(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01))
    facts = [f"the user asked about item{i} in the widget catalogue" for i in range(1500)]
    store.operator.remember_many(facts, "global")
    backend, scope = store.backend, store.engine.scope_ref("global")
    only = backend.lexical([scope], ["user", "widget", "item42"], 10, Filters())
    assert [f.content for f in backend.get(scope, [h[1] for h in only])] == [facts[42]]  # in every fact: dropped
    assert len(backend.lexical([scope], ["user", "widget"], 10, Filters())) == 10  # the rarest term is kept
    hits = store.operator.search("user widget item42", "global")
    assert hits[0].content == "the user asked about item42 in the widget catalogue"


def test_rrf() -> None:
    scores = rrf([(["a", "b", "c"], 1.0), (["c", "a"], 1.0)], k=60)  # the textbook constant
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["b"] == pytest.approx(1 / 62)
    assert max(scores, key=scores.__getitem__) == "a"
    assert rrf([(["x"], 2.0)], k=0)["x"] == 2.0
    with pytest.raises(ValueError):
        rrf([], k=-1)


def test_search_with_nasty_queries_through_the_store(store: SharedMemoryStore) -> None:
    store.operator.remember("alpha beta gamma", "global")
    for text in NASTY:
        store.operator.search(text, "global")
    assert store.operator.search('"alpha" NOT beta', "global")[0].content == "alpha beta gamma"


def test_query_words_sharing_a_stem_on_a_large_scope(store: SharedMemoryStore) -> None:
    """'reported' and 'reports' share the stem 'report': the common-term check must not trip on it."""
    store.operator.remember_many([f"weekly report {i} for team {i % 40}" for i in range(1100)], "global")
    hits = store.operator.search("reported reports teams team 7", "global")
    assert hits and "report" in hits[0].content


def test_lexical_postings_budget_keeps_the_rarest_terms(tmp_path: Path) -> None:
    from autogen_shared_memory.backends.sqlite import SQLiteBackend

    backend = SQLiteBackend(tmp_path, max_common_term_ratio=1.0, max_lexical_postings=2000)
    store = SharedMemoryStore(backend, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01))
    facts = [f"note {i} {'apple' if i % 2 else 'berry'} {'cedar' if i % 5 == 0 else ''}" for i in range(2400)]
    store.operator.remember_many(facts, "global")  # apple: 1200 facts, berry: 1200, cedar: 480
    scope = store.engine.scope_ref("global")

    def matched(terms: list[str]) -> list[str]:
        found = backend.get(scope, [h[1] for h in backend.lexical([scope], terms, 10_000, Filters())])
        return [f.content for f in found]

    # 480 + 1200 postings fit in 2000, + 1200 more do not: cedar and the query's first of the two tied terms
    for first, second in (("apple", "berry"), ("berry", "apple")):
        hits = matched([first, second, "cedar"])
        assert len(hits) == 1200 + 240 and not any(second in h.split() and "cedar" not in h.split() for h in hits)
    backend.max_lexical_postings = 100
    hits = matched(["apple", "berries", "cedar"])
    assert len(hits) == 480 and all("cedar" in h.split() for h in hits)  # the rarest term only, past the budget


def test_stems_of_matches_the_fts5_index() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(c, tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
    text = "Café_owners deployed eu-central-1 on Mondays; naïve reports (x2) 🚀 don't"
    conn.execute("INSERT INTO t VALUES (?)", (text,))
    assert stems_of(text) == {r[0] for r in conn.execute("SELECT term FROM v")}


def test_a_query_at_the_length_limit_is_searched_and_one_character_more_is_refused(store: SharedMemoryStore) -> None:
    assert MAX_QUERY_CHARS == 4096
    fact = store.operator.remember("The deploy window is Friday", "global")
    longest = "deploy window " + "x" * (MAX_QUERY_CHARS - 14)
    assert len(longest) == MAX_QUERY_CHARS
    assert [h.id for h in store.operator.search(longest, "global")] == [fact.id]
    assert fact.id in store.operator.recall(longest, "global")
    search = memory_tools(store, "alice")[0]
    assert fact.id in asyncio.run(search.run_json({"query": longest}, CancellationToken()))
    for call in (store.operator.search, store.operator.recall):
        with pytest.raises(ValueError, match="query is 4097 characters; the limit is 4096"):
            call(longest + "x", "global")
    answer = asyncio.run(search.run_json({"query": longest + "x"}, CancellationToken()))
    assert answer.startswith("ERROR: ") and "query" in answer and "4096" in answer, answer
