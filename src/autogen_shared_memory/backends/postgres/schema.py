"""The PostgreSQL schema: pgvector, the tables of every scope (keyed by ``(scope_kind, owner)``) and the
forward migrations between versions."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ...core import lifecycle
from ...core.records import TABLES, TableSpec
from ...core.types import SharedMemoryError
from .errors import BackendUnavailableError, redact
from .fulltext import tsvector_literal

SCHEMA_VERSION = 9
_PG_TYPES = {str: "text", int: "bigint", float: "double precision", bytes: "bytea"}


def ensure_extension(conn: psycopg.Connection[Any], dsn: str) -> None:
    """pgvector in the database, or BackendUnavailableError saying how to get it."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.UniqueViolation:  # another process created it at the same moment (IF NOT EXISTS races)
        pass
    except psycopg.Error as exc:
        db = conninfo_to_dict(dsn).get("dbname", "the database")
        raise BackendUnavailableError(
            f"the pgvector extension is not available in {db} ({redact(dsn)}): {exc.diag.message_primary}. "
            "Install pgvector on the server and run 'CREATE EXTENSION vector;' as a superuser in that database."
        ) from exc


def installed_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's version, or None where it has no tables yet: read without any DDL, so that a role that
    may only read and write the tables opens a deployment already made (PostgreSQL checks the CREATE right of
    ``CREATE ... IF NOT EXISTS`` before it looks whether the object exists)."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{schema}.asm_schema",)).fetchone()
    if row is None or row[0] is None:
        return None
    found = conn.execute(f"SELECT version FROM {schema}.asm_schema").fetchone()
    return int(found[0]) if found else None


def vector_schema(conn: psycopg.Connection[Any]) -> str | None:
    """The schema pgvector's types are in (``public`` by default; ``extensions`` on some hosted services)."""
    row = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'").fetchone()
    return str(row[0]) if row else None


def search_path(schema: str, vectors: str | None) -> str:
    """The search path of the backend's sessions: its schema, ``public``, and pgvector's schema."""
    return ", ".join(dict.fromkeys([schema, "public", *([vectors] if vectors else [])]))


def prepare(conn: psycopg.Connection[Any], schema: str, dsn: str) -> str | None:
    """Make the schema ready (pgvector, then :func:`migrate`) unless it already is; return pgvector's schema.
    The role needs the right to create only when there is something to create."""
    reserved = conn.execute("SELECT 1 FROM pg_get_keywords() WHERE word = %s AND catcode IN ('R', 'T')", (schema,))
    if reserved.fetchone() is not None:  # the backend writes the name unquoted in its SQL
        raise ValueError(f"schema {schema!r} is a reserved word in PostgreSQL's SQL: choose another name")
    try:
        if installed_version(conn, schema) != SCHEMA_VERSION:
            ensure_extension(conn, dsn)
            migrate(conn, schema, dsn)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise BackendUnavailableError(
            f"the PostgreSQL role of {redact(dsn)} may not create or upgrade schema {schema} "
            f"({exc.diag.message_primary}): open it once with a role that may (its owner), then this role "
            "needs only to read and write its tables"
        ) from exc
    return vector_schema(conn)


