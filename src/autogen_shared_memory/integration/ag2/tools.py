"""The memory tools as AG2 sees them, and who a tool call is run for.

AG2 runs a tool call with whichever agent executes it: in a ``GroupChat`` the next speaker that has the
function in its function map, in a two-agent chat the agent the call was sent to, in a pattern-based
group chat (``initiate_group_chat``) the ``GroupToolExecutor``, whose function map is the union of all
the agents' (``dict.update``: when several agents have ``memory_search``, one copy is kept). Never the
agent whose model asked. The functions registered here therefore carry no identity of their own (any
agent's copy does the same), and the identity comes from the message being executed: each attached
agent's tool-call reply function (AG2's ``generate_tool_calls_reply`` and its async twin), and the
executor's (``_generate_group_tool_reply`` and ``_a_generate_group_tool_reply``), is wrapped so that, while
it runs, a context variable holds the memory tools of the agent that *asked*:

* in a group chat, patterns included, the message comes from the ``GroupChatManager``, and its ``name``
  is the speaker, set by ``GroupChat.append`` (the model cannot choose it: AG2 forces a tool-call message's
  role to ``assistant``, and ``append`` overwrites the ``name`` of every message that is not a
  ``function`` result). AG2's own ``GroupToolExecutor`` (``set_tool_call_originator``) and its safeguards
  find the sender of a tool call the same way; the name must match exactly one agent of the chat;
* except the speaker's own message, back in its turn to run it (a ``GroupChat`` may hand it the floor
  again): the speaker's copy in its own history has no ``name``. It runs for the speaker only when its
  tool calls are the very list the speaker sent to that manager (:func:`note_sent`, a hook on every agent
  with the tools), which no other agent's message can be;
* in a two-agent chat the asker is the sender itself (a message relayed under another ``name`` is
  refused);
* the asker must be an agent this store attached with the tools. Otherwise (no sender, an unknown name,
  an agent without memory tools, a call executed outside the wrapper) the call answers ``ERROR:`` text
  and changes nothing: it never falls back to the executing agent.

The registered functions are plain functions bound to that identity: in async chats they return a coroutine,
which AG2 awaits; in sync chats they return the answer, run on this process's one memory loop
(:func:`run_sync`): given a coroutine there, AG2 would start a thread and an event loop for every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from autogen import ConversableAgent, GroupChatManager

from ..toolkit import ARGS, CAPSULE_PREAMBLE, DESCRIPTIONS, TOOL_NAMES, BoundTools, Recall, json_kind, not_an_object

logger = logging.getLogger("autogen_shared_memory")

T = TypeVar("T")
ReplyFunc = Callable[..., Any]


@dataclass(frozen=True)
class Caller:
    """Who a tool call is run for: the asker's bound tools, or why it cannot be run."""

    tools: BoundTools | None = None
    error: str | None = None


@dataclass
class Asked:
    """The memory calls of the one message a tool-call reply is running, and who asked for them. A memory
    call runs only if it is one of these (each once): a call made anywhere else while that reply runs (in a
    nested chat another tool of the message started, say) is not the asker's and is refused."""

    caller: Caller
    calls: list[tuple[str, str]]  # (tool name, arguments as canonical JSON), not yet run

    def take(self, name: str, arguments: Mapping[str, Any]) -> bool:
        key = (name, _canonical(arguments))
        if key in self.calls:
            self.calls.remove(key)
            return True
        return False


NOT_ASKED = (
    "ERROR: this memory call is not one the agent whose tool calls are running asked for (it was made "
    "inside another tool, a nested chat say); shared memory only runs calls for the agent that made them. "
    "Nothing was changed."
)


def _canonical(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, default=str)


_CALLER: ContextVar[Asked | None] = ContextVar("autogen_shared_memory_ag2_caller", default=None)

# A memory call whose arguments are not a JSON object is handed to AG2 with this one key instead: AG2
# itself crashes on such arguments (``null`` or a number end the chat with an exception).
INVALID_ARGUMENTS = "__shared_memory_invalid_arguments__"

