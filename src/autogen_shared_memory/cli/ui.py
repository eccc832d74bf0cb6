"""``autogen-shared-memory ui``: the local web inspector (the ``[ui]`` extra), on the store the global options
name. Read-only unless an operator token is given; see docs/ui.md."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import typer

from ..settings import WritePolicy
from .app import _CliError, _settings, command, make_backend, warn

ENV_UI_TOKEN = "AUTOGEN_SHARED_MEMORY_UI_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def read_token(path: Path | None) -> str | None:
    """The operator token: the first line of ``path``, else ``$AUTOGEN_SHARED_MEMORY_UI_TOKEN``, else None.

    Args:
        path: the token file (``--operator-token-file``).

    Returns:
        The token, or None (the inspector is then read-only).

    Raises:
        _CliError: the file cannot be read, is readable by other users, or the token is shorter than 16
            characters.
    """
    if path is not None:
        try:
            mode = path.stat().st_mode
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise _CliError(f"cannot read the operator token file {path}: {exc}") from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise _CliError(f"the operator token file {path} is readable by other users: chmod 600 it")
        token = lines[0].strip() if lines else ""
    else:
        token = os.environ.get(ENV_UI_TOKEN, "").strip()
        if not token:
            return None
    if len(token) < 16:
        raise _CliError("the operator token must be at least 16 characters (e.g. `openssl rand -hex 24`)")
    return token


@command("ui")
def ui_cmd(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="The address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port to listen on.")] = 8765,
    operator_token_file: Annotated[
        Path | None,
        typer.Option(
            help=f"A file (mode 600) holding the operator token, which lets a signed-in browser approve and "
            f"reject held global writes (or ${ENV_UI_TOKEN}). Without one the inspector is read-only.",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start the web inspector: scopes, facts, search with its reasons, held writes, the live change feed and
    records, in a browser. Read-only unless given an operator token."""
    try:
        import uvicorn

        from ..ui import create_app, open_inspector
    except ModuleNotFoundError as exc:
        raise _CliError(f"the inspector needs {exc.name!r}: pip install 'autogen-shared-memory[ui]'") from exc
    settings = _settings(ctx)
    token = read_token(operator_token_file)
    policy = WritePolicy(global_writers=settings.global_writers, operator_id=settings.operator)
    embedder = settings.embedder()
    if settings.dsn:
        dsn, schema = settings.dsn, settings.pg_schema
        inspector = open_inspector(
            lambda: make_backend(dsn, schema, create=False),
            embedder=embedder,
            policy=policy,
            writable=token is not None,
        )
    else:
        if not settings.root.is_dir():
            raise _CliError(f"no memory store at {settings.root}")
        inspector = open_inspector(settings.root, embedder=embedder, policy=policy, writable=token is not None)
    if host not in LOOPBACK:
        warn(f"listening on {host}: anyone who can reach it can read every scope of the store")
    app = create_app(inspector, token=token, hosts=[] if host in LOOPBACK else [host])
    mode = "operator actions need the token" if token else "read-only"
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"inspecting {inspector.backend_name} at http://{shown}:{port}/ ({mode}); Ctrl+C stops it")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)
    finally:
        inspector.store.close()
