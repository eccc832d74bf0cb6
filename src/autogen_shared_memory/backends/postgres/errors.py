"""Errors that name the server without its password."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ...errors import BackendUnavailableError as BackendUnavailableError


def redact(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    params.pop("password", None)
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
