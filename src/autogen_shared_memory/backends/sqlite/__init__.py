"""The SQLite backend: one file per scope under a root directory, plus ``ids.db``."""

from .backend import SQLiteBackend, fts5_expression
from .files import StorageError, owner_file_token, scope_file_name
from .schema import MIGRATIONS, SCHEMA_VERSION

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteBackend",
    "StorageError",
    "fts5_expression",
    "owner_file_token",
    "scope_file_name",
]
