"""Storage backends: the contract (:mod:`.base`), SQLite files (:mod:`.sqlite`), PostgreSQL (:mod:`.postgres`),
and :func:`open_backend`, the one place outside them that picks and constructs one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from ..errors import NotAStoreError
from .base import Backend

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite://"


def open_backend(
    location: str | os.PathLike[str],
    *,
    kind: Literal["sqlite", "postgresql"] | None = None,
    create: bool = True,
    **options: Any,
) -> Backend:
    """The backend a location names.

    Args:
        location: a PostgreSQL DSN (``postgresql://…`` or ``postgres://…``; with ``kind="postgresql"``, a
            ``key=value`` one too), ``sqlite:///dir``, or the path of a store directory (SQLite files).
        kind: which backend (None: told by the location, as above).
        create: False: a store that does not exist is an error (a mistyped location never makes a new, empty
            store). A PostgreSQL schema that cannot be checked (the server is unreachable) is left for opening
            the backend to report.
        **options: the backend's own options (``schema=`` for PostgreSQL, ``vector_index=`` for both, ...).

    Returns:
        The backend: a :class:`~.postgres.PostgresBackend` or a :class:`~.sqlite.SQLiteBackend`.

    Raises:
        NotAStoreError: ``create`` is False and the store does not exist.
        ModuleNotFoundError: a DSN, and this installation lacks the PostgreSQL backend or its driver
            (``pip install 'autogen-shared-memory[postgres]'``).
    """
    text = os.fspath(location)
    if kind is None:
        kind = "postgresql" if text.startswith(POSTGRES_SCHEMES) else "sqlite"
    if kind not in ("sqlite", "postgresql"):
        raise ValueError(f"kind must be 'sqlite' or 'postgresql', got {kind!r}")
    if kind == "postgresql":
        from .postgres import DEFAULT_SCHEMA, PostgresBackend, schema_exists

        name = options.get("schema") or DEFAULT_SCHEMA
        if not create and schema_exists(text, name) is False:
            raise NotAStoreError(f"no memory store in PostgreSQL schema {name!r} of that database")
        return PostgresBackend(text, **options)
    from .sqlite import SQLiteBackend

    root = Path(text[len(SQLITE_SCHEME) :] if text.startswith(SQLITE_SCHEME) else text)
    if not create and not root.is_dir():
        raise NotAStoreError(f"no memory store at {root}")
    return SQLiteBackend(root, **options)


__all__ = ["Backend", "open_backend"]
