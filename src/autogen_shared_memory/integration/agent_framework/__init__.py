"""Microsoft Agent Framework (``agent-framework-core``, orchestrations from ``agent-framework-orchestrations``):
a context provider that gives an agent the memory tools, the scaffolding, recall and records, and the
attacher behind ``store.attach(agent | [agents] | builder | workflow)``."""

try:
    import agent_framework  # noqa: F401
except ModuleNotFoundError as exc:  # a bare "No module named 'agent_framework'" does not say what to install
    if exc.name != "agent_framework":
        raise
    raise ModuleNotFoundError(
        "Microsoft Agent Framework is not installed: pip install 'autogen-shared-memory[agent-framework]'",
        name=exc.name,
    ) from exc

from ...core.types import GroupIdRequired
from ..toolkit import Attachment
from .attach import Adapter, AgentAttachment, Attacher, iter_agents
from .provider import (
    DEFAULT_SOURCE_ID,
    MemoryTool,
    SharedMemoryContextProvider,
    SharedMemoryProviderConfig,
    agent_identity,
    memory_tools,
)

__all__ = [
    "DEFAULT_SOURCE_ID",
    "Adapter",
    "AgentAttachment",
    "Attacher",
    "Attachment",
    "GroupIdRequired",
    "MemoryTool",
    "SharedMemoryContextProvider",
    "SharedMemoryProviderConfig",
    "agent_identity",
    "iter_agents",
    "memory_tools",
]