def migrate(conn: psycopg.Connection[Any], schema: str, dsn: str) -> None:
    """Create or upgrade the schema's tables to :data:`SCHEMA_VERSION` (one migrator at a time)."""
    s = schema
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"asm-migrate-{s}",))  # one migrator at a time
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.asm_schema (version int NOT NULL)")
        row = conn.execute(f"SELECT version FROM {s}.asm_schema").fetchone()
        version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            raise SharedMemoryError(
                f"schema {s} at {redact(dsn)} has version {version}, newer than this package supports "
                f"({SCHEMA_VERSION}); upgrade autogen-shared-memory"
            )
        if version < 1:
            _migrate_v1(conn, schema)
        if version < 2:
            _migrate_v2(conn, schema)
        if version < 3:  # a lookup by id alone (get, forget, history without the scope) is one index probe
            conn.execute(f"CREATE INDEX IF NOT EXISTS asm_facts_id ON {s}.asm_facts (id)")
        if version < 4:
            _migrate_v4(conn, schema)
        if version < 5:
            _migrate_v5(conn, schema)
        if version < 6:
            _migrate_v6(conn, schema)
        if version < 7:
            _migrate_v7(conn, schema)
        if version < 8:
            _migrate_v8(conn, schema)
        if version < 9:  # a fact's stems, for search in the server (filled once a backend enables it)
            conn.execute(f"ALTER TABLE {s}.asm_facts ADD COLUMN IF NOT EXISTS stems tsvector")
        if row is None:
            conn.execute(f"INSERT INTO {s}.asm_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
        else:
            conn.execute(f"UPDATE {s}.asm_schema SET version = %s", (SCHEMA_VERSION,))


def _migrate_v1(conn: psycopg.Connection[Any], schema: str) -> None:
    s = schema
    conn.execute(f"SET LOCAL search_path TO {search_path(s, vector_schema(conn))}")
    conn.execute("""
        CREATE TABLE asm_scopes (
            scope_kind text NOT NULL, owner text NOT NULL, n_facts bigint NOT NULL DEFAULT 0,
            last_write double precision, created_at double precision NOT NULL,
            PRIMARY KEY (scope_kind, owner))""")
    conn.execute("""
        CREATE TABLE asm_meta (
            scope_kind text NOT NULL, owner text NOT NULL, key text NOT NULL, value text NOT NULL,
            PRIMARY KEY (scope_kind, owner, key))""")
    conn.execute("""
        CREATE TABLE asm_facts (
            seq bigserial PRIMARY KEY, scope_kind text NOT NULL, owner text NOT NULL, id text NOT NULL,
            content text NOT NULL, created_by text NOT NULL, created_at double precision NOT NULL,
            confidence double precision NOT NULL DEFAULT 1, tags jsonb NOT NULL DEFAULT '[]',
            category text, metadata jsonb NOT NULL DEFAULT '{}', session_id text, expires_at double precision,
            supersedes jsonb NOT NULL DEFAULT '[]', superseded_by text, status text NOT NULL,
            tombstone_by text, tombstone_at double precision, tombstone_reason text,
            reinforcement bigint NOT NULL DEFAULT 1, content_hash text NOT NULL, version bigint NOT NULL DEFAULT 1,
            updated_at double precision, embedding vector NOT NULL,
            UNIQUE (scope_kind, owner, id))""")
    conn.execute("CREATE INDEX asm_facts_hash ON asm_facts (scope_kind, owner, content_hash, status)")
    conn.execute("CREATE INDEX asm_facts_created ON asm_facts (scope_kind, owner, created_at)")
    conn.execute("CREATE INDEX asm_facts_session ON asm_facts (scope_kind, owner, session_id, seq)")
    # (Schemas 1 to 4 also kept a tsvector of each fact here, GIN-indexed: version 5 drops both.)
    conn.execute("""
        CREATE FUNCTION asm_fact_content_immutable() RETURNS trigger AS $$ BEGIN
          IF NEW.content IS DISTINCT FROM OLD.content THEN
            RAISE EXCEPTION 'fact content is immutable: supersede the fact instead';
          END IF; RETURN NEW; END $$ LANGUAGE plpgsql""")
    conn.execute(
        "CREATE TRIGGER asm_facts_immutable BEFORE UPDATE ON asm_facts FOR EACH ROW "
        "EXECUTE FUNCTION asm_fact_content_immutable()"
    )
    conn.execute("""
        CREATE TABLE asm_audit (
            seq bigserial PRIMARY KEY, scope_kind text NOT NULL, owner text NOT NULL, fact_id text NOT NULL,
            event text NOT NULL, actor text NOT NULL, at double precision NOT NULL, detail jsonb)""")
    conn.execute("CREATE INDEX asm_audit_fact ON asm_audit (scope_kind, owner, fact_id)")
    conn.execute("""
        CREATE FUNCTION asm_append_only() RETURNS trigger AS $$ BEGIN
          IF current_setting('asm.allow_purge', true) = 'on' AND TG_OP = 'DELETE' THEN RETURN OLD; END IF;
          RAISE EXCEPTION '% is append-only: % is not allowed', substr(TG_TABLE_NAME, 5), TG_OP;
        END $$ LANGUAGE plpgsql""")
    for spec in TABLES.values():
        create_record_table(conn, spec)


def _migrate_v2(conn: psycopg.Connection[Any], schema: str) -> None:
    """``stated_by`` (the author, then every agent whose restatement reinforced the fact, from the audit
    trail) and content hashes of :func:`lifecycle.normalise`, as in SQLite's schema 3."""
    s = schema
    conn.execute(f"ALTER TABLE {s}.asm_facts ADD COLUMN stated_by jsonb NOT NULL DEFAULT '[]'")
    restated: dict[tuple[str, str, str], list[str]] = {}
    for kind, owner, fact_id, actor in conn.execute(
        f"SELECT scope_kind, owner, fact_id, actor FROM {s}.asm_audit WHERE event = 'reinforced' ORDER BY seq"
    ).fetchall():
        restated.setdefault((kind, owner, fact_id), []).append(actor)
    rows = conn.execute(f"SELECT seq, scope_kind, owner, id, content, created_by FROM {s}.asm_facts").fetchall()
    with conn.cursor() as cur:
        cur.executemany(
            f"UPDATE {s}.asm_facts SET content_hash = %s, stated_by = %s::jsonb WHERE seq = %s",
            [
                (
                    lifecycle.content_hash(content),
                    json.dumps(list(dict.fromkeys([by, *restated.get((kind, owner, fid), ())]))),
                    seq,
                )
                for seq, kind, owner, fid, content, by in rows
            ],
        )


def _migrate_v4(conn: psycopg.Connection[Any], schema: str) -> None:
    """Revisions (SQLite's schema has them): the backend keeps each scope's vectors in memory and refreshes
    them by revision.

    * ``asm_facts.rev`` / ``asm_scopes.rev``: every write that changes facts stamps the rows it touched with
      the scope's next revision, so a process refreshes only what changed since it last looked (any host);
      ``asm_scopes.epoch`` moves on when rows disappear or vectors are replaced (everyone reloads).
    * (Schema 4 also counted, per scope and lexeme, how many facts contain it, in ``asm_terms``, kept by
      statement-level triggers: version 5 drops them.)
    * ``asm_audit (scope_kind, owner, seq)``: the change feed reads a scope's audit trail after a position.
    * The pgvector HNSW indexes go: nothing queries them any more, and each insert paid ~2.5 ms to keep them
      (measured: 400 inserts/s at 100k rows).
    * Vectors stay in pgvector's default storage (out of the row once it passes 2 kB, as a 384-d fact's row
      does): the lexical leg's heap visits then read 5x fewer pages (measured: 2,948 instead of 14,540 pages
      for 34k facts, 5.6 instead of 7.1 ms for a 6,400-posting query), and only a scope's first load and the
      few re-scored vectors of a search read the TOAST table.
    """
    s = schema
    conn.execute(f"ALTER TABLE {s}.asm_facts ADD COLUMN IF NOT EXISTS rev bigint NOT NULL DEFAULT 0")
    conn.execute(f"ALTER TABLE {s}.asm_scopes ADD COLUMN IF NOT EXISTS rev bigint NOT NULL DEFAULT 0")
    conn.execute(f"ALTER TABLE {s}.asm_scopes ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0")
    conn.execute(f"CREATE INDEX IF NOT EXISTS asm_facts_rev ON {s}.asm_facts (scope_kind, owner, rev)")
    # the change feed reads each scope's audit trail by seq (after a position; the last one for "now")
    conn.execute(f"CREATE INDEX IF NOT EXISTS asm_audit_seq ON {s}.asm_audit (scope_kind, owner, seq)")
    for (name,) in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'asm_facts' "
        "AND indexname LIKE 'asm\\_facts\\_hnsw\\_%%'",
        (s,),
    ).fetchall():
        conn.execute(f"DROP INDEX {s}.{name}")


