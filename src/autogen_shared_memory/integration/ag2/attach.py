"""Attach a store to AG2 group chats and agents: memory tools, prompt scaffolding, recall, group membership.

``store.attach(group_chat)`` (a ``GroupChat``, its ``GroupChatManager``, a ``ConversableAgent``, a list
of agents, or a pattern of ``initiate_group_chat``) gives every agent the memory it can use:

* an agent with an LLM gets ``memory_search`` / ``memory_remember`` / ``memory_forget`` in its
  ``llm_config`` tools and the scaffolding appended to its system message;
* an agent named in ``read_only`` (models without function calling) gets, instead of the tools, a
  byte-bounded capsule of the facts relevant to the latest message before each reply (a
  ``process_all_messages_before_reply`` hook, never written into the history) and the read-only
  scaffolding;
* every agent can *execute* memory tool calls (its function map has the three functions), always for
  the agent whose model asked, never for itself: see :mod:`.tools`. In a pattern-based group chat the
  calls run in the ``GroupToolExecutor`` that ``initiate_group_chat`` creates (after attach, with the
  agents' function maps copied in): the first message an attached agent sends to that chat's manager
  wraps the executor's tool reply in the same way;
* every agent becomes a member of the group (``group_id``, the team's name, required) and an entry of the
  agent directory under its memory identity (its name qualified by the group, ``launch:writer``, or the
  id ``agent_ids`` maps its name to); its text messages and memory tool calls are recorded in its records.

AG2 rebuilds an agent's ``OpenAIWrapper`` whenever a tool signature changes, which drops a custom model
client registered with ``register_model_client`` (Ollama, test clients) back to an inactive placeholder.
Attach and detach carry the registered client instances (and the usage totals) over to the rebuilt
wrapper, so such an agent keeps working; a client object set directly on ``agent.client`` is kept as is.

This module is the AG2 adapter (:class:`Adapter`); the generic :class:`~..attacher.Attacher` does what every
framework shares (unique names, the group, all or nothing, the undo registry), so that ``detach`` removes
exactly what attach added, and attaching twice changes nothing.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autogen import ConversableAgent, GroupChat, GroupChatManager
from autogen.agentchat.group.group_tool_executor import GroupToolExecutor
from autogen.agentchat.group.patterns.pattern import Pattern
from autogen.oai.client import OpenAIWrapper, PlaceHolderClient

from ...core.records import ConversationRecord, bounded_text
from ...core.types import validate_owner_id
from ..attacher import AdapterBase, Binding, private_attribute
from ..attacher import Attacher as GenericAttacher
from ..toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING, TOOL_NAMES, BoundTools, Mode, Recall
from ..writer import RecordWriter
from .tools import Caller, ReplyFunc, note_sent, recall_hook, tool_call_wrappers, tool_function, tool_schema

if TYPE_CHECKING:
    from ...facts import FactStore

logger = logging.getLogger("autogen_shared_memory")

_USAGE = ("total_usage_summary", "actual_usage_summary")


@dataclass
class AgentAttachment:
    """What attach did to one agent (and what detach will undo)."""

    agent_name: str
    group_id: str | None
    mode: Mode
    agent_id: str = ""  # the agent's memory identity (its name qualified by the group, or mapped)
    tools: BoundTools | None = None  # the tools calls *asked by this agent* run with (mode "tools")
    recall: Recall | None = None  # mode "recall"
    original_system_message: Any = None
    system_message: Any = None  # what attach set (None: the system message was left alone)
    tool_signatures: list[str] = field(default_factory=list)  # added to llm_config["tools"]
    functions: dict[str, Callable[..., Any]] = field(default_factory=dict)  # added to the function map
    reply_functions: list[tuple[ReplyFunc, ReplyFunc]] = field(default_factory=list)  # (original, wrapper)
    hooks: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)


# The private attributes of AG2 objects attach reads or changes, one function each, written against AG2 0.14.1
# (module autogen): AG2 has no public way to list or replace an agent's reply functions as registered, nor to
# reach the model clients a wrapper holds. A version without one of them fails with an error naming it, not
# with an AttributeError from the middle of an attach.
_WRITTEN_FOR = "autogen 0.14.1"


def _reply_func_list(agent: ConversableAgent) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = private_attribute(agent, "_reply_func_list", _WRITTEN_FOR)
    return entries


def _wrapper_clients(client: OpenAIWrapper) -> list[Any]:
    """The wrapper's model clients (the list itself: an entry is replaced in place)."""
    clients = private_attribute(client, "_clients", _WRITTEN_FOR)
    if not isinstance(clients, list):
        raise RuntimeError(
            f"shared memory cannot attach: OpenAIWrapper._clients is a {type(clients).__name__}, not the list "
            f"{_WRITTEN_FOR} keeps"
        )
    return clients


