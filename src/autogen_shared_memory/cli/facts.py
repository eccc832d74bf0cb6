"""The fact commands: each goes through :class:`~autogen_shared_memory.store.SharedMemoryStore`, so the CLI
gets the access policy, lifecycle and audit trail library callers get, and prints the result (table or JSON)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from ..core.types import Change, Fact, Position, ScopeRef
from ..store import SharedMemoryStore
from .app import (
    _STALE,
    JsonOpt,
    Rows,
    _fact_id,
    _fact_ids,
    _moment,
    _n,
    _out,
    _owner,
    _owners,
    _require_agent,
    _require_group,
    _settings,
    _short,
    _size,
    _when,
    acting,
    command,
    confidence_option,
    emit_json,
    fact_json,
    group_ids,
    json_text,
    terminal_safe,
    ttl_days_option,
    warn,
)


def _unlisted_scope_files(store: SharedMemoryStore, listed: Iterable[ScopeRef]) -> list[str]:
    """Files named like scope files that the store does not list (not SQLite, someone else's database)."""
    return store.backend.stray_locations(list(listed))


@command("scopes")
def scopes_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every scope with its fact counts, size on disk, embedding model and last write."""
    settings = _settings(ctx)
    store = settings.open_store()
    stats = store.stats()
    if not settings.dsn:
        for path in _unlisted_scope_files(store, [s.scope for s in stats]):
            warn(f"{path} is not a memory store file; it is skipped (run `autogen-shared-memory doctor`)")
    if as_json:
        emit_json(
            [
                {
                    "scope": str(s.scope),
                    "kind": s.scope.kind,
                    "owner": s.scope.owner,
                    "file": store.backend.scope_location(s.scope),
                    "counts": s.counts,
                    "size_bytes": s.size_bytes,
                    "embedding_model": s.embedding_model,
                    "embedding_dim": s.embedding_dim,
                    "last_write": s.last_write,
                    "schema_version": s.schema_version,
                }
                for s in stats
            ]
        )
        return
    if not stats:
        _out().print(f"no scopes yet in {settings.where}")
        return
    table = Rows(
        ("scope", "active", *_STALE, "size", "model", "last write"),
        wide=("model",),
        right=("active", *_STALE, "size"),
        title=f"{_n(len(stats), 'scope')} in {settings.where}",
    )
    for s in stats:
        model = s.embedding_model or "-"
        table.add(
            str(s.scope),
            *(str(s.counts.get(k, 0)) for k in ("active", *_STALE)),
            _size(s.size_bytes),
            model,
            _when(s.last_write),
        )
    table.print()


# ------------------------------------------------------------------------------------------ search
@command("search")
def search_cmd(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for (words or a question).")],
    scope: Annotated[
        Literal["all", "agent", "group", "global"],
        typer.Option(
            help="all = every scope of the store; with --agent or --group, the agent's scope (with --agent), the "
            "group (with --group) and global."
        ),
    ] = "all",
    agent: Annotated[
        str | None,
        typer.Option(
            help="Search as this agent (the access policy applies); default: trusted operator.",
            callback=_owner("agent id"),
        ),
    ] = None,
    group: Annotated[str | None, typer.Option(help="The group scope to include.", callback=_owner("group id"))] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=1000, help="How many hits.")] = 5,
    tag: Annotated[list[str] | None, typer.Option(metavar="TAG", help="Only facts with this tag (repeatable).")] = None,
    include_inactive: Annotated[
        bool, typer.Option("--include-inactive", help="Also forgotten, superseded and expired facts.")
    ] = False,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="WHEN",
            callback=_moment,
            help="Recall what was believed then (ISO date or time, local unless it has an offset): facts "
            "written by then, not yet superseded, forgotten or expired.",
        ),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Show lexical rank, semantic rank, cosine and fused score.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Hybrid search (BM25 keywords + embeddings, fused by RRF) of every scope, or of what an agent or a group
    sees; hits as a table with the scope of each."""
    if scope == "agent" and agent is None:
        raise typer.BadParameter("--scope agent needs --agent ID", param_hint="--scope")
    if scope == "group" and group is None:
        raise typer.BadParameter("--scope group needs --group ID", param_hint="--scope")
    settings = _settings(ctx)
    store = settings.open_store()
    if group is not None:  # a mistyped id is an error, not "no hits" (the memory is not empty)
        _require_group(store, group)
    if agent is not None and scope == "agent":
        _require_agent(store, agent)
    searched = _searched(store, scope, agent, group)
    if not settings.dsn and scope == "all" and agent is None and group is None:
        for path in _unlisted_scope_files(store, searched):
            warn(f"{path} is not a memory store file; it is not searched (run `autogen-shared-memory doctor`)")
    hits = acting(store, agent, group).search(
        query,
        scope,
        top_k=top_k,
        tags=tag,
        include_inactive=include_inactive,
        as_of=None if as_of is None else datetime.fromisoformat(as_of),
        scopes=searched,
    )
    if as_json:
        emit_json(
            [
                {
                    "rank": n,
                    "score": h.score,
                    "lexical_rank": h.lexical_rank,
                    "semantic_rank": h.semantic_rank,
                    "cosine": h.cosine,
                    "fact": fact_json(h.fact),
                }
                for n, h in enumerate(hits, start=1)
            ]
        )
        return
    if not hits:
        names = ", ".join(str(ref) for ref in searched[:20]) + (
            f" and {len(searched) - 20} more" if len(searched) > 20 else ""
        )
        _out().print(f"no hits in {_n(len(searched), 'scope')}: {names}", soft_wrap=True)
        return
    numbers = ("#", *(("lex", "sem", "cosine") if explain else ()), "score")
    table = Rows(("#", "id", "scope", *numbers[1:], "by", "content"), wide=("content",), right=numbers)
    for n, h in enumerate(hits, start=1):
        why = (
            [
                "-" if h.lexical_rank is None else str(h.lexical_rank),
                "-" if h.semantic_rank is None else str(h.semantic_rank),
                "-" if h.cosine is None else f"{h.cosine:.3f}",
            ]
            if explain
            else []
        )
        status = "" if h.fact.status == "active" else f"[{h.fact.status}] "
        if as_of is not None and status:  # it was believed then: what happened to it since is a later fact
            status = f"[{h.fact.status} since] "
        table.add(
            str(n),
            h.id,
            str(h.fact.scope),
            *why,
            f"{h.score:.4f}",
            h.fact.created_by,
            status + h.content,
        )
    table.print()


def _searched(store: SharedMemoryStore, scope: str, agent: str | None, group: str | None) -> list[ScopeRef]:
    """The scopes a search reads: every scope of the store for the operator's plain search (global always,
    so a global file that cannot be read is an error, never an empty answer), else what the agent or group
    sees (the agent's scope, the group, global) or the one scope named."""
    if scope == "all" and agent is None and group is None:
        return list(dict.fromkeys([*store.backend.scopes(), ScopeRef("global")]))
    if scope == "agent":
        return [ScopeRef("agent", str(agent))]
    if scope == "group":
        return [ScopeRef("group", str(group))]
    if scope == "global":
        return [ScopeRef("global")]
    mine = [ScopeRef("agent", agent)] if agent is not None else []
    return [*mine, *([ScopeRef("group", group)] if group is not None else []), ScopeRef("global")]


# ----------------------------------------------------------------------------------- show, history
FactIdArg = Annotated[str, typer.Argument(help="A fact id (a_…, g_… or w_…).", callback=_fact_id)]


def _fact_rows(fact: Fact) -> list[tuple[str, str]]:
    rows = [
        ("id", fact.id),
        ("scope", str(fact.scope)),
        ("status", fact.status),
        ("content", fact.content),
        ("created by", fact.created_by),
        ("created at", _when(fact.created_at)),
        ("confidence", f"{fact.confidence:g}"),
        ("stated by", ", ".join(fact.stated_by) + (f" ({fact.reinforcement} times)" if fact.reinforcement > 1 else "")),
        ("tags", ", ".join(fact.tags) or "-"),
        ("category", fact.category or "-"),
        ("metadata", json.dumps(fact.metadata, ensure_ascii=False) if fact.metadata else "-"),
        ("session", fact.session_id or "-"),
        ("expires at", _when(fact.expires_at)),
        ("supersedes", ", ".join(fact.supersedes) or "-"),
        ("superseded by", fact.superseded_by or "-"),
        ("valid to", _when(fact.valid_to)),
    ]
    if fact.tombstone_at is not None:
        rows.append(
            (
                "tombstone",
                f"{fact.tombstone_by} at {_when(fact.tombstone_at)}"
                + (f": {fact.tombstone_reason}" if fact.tombstone_reason else ""),
            )
        )
    rows += [("version", str(fact.version)), ("updated at", _when(fact.updated_at))]
    return rows


@command("show")
def show_cmd(ctx: typer.Context, fact_id: FactIdArg, as_json: JsonOpt = False) -> None:
    """One fact with its provenance and lifecycle state (any status)."""
    fact = _settings(ctx).open_store().operator.get(fact_id)
    if as_json:
        emit_json(fact_json(fact))
        return
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in _fact_rows(fact):
        table.add_row(key, value)
    _out().print(table)


@command("history")
def history_cmd(ctx: typer.Context, fact_id: FactIdArg, as_json: JsonOpt = False) -> None:
    """The audit trail of a fact and of its whole supersede chain."""
    store = _settings(ctx).open_store()
    events = store.operator.history(fact_id)
    chain = store.operator.supersede_chain(fact_id)
    if as_json:
        emit_json(
            {
                "fact_id": fact_id,
                "chain": [
                    {"id": f, "purged": True} if isinstance(f, str) else {**fact_json(f), "purged": False}
                    for f in chain
                ],
                "events": [dataclasses.asdict(e) for e in events],
            }
        )
        return
    out = _out()
    if len(chain) > 1:
        links = Rows(("", "id", "status", "created", "by", "content"), wide=("content",), title="supersede chain")
        for f in chain:
            if isinstance(f, str):
                links.add("", f, "purged", "-", "-", "-")
            else:
                marker = "→" if f.id == fact_id else ""
                links.add(marker, f.id, f.status, _when(f.created_at), f.created_by, _short(f.content))
        links.print(out)
    title = f"audit trail of {fact_id}" + (" and its chain" if len(chain) > 1 else "")
    trail = Rows(("at", "fact", "event", "actor", "detail"), wide=("detail",), title=title)
    for e in events:
        detail = ", ".join(f"{k}={v}" for k, v in e.detail.items() if v is not None) or "-"
        trail.add(_when(e.at), e.fact_id, e.event, e.actor, detail)
    trail.print(out)


# ------------------------------------------------------------------------------------------ watch
def _position(value: str | None) -> str | None:
    if value is not None and value != "start":
        try:
            Position.parse(value)
        except ValueError as exc:
            raise typer.BadParameter(f"{exc}; pass a position printed by watch, or 'start'") from None
    return value


def change_json(change: Change) -> dict[str, Any]:
    return {
        "scope": str(change.scope),
        "event": change.event,
        "fact_id": change.fact_id,
        "actor": change.actor,
        "at": change.at,
        "seq": change.seq,
        "detail": change.detail,
        "position": str(change.position),
    }


@command("watch")
def watch_cmd(
    ctx: typer.Context,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="POSITION",
            help="Start after this position (watch prints where it stopped), or 'start' for the beginning. "
            "Default: now.",
            callback=_position,
        ),
    ] = None,
    count: Annotated[int | None, typer.Option(min=1, help="Stop after this many changes.")] = None,
    poll: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=3600.0,
            help="Seconds between looks at SQLite files (default 0.2); with --dsn, a safety re-read.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Follow changes to facts live, made by any process or host, until Ctrl-C (or --count changes)."""
    store = _settings(ctx).open_store()
    done = threading.Event()
    shown: list[Change] = []

    def show(change: Change) -> None:
        if done.is_set():
            return  # past --count: not shown, so not part of the position printed at the end
        if as_json:
            typer.echo(json_text(change_json(change)))
        else:
            detail = ", ".join(f"{k}={v}" for k, v in change.detail.items() if v is not None and k != "session_id")
            typer.echo(
                terminal_safe(
                    f"{_when(change.at)}  {change.scope}  {change.event:<10}  {change.fact_id}  by {change.actor}"
                    + (f"  ({detail})" if detail else ""),
                    lines=False,  # one line per change: an agent's line break must not forge another
                )
            )
        shown.append(change)
        if count is not None and len(shown) >= count:
            done.set()

    subscription = store.subscribe(
        show, since=None if since == "start" else "now" if since is None else since, poll_interval=poll
    )
    start = subscription.position
    typer.echo(f"watching {_settings(ctx).where} from position {start} (Ctrl-C stops)", err=True)
    previous: Any = None
    with contextlib.suppress(ValueError):  # SIGTERM stops it like Ctrl-C (only the main thread may set handlers)
        previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        subscription.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    end = shown[-1].position if shown else start
    typer.echo(f"stopped after {_n(len(shown), 'change')}; resume with --since {end}", err=True)


