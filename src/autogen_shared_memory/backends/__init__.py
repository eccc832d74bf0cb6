"""Storage backends: the contract (:mod:`.base`), SQLite files (:mod:`.sqlite`), PostgreSQL (:mod:`.postgres`),
and :func:`open_backend`, the one place outside them that picks and constructs one."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidInputError, NotAStoreError
from .base import Backend

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite://"


def _supported(cls: type[Backend], options: dict[str, Any]) -> None:
    """Refuse an option the backend's constructor does not take: a knob that would be ignored is an error."""
    params = inspect.signature(cls.__init__).parameters
    known = sorted(
        n for n, p in params.items() if p.kind == p.KEYWORD_ONLY or (n != "self" and p.default is not p.empty)
    )
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidInputError(
            f"{cls.__name__} does not support {', '.join(unknown)}; its options: {', '.join(known)}"
        )


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
        **options: the backend's own options (``schema=`` and ``search=`` for PostgreSQL, ``vector_index=`` for
            both, ...).

    Returns:
        The backend: a :class:`~.postgres.PostgresBackend` or a :class:`~.sqlite.SQLiteBackend`.

    Raises:
        InvalidInputError: an option the backend does not support (never silently ignored).
        NotAStoreError: ``create`` is False and the store does not exist.
        ModuleNotFoundError: a DSN, and this installation lacks the PostgreSQL backend or its driver
            (``pip install 'autogen-shared-memory[postgres]'``).
    """
    text = os.fspath(location)
    if kind is None:
        kind = "postgresql" if text.startswith(POSTGRES_SCHEMES) else "sqlite"
    if kind not in ("sqlite", "postgresql"):
        raise InvalidInputError(f"kind must be 'sqlite' or 'postgresql', got {kind!r}")
    if kind == "postgresql":
        from .postgres import DEFAULT_SCHEMA, PostgresBackend, schema_exists

        name = options.get("schema") or DEFAULT_SCHEMA
        if not create and schema_exists(text, name) is False:
            raise NotAStoreError(f"no memory store in PostgreSQL schema {name!r} of that database")
        _supported(PostgresBackend, options)
        return PostgresBackend(text, **options)
    from .sqlite import SQLiteBackend

    _supported(SQLiteBackend, options)
    root = Path(text[len(SQLITE_SCHEME) :] if text.startswith(SQLITE_SCHEME) else text)
    if not create and not root.is_dir():
        raise NotAStoreError(f"no memory store at {root}")
    return SQLiteBackend(root, **options)


__all__ = ["Backend", "open_backend"]