def _group_manager(executor: GroupToolExecutor) -> Any:
    # optional: an executor that never joined a chat has none (and nothing to unwrap for)
    return getattr(executor, "_group_manager", None)


def _group_agents(group_chat: GroupChat) -> Iterator[ConversableAgent]:
    for agent in group_chat.agents:
        if isinstance(agent, GroupChatManager):
            raise TypeError(
                f"agent {agent.name!r} is the manager of a nested group chat: attach that group chat separately"
            )
        if not isinstance(agent, ConversableAgent):
            raise TypeError(f"cannot give shared memory to a {type(agent).__name__}: not a ConversableAgent")
        yield agent


def _pattern_agents(pattern: Pattern) -> list[Any]:
    """A pattern's agents and its user agent (``initiate_group_chat`` adds the tool executor later)."""
    agents = list(pattern.agents)
    if pattern.user_agent is not None and pattern.user_agent not in agents:
        agents.append(pattern.user_agent)
    return agents


def iter_agents(target: Any) -> Iterator[ConversableAgent]:
    """The agents of a group chat (or of its manager), of a pattern, of a list of agents, or the agent itself."""
    if isinstance(target, Pattern):
        yield from iter_agents(_pattern_agents(target))
    elif isinstance(target, GroupChatManager):
        yield from _group_agents(target.groupchat)
    elif isinstance(target, GroupChat):
        yield from _group_agents(target)
    elif isinstance(target, ConversableAgent):
        yield target
    elif isinstance(target, (list, tuple)):
        for item in target:
            if not isinstance(item, ConversableAgent) or isinstance(item, GroupChatManager):
                raise TypeError(f"a list to attach holds AG2 agents, got {type(item).__name__}")
            yield item
    else:
        raise TypeError(
            f"attach takes an AG2 GroupChat, GroupChatManager, Pattern or ConversableAgent, got {type(target)}"
        )


def _llm_tool_names(agent: ConversableAgent) -> list[str]:
    config = agent.llm_config
    tools = (config.get("tools") if config else None) or []
    return [t.get("function", {}).get("name", "") for t in tools if isinstance(t, Mapping)]


def _model_name(agent: ConversableAgent) -> str | None:
    config = agent.llm_config
    entries = getattr(config, "config_list", None) or []
    model = getattr(entries[0], "model", None) if entries else None
    return str(model) if model else None


# AG2's tool-call reply functions: an agent's (registered as plain functions) and a pattern chat's tool
# executor's (registered as its bound methods).
_TOOL_CALL_REPLIES: dict[Any, str] = {
    ConversableAgent.generate_tool_calls_reply: "sync",
    ConversableAgent.a_generate_tool_calls_reply: "async",
    GroupToolExecutor._generate_group_tool_reply: "sync",
    GroupToolExecutor._a_generate_group_tool_reply: "async",
}


def _tool_call_replies(agent: ConversableAgent) -> tuple[ReplyFunc | None, ReplyFunc | None]:
    """AG2's tool-call reply functions in the agent's reply list (sync, async), as registered (none when
    they were replaced, e.g. already wrapped)."""
    found: dict[str, ReplyFunc] = {}
    for entry in _reply_func_list(agent):
        func = entry["reply_func"]
        kind = _TOOL_CALL_REPLIES.get(getattr(func, "__func__", func))
        if kind is not None:
            found[kind] = func
    return found.get("sync"), found.get("async")


