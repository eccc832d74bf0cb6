"""A new scope file's tables are what the schema says: column types, NOT NULL, defaults, keys and indexes.

The DDL is written by ``schema._create_table`` / ``_create_index`` (sqlite-utils wrote it up to 0.1.0, in the same
layout): these tests read the file back with SQLite's own pragmas, so a constraint the generator dropped fails here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autogen_shared_memory import FactStore
from autogen_shared_memory.core.records import TABLES
from autogen_shared_memory.testing import HashEmbedder

SQL_TYPES = {int: "INTEGER", str: "TEXT", float: "REAL", bytes: "BLOB"}


@pytest.fixture(scope="module")
def scope_file(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    root = tmp_path_factory.mktemp("store")
    store = FactStore(root, embedder=HashEmbedder(dimension=16))
    store.remember("the deploy runs on fridays", "global", agent_id=None)
    store.close()
    return sqlite3.connect(Path(root) / "global.db")


def columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, bool, str | None, bool]]:
    return [
        (name, kind, bool(notnull), default, bool(pk))
        for _, name, kind, notnull, default, pk in conn.execute(f'PRAGMA table_info("{table}")')
    ]


def indexes(conn: sqlite3.Connection, table: str) -> set[tuple[tuple[str, ...], bool]]:
    return {
        (tuple(row[2] for row in conn.execute(f'PRAGMA index_info("{name}")')), bool(unique))
        for _, name, unique, origin, _ in conn.execute(f'PRAGMA index_list("{table}")')
        if origin == "c"  # created by CREATE INDEX (not a PRIMARY KEY's automatic index)
    }


def test_the_facts_table(scope_file: sqlite3.Connection) -> None:
    cols = {name: (kind, notnull, default, pk) for name, kind, notnull, default, pk in columns(scope_file, "facts")}
    assert cols["seq"] == ("INTEGER", False, None, True)
    required = {name for name, (_, notnull, _, _) in cols.items() if notnull}
    assert required == {"id", "content", "created_by", "created_at", "status", "content_hash", "rev", "embedding"} | {
        "stated_by"  # added by schema 3, with a default
    }
    assert cols["embedding"][0] == "BLOB" and cols["created_at"][0] == "REAL" and cols["content"][0] == "TEXT"
    assert {name: default for name, (_, _, default, _) in cols.items() if default is not None} == {
        "confidence": "1.0",
        "tags": "'[]'",
        "metadata": "'{}'",
        "supersedes": "'[]'",
        "reinforcement": "1",
        "version": "1",
        "stated_by": "'[]'",
    }
    assert indexes(scope_file, "facts") == {
        (("id",), True),
        (("content_hash", "status"), False),
        (("rev",), False),
        (("created_at",), False),
        (("created_by",), False),
        (("session_id", "seq"), False),
    }
    with pytest.raises(sqlite3.IntegrityError):  # ids are unique
        scope_file.execute(
            "INSERT INTO facts (id, content, created_by, created_at, status, content_hash, rev, "
            "embedding) SELECT id, content || '!', created_by, created_at, status, 'x', rev, "
            "embedding FROM facts LIMIT 1"
        )


def test_the_bookkeeping_tables(scope_file: sqlite3.Connection) -> None:
    assert columns(scope_file, "audit") == [
        ("seq", "INTEGER", False, None, True),
        ("fact_id", "TEXT", True, None, False),
        ("event", "TEXT", True, None, False),
        ("actor", "TEXT", True, None, False),
        ("at", "REAL", True, None, False),
        ("detail", "TEXT", False, None, False),
    ]
    assert indexes(scope_file, "audit") == {(("fact_id",), False)}
    assert columns(scope_file, "meta") == [("key", "TEXT", False, None, True), ("value", "TEXT", False, None, False)]
    assert [c[:2] for c in columns(scope_file, "state")] == [
        ("id", "INTEGER"),
        ("rev", "INTEGER"),
        ("epoch", "INTEGER"),
        ("n_facts", "INTEGER"),
        ("last_write", "REAL"),
    ]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_record_table_follows_its_spec(scope_file: sqlite3.Connection, name: str) -> None:
    spec = TABLES[name]
    expected = [("seq", "INTEGER", False, None, True)] + [
        (column, SQL_TYPES[kind], column in spec.not_null, None, False) for column, kind in spec.columns.items()
    ]
    assert columns(scope_file, name) == expected
    assert indexes(scope_file, name) == {(spec.key, True)} | {(cols, False) for cols in spec.indexes}
