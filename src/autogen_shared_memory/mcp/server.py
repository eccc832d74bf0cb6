"""The MCP server: the three memory tools, the scaffolding and the readable scopes of one caller.

A caller's identity (agent id, group, read-only) is fixed outside the protocol: at launch for stdio (one
client, one identity), by its bearer token for streamable HTTP (:mod:`.http`). The model chooses the
arguments of a call, never who it is. Each call runs through the toolkit's
:class:`~autogen_shared_memory.integration.toolkit.BoundTools`, so an answer is the same text the framework
tools give (receipts, ``DENIED:`` / ``ERROR:`` lines, capsules), and a call never fails at the protocol
level: a refused or invalid call is a normal result whose text says so (an MCP ``isError`` result makes some
clients raise instead of showing the model the answer).

Resources: one per scope the caller may read (``memory://agent/<id>``, ``memory://group/<id>``,
``memory://global``), each answering its newest active facts as JSON, and ``memory://fact/<id>``, answering
one fact the caller may read (a fact it may not read is answered exactly as one that does not exist).
Subscribers of a resource are told when it changes (``notifications/resources/updated``, or the
``subscriptions/listen`` stream of 2026 clients) from the store's change feed, so a write by another process
or host reaches them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from ..core.types import Change, Fact, FactNotFoundError, Filters, MemoryAccessDenied, ScopeRef, validate_owner_id
from ..handles import AgentHandle
from ..integration.toolkit import (
    ARGS,
    DEFAULT_SCAFFOLDING,
    DESCRIPTIONS,
    FORGET,
    REMEMBER,
    SEARCH,
    TOOL_NAMES,
    BoundTools,
)
from ..store import SharedMemoryStore

logger = logging.getLogger("autogen_shared_memory")

SERVER_NAME = "autogen-shared-memory"
PROMPT_NAME = "memory_scaffolding"
WRITE_TOOLS = (REMEMBER, FORGET)
SCOPE_FACTS = 100  # a scope resource answers its newest active facts, at most this many
FACT_URI = "memory://fact/"
READ_ONLY_DENIED = (
    "DENIED: this connection is read-only (its token does not allow writes): memory_remember and memory_forget "
    "are not available. Nothing was changed."
)


@dataclass(frozen=True)
class Identity:
    """Who a connection acts as: an agent, the group its tools are bound to, and whether it may write.

    Args:
        agent_id: the agent's id.
        group_id: its team's group (None: agent and global scopes only).
        read_only: the connection may search and read, never write.

    Raises:
        ValueError / TypeError: an id the store cannot own.
    """

    agent_id: str
    group_id: str | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_id", validate_owner_id(self.agent_id, "agent_id"))
        if self.group_id is not None:
            object.__setattr__(self, "group_id", validate_owner_id(self.group_id, "group_id"))


def _handle(store: SharedMemoryStore, identity: Identity) -> AgentHandle:
    """The handle ``identity`` acts through: the one place where the server binds an identity to the store.

    Binding to a group enrols the agent in it (trusted code chose the team at launch or when it made the
    token, as ``attach`` does).
    """
    return store.as_agent(identity.agent_id, identity.group_id, join=identity.group_id is not None)


def _bind(handle: AgentHandle, *, record_calls: bool) -> BoundTools:
    """The memory tools of a handle; ``record_calls`` logs each call in the agent's tool history (no framework
    runtime records calls that arrive over MCP)."""
    return BoundTools(handle.engine, handle.agent_id, handle.group_id, record_calls=record_calls)


def scope_uri(scope: ScopeRef) -> str:
    """The resource URI of a scope: ``memory://global``, ``memory://group/<id>`` or ``memory://agent/<id>``."""
    return "memory://global" if scope.kind == "global" else f"memory://{scope.kind}/{scope.owner}"


def fact_uri(fact_id: str) -> str:
    """The resource URI of a fact: ``memory://fact/<id>``."""
    return FACT_URI + fact_id


def scaffolding(read_only: bool = False) -> str:
    """The memory scaffolding (the system-prompt text of an agent with the tools); for a read-only connection
    without the items of the tools it cannot call."""
    if not read_only:
        return DEFAULT_SCAFFOLDING
    lines = DEFAULT_SCAFFOLDING.splitlines()
    return "\n".join(line for line in lines if not line.startswith(tuple(f"- {name}(" for name in WRITE_TOOLS)))


def _not_found(uri: str) -> MCPError:
    """The one answer for a resource that does not exist and one the caller may not read (no oracle)."""
    return MCPError(types.INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})


