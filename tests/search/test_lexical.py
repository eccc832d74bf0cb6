"""The lexical leg's stages on a real file: which terms are scored (the budget, tie order), the ranking of
the SQLite backend's in-memory postings against FTS5's own ``bm25()`` on the same file, the status rule and
narrowing filters, and postings that follow other writers."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search.lexical import choose_terms
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import HashEmbedder

GLOBAL = ScopeRef("global")


def has_alpha(i: int) -> bool:
    return i % 40 == 0


def fact(i: int) -> str:
    """alpha in 50 of 2,000 facts, beta in 286, gamma (once or twice) in 667; filler varies the lengths."""
    words = [f"item{i}"] + ["filler"] * (i % 9) + ["alpha"] * has_alpha(i) + ["beta"] * (i % 7 == 0)
    return " ".join(words + ["gamma"] * ((i % 3 == 0) + (i % 33 == 0)))


def open_store(root: object, **options: object) -> tuple[SharedMemoryStore, SQLiteBackend]:
    backend = SQLiteBackend(root, **options)  # type: ignore[arg-type]
    store = SharedMemoryStore(backend, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01))  # type: ignore[arg-type]
    return store, backend


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> SQLiteBackend:
    store, backend = open_store(
        tmp_path_factory.mktemp("lexical"), max_common_term_ratio=1.0, max_lexical_postings=10**6
    )
    store.operator.remember_many([fact(i) for i in range(2000)], "global")
    return backend


def fts5_bm25(backend: SQLiteBackend, expression: str) -> list[tuple[str, float]]:
    """The reference: FTS5's own ranking of the file's facts, by id (an index built here, with the tokenizer
    the postings copy: the file keeps none since schema 5)."""
    conn = sqlite3.connect(backend.path_of(GLOBAL))
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE temp.reference USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')"
        )
        conn.execute("INSERT INTO temp.reference (rowid, content) SELECT seq, content FROM facts")
        return conn.execute(
            "SELECT f.id, -bm25(reference) FROM temp.reference JOIN facts f ON f.seq = reference.rowid "
            "WHERE reference MATCH ? ORDER BY bm25(reference), f.seq",
            (expression,),
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("terms", [["alpha"], ["alpha", "beta", "gamma"], ["gamma", "filler"], ["item7", "betas"]])
def test_the_ranking_is_fts5_bm25_of_the_file(backend: SQLiteBackend, terms: list[str]) -> None:
    expected = fts5_bm25(backend, " OR ".join(f'"{t}"' for t in terms))
    hits = backend.lexical([GLOBAL], terms, 10_000, Filters())
    assert [h[1] for h in hits] == [fact_id for fact_id, _ in expected]
    assert [h[2] for h in hits] == pytest.approx([score for _, score in expected], rel=1e-9)


def test_the_budget_scores_the_rarest_terms_only(tmp_path: object) -> None:
    store, backend = open_store(tmp_path, max_common_term_ratio=1.0, max_lexical_postings=400)
    store.operator.remember_many([fact(i) for i in range(2000)], "global")
    hits = backend.lexical([GLOBAL], ["gamma", "alpha", "beta"], 10_000, Filters())
    # alpha (50) + beta (286) fit in 400 postings, gamma (667) does not: only facts with alpha or beta score.
    assert len(hits) == sum(has_alpha(i) or i % 7 == 0 for i in range(2000))
    assert [h[1] for h in hits] == [fact_id for fact_id, _ in fts5_bm25(backend, '"alpha" OR "beta"')]


def test_the_status_rule_and_narrowing_filters(tmp_path: object) -> None:
    store, backend = open_store(tmp_path)
    store.operator.add_member("crew", "ann")
    kept = store.as_operator("crew").remember("the kafka broker lag alert fired", "group", tags=["ops"])
    gone = store.as_operator("crew").remember("kafka consumers were restarted", "group", tags=["ops"])
    other = store.as_operator("crew").remember("kafka topic naming rules", "group", tags=["docs"])
    store.as_operator("crew").forget(gone.id)
    crew = store.engine.scope_ref("group", group_id="crew")
    ids = {h[1] for h in backend.lexical([crew], ["kafka"], 10, Filters())}
    assert ids == {kept.id, other.id}  # a forgotten fact does not score
    assert {h[1] for h in backend.lexical([crew], ["kafka"], 10, Filters(include_inactive=True))} == {
        kept.id,
        gone.id,
        other.id,
    }
    assert [h[1] for h in backend.lexical([crew], ["kafka"], 10, Filters(tags=("ops",)))] == [kept.id]
    assert [h[1] for h in backend.lexical([crew], ["kafka"], 10, Filters(tags=("ops",), include_inactive=True))] in (
        [kept.id, gone.id],
        [gone.id, kept.id],
    )


def test_postings_follow_another_writer_and_a_purge(tmp_path: object) -> None:
    store, backend = open_store(tmp_path)
    first = store.operator.remember("the pager rotation starts on monday", "global")
    assert [h[1] for h in backend.lexical([GLOBAL], ["pager"], 10, Filters())] == [first.id]
    other, _ = open_store(tmp_path)  # another process's connections and caches
    second = other.operator.remember("the pager app needs a new token", "global")
    assert {h[1] for h in backend.lexical([GLOBAL], ["pager"], 10, Filters())} == {first.id, second.id}
    other.operator.forget(first.id)
    other.operator.purge(0)  # rows deleted: the epoch moves on, positions are rebuilt
    third = other.operator.remember("token rotation is quarterly", "global")
    assert [h[1] for h in backend.lexical([GLOBAL], ["pager"], 10, Filters())] == [second.id]
    assert {h[1] for h in backend.lexical([GLOBAL], ["token", "rotation"], 10, Filters())} == {second.id, third.id}


@pytest.mark.parametrize("order", list(itertools.permutations(["deploy", "rollback", "canary", "freeze"])))
def test_tied_terms_go_to_the_query_order_not_the_hash_order(order: tuple[str, ...]) -> None:
    # Equally frequent terms and room for one: the query's first is kept, whatever the process's hash seed
    # (a set's iteration order made the same query rank differently per process).
    stems = {t: t for t in order}
    df = dict.fromkeys(order, 600)
    assert choose_terms(order, stems, 100_000, df, common_ratio=0.1, budget=1000) == [order[0]]