NO_CALLER = (
    "ERROR: shared memory cannot tell which agent asked for this call (it was not run by an attached "
    "agent's tool-call reply). Nothing was changed."
)


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI tool signature of one memory tool (from the toolkit's argument model)."""
    parameters = ARGS[name].model_json_schema()
    parameters.pop("title", None)
    return {"type": "function", "function": {"name": name, "description": DESCRIPTIONS[name], "parameters": parameters}}


def tool_function(name: str) -> Callable[..., str | Coroutine[Any, Any, str]]:
    """The function-map entry of one memory tool: runs the call for the agent that asked, or refuses."""

    def run(**arguments: Any) -> str | Coroutine[Any, Any, str]:
        asked = _CALLER.get()
        if asked is None:
            return NO_CALLER
        if not asked.take(name, arguments):
            return NOT_ASKED
        caller = asked.caller
        if caller.tools is None:
            return caller.error or NO_CALLER
        if INVALID_ARGUMENTS in arguments:
            return not_an_object(name, str(arguments[INVALID_ARGUMENTS]))
        answer = caller.tools.call(name, arguments)  # answers text, never raises
        return answer if _loop_running() else run_sync(lambda: answer)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = DESCRIPTIONS[name]
    return run


# The tool calls each agent with the tools last sent to each recipient: the list object itself, which AG2
# keeps in the sender's own history (weakly keyed: the agents and the chat's manager come and go).
_SENT: weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, Any]] = weakref.WeakKeyDictionary()


def note_sent(sender: Any, message: Any, recipient: Any, silent: Any) -> Any:
    """A ``process_message_before_send`` hook: keeps the tool-call list of a message the agent sends."""
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if calls:
        # an agent class without weak references: its own calls are not told apart (they answer ERROR)
        with contextlib.suppress(TypeError):
            _SENT.setdefault(sender, weakref.WeakKeyDictionary())[recipient] = calls
    return message


def _sent(sender: Any, recipient: Any) -> Any:
    """The tool-call list ``sender`` last sent to ``recipient`` (:func:`note_sent`), or None."""
    try:
        return _SENT.get(sender, {}).get(recipient)
    except TypeError:  # not weakly referable: nothing was kept
        return None


def asker_of(message: Mapping[str, Any], sender: Any, recipient: Any = None) -> ConversableAgent | str:
    """The agent whose model made the tool calls of ``message`` (received from ``sender``, in the history
    of ``recipient``, the agent running them), or an error."""
    name = message.get("name")
    if sender is None:
        return "ERROR: shared memory cannot tell which agent asked for this call (no sender). Nothing was changed."
    if isinstance(sender, GroupChatManager):
        calls = message.get("tool_calls")
        own = name is None and calls is not None and calls is _sent(recipient, sender)
        if own and isinstance(recipient, ConversableAgent):  # its own message (those it received are named)
            return recipient
        matches = [a for a in sender.groupchat.agents if a.name == name] if isinstance(name, str) else []
        if len(matches) != 1 or not isinstance(matches[0], ConversableAgent):
            return (
                f"ERROR: shared memory cannot tell which agent of the group chat asked for this call (speaker "
                f"{name!r}). Nothing was changed."
            )
        return matches[0]
    if not isinstance(sender, ConversableAgent):
        return f"ERROR: shared memory does not know the sender type {type(sender).__name__}. Nothing was changed."
    if name is not None and name != sender.name:
        return (
            f"ERROR: this call was relayed by {sender.name!r} under the name {name!r}; shared memory only runs "
            "calls for the agent that made them. Nothing was changed."
        )
    return sender


def _is_memory_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, Mapping) else None
    return isinstance(function, Mapping) and function.get("name") in TOOL_NAMES


def _memory_calls(message: Mapping[str, Any]) -> bool:
    calls = message.get("tool_calls") or []
    return isinstance(calls, list) and any(_is_memory_call(c) for c in calls)


def _object_arguments(raw: Any) -> tuple[dict[str, Any] | None, str]:
    """The JSON object ``raw`` holds (control characters inside its strings allowed, as AG2 does), or None and
    what it is instead."""
    if not isinstance(raw, str):
        return None, json_kind(raw)
    try:
        value = json.loads(raw, strict=False)
    except (ValueError, TypeError):
        return None, "text that is not JSON"
    except RecursionError:
        return None, "JSON nested too deep"
    return (value, "") if isinstance(value, dict) else (None, json_kind(value))


