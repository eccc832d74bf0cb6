"""What every command shares: the Typer app and its global options, opening the store, the output and
error conventions. Command modules import from here; this module imports none of them.

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
import importlib.util
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, ParamSpec, TypeVar, cast

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption

from ..backends import open_backend
from ..backends.base import Backend
from ..core.capsule import escape
from ..core.types import (
    SCOPE_KINDS,
    EmbeddingModelMismatchError,
    Fact,
    MemoryAccessDenied,
    ScopeRef,
    SharedMemoryError,
    expiry_from_ttl,
    kind_of_fact_id,
    validate_confidence,
    validate_owner_id,
    validate_schema_name,
)
from ..embedding import Embedder, SentenceTransformerEmbedder
from ..errors import NotAStoreError
from ..handles import MemoryHandle
from ..onnx_embedding import OnnxEmbedder
from ..settings import WritePolicy
from ..store import ENV_DSN, ENV_ROOT, SharedMemoryStore, default_root
from ..views.agents import TASK_STATUSES, agent_known

P = ParamSpec("P")
T = TypeVar("T")
V = TypeVar("V")

ENV_OPERATOR = "AUTOGEN_SHARED_MEMORY_OPERATOR"
ENV_GLOBAL_WRITERS = "AUTOGEN_SHARED_MEMORY_GLOBAL_WRITERS"
ENV_TEST_EMBEDDER = "AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER"  # "hash": HashEmbedder, for tests only

EXIT_FAILED = 1  # the operation failed (usage errors exit with 2, as Click does)
_STALE = ("forgotten", "superseded", "expired")


class _CliError(Exception):
    """An operation failed for a reason the user can act on: one line on stderr, exit code 1.

    Private to the CLI package, and not a :class:`~autogen_shared_memory.SharedMemoryError`: only the CLI's
    commands raise it and its error handler always catches it, so no library caller ever sees one."""


# ------------------------------------------------------------------------------------------- settings
def make_backend(dsn: str, schema: str | None = None, *, create: bool = True) -> Backend:
    """The storage backend behind ``--dsn``: the PostgreSQL backend, when this installation has it. Without
    ``create``, a schema that does not exist is an error (a mistyped ``--pg-schema`` never makes a new,
    empty tenant), as a missing ``--root`` directory is."""
    try:
        options = {} if schema is None else {"schema": schema}
        backend = open_backend(dsn, kind="postgresql", create=create, **options)
    except ModuleNotFoundError as exc:
        if exc.name in ("autogen_shared_memory.backends.postgres", "autogen_shared_memory.backends"):
            raise _CliError(
                "the PostgreSQL backend is not available in this version of autogen-shared-memory; "
                "use --root DIR (SQLite files) instead of --dsn"
            ) from exc
        raise _CliError(
            f"the PostgreSQL backend needs {exc.name!r}: pip install 'autogen-shared-memory[postgres]'"
        ) from exc
    except NotAStoreError as exc:
        raise _CliError(f"{exc} (to make one, pass --create before the command)") from exc
    except (SharedMemoryError, ValueError):
        raise  # its messages name the server without the password
    except Exception as exc:  # a driver error: report it, never the DSN (it may hold a password)
        raise _CliError(f"cannot open the PostgreSQL store: {type(exc).__name__}: {exc}") from exc
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
    dsn_from: str = "--dsn"  # where the DSN came from: --dsn or $AUTOGEN_SHARED_MEMORY_DSN
    stores: list[SharedMemoryStore] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)  # directories --create made, deepest first

    @property
    def where(self) -> str:
        return f"the PostgreSQL store ({self.dsn_from})" if self.dsn else str(self.root)

    def embedder(self, model_dir: Path | None = None) -> Embedder:
        chosen = model_dir or self.model_dir
        if chosen is not None:
            # sentence-transformers runs any architecture; without it (the users' install has no torch) a
            # BERT folder runs on ONNX Runtime, with the same vectors and the same model id (the folder name).
            if importlib.util.find_spec("sentence_transformers") is not None:
                return SentenceTransformerEmbedder(chosen)
            return OnnxEmbedder(chosen)
        test = os.environ.get(ENV_TEST_EMBEDDER)
        if test:
            if test != "hash":
                raise _CliError(f"{ENV_TEST_EMBEDDER} takes 'hash' (for tests only), got {test!r}")
            from ..testing import HashEmbedder

            return HashEmbedder()
        return OnnxEmbedder()

    def check_root(self) -> None:
        """The store directory must exist (``--create`` makes it): a typo never creates a stray store."""
        if self.root.exists() and not self.root.is_dir():
            raise _CliError(
                f"{self.root} is a file, not a memory store directory (--root takes the directory holding global.db)"
            )
        if not self.root.exists():
            if not self.create:
                raise _CliError(f"no memory store at {self.root} (to make one, pass --create before the command)")
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
            policy = WritePolicy(global_writers=self.global_writers, operator_id=self.operator)
            store = SharedMemoryStore(
                make_backend(self.dsn, self.pg_schema, create=self.create), embedder=embedder, policy=policy
            )
        else:
            self.check_root()
            policy = WritePolicy(global_writers=self.global_writers, operator_id=self.operator)
            store = SharedMemoryStore(self.root, embedder=embedder, policy=policy)
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
def terminal_safe(text: str, *, lines: bool = True) -> str:
    """``text`` with every character a terminal would act on (ESC and the other controls, bidi overrides,
    invisible format characters) shown as an escape, line breaks kept unless ``lines`` is false (output of
    one line per item, where an agent's line break would forge another item): an agent's fact must not move
    the cursor, recolour or rewrite what the operator reads (a held write shown as something else in
    ``pending``)."""
    keep = "\n" if lines else ""
    if text.isprintable() or all(ch.isprintable() or ch in keep for ch in text):
        return text
    return "".join(ch if ch.isprintable() or ch in keep else escape(ch) for ch in text)


class _SafeConsole(Console):
    """Rich's console, with every string it renders (table cells and titles too) through
    :func:`terminal_safe` before layout, so widths stay right."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(terminal_safe(text), **options)


def _out() -> Console:
    # Plain text: fact contents are data, never Rich markup; no highlighting of numbers in tables. Piped
    # output (not a terminal, no $COLUMNS) gets 140 columns instead of Rich's 80, so rows rarely wrap.
    width = None if os.environ.get("COLUMNS") or Console().is_terminal else 140
    return _SafeConsole(markup=False, highlight=False, emoji=False, width=width)


def _err() -> Console:
    return _SafeConsole(stderr=True, markup=False, highlight=False, emoji=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, ScopeRef):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def json_text(data: Any, indent: int | None = None) -> str:
    """``data`` as JSON, non-ASCII text kept readable, but every character a terminal would act on (controls,
    bidi overrides, format characters) as a ``\\u`` escape: the same data for a parser, inert on a screen."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, default=_json_default)
    if text.isprintable() or all(ch.isprintable() or ch == "\n" for ch in text):
        return text
    return "".join(ch if ch.isprintable() or ch == "\n" else json.dumps(ch)[1:-1] for ch in text)


def emit_json(data: Any) -> None:
    typer.echo(json_text(data, indent=2))


def warn(message: str) -> None:
    typer.echo(f"warning: {terminal_safe(message)}", err=True)


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
    return _checked(lambda value: validate_owner_id(value, what))


def _checked(validate: Callable[[V], V]) -> Callable[[V | None], V | None]:
    """An option's callback: ``validate``'s ValueError as a usage error (exit 2)."""

    def check(value: V | None) -> V | None:
        try:
            return None if value is None else validate(value)
        except (TypeError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from exc

    return check


def _owners(what: str) -> Callable[[list[str] | None], list[str] | None]:
    """:func:`_owner` for a repeatable option: every id checked before the command runs (a usage error)."""
    one = _owner(what)

    def check(values: list[str] | None) -> list[str] | None:
        return None if values is None else [v for v in (one(value) for value in values) if v is not None]

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


def _ttl_days(days: float) -> float:
    """``--ttl-days`` as the store checks ``ttl_days`` (a positive, finite number of days, at most a century)."""
    expiry_from_ttl(days, 0.0)
    return days


ttl_days_option = _checked(_ttl_days)
confidence_option = _checked(validate_confidence)


def _moment(value: str | None) -> str | None:
    """An ISO 8601 date or date-time (local time unless it carries an offset)."""
    if value is not None:
        try:
            datetime.fromisoformat(value).timestamp()  # 0001-01-01 local may fall before year 1 in UTC
        except (ValueError, OverflowError, OSError):
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
_HANDLED = (_CliError, SharedMemoryError, MemoryAccessDenied, ValueError, OSError, sqlite3.Error)


def _plain_flags(params: list[Any]) -> list[Any]:
    """Typer's Rich help prints a flag's type (``<bool>``) as if the flag took a value: show it bare."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    return params


def _global_option_hint(ctx: Any, name: str) -> str | None:
    """What to say when ``name``, unknown to the command, is one of the app's global options (they go before
    the command); None when it is not one."""
    parent = ctx.parent
    if parent is None:
        return None
    for param in parent.command.params:
        if isinstance(param, TyperOption) and name in (*param.opts, *param.secondary_opts):
            value = "" if param.is_flag else f" {param.metavar or (param.name or 'value').upper()}"
            return (
                f"{name} is a global option: put it before the command: "
                f"{parent.command_path} {name}{value} {ctx.info_name} ..."
            )
    return None


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # click's NoSuchOption (typer may carry a click of its own: matched by name)
            name = getattr(exc, "option_name", None)
            hint = _global_option_hint(ctx, name) if type(exc).__name__ == "NoSuchOption" and name else None
            if hint is None:
                raise
            raise cast(Any, type(exc))(name, message=hint, ctx=ctx) from None


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
        typer.echo(f"error: {terminal_safe(_message(exc))}", err=True)
        raise typer.Exit(EXIT_FAILED) from exc


def _text_path(path: Path, where: str) -> Path:
    """``path``, if it is UTF-8 text: the store records its folder and model paths as text (a name with other
    bytes, kept by Python as lone surrogates, cannot be written down)."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        shown = os.fsencode(text).decode("utf-8", "backslashreplace")
        raise typer.BadParameter(
            f"the path {shown} is not UTF-8 text (byte {os.fsencode(text[exc.start])[0]:#04x} at position "
            f"{exc.start}); the store writes its paths down as text: rename the folder or use another",
            param_hint=where,
        ) from None
    return path


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"autogen-shared-memory {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    root: Annotated[
        str | None,
        typer.Option(
            help=f"Store directory. Default: ${ENV_ROOT}, else ~/.autogen/shared_memory.",
            show_default=False,
            metavar="PATH",
        ),
    ] = None,
    dsn: Annotated[
        str | None,
        typer.Option(help=f"PostgreSQL DSN instead of --root (or ${ENV_DSN}).", show_default=False),
    ] = None,
    pg_schema: Annotated[
        str | None,
        typer.Option(
            "--pg-schema",
            help="The PostgreSQL schema of the store (with --dsn). Default: autogen_shared_memory.",
            show_default=False,
            callback=_checked(validate_schema_name),
        ),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            help="A sentence-transformers model folder, run by sentence-transformers when it is installed, "
            "else (a BERT model) on ONNX Runtime (default: all-MiniLM-L6-v2 on ONNX Runtime).",
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
    for name, value in (("--root", root), ("--dsn", dsn)):
        if value is not None and not value.strip():  # "$VAR" of an unset variable: never another store
            raise typer.BadParameter("must not be empty (an unset variable?)", param_hint=name)
    if model is not None:
        _text_path(model, "--model")
    if root is not None and dsn is not None:
        raise typer.BadParameter("give --root or --dsn, not both", param_hint="--root / --dsn")
    dsn_from = "--dsn"
    if root is None and dsn is None:
        dsn = os.environ.get(ENV_DSN) or None
        dsn_from = f"${ENV_DSN}"
    writers = list(global_writer or [])
    if not writers and os.environ.get(ENV_GLOBAL_WRITERS):
        writers = [w for w in os.environ[ENV_GLOBAL_WRITERS].replace(",", " ").split() if w]
    for writer in writers:
        if writer != "*":
            _owner("global writer id")(writer)
    root_from = "--root"  # for messages: where the store directory came from
    if root is None:
        root_from = f"${ENV_ROOT}" if os.environ.get(ENV_ROOT) else "the default"
    # absolute: the SQLite backend cannot list the scopes of a relative root (Path.as_uri)
    root_path = (Path(root) if root is not None else default_root()).expanduser().absolute()
    if dsn is None:
        _text_path(root_path, "the default store directory" if root_from == "the default" else root_from)
    settings = Settings(
        root=root_path,
        dsn=dsn,
        dsn_from=dsn_from,
        pg_schema=pg_schema,
        model_dir=model,
        operator=operator,
        global_writers=tuple(writers),
        create=create,
        root_from=root_from,
    )
    ctx.obj = settings
    ctx.call_on_close(settings.close)


# ------------------------------------------------------------------------------------------- store


def acting(store: SharedMemoryStore, agent: str | None, group: str | None = None) -> MemoryHandle:
    """The handle a command acts through: ``--agent``'s, else the operator's (the CLI is trusted code)."""
    return store.as_agent(agent, group) if agent is not None else store.as_operator(group)


def _require_agent(store: SharedMemoryStore, agent_id: str) -> None:
    """An agent the store knows: in the directory, with a scope of its own (its facts and records) or a
    member of a group (tasks and case log entries live in the group's scope)."""
    if agent_known(store.engine, agent_id):
        return
    if any(store.engine.access.is_member(ref.owner, agent_id) for ref in store.backend.scopes("group")):
        return
    raise _CliError(
        f"unknown agent {agent_id!r}: not in the agent directory, no memory of its own and a member of no group"
    )


def group_ids(store: SharedMemoryStore) -> list[str]:
    """The groups of the store (the groups with a scope: members, facts or records), sorted.

    Args:
        store: the open store.

    Returns:
        The group ids, sorted.
    """
    return sorted(ref.owner for ref in store.backend.scopes("group"))


def _require_group(store: SharedMemoryStore, group_id: str, hint: str = "") -> None:
    """A group the store has: a mistyped id is an error naming the groups there are, never an empty answer
    (or, for a write, a new group)."""
    if store.backend.exists(ScopeRef("group", group_id)):
        return
    groups = group_ids(store)
    listed = ", ".join(groups[:10]) + (f" and {len(groups) - 10} more" if len(groups) > 10 else "")
    raise _CliError(
        f"no group {group_id!r} in this store ({f'its groups: {listed}' if groups else 'it has no groups'})" + hint
    )


def main() -> None:
    """Console entry point (``autogen-shared-memory`` and ``python -m autogen_shared_memory``)."""
    app()
