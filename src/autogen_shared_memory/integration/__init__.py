"""Framework integrations, one package per framework: ``autogen`` (agentchat teams and the core runtime),
``agent_framework`` (Microsoft Agent Framework) and ``ag2`` (AG2's classic ``GroupChat``), over what they
share in :mod:`.toolkit` (the identity-bound tools, the scaffolding, the recalled capsule).

Each takes a :class:`~autogen_shared_memory.facts.FactStore` and is imported only when used. The AutoGen
names stay importable from here, as before the packages existed.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_SCAFFOLDING",
    "READ_ONLY_SCAFFOLDING",
    "AgentAttachment",
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


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import autogen

        return getattr(autogen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