def _wrap_tool_call_replies(
    agent: ConversableAgent, resolve: Callable[[ConversableAgent | str], Caller]
) -> list[tuple[ReplyFunc, ReplyFunc]]:
    """Replace the agent's tool-call reply functions with wrappers that run memory calls for the asker;
    returns (original, wrapper) pairs for undoing."""
    sync_reply, async_reply = _tool_call_replies(agent)
    if sync_reply is None:
        return []
    sync_wrapper, async_wrapper = tool_call_wrappers(resolve, sync_reply, async_reply)
    agent.replace_reply_func(sync_reply, sync_wrapper)
    replaced = [(sync_reply, sync_wrapper)]
    if async_reply is not None and async_wrapper is not None:
        agent.replace_reply_func(async_reply, async_wrapper)
        replaced.append((async_reply, async_wrapper))
    return replaced


def _with_scaffolding(current: Any, text: str) -> Any:
    """The system message with the scaffolding appended once (a str, or a list of content parts)."""
    if isinstance(current, list):
        if any(isinstance(p, Mapping) and p.get("text") == text for p in current):
            return current
        return [*current, {"type": "text", "text": text}]
    if not isinstance(current, str) or not current.strip():
        return text
    return current if text in current else f"{current}\n\n{text}"


def _check_client(agent: ConversableAgent) -> None:
    client = agent.client
    if isinstance(client, OpenAIWrapper):
        try:
            _wrapper_clients(client)
        except RuntimeError as exc:
            raise RuntimeError(
                f"cannot attach shared memory to {agent.name!r}: registering its tools makes AG2 rebuild its model "
                f"client, and this AG2 version's client does not show which custom clients to keep ({exc})"
            ) from None


def _change_tools_keeping_client(agent: ConversableAgent, change: Callable[[], None]) -> None:
    """Run ``change`` (which makes AG2 rebuild ``agent.client``), then give the rebuilt client the custom
    model clients that were registered on the old one, so ``register_model_client`` is not undone."""
    old = agent.client
    change()
    new = agent.client
    if new is old or old is None:
        return
    if not isinstance(old, OpenAIWrapper):  # a client object set directly (e.g. a test double): keep it
        agent.client = old
        return
    if not isinstance(new, OpenAIWrapper):
        return
    kept, rebuilt = _wrapper_clients(old), _wrapper_clients(new)
    for i, (before, after) in enumerate(zip(kept, rebuilt, strict=False)):
        if (
            isinstance(after, PlaceHolderClient)
            and not isinstance(before, PlaceHolderClient)
            and type(before).__name__ == after.config.get("model_client_cls")
        ):
            rebuilt[i] = before
    for attr in _USAGE:
        if attr in vars(old):
            setattr(new, attr, getattr(old, attr))


def _recorder(writer: RecordWriter, agent_name: str, agent_id: str) -> Callable[..., Any]:
    """A ``process_message_before_send`` hook recording the agent's own text messages in the records of
    ``agent_id``, its memory identity. It only queues them: AG2 calls the hook on the event loop in async
    chats, and a busy file would stall the loop."""
    agent_id = validate_owner_id(agent_id, "agent_id")

    def record(sender: Any, message: Any, recipient: Any, silent: Any) -> Any:
        try:
            m = message if isinstance(message, Mapping) else {"content": message}
            content = m.get("content")
            if m.get("role") in ("tool", "function") or m.get("tool_responses"):
                return message  # memory tool calls are recorded by the tools themselves; the text a model
                # sends with its calls ("I will note that...") is a message of its own, recorded below
            if isinstance(content, str) and content.strip():
                writer.put(
                    ConversationRecord(
                        agent_id=agent_id,
                        content=bounded_text(content, "message", truncate=True),
                        role="assistant",
                        source=agent_name,
                        session_id=writer.store.session_id,
                        context={"recipient": str(getattr(recipient, "name", ""))},
                    )
                )
        except Exception:  # a record that cannot be written must not stop the chat
            logger.exception("could not record a message of %s", agent_name)
        return message

    return record