def _with_object_arguments(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message``, or a copy whose memory calls carry their arguments as plain JSON (every newline and tab
    escaped), or :data:`INVALID_ARGUMENTS` when they are not an object. AG2 "repairs" raw arguments before
    reading them (``_format_json_str``): a string ending in a backslash flips its idea of what is quoted, and
    a newline inside a fact is then deleted, or valid JSON refused."""
    calls = list(message.get("tool_calls") or [])
    changed = False
    for i, call in enumerate(calls):
        if not _is_memory_call(call):
            continue
        raw = call["function"].get("arguments", "{}")
        value, problem = _object_arguments(raw)
        arguments = json.dumps({INVALID_ARGUMENTS: problem} if value is None else value)
        if arguments != raw:
            calls[i] = {**call, "function": {**call["function"], "arguments": arguments}}
            changed = True
    return {**message, "tool_calls": calls} if changed else message


def tool_call_wrappers(
    resolve: Callable[[ConversableAgent | str], Caller], sync_original: ReplyFunc, async_original: ReplyFunc | None
) -> tuple[ReplyFunc, ReplyFunc | None]:
    """Wrap AG2's tool-call reply functions: while they run, the context holds the asker's memory tools.

    The wrappers keep the originals' names (AG2 pairs ``a_generate_tool_calls_reply`` with
    ``generate_tool_calls_reply`` by name to skip the sync one in async chats).
    """

    def prepare(
        recipient: ConversableAgent, messages: list[dict[str, Any]] | None, sender: Any
    ) -> tuple[Asked | None, list[dict[str, Any]] | None]:
        """Who the memory calls of the latest message run for, and the messages to hand to AG2."""
        history = messages
        if history is None and sender is not None:  # AG2 reads the history with the sender then
            history = recipient.chat_messages.get(sender)
        message = history[-1] if history else None
        if not isinstance(message, Mapping) or not _memory_calls(message):
            return None, messages
        fixed = _with_object_arguments(message)
        if fixed is not message and history:  # a copy: the history keeps what the model sent
            messages = [*history[:-1], dict(fixed)]
        calls = [
            (c["function"]["name"], _canonical(json.loads(c["function"].get("arguments") or "{}")))
            for c in fixed.get("tool_calls") or []
            if _is_memory_call(c)
        ]
        return Asked(resolve(asker_of(message, sender, recipient)), calls), messages

    @functools.wraps(sync_original)
    def generate_tool_calls_reply(
        recipient: ConversableAgent,
        messages: list[dict[str, Any]] | None = None,
        sender: Any = None,
        config: Any = None,
    ) -> Any:
        caller, messages = prepare(recipient, messages, sender)
        token = _CALLER.set(caller)
        try:
            return sync_original(recipient, messages=messages, sender=sender, config=config)
        finally:
            _CALLER.reset(token)

    if async_original is None:
        return generate_tool_calls_reply, None
    original = async_original

    @functools.wraps(original)
    async def a_generate_tool_calls_reply(
        recipient: ConversableAgent,
        messages: list[dict[str, Any]] | None = None,
        sender: Any = None,
        config: Any = None,
    ) -> Any:
        caller, messages = prepare(recipient, messages, sender)
        token = _CALLER.set(caller)
        try:
            return await original(recipient, messages=messages, sender=sender, config=config)
        finally:
            _CALLER.reset(token)

    return generate_tool_calls_reply, a_generate_tool_calls_reply


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None  # (the process it runs in, the loop)
_LOOP_LOCK = threading.Lock()


def _memory_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for memory calls made from sync code, running in a daemon thread of its own
    (a new one after a fork). The store's async methods run in its executor's threads, which live on, and so
    do their database connections: a loop per call would start a thread, and open the scope files, per call."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="shared-memory-ag2", daemon=True).start()
            _LOOP = (os.getpid(), loop)
        return _LOOP[1]


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, whether or not an event loop runs in this thread.

    AG2 calls hooks synchronously, also from inside ``a_initiate_chat``, and runs tool calls synchronously in
    sync chats: the coroutine runs on :func:`_memory_loop` while the caller waits (a short store call; it
    could not run on a busy loop of the caller's).

    Args:
        factory: makes the coroutine (called in this thread).

    Returns:
        The coroutine's result.

    Raises:
        Exception: whatever the coroutine raises.
    """
    return asyncio.run_coroutine_threadsafe(factory(), _memory_loop()).result()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def recall_hook(recall: Recall) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """A ``process_all_messages_before_reply`` hook: the capsule for the latest message, for this reply only.

    The capsule goes just before the latest message (so the reply functions still see the latest message
    last) and never into the agent's history. Tool calls and tool results get no capsule (a message
    between a call and its result would break the model's protocol).
    """

    def inject(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not messages:
            return messages
        last = messages[-1]
        if not isinstance(last, Mapping) or last.get("tool_calls") or last.get("role") in ("tool", "function"):
            return messages
        query = _text(last.get("content"))
        if not query.strip() or query.startswith(CAPSULE_PREAMBLE):
            return messages
        try:
            _, text = run_sync(lambda: recall(query))
        except Exception:  # the reply goes on without memory
            logger.exception("shared memory recall failed for %s", recall.agent_id)
            return messages
        if not text:
            return messages
        return [*messages[:-1], {"role": "user", "content": text}, last]

    return inject
