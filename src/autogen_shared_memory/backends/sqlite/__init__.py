"""The SQLite backend: one file per scope under a root directory, plus ``ids.db``."""

from .backend import SQLiteBackend, fts5_expression
from .files import StorageError
from .schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteBackend", "StorageError", "fts5_expression"]
