"""The whole-store commands (export, import, purge, reembed): the operator's maintenance, each copying or
changing many facts through the library and reporting the totals (purge and reembed first with ``--dry-run``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..core.types import ScopeRef
from ..store import SharedMemoryStore
from ..transfer import ImportFormatError, export_scopes, max_line_chars, read_lines
from .app import (
    _STALE,
    JsonOpt,
    Rows,
    _CliError,
    _n,
    _out,
    _owner,
    _progress,
    _require_agent,
    _scopes,
    _settings,
    command,
    emit_json,
    parse_scope,
    warn,
)
from .facts import _unlisted_scope_files


@command("export")
def export_cmd(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="The JSON Lines file to write ('-' for stdout).", metavar="FILE.jsonl")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SCOPE", help="Only this scope: global, group:ID or agent:ID (repeatable).", callback=_scopes
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            help="One agent's memory and records (its file and directory entry).", callback=_owner("agent id")
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE if it exists.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the store (or some scopes, or one agent) as lossless JSON Lines."""
    if scope and agent is not None:
        raise typer.BadParameter("give --scope or --agent, not both", param_hint="--scope / --agent")
    settings = _settings(ctx)
    store = settings.open_store()
    if agent is not None:
        _require_agent(store, agent)
    named = list(dict.fromkeys(parse_scope(s) for s in scope)) if scope else None
    try:
        targets = export_scopes(store.engine, agent_id=agent, scopes=named)
    except ValueError as exc:
        raise _CliError(str(exc)) from exc
    if named is None and agent is None and not settings.dsn:  # the whole store: say what it leaves out
        for stray in _unlisted_scope_files(store, targets):
            warn(f"{stray} is not a memory store file; it is not exported (run `autogen-shared-memory doctor`)")
    to_stdout = file == "-"
    path = Path(file)
    if not to_stdout and path.exists() and not force:
        raise _CliError(f"{path} exists (pass --force to overwrite it)")
    with _progress("exporting", None, enabled=not as_json and not to_stdout) as advance:
        rows = store.export(sys.stdout if to_stdout else path, agent=agent, scopes=named, progress=advance)
    summary = {"file": file, "rows": rows, "scopes": [str(r) for r in targets]}
    if as_json and not to_stdout:
        emit_json(summary)
    elif not to_stdout:
        _out().print(f"exported {_n(rows, 'row')} from {_n(len(targets), 'scope')} to {path}")


def _import_model_conflicts(store: SharedMemoryStore, path: Path) -> list[str]:
    """Scopes whose recorded embedding model (or dimension) differs from the one in the file. The library's
    import refuses them too, before writing anything; this check stays for its message, which names the
    value the scope holds."""
    conflicts: list[str] = []
    with open(path, encoding="utf-8", newline="\n") as fh:
        for _, text in read_lines(fh, max_line_chars(store.engine)):
            if '"meta"' not in text or "embedding_" not in text:
                continue
            try:
                item = json.loads(text)
                ref = ScopeRef(item["scope"]["kind"], item["scope"].get("owner", ""))
                key, value = item["row"]["key"], item["row"]["value"]
            except (ValueError, TypeError, KeyError, RecursionError):
                continue  # malformed lines are the import's to report
            if item.get("table") != "meta" or key not in ("embedding_model", "embedding_dim"):
                continue
            current = store.backend.get_meta(ref, key) if store.backend.exists(ref) else None
            if current is not None and current != value:
                conflicts.append(f"{ref} holds {key} {current!r}, the file has {value!r}")
    return conflicts