# ------------------------------------------------------------------------------------------ writes
@command("remember")
def remember_cmd(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The fact.")],
    scope: Annotated[Literal["agent", "group", "global"], typer.Option(help="Where the fact goes.")],
    as_: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Write as this agent (the access policy applies); default: the operator.",
            callback=_owner("agent id"),
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(help="The group (with --scope group): one the store has.", callback=_owner("group id")),
    ] = None,
    create_group: Annotated[
        bool,
        typer.Option(
            "--create-group", help="Start the group if the store has none of that id (else a new id is refused)."
        ),
    ] = False,
    tag: Annotated[list[str] | None, typer.Option(metavar="TAG", help="A tag (repeatable).")] = None,
    category: Annotated[str | None, typer.Option(help="A category, e.g. preference.")] = None,
    ttl_days: Annotated[
        float | None, typer.Option("--ttl-days", help="Expire after this many days.", callback=ttl_days_option)
    ] = None,
    confidence: Annotated[float, typer.Option(help="0..1.", callback=confidence_option)] = 1.0,
    supersedes: Annotated[
        list[str] | None,
        typer.Option(
            "--supersedes",
            metavar="ID",
            help="A fact of the same scope this one corrects (repeatable).",
            callback=_fact_ids,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a fact (one that says the same thing as an existing fact reinforces it instead)."""
    if scope == "agent" and as_ is None:
        raise typer.BadParameter("--scope agent writes an agent's own scope: give --as AGENT", param_hint="--scope")
    if scope == "group" and group is None:
        raise typer.BadParameter("--scope group needs --group ID", param_hint="--scope")
    if create_group and scope != "group":
        raise typer.BadParameter("--create-group goes with --scope group", param_hint="--create-group")
    store = _settings(ctx).open_store()
    if scope == "group" and group is not None and not create_group:  # a mistyped id never starts a stray group
        _require_group(
            store,
            group,
            f"; to start a new group, pass --create-group (or add its members first: "
            f"autogen-shared-memory members {group} --add AGENT)",
        )
    receipt = acting(store, as_, group).remember(
        text,
        scope,
        confidence=confidence,
        ttl_days=ttl_days,
        tags=tag,
        category=category,
        supersedes=supersedes,
    )
    if as_json:
        emit_json(dataclasses.asdict(receipt) | {"scope": str(receipt.scope)})
        return
    line = f"{receipt.status} {receipt.id} in {receipt.scope}"
    if receipt.status == "reinforced":
        line += " (an existing fact" + (
            f", similarity {receipt.similarity:.3f})" if receipt.similarity is not None else ", same text)"
        )
    if receipt.superseded:
        line += f"; superseded {', '.join(receipt.superseded)}"
    for fact in (store.operator.get(fid) for fid in receipt.similar):
        line += f"\n  similar to {fact.id}: {_short(fact.content, 100)} (if this replaces it: --supersedes {fact.id})"
    _out().print(line)


@command("forget")
def forget_cmd(
    ctx: typer.Context,
    fact_id: FactIdArg,
    reason: Annotated[str, typer.Option(help="Why (kept in the tombstone and the audit trail).")],
    as_: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Forget as this agent (the access policy applies); default: the operator.",
            callback=_owner("agent id"),
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Tombstone a fact: search stops returning it; its row and audit trail stay until purge."""
    store = _settings(ctx).open_store()
    before = store.operator.get(fact_id)
    closed = before.status in ("forgotten", "superseded")
    if closed:
        fact = before
        message = f"{fact_id} was already {before.status} (by {before.tombstone_by} at {_when(before.tombstone_at)})"
    else:
        fact = acting(store, as_).forget(fact_id, reason)
        message = f"forgot {fact_id} in {fact.scope}: {_short(fact.content, 80)}"
    if as_json:
        emit_json(fact_json(fact) | {"changed": not closed})
        return
    _out().print(message)


@command("pending")
def pending_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Global facts held for review (written by agents that are not global writers); approve or forget them."""
    facts = _settings(ctx).open_store().operator.pending()
    if as_json:
        emit_json([fact_json(f) for f in facts])
        return
    if not facts:
        _out().print("no facts held for review")
        return
    table = Rows(("id", "by", "created", "content"), wide=("content",))
    for fact in facts:
        table.add(fact.id, fact.created_by, _when(fact.created_at), fact.content)
    table.print()


@command("approve")
def approve_cmd(
    ctx: typer.Context,
    fact_id: FactIdArg,
    as_: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Approve as this agent (a global writer); default: the operator.",
            callback=_owner("agent id"),
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Release a fact held for review into recall (if a live fact says the same, that one is reinforced)."""
    store = _settings(ctx).open_store()
    before = store.operator.get(fact_id)
    fact = acting(store, as_).approve(fact_id)
    if as_json:
        emit_json(fact_json(fact) | {"changed": before.status == "pending"})
        return
    if before.status == "active":  # the library's no-op: say so, as forget does for a closed fact
        _out().print(f"{fact_id} is not held for review (it is active): nothing to approve")
        return
    if fact.id != fact_id:  # said meanwhile by a writer: the held fact joined that one
        _out().print(f"approved {fact_id} as a restatement of {fact.id} in {fact.scope}, which it reinforced")
        return
    _out().print(f"approved {fact.id} in {fact.scope}: {_short(fact.content, 80)}")


@command("groups")
def groups_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every group with its members and fact counts."""
    settings = _settings(ctx)
    store = settings.open_store()
    groups = [
        (gid, sorted(store.operator.members(gid)), store.backend.stats(ScopeRef("group", gid)))
        for gid in group_ids(store)
    ]
    if as_json:
        emit_json(
            [
                {"group": gid, "members": members, "counts": s.counts, "last_write": s.last_write}
                for gid, members, s in groups
            ]
        )
        return
    if not groups:
        _out().print(f"no groups yet in {settings.where}")
        return
    table = Rows(
        ("group", "members", "active", *_STALE, "last write"),
        wide=("members",),
        right=("active", *_STALE),
        title=f"{_n(len(groups), 'group')} in {settings.where}",
    )
    for gid, members, s in groups:
        table.add(
            gid,
            ", ".join(members) or "-",
            *(str(s.counts.get(k, 0)) for k in ("active", *_STALE)),
            _when(s.last_write),
        )
    table.print()


@command("members")
def members_cmd(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="The group id.", callback=_owner("group id"))],
    add: Annotated[
        list[str] | None,
        typer.Option(
            "--add",
            metavar="AGENT",
            help="Let this agent read and write the group (repeatable).",
            callback=_owners("agent id"),
        ),
    ] = None,
    remove: Annotated[
        list[str] | None,
        typer.Option(
            "--remove",
            metavar="AGENT",
            help="Take this agent out of the group (repeatable).",
            callback=_owners("agent id"),
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """A group's members, the agents that may read and write its scope (--add / --remove change them)."""
    store = _settings(ctx).open_store()
    if not add:  # adding members is how a group starts; reading or removing needs one that exists
        _require_group(store, group)
    for agent in add or ():
        store.operator.add_member(group, agent)
    for agent in remove or ():
        store.operator.remove_member(group, agent)
    members = sorted(store.operator.members(group))
    if as_json:
        emit_json({"group": group, "members": members})
        return
    _out().print(f"group {group}: {', '.join(members) if members else 'no members'}")