def _migrate_v5(conn: psycopg.Connection[Any], schema: str) -> None:
    """The facts' full-text machinery goes: the ``tsv`` column and its GIN index, and ``asm_terms`` with the
    triggers and functions that kept it. Search ranks keywords from each process's postings
    (:mod:`~autogen_shared_memory.search.postings`) and nothing read them, yet every insert paid for the
    tsvector, its GIN entries and the term counts. Record tables keep their ``tsv``: ``rows(query_terms=...)``
    searches them. ``DROP COLUMN`` only marks the column dropped (no table rewrite); its bytes in existing rows
    go as the rows are rewritten or by ``VACUUM FULL``. The version keeps releases that searched through these
    from opening the schema and finding them gone."""
    s = schema
    conn.execute(f"DROP TRIGGER IF EXISTS asm_facts_terms_added ON {s}.asm_facts")
    conn.execute(f"DROP TRIGGER IF EXISTS asm_facts_terms_removed ON {s}.asm_facts")
    conn.execute(f"DROP FUNCTION IF EXISTS {s}.asm_terms_added()")
    conn.execute(f"DROP FUNCTION IF EXISTS {s}.asm_terms_removed()")
    conn.execute(f"DROP TABLE IF EXISTS {s}.asm_terms")
    conn.execute(f"DROP INDEX IF EXISTS {s}.asm_facts_tsv")
    conn.execute(f"ALTER TABLE {s}.asm_facts DROP COLUMN IF EXISTS tsv")