def _fact_json(fact: Fact) -> dict[str, Any]:
    data = dataclasses.asdict(fact)
    data["scope"] = str(fact.scope)
    return data


class Binding:
    """One identity's memory on the store: its tools and what it may read.

    Args:
        store: the store.
        identity: who the connection acts as.
    """

    def __init__(self, store: SharedMemoryStore, identity: Identity) -> None:
        self.identity = identity
        self.handle = _handle(store, identity)
        # Write calls are recorded in the agent's tool history, refused ones too (what a model tried is part of
        # the record; the facts' own audit trail has every write that happened). Searches are not: a record
        # is a write transaction, which would cost every search several milliseconds.
        self.tools = _bind(self.handle, record_calls=True)
        self.search_tools = _bind(self.handle, record_calls=False)

    def scopes(self) -> list[ScopeRef]:
        """The scopes the identity reads: its own, its group's (when bound to one) and global."""
        own = [ScopeRef("agent", self.identity.agent_id)]
        group = [] if self.identity.group_id is None else [ScopeRef("group", self.identity.group_id)]
        return [*own, *group, ScopeRef("global")]

    def scope_of(self, uri: str) -> ScopeRef | None:
        """The readable scope ``uri`` names, or None."""
        return next((ref for ref in self.scopes() if scope_uri(ref) == uri), None)

    async def fact(self, fact_id: str) -> Fact:
        """The fact, if it is in one of the identity's :meth:`scopes` and the store lets the identity read it.

        Raises:
            FactNotFoundError: no such fact, or one the identity may not read (the same error).
        """
        try:
            fact = await self.handle.aget(fact_id)
        except (ValueError, TypeError, MemoryAccessDenied):  # a malformed id: as missing as any other
            raise FactNotFoundError("no such fact") from None
        if fact.scope not in self.scopes():  # another agent's notes, or another group the agent is also in:
            # the tools' searches never show them, so neither does a resource
            raise FactNotFoundError("no such fact")
        return fact

    async def scope_facts(self, scope: ScopeRef) -> list[Fact]:
        """The newest active facts of a readable scope, oldest first, at most :data:`SCOPE_FACTS`."""

        engine = self.handle.engine

        def read() -> list[Fact]:
            engine.access.check_read(self.identity.agent_id, scope)
            if not engine.backend.exists(scope):
                return []
            ids = engine.backend.select_ids(scope, Filters(), 10**9)[-SCOPE_FACTS:]
            return engine.backend.get(scope, ids)

        return await asyncio.to_thread(read)


Resolve = Callable[[ServerRequestContext[Any, Any]], Binding]
"""How the server finds the binding of a request (fixed for stdio, by token for HTTP)."""