@command("import")
def import_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="A JSON Lines export.", exists=True, dir_okay=False, metavar="FILE.jsonl")
    ],
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip malformed lines (default: a bad line imports nothing).")
    ] = False,
    with_policy: Annotated[
        bool,
        typer.Option(
            "--with-policy",
            help="Also apply the group memberships and agent privacy the file sets (default: such a file is refused).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Import an export; every line is checked before anything is written, existing rows are kept."""
    if not file.is_file():  # a device (/dev/zero never ends), a pipe (blocks), a socket: not an export file
        raise _CliError(f"{file} is not a regular file (a device, a pipe or a socket): import reads an export file")
    store = _settings(ctx).open_store()
    try:
        conflicts = _import_model_conflicts(store, file)
        with open(file, encoding="utf-8", newline="\n") as fh:
            total = sum(
                1
                for _, line in read_lines(fh, max_line_chars(store.engine))
                if line.strip() and not line.startswith(('{"type": "header"', '{"type": "end"'))
            )
    except ImportFormatError:  # a line too long: the import says so, with its number
        conflicts, total = [], 0
    if conflicts:
        raise _CliError(f"nothing imported: {conflicts[0]} (reembed one side first)")
    with _progress("importing", total, enabled=not as_json) as advance:
        report = store.import_(file, skip_bad=skip_bad, policy=with_policy, progress=advance)
    for bad in report.skipped_bad:
        warn(f"skipped {bad}")
    if as_json:
        emit_json(
            {
                "file": str(file),
                "lines": report.lines,
                "inserted": report.inserted,
                "closed": report.closed,
                "updated": report.updated,
                "purged": report.purged,
                "skipped_bad": report.skipped_bad,
                "scopes": sorted(str(r) for r in report.scopes),
                "changes": report.changes,
            }
        )
        return
    line = f"imported {_n(report.inserted, 'new row')} into {_n(len(report.scopes), 'scope')} from {file}"
    if report.closed:
        line += f"; closed {_n(report.closed, 'fact')} the export had forgotten or superseded"
    if report.updated:
        line += f"; updated {_n(report.updated, 'row')} the export had added to"
    if report.purged:
        line += f"; left out {_n(report.purged, 'fact')} this store had purged"
    skipped = f", {_n(len(report.skipped_bad), 'bad line')} skipped" if report.skipped_bad else ""
    line += f" ({_n(report.lines, 'line')}{skipped})"
    out = _out()
    out.print(line)
    for change in report.changes:  # what changed of what was here: facts' status and authors, policy
        out.print(f"  changed {change}")


# -------------------------------------------------------------------------------- purge, reembed
@command("purge")
def purge_cmd(
    ctx: typer.Context,
    older_than: Annotated[
        float,
        typer.Option("--older-than", min=0.0, help="Only facts forgotten / superseded / expired this many days ago."),
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Physically delete forgotten, superseded and expired facts (their audit trail keeps a 'purged' event)."""
    store = _settings(ctx).open_store()
    plan = store.operator.purge_plan(older_than)
    purged: dict[ScopeRef, int] = {}
    if not dry_run:
        for ref, counts in plan.items():
            if sum(counts.values()):
                purged[ref] = store.operator.purge(older_than, scopes=[ref])
    due = {ref: counts for ref, counts in plan.items() if sum(counts.values())}
    total = sum(sum(c.values()) for c in due.values())
    done = sum(purged.values())
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "older_than_days": older_than,
                "scopes": {
                    str(ref): {**counts, "total": sum(counts.values()), "purged": purged.get(ref, 0)}
                    for ref, counts in due.items()
                },
                "total": total,
                "purged": done,
            }
        )
        return
    out = _out()
    if due:
        table = Rows(("scope", *_STALE, "total"), wide=("scope",), right=(*_STALE, "total"))
        for ref, counts in due.items():
            table.add(str(ref), *(str(counts[k]) for k in _STALE), str(sum(counts.values())))
        table.print(out)
    if dry_run:
        out.print(f"dry run: {total} facts would be purged (older than {older_than:g} days); nothing was deleted")
    else:
        out.print(f"purged {done} facts older than {older_than:g} days")


@command("reembed")
def reembed_cmd(
    ctx: typer.Context,
    model: Annotated[
        Path | None,
        typer.Option(
            help="Re-embed with this sentence-transformers folder (default: the configured model).",
            exists=True,
            file_okay=False,
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be re-embedded; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Re-embed every fact of every scope with the configured (or given) model and record it."""
    store = _settings(ctx).open_store(model_dir=model)
    target = store.model
    stats = store.stats()
    total = sum(sum(s.counts.values()) for s in stats)
    plan = [
        {"scope": str(s.scope), "facts": sum(s.counts.values()), "from": s.embedding_model, "to": target.model_id}
        for s in stats
    ]
    done = 0
    if not dry_run and stats:
        with _progress(f"re-embedding with {target.model_id}", total, enabled=not as_json) as advance:
            done = store.operator.reembed(progress=advance)
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "model": target.model_id,
                "dimension": target.dimension,
                "scopes": plan,
                "facts": total,
                "reembedded": done,
            }
        )
        return
    out = _out()
    if not stats:
        out.print("nothing to re-embed: the store has no scopes")
        return
    table = Rows(("scope", "facts", "recorded model", "new model"), wide=("scope",), right=("facts",))
    for row in plan:
        table.add(str(row["scope"]), str(row["facts"]), str(row["from"] or "-"), str(row["to"]))
    table.print(out)
    if dry_run:
        out.print(f"dry run: {total} facts in {len(stats)} scopes would be re-embedded with {target.model_id}")
    else:
        out.print(f"re-embedded {done} facts in {len(stats)} scopes with {target.model_id} ({target.dimension}-d)")
