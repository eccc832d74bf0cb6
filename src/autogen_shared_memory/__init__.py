"""autogen-shared-memory: one persistent, shared, scoped long-term memory for AutoGen multi-agent systems.

Facts live in three scopes — ``agent`` (private to one agent), ``group`` (one team) and ``global`` (the
deployment) — as SQLite files under one root, recalled by hybrid FTS5 + embedding search fused with
Reciprocal Rank Fusion and returned as small byte-bounded capsules.
"""

from .backends.base import Backend, ModelInfo
from .backends.sqlite import SQLiteBackend
from .capsule import capsule
from .embedding import Embedder, SentenceTransformerEmbedder
from .model import (
    AuditEvent,
    EmbeddingModelError,
    EmbeddingModelMismatchError,
    Fact,
    FactNotFoundError,
    Hit,
    MemoryAccessDenied,
    NotAStoreError,
    Receipt,
    ScopeRef,
    ScopeStats,
    SharedMemoryError,
)
from .store import SharedMemoryStore

__version__ = "0.1.0"

__all__ = [
    "AuditEvent",
    "Backend",
    "Embedder",
    "EmbeddingModelError",
    "EmbeddingModelMismatchError",
    "Fact",
    "FactNotFoundError",
    "Hit",
    "MemoryAccessDenied",
    "ModelInfo",
    "NotAStoreError",
    "Receipt",
    "SQLiteBackend",
    "ScopeRef",
    "ScopeStats",
    "SentenceTransformerEmbedder",
    "SharedMemoryError",
    "SharedMemoryStore",
    "__version__",
    "capsule",
]
