"""The scope file's schema: tables, the record tables' FTS5 indexes, triggers, and the forward migrations between
versions."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping

from ...core import lifecycle
from ...core.records import TABLES, TableSpec
from ..base import FACT_COLUMN_NAMES

SCHEMA_VERSION = 5


FACT_COLUMNS = ", ".join(FACT_COLUMN_NAMES)  # the order of base.fact_from_row


_SQL_TYPES = {int: "INTEGER", str: "TEXT", float: "REAL", bytes: "BLOB"}


def _sql_literal(value: object) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)


def _create_table(
    conn: sqlite3.Connection,
    name: str,
    columns: Mapping[str, type],
    pk: str,
    not_null: Collection[str] = (),
    defaults: Mapping[str, object] | None = None,
) -> None:
    """``CREATE TABLE`` from Python types, in the layout sqlite-utils wrote for schemas 1 to 5."""
    lines = []
    for column, kind in columns.items():
        line = f'   "{column}" {_SQL_TYPES[kind]}'
        if column == pk:
            line += " PRIMARY KEY"
        elif column in not_null:
            line += " NOT NULL"
        if defaults and column in defaults:
            line += f" DEFAULT {_sql_literal(defaults[column])}"
        lines.append(line)
    conn.execute(f'CREATE TABLE "{name}" (\n' + ",\n".join(lines) + "\n)")


def _create_index(conn: sqlite3.Connection, table: str, columns: Collection[str], unique: bool = False) -> None:
    name = f"idx_{table}_{'_'.join(columns)}"
    quoted = ", ".join(f'"{column}"' for column in columns)
    conn.execute(f'CREATE {"UNIQUE " if unique else ""}INDEX "{name}"\n    ON "{table}" ({quoted})')


def _migrate_v1(conn: sqlite3.Connection) -> None:
    _create_table(
        conn,
        "facts",
        {
            "seq": int,
            "id": str,
            "content": str,
            "created_by": str,
            "created_at": float,
            "confidence": float,
            "tags": str,
            "category": str,
            "metadata": str,
            "session_id": str,
            "expires_at": float,
            "supersedes": str,
            "superseded_by": str,
            "status": str,
            "tombstone_by": str,
            "tombstone_at": float,
            "tombstone_reason": str,
            "reinforcement": int,
            "content_hash": str,
            "version": int,
            "updated_at": float,
            "rev": int,
            "embedding": bytes,
        },
        pk="seq",
        not_null={"id", "content", "created_by", "created_at", "status", "content_hash", "rev", "embedding"},
        defaults={
            "confidence": 1.0,
            "tags": "[]",
            "metadata": "{}",
            "supersedes": "[]",
            "reinforcement": 1,
            "version": 1,
        },
    )
    _create_index(conn, "facts", ["id"], unique=True)
    for columns in (["content_hash", "status"], ["rev"], ["created_at"], ["created_by"], ["session_id", "seq"]):
        _create_index(conn, "facts", columns)
    _create_table(
        conn,
        "audit",
        {"seq": int, "fact_id": str, "event": str, "actor": str, "at": float, "detail": str},
        pk="seq",
        not_null={"fact_id", "event", "actor", "at"},
    )
    _create_index(conn, "audit", ["fact_id"])
    _create_table(conn, "meta", {"key": str, "value": str}, pk="key")
    _create_table(conn, "state", {"id": int, "rev": int, "epoch": int, "n_facts": int, "last_write": float}, pk="id")
    conn.execute("INSERT INTO state (id, rev, epoch, n_facts, last_write) VALUES (1, 0, 0, 0, NULL)")
    # (Schemas 1 to 4 also indexed the facts with FTS5 here, through triggers: version 5 drops that index.)
    conn.execute(
        "CREATE TRIGGER facts_content_immutable BEFORE UPDATE OF content ON facts "
        "WHEN new.content IS NOT old.content BEGIN "
        "SELECT RAISE(ABORT, 'fact content is immutable: supersede the fact instead'); END"
    )


def create_record_table(conn: sqlite3.Connection, spec: TableSpec) -> None:
    _create_table(conn, spec.name, {"seq": int, **spec.columns}, pk="seq", not_null=spec.not_null)
    _create_index(conn, spec.name, spec.key, unique=True)
    for columns in spec.indexes:
        _create_index(conn, spec.name, columns)
    if spec.fts:
        conn.execute(
            f"CREATE VIRTUAL TABLE {spec.name}_fts USING fts5({spec.fts}, content='{spec.name}', "
            "content_rowid='seq', tokenize='porter unicode61 remove_diacritics 2')"
        )
        conn.execute(
            f"CREATE TRIGGER {spec.name}_ai AFTER INSERT ON {spec.name} BEGIN INSERT INTO {spec.name}_fts "
            f"(rowid, {spec.fts}) VALUES (new.seq, new.{spec.fts}); END"
        )
        conn.execute(
            f"CREATE TRIGGER {spec.name}_ad AFTER DELETE ON {spec.name} BEGIN INSERT INTO {spec.name}_fts "
            f"({spec.name}_fts, rowid, {spec.fts}) VALUES ('delete', old.seq, old.{spec.fts}); END"
        )
        if not spec.append_only:
            conn.execute(
                f"CREATE TRIGGER {spec.name}_au AFTER UPDATE OF {spec.fts} ON {spec.name} BEGIN "
                f"INSERT INTO {spec.name}_fts ({spec.name}_fts, rowid, {spec.fts}) "
                f"VALUES ('delete', old.seq, old.{spec.fts}); "
                f"INSERT INTO {spec.name}_fts (rowid, {spec.fts}) VALUES (new.seq, new.{spec.fts}); END"
            )
    if spec.append_only:
        _append_only_triggers(conn, spec.name)


def _append_only_triggers(conn: sqlite3.Connection, table: str) -> None:
    for op in ("UPDATE", "DELETE"):
        conn.execute(
            f"CREATE TRIGGER {table}_no_{op.lower()} BEFORE {op} ON {table} BEGIN "
            f"SELECT RAISE(ABORT, '{table} is append-only: {op} is not allowed'); END"
        )


def _migrate_v2(conn: sqlite3.Connection) -> None:
    """Records: conversations, tool calls, tasks, profile, directory, saved conversations, agent state,
    the append-only case log and its checkpoints (every table from :data:`records.TABLES`)."""
    for spec in TABLES.values():
        create_record_table(conn, spec)


def _migrate_v3(conn: sqlite3.Connection) -> None:
    """Who stated each fact (``stated_by``: its author, then every other agent whose restatement reinforced
    it, from the audit trail), and content hashes of :func:`lifecycle.normalise` (NFKC, surrounding
    punctuation), so exact duplicates written before are recognised. Nothing is deleted or merged."""
    conn.execute("ALTER TABLE facts ADD COLUMN stated_by TEXT NOT NULL DEFAULT '[]'")
    restated: dict[str, list[str]] = {}
    for fact_id, actor in conn.execute("SELECT fact_id, actor FROM audit WHERE event = 'reinforced' ORDER BY seq"):
        restated.setdefault(fact_id, []).append(actor)
    conn.executemany(
        "UPDATE facts SET content_hash = ?, stated_by = ? WHERE seq = ?",
        (
            (lifecycle.content_hash(content), json.dumps(list(dict.fromkeys([by, *restated.get(fid, ())]))), seq)
            for seq, fid, content, by in conn.execute("SELECT seq, id, content, created_by FROM facts").fetchall()
        ),
    )


def _migrate_v4(conn: sqlite3.Connection) -> None:
    """Nothing changes in the file: from version 4 on, every writer records the ids it stores in the root's
    ``ids.db`` (:class:`IdIndex`). The version keeps older releases, which do not, from writing to it."""


def _migrate_v5(conn: sqlite3.Connection) -> None:
    """The facts' FTS5 index (``facts_fts``, ``facts_vocab`` and the insert/delete triggers that kept it) goes:
    search ranks keywords from each process's postings (FTS5's tokens and BM25,
    :mod:`~autogen_shared_memory.search.postings`) and nothing read the index, yet keeping it was about two
    fifths of a write batch's time into a 100k-fact scope (its inserts, and merging its segments at each
    commit). Record tables keep theirs. The version keeps releases that searched through it from opening
    the file and finding it gone."""
    conn.execute("DROP TRIGGER IF EXISTS facts_ai")
    conn.execute("DROP TRIGGER IF EXISTS facts_ad")
    conn.execute("DROP TABLE IF EXISTS facts_vocab")
    conn.execute("DROP TABLE IF EXISTS facts_fts")


# Forward migrations: MIGRATIONS[n] brings a file from user_version n to n + 1.
MIGRATIONS = [_migrate_v1, _migrate_v2, _migrate_v3, _migrate_v4, _migrate_v5]
assert len(MIGRATIONS) == SCHEMA_VERSION
