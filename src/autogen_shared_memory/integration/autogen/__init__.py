"""AutoGen (agentchat and the core runtime): memory tools, the Memory view, attach, runtime recording."""

from ..toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING, Attachment
from .attach import AgentAttachment, derive_group_id
from .memory import SharedMemory, SharedMemoryConfig
from .runtime import (
    ForgetRequest,
    MemoryRecorder,
    MemoryReply,
    MemoryServiceAgent,
    RememberRequest,
    SearchRequest,
)
from .tools import MemoryForgetTool, MemoryRememberTool, MemorySearchTool, memory_tools

__all__ = [
    "DEFAULT_SCAFFOLDING",
    "READ_ONLY_SCAFFOLDING",
    "AgentAttachment",
    "Attachment",
    "ForgetRequest",
    "MemoryForgetTool",
    "MemoryRecorder",
    "MemoryRememberTool",
    "MemoryReply",
    "MemorySearchTool",
    "MemoryServiceAgent",
    "RememberRequest",
    "SearchRequest",
    "SharedMemory",
    "SharedMemoryConfig",
    "derive_group_id",
    "memory_tools",
]
