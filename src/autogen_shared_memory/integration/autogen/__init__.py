"""AutoGen (agentchat and the core runtime): memory tools, the Memory view, attach, runtime recording."""

from ...core.types import GroupIdRequired
from ..toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING, Attachment
from .attach import Adapter, AgentAttachment, Attacher
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
    "Adapter",
    "AgentAttachment",
    "Attacher",
    "Attachment",
    "ForgetRequest",
    "GroupIdRequired",
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
    "memory_tools",
]
