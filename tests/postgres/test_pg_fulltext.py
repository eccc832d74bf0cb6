"""The record tables' tsvector and tsquery literals (backends/postgres/fulltext.py), without a server: FTS5's
terms, PostgreSQL's limits kept."""

from __future__ import annotations

import pytest

from autogen_shared_memory.backends.postgres import fulltext
from autogen_shared_memory.backends.postgres.fulltext import tsquery_literal, tsvector_literal


def test_terms_and_positions_are_fts5s() -> None:
    assert tsvector_literal("It's John's turn, possibly") == "'it':1 's':2,4 'john':3 'turn':5 'possibl':6"
    assert tsvector_literal("") == "" and tsvector_literal("!!!") == "" and tsvector_literal(None) is None
    assert tsquery_literal(["it's", "foo_bar", "!!", "it's"]) == "( 'it' <-> 's' ) | ( 'foo' <-> 'bar' )"
    assert tsquery_literal(["!!"]) == ""


def test_postgresqls_limits_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    many = tsvector_literal("word " * 300)
    assert many is not None and many.count(",") == fulltext.MAX_POSITIONS - 1  # 256 positions kept
    far = tsvector_literal("filler " * 16_383 + "beyond and further")
    assert far is not None and "'beyond':16383 'and':16383 'further':16383" in far  # found alone, as on SQLite
    long = "x" * 3000
    assert tsvector_literal(f"short {long} after") == "'short':1 'after':3"
    assert tsquery_literal([f"a_{long}", "b"]) == "( 'b' )"  # a phrase PostgreSQL cannot hold never matches
    monkeypatch.setattr(fulltext, "MAX_TSVECTOR_BYTES", 40)
    assert tsvector_literal("alpha beta gamma delta epsilon") == "'alpha':1 'beta':2"  # ~8 bytes a lexeme, 2 a position


def test_quotes_and_backslashes_cannot_leave_a_lexeme() -> None:
    assert fulltext.quoted("o'k\\") == "'o''k\\\\'"
