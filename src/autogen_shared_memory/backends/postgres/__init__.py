"""The PostgreSQL backend: every scope of a deployment in one database (pgvector + full text)."""

from .backend import PostgresBackend
from .errors import BackendUnavailableError, redact
from .notify import CHANNEL
from .schema import SCHEMA_VERSION

__all__ = ["CHANNEL", "SCHEMA_VERSION", "BackendUnavailableError", "PostgresBackend", "redact"]