class MemoryServer:
    """The MCP server of a store: the lowlevel SDK server (:attr:`server`) and the change-feed bridge.

    Args:
        store: the store.
        resolve: the binding of a request (raises ``MCPError`` for a request without identity).
        name: the server's name, as clients show it.
    """

    def __init__(self, store: SharedMemoryStore, resolve: Resolve, *, name: str = SERVER_NAME) -> None:
        from .. import __version__

        self.store = store
        self.resolve = resolve
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._subscribers: dict[ServerSession, set[str]] = {}  # sessions of 2025 clients and their URIs
        self.server: Server[Any] = Server(
            name,
            version=__version__,
            instructions=DEFAULT_SCAFFOLDING,
            lifespan=self._lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen_handler,
        )

    # ------------------------------------------------------------------ tools
    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        binding = self.resolve(ctx)
        names = [SEARCH] if binding.identity.read_only else list(TOOL_NAMES)
        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=DESCRIPTIONS[name], input_schema=ARGS[name].model_json_schema())
                for name in names
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        binding = self.resolve(ctx)
        if binding.identity.read_only and params.name in WRITE_TOOLS:
            text = READ_ONLY_DENIED
        else:
            call_id = None if ctx.request_id is None else str(ctx.request_id)
            tools = binding.search_tools if params.name == SEARCH else binding.tools
            text = await tools.call(params.name, params.arguments or {}, call_id)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=False)

    # ------------------------------------------------------------------ prompts
    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        description = "How to use the shared memory tools: put it in the agent's system prompt."
        return types.ListPromptsResult(prompts=[types.Prompt(name=PROMPT_NAME, description=description)])

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name != PROMPT_NAME:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}; the prompt is {PROMPT_NAME}")
        text = scaffolding(self.resolve(ctx).identity.read_only)
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        return types.GetPromptResult(description="The shared memory scaffolding", messages=[message])

    # ------------------------------------------------------------------ resources
    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        binding = self.resolve(ctx)
        resources = [
            types.Resource(
                name=str(ref),
                uri=scope_uri(ref),
                description=f"The newest active facts of the {ref.kind} scope {str(ref)!r}, as JSON.",
                mime_type="application/json",
            )
            for ref in binding.scopes()
        ]
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            name="fact",
            uri_template=FACT_URI + "{fact_id}",
            description="One fact you may read, by id, with its provenance and status, as JSON.",
            mime_type="application/json",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        binding = self.resolve(ctx)
        uri = str(params.uri)
        data: Any
        if uri.startswith(FACT_URI):
            try:
                data = _fact_json(await binding.fact(uri[len(FACT_URI) :]))
            except FactNotFoundError:
                raise _not_found(uri) from None
        else:
            scope = binding.scope_of(uri)
            if scope is None:
                raise _not_found(uri)
            try:
                data = [_fact_json(fact) for fact in await binding.scope_facts(scope)]
            except MemoryAccessDenied:  # no longer a member of the group it is bound to
                raise _not_found(uri) from None
        text = json.dumps(data, ensure_ascii=False, default=str)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=text, mime_type="application/json")]
        )

    async def _check_readable(self, binding: Binding, uri: str) -> None:
        """Refuse a subscription to a resource the caller may not read, as a read of it is refused."""
        if uri.startswith(FACT_URI):
            try:
                await binding.fact(uri[len(FACT_URI) :])
            except FactNotFoundError:
                raise _not_found(uri) from None
        elif binding.scope_of(uri) is None:
            raise _not_found(uri)

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        uri = str(params.uri)
        await self._check_readable(self.resolve(ctx), uri)
        self._subscribers.setdefault(ctx.session, set()).add(uri)
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        self._subscribers.get(ctx.session, set()).discard(str(params.uri))
        return types.EmptyResult()

    async def _listen_handler(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        binding = self.resolve(ctx)
        for uri in params.notifications.resource_subscriptions or ():
            await self._check_readable(binding, str(uri))
        return await self._listen(ctx, params)

    # ------------------------------------------------------------------ the change feed
    @contextlib.asynccontextmanager
    async def _lifespan(self, server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        """While the server runs, the store's change feed drives the resource notifications. The embedding
        model starts loading at once, in the background, so the first search does not wait for all of it."""
        threading.Thread(target=self._warm_up, name="shared-memory-warm-up", daemon=True).start()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Change] = asyncio.Queue()
        subscription = await asyncio.to_thread(
            self.store.subscribe, lambda change: loop.call_soon_threadsafe(queue.put_nowait, change)
        )
        pump = asyncio.create_task(self._pump(queue))
        try:
            yield {}
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            await asyncio.to_thread(subscription.stop)
            self._listen.close()

    def _warm_up(self) -> None:
        load = getattr(self.store.embedder, "load", None)
        try:
            if callable(load):
                load()
        except Exception:  # the first embedding call raises it again, as the answer to that call
            logger.debug("the embedding model could not be loaded ahead of the first call", exc_info=True)

    async def _pump(self, queue: asyncio.Queue[Change]) -> None:
        while True:
            change = await queue.get()
            for uri in (scope_uri(change.scope), fact_uri(change.fact_id)):
                await self.notify(uri)

    async def notify(self, uri: str) -> None:
        """Tell every subscriber of ``uri`` that it changed (a subscriber that is gone is dropped).

        Args:
            uri: the resource's URI.
        """
        await self.bus.publish(ResourceUpdated(uri=uri))
        for session, uris in list(self._subscribers.items()):
            if uri in uris:
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # the client went away: its subscriptions go with it
                    self._subscribers.pop(session, None)


def stdio_binding(store: SharedMemoryStore, identity: Identity) -> Resolve:
    """The resolver of a stdio server: one client, the identity chosen at launch.

    Args:
        store: the store.
        identity: who the client acts as.

    Returns:
        A resolver answering the same binding for every request.
    """
    binding = Binding(store, identity)
    return lambda ctx: binding


async def serve_stdio(store: SharedMemoryStore, identity: Identity) -> None:
    """Serve ``identity``'s memory over stdin/stdout until the client closes them.

    Args:
        store: the store.
        identity: who the client acts as.
    """
    from mcp.server.stdio import stdio_server

    memory = MemoryServer(store, stdio_binding(store, identity))
    async with stdio_server() as (read, write):
        await memory.server.run(read, write, memory.server.create_initialization_options())
