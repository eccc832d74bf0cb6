"""autogen-shared-memory: one persistent, shared, scoped long-term memory for AutoGen multi-agent systems.

Facts live in three scopes — ``agent`` (private to one agent), ``group`` (one team) and ``global`` (the
deployment) — as SQLite files under one root, recalled by hybrid BM25 + embedding search fused with
Reciprocal Rank Fusion and returned as small byte-bounded capsules.
"""

from typing import TYPE_CHECKING, Any

from .backends import open_backend
from .backends.base import Backend, ModelInfo
from .backends.sqlite import SQLiteBackend
from .core.capsule import capsule
from .core.records import ConversationRecord, ToolCallRecord
from .core.types import (
    AuditEvent,
    Change,
    Fact,
    Hit,
    Position,
    Receipt,
    ScopeRef,
    ScopeStats,
)
from .embedding import Embedder, SentenceTransformerEmbedder
from .errors import (
    BackendUnavailableError,
    CheckpointError,
    EmbeddingModelError,
    EmbeddingModelMismatchError,
    FactNotFoundError,
    GroupIdRequired,
    ImportFormatError,
    ImportModelError,
    ImportPolicyError,
    InvalidInputError,
    InvalidInputTypeError,
    MemoryAccessDenied,
    NotAStoreError,
    PositionError,
    SharedMemoryError,
    StorageError,
    TaskNotFoundError,
    UnknownAgentError,
)
from .facts import FactStore
from .handles import AgentHandle, MemoryHandle, OperatorHandle
from .onnx_embedding import OnnxEmbedder
from .settings import DedupSettings, RecallSettings, WritePolicy
from .store import SharedMemoryStore, SharedMemoryStoreConfig

if TYPE_CHECKING:
    from .integration.autogen import (
        MemoryForgetTool,
        MemoryRecorder,
        MemoryRememberTool,
        MemorySearchTool,
        MemoryServiceAgent,
        SharedMemory,
    )

# The AutoGen integration imports autogen-agentchat (about 0.2 s): loaded on first use, so that a process that
# only stores and searches (a CLI command, a worker of another framework) does not pay for it.
_INTEGRATION = {
    "MemoryForgetTool",
    "MemoryRecorder",
    "MemoryRememberTool",
    "MemorySearchTool",
    "MemoryServiceAgent",
    "SharedMemory",
}


def __getattr__(name: str) -> Any:
    if name in _INTEGRATION:
        from .integration import autogen as integration

        return getattr(integration, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AgentHandle",
    "AuditEvent",
    "Backend",
    "BackendUnavailableError",
    "Change",
    "CheckpointError",
    "ConversationRecord",
    "DedupSettings",
    "Embedder",
    "EmbeddingModelError",
    "EmbeddingModelMismatchError",
    "Fact",
    "FactNotFoundError",
    "FactStore",
    "GroupIdRequired",
    "Hit",
    "ImportFormatError",
    "ImportModelError",
    "ImportPolicyError",
    "InvalidInputError",
    "InvalidInputTypeError",
    "MemoryAccessDenied",
    "MemoryForgetTool",
    "MemoryHandle",
    "MemoryRecorder",
    "MemoryRememberTool",
    "MemorySearchTool",
    "MemoryServiceAgent",
    "ModelInfo",
    "NotAStoreError",
    "OnnxEmbedder",
    "OperatorHandle",
    "Position",
    "PositionError",
    "RecallSettings",
    "Receipt",
    "SQLiteBackend",
    "ScopeRef",
    "ScopeStats",
    "SentenceTransformerEmbedder",
    "SharedMemory",
    "SharedMemoryError",
    "SharedMemoryStore",
    "SharedMemoryStoreConfig",
    "StorageError",
    "TaskNotFoundError",
    "ToolCallRecord",
    "UnknownAgentError",
    "WritePolicy",
    "__version__",
    "capsule",
    "open_backend",
]
