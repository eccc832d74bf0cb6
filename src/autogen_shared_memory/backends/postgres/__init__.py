"""The PostgreSQL backend: every scope of a deployment in one database (pgvector + full text)."""

from .backend import DEFAULT_SCHEMA, PostgresBackend, schema_exists
from .errors import BackendUnavailableError, redact
from .notify import CHANNEL
from .schema import SCHEMA_VERSION

__all__ = [
    "CHANNEL",
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "BackendUnavailableError",
    "PostgresBackend",
    "redact",
    "schema_exists",
]
