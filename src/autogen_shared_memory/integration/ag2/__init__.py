"""AG2 (module ``autogen``: ``ConversableAgent`` / ``GroupChat``, and the pattern-based group chats of
``initiate_group_chat``): attach and the memory tools.

``store.attach(group_chat, group_id=...)`` (or a pattern) dispatches here for AG2 objects; see
:mod:`.attach` for what it adds and :mod:`.tools` for how a tool call is run for the agent that asked (not
the agent that executes it).
"""

try:
    import autogen  # noqa: F401
except ModuleNotFoundError as exc:  # a bare "No module named 'autogen'" does not say what to install
    if exc.name != "autogen":
        raise
    raise ModuleNotFoundError("AG2 is not installed: pip install 'autogen-shared-memory[ag2]'", name=exc.name) from exc

from ...core.types import GroupIdRequired
from ..toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING, Attachment
from .attach import Adapter, AgentAttachment, Attacher, iter_agents
from .tools import asker_of, tool_schema

__all__ = [
    "DEFAULT_SCAFFOLDING",
    "READ_ONLY_SCAFFOLDING",
    "Adapter",
    "AgentAttachment",
    "Attacher",
    "Attachment",
    "GroupIdRequired",
    "asker_of",
    "iter_agents",
    "tool_schema",
]