def _migrate_v6(conn: psycopg.Connection[Any], schema: str) -> None:
    """A fact's metadata and an audit event's detail keep the JSON text they were written as (``json``, not
    ``jsonb``): ``jsonb`` stores a parsed form, so ``1e20`` came back as an integer, ``-0.0`` as ``0.0`` and
    keys in another order, where SQLite gives back what was written. Nothing queries inside them. Values
    written before this version keep ``jsonb``'s form."""
    s = schema
    conn.execute(f"ALTER TABLE {s}.asm_facts ALTER COLUMN metadata DROP DEFAULT")
    conn.execute(f"ALTER TABLE {s}.asm_facts ALTER COLUMN metadata TYPE json USING metadata::json")
    conn.execute(f"ALTER TABLE {s}.asm_facts ALTER COLUMN metadata SET DEFAULT '{{}}'::json")
    conn.execute(f"ALTER TABLE {s}.asm_audit ALTER COLUMN detail TYPE json USING detail::json")


def _migrate_v7(conn: psycopg.Connection[Any], schema: str) -> None:
    """The record tables' JSON columns (a profile value, a task's context, a tool call's arguments...) keep
    the text they were written as, as a fact's metadata does since version 6. Values written before this
    version keep ``jsonb``'s form."""
    for spec in TABLES.values():
        for column in spec.json_columns:
            conn.execute(
                f'ALTER TABLE {schema}.asm_{spec.name} ALTER COLUMN "{column}" TYPE json USING "{column}"::json'
            )


def _migrate_v8(conn: psycopg.Connection[Any], schema: str) -> None:
    """A record table's ``tsv`` is written by the backend from FTS5's terms (:mod:`.fulltext`), not generated
    by ``to_tsvector('english', ...)``, so ``rows(query_terms=...)`` matches what SQLite matches. Existing rows
    get theirs here, a thousand at a time (the append-only guard is lifted meanwhile)."""
    for spec in TABLES.values():
        if spec.fts is None:
            continue
        table = f"{schema}.asm_{spec.name}"
        conn.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS tsv")
        conn.execute(f"ALTER TABLE {table} ADD COLUMN tsv tsvector")
        if spec.append_only:
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER asm_{spec.name}_append_only")
        last = 0
        while rows := conn.execute(
            f'SELECT seq, "{spec.fts}" FROM {table} WHERE seq > %s ORDER BY seq LIMIT 1000', (last,)
        ).fetchall():
            with conn.cursor() as cur:
                cur.executemany(
                    f"UPDATE {table} SET tsv = %s::tsvector WHERE seq = %s",
                    [(tsvector_literal(text), seq) for seq, text in rows],
                )
            last = rows[-1][0]
        if spec.append_only:
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER asm_{spec.name}_append_only")
        conn.execute(f"CREATE INDEX asm_{spec.name}_tsv ON {table} USING gin (tsv)")


def create_record_table(conn: psycopg.Connection[Any], spec: TableSpec) -> None:
    """A record table as schema 1 created it (its JSON columns ``jsonb`` until :func:`_migrate_v7`, its
    ``tsv`` generated until :func:`_migrate_v8`)."""
    columns = []
    for name, kind in spec.columns.items():
        pg_type = "jsonb" if name in spec.json_columns else _PG_TYPES[kind]
        null = " NOT NULL" if name in spec.not_null else ""
        columns.append(f'"{name}" {pg_type}{null}')
    if spec.fts:
        columns.append(
            f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', coalesce(\"{spec.fts}\", ''))) STORED"
        )
    key = ", ".join(f'"{c}"' for c in spec.key)
    table = f"asm_{spec.name}"
    conn.execute(
        f"CREATE TABLE {table} (seq bigserial PRIMARY KEY, scope_kind text NOT NULL, "
        f"owner text NOT NULL, {', '.join(columns)}, UNIQUE (scope_kind, owner, {key}))"
    )
    for i, index in enumerate(spec.indexes):
        cols = ", ".join(f'"{c}"' for c in index)
        conn.execute(f"CREATE INDEX {table}_i{i} ON {table} (scope_kind, owner, {cols})")
    if spec.fts:
        conn.execute(f"CREATE INDEX {table}_tsv ON {table} USING gin (tsv)")
    if spec.append_only:
        conn.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION asm_append_only()"
        )
