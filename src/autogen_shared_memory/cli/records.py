"""The record commands (agent directory, conversations, tool calls, tasks, case log): read-only views, as
trusted code, of what agents recorded, so an operator can look without writing Python."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Literal

import typer

from .app import (
    JsonOpt,
    Rows,
    _out,
    _owner,
    _require_agent,
    _require_group,
    _settings,
    _short,
    _task_status,
    _when,
    command,
    emit_json,
)

AgentArg = Annotated[str, typer.Argument(help="The agent id.", callback=_owner("agent id"))]


@command("agents")
def agents_cmd(
    ctx: typer.Context,
    status: Annotated[
        Literal["active", "idle", "unavailable"] | None, typer.Option(help="Only agents with this status.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The agent directory (global.db): who is there, what they can do, when they were last active."""
    store = _settings(ctx).open_store()
    agents = store.for_agent(store.policy.operator_id).list_agents(status)
    if as_json:
        emit_json([dataclasses.asdict(a) for a in agents])
        return
    if not agents:
        _out().print("no agents in the directory")
        return
    table = Rows(("agent", "name", "status", "capabilities", "model", "tools", "last active"), wide=("capabilities",))
    for a in agents:
        table.add(
            a.agent_id,
            a.display_name or "-",
            a.status or "-",
            ", ".join(a.capabilities) or "-",
            a.model or "-",
            ", ".join(a.tools) or "-",
            _when(a.last_active_at),
        )
    table.print()


@command("conversations")
def conversations_cmd(
    ctx: typer.Context,
    agent: AgentArg,
    search: Annotated[str | None, typer.Option(help="Full-text search (best match first).")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many messages.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """An agent's recorded messages, newest first (or ranked by --search)."""
    store = _settings(ctx).open_store()
    _require_agent(store, agent)
    records = store.operator.conversation(agent, session_id=session, query=search, limit=limit)
    if as_json:
        emit_json([dataclasses.asdict(r) for r in records])
        return
    if not records:
        if search is not None:
            _out().print(f"no messages of {agent} match {search!r}")
        elif session is not None:
            _out().print(f"no messages of {agent} in session {session!r}")
        else:
            _out().print(f"no messages recorded for {agent}")
        return
    table = Rows(("time", "role", "source", "session", "content"), wide=("content",))
    for r in records:
        table.add(_when(r.created_at), r.role, r.source or "-", (r.session_id or "-")[:12], r.content)
    table.print()


@command("tools")
def tools_cmd(
    ctx: typer.Context,
    agent: AgentArg,
    tool: Annotated[str | None, typer.Option(help="Only calls of this tool.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many calls.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """An agent's recorded tool calls, newest first."""
    store = _settings(ctx).open_store()
    _require_agent(store, agent)
    calls = store.operator.tool_history(agent, tool_name=tool, limit=limit)
    if as_json:
        emit_json([dataclasses.asdict(c) for c in calls])
        return
    if not calls:
        _out().print(f"no tool calls recorded for {agent}")
        return
    table = Rows(("time", "tool", "ok", "ms", "args", "result / error"), wide=("result / error",), right=("ms",))
    for c in calls:
        table.add(
            _when(c.created_at),
            c.tool_name,
            "yes" if c.success else "NO",
            "-" if c.duration_ms is None else f"{c.duration_ms:.0f}",
            _short(json.dumps(c.tool_args, ensure_ascii=False), 80),
            _short(c.error or c.result or "-", 120),
        )
    table.print()


@command("tasks")
def tasks_cmd(
    ctx: typer.Context,
    group: Annotated[
        str | None, typer.Option(help="Only this group's tasks (default: every scope).", callback=_owner("group id"))
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="pending, assigned, in_progress, ...", callback=_task_status)
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="Only tasks assigned to this agent.", callback=_owner("agent id"))
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Tasks: a group's (in its file) or every scope's, oldest first."""
    store = _settings(ctx).open_store()
    if group is not None:
        _require_group(store, group)
    tasks = store.operator.tasks(group, status=status, assigned_to=agent)
    if as_json:
        emit_json([dataclasses.asdict(t) for t in tasks])
        return
    if not tasks:
        _out().print("no tasks")
        return
    table = Rows(("task", "scope", "assignee", "status", "title", "by", "updated"), wide=("title",))
    for t in tasks:
        table.add(t.id, t.scope, t.agent_id, t.status, t.title, t.created_by, _when(t.updated_at))
    table.print()


@command("caselog")
def caselog_cmd(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="The group id.", callback=_owner("group id"))],
    after: Annotated[str | None, typer.Option(help="Only entries after this entry id (a checkpoint).")] = None,
    current: Annotated[bool, typer.Option("--current", help="Fold superseded entries away.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """A group's append-only case log, oldest first."""
    store = _settings(ctx).open_store()
    _require_group(store, group)
    entries = store.operator.case_log(group).entries(after, current=current)
    if as_json:
        emit_json([dataclasses.asdict(e) for e in entries])
        return
    if not entries:
        _out().print(f"no case log entries in {group}" + (f" after {after}" if after else ""))
        return
    table = Rows(("v", "id", "time", "author", "summary", "supersedes"), wide=("summary",), right=("v",))
    for e in entries:
        table.add(str(e.version), e.id, _when(e.created_at), e.author, e.summary, ", ".join(e.supersedes) or "-")
    table.print()