class Adapter(AdapterBase[AgentAttachment]):
    """The AG2 adapter: group chats, their managers, patterns, agents and lists of agents. It keeps, per
    store, the agents it bound (a tool call is run for the agent that asked, with that agent's tools), the
    pattern chats' tool executors it linked and the thread that writes the records."""

    def __init__(self, store: FactStore) -> None:
        super().__init__(store)
        self._bound: weakref.WeakKeyDictionary[ConversableAgent, AgentAttachment] = weakref.WeakKeyDictionary()
        # the pattern chats' tool executors this adapter has linked (weakly: an executor lives as long as
        # its chat; the wrappers, in its reply list, are found there again by _ours)
        self._executors: weakref.WeakSet[GroupToolExecutor] = weakref.WeakSet()
        self._lock = threading.Lock()  # chats in several threads may meet a new executor at once
        self._records: RecordWriter | None = None

    @staticmethod
    def claims(target: Any) -> bool:
        """Whether ``target`` is an AG2 group chat, manager, pattern or agent (or a list whose first item is).

        Args:
            target: anything given to ``store.attach``.

        Returns:
            True for AG2 objects.
        """
        first = target[0] if isinstance(target, (list, tuple)) and target else target
        return isinstance(first, (ConversableAgent, GroupChat, Pattern))

    def agents(self, target: Any) -> list[Any]:
        return list(iter_agents(target))

    def check_options(self, names: list[str], options: Mapping[str, Any]) -> None:
        """``read_only`` (``True`` or agent names) and ``record`` (a bool)."""
        unexpected = set(options) - {"read_only", "record"}
        if unexpected:
            raise TypeError(f"attach got options AG2 does not take: {sorted(unexpected)} (it takes read_only, record)")
        read_only = options.get("read_only", False)
        if isinstance(read_only, str):
            raise TypeError("read_only is True, False or a collection of agent names, not one str")
        unknown = set() if isinstance(read_only, bool) else set(read_only) - set(names)
        if unknown:
            raise ValueError(f"read_only names agents that are not attached here: {sorted(unknown)}")

    def check(self, agent: Any, binding: Binding) -> None:
        clash = (set(_llm_tool_names(agent)) | set(agent.function_map)) & set(TOOL_NAMES)
        if clash:
            raise ValueError(
                f"agent {binding.name!r} already has a tool or function named {sorted(clash)[0]!r}: rename it, "
                "detach the store that added it, or do not attach shared memory to this agent"
            )
        if agent.llm_config:
            _check_client(agent)

    def _writer(self) -> RecordWriter:
        """The thread that writes the attached agents' messages (started by the first agent recorded)."""
        with self._lock:
            if self._records is None:
                self._records = RecordWriter(self.store)
            return self._records

    def _caller(self, asker: ConversableAgent | str) -> Caller:
        """The memory tools a call asked by ``asker`` runs with (resolved from the message, see :mod:`.tools`)."""
        if isinstance(asker, str):
            return Caller(error=asker)
        done = self._bound.get(asker)
        if done is None or done.tools is None:
            return Caller(
                error=f"ERROR: agent {asker.name!r} was not given the shared memory tools, so its memory calls are "
                "not run. Nothing was changed."
            )
        return Caller(tools=done.tools)

    def _link_executor(self, sender: Any, message: Any, recipient: Any, silent: Any) -> Any:
        """A ``process_message_before_send`` hook of every attached agent: a message to the manager of a
        pattern chat makes that chat's tool executor run memory calls for the agent that asked.

        ``initiate_group_chat`` creates the executor after attach, so it is found here, before any tool
        call of an attached agent reaches it (the call is sent through this hook first). An executor another
        store already wrapped is left alone: calls of this store's agents there answer ``ERROR:``."""
        if isinstance(recipient, GroupChatManager):
            for agent in recipient.groupchat.agents:
                if isinstance(agent, GroupToolExecutor) and agent not in self._executors:
                    with self._lock:
                        if agent not in self._executors:
                            for _, wrapper in _wrap_tool_call_replies(agent, self._caller):
                                wrapper._shared_memory_resolve = self._caller  # type: ignore[attr-defined]
                            self._executors.add(agent)
        return message

    def bind(self, agent: Any, binding: Binding) -> AgentAttachment:
        store, agent_id, group_id = self.store, binding.agent_id, binding.group_id
        read_only = binding.options.get("read_only", False)
        record = bool(binding.options.get("record", True))
        recall_only = read_only if isinstance(read_only, bool) else binding.name in read_only
        mode: Mode = "member" if not agent.llm_config else "recall" if recall_only else "tools"
        done = AgentAttachment(agent.name, group_id, mode, agent_id)
        try:
            # Every agent executes memory calls (for the agent that asked): the wrappers say who that is.
            done.reply_functions = _wrap_tool_call_replies(agent, self._caller)
            if done.reply_functions:
                done.functions = {name: tool_function(name) for name in TOOL_NAMES}
                agent.register_function(dict(done.functions), silent_override=True)
            link = self._link_executor
            agent.register_hook("process_message_before_send", link)
            done.hooks.append(("process_message_before_send", link))
            if mode == "tools":
                done.tools = BoundTools(store, agent_id, group_id, record_calls=record)
                agent.register_hook("process_message_before_send", note_sent)
                done.hooks.append(("process_message_before_send", note_sent))
                for name in TOOL_NAMES:
                    add = functools.partial(agent.update_tool_signature, tool_schema(name), is_remove=False)
                    _change_tools_keeping_client(agent, add)
                    done.tool_signatures.append(name)
            elif mode == "recall":
                done.recall = Recall(store, agent_id, group_id)
                hook = recall_hook(done.recall)
                agent.register_hook("process_all_messages_before_reply", hook)
                done.hooks.append(("process_all_messages_before_reply", hook))
            if mode != "member":
                done.original_system_message = agent.system_message
                text = (
                    binding.scaffolding or DEFAULT_SCAFFOLDING
                    if mode == "tools"
                    else binding.read_only_scaffolding or READ_ONLY_SCAFFOLDING
                )
                updated = _with_scaffolding(done.original_system_message, text)
                if updated != done.original_system_message:
                    agent.update_system_message(updated)
                    done.system_message = updated
            if record:
                hook = _recorder(self._writer(), agent.name, agent_id)
                agent.register_hook("process_message_before_send", hook)
                done.hooks.append(("process_message_before_send", hook))
        except BaseException:
            self.unbind(agent, done)
            raise
        self._bound[agent] = done
        return done

    def unbind(self, agent: Any, record: AgentAttachment) -> None:
        """Remove what ``record`` says attach added (whatever was added; the rest is left alone)."""
        self._bound.pop(agent, None)
        for hookable, hook in record.hooks:
            hooks = agent.hook_lists.get(hookable, [])
            if hook in hooks:
                hooks.remove(hook)
        if record.system_message is not None:
            current = agent.system_message
            if current == record.system_message:
                agent.update_system_message(record.original_system_message)
            elif isinstance(current, str) and isinstance(record.original_system_message, str):
                suffix = record.system_message[len(record.original_system_message) :]
                if suffix and suffix in current:  # changed since: take out only the scaffolding
                    agent.update_system_message(current.replace(suffix, "", 1))
        for name in reversed(record.tool_signatures):
            if name in _llm_tool_names(agent):
                remove = functools.partial(agent.update_tool_signature, name, is_remove=True)
                _change_tools_keeping_client(agent, remove)
        ours = [name for name, func in record.functions.items() if agent.function_map.get(name) is func]
        if ours:  # a None entry removes the function (AG2's documented way)
            agent.register_function(dict.fromkeys(ours), silent_override=True)
        for original, wrapper in record.reply_functions:
            agent.replace_reply_func(wrapper, original)

    def describe(self, agent: Any, record: AgentAttachment) -> tuple[Any, Any, list[str]]:
        """The directory entry: description, model, the agent's own tools (the memory tools are implied)."""
        tools = [n for n in _llm_tool_names(agent) if n not in TOOL_NAMES]
        return agent.description, _model_name(agent), tools

    def detached(self, target: Any) -> None:
        """Unwrap the executors of chats none of whose agents is still attached here."""
        with self._lock:
            for executor in list(self._executors):
                chat = getattr(_group_manager(executor), "groupchat", None)
                if not any(a in self._bound for a in getattr(chat, "agents", ())):
                    for entry in _reply_func_list(executor):
                        wrapper = entry["reply_func"]
                        if getattr(wrapper, "_shared_memory_resolve", None) == self._caller:
                            entry["reply_func"] = wrapper.__wrapped__
                    self._executors.discard(executor)


class Attacher(GenericAttacher[AgentAttachment]):
    """The generic attacher with the AG2 adapter (what ``store.attach`` uses for AG2 objects)."""

    def __init__(self, store: FactStore) -> None:
        super().__init__(store, Adapter(store))
