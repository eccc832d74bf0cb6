"""Read-only health checks of a SQLite store (:meth:`.backend.SQLiteBackend.health`): its directory, and every
file named like a scope file. They never change a file, so they open each with SQLite read-only, not through
the backend's connections (which migrate and repair)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ...core.types import SCOPE_KINDS, EmbeddingModelMismatchError, ScopeRef
from ..base import HealthCheck, ModelInfo, compare_model
from .files import scope_file_candidates, scope_file_name
from .schema import SCHEMA_VERSION


def inspect_file(path: Path, model: ModelInfo | None) -> list[HealthCheck]:
    """Read-only checks of one scope file (doctor never changes a file)."""
    name = path.name
    problems: list[HealthCheck] = []
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            problems.append(
                HealthCheck(
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
                HealthCheck(
                    "scope files",
                    "fail",
                    f"{name} is not a SQLite database",
                    f"move {path} out of the store directory (writes to that scope fail until then)",
                ),
            ]
        return [
            *problems,
            HealthCheck("scope files", "fail", f"{name}: {exc}", f"restore {name} from an export or backup"),
        ]
    if version == 0 and objects:
        return [
            *problems,
            HealthCheck(
                "scope files",
                "fail",
                f"{name} is a SQLite database but not a memory store",
                f"move {path} out of the store directory",
            ),
        ]
    if journal != "wal":
        problems.append(
            HealthCheck(
                "wal",
                "fail",
                f"{name}: journal_mode={journal}",
                f"sqlite3 {path} 'PRAGMA journal_mode=WAL;' (or open it once for writing with the library)",
            )
        )
    if version > SCHEMA_VERSION:
        problems.append(
            HealthCheck(
                "schema",
                "fail",
                f"{name}: schema {version}, newer than this package's {SCHEMA_VERSION}",
                "upgrade autogen-shared-memory",
            )
        )
    elif version < SCHEMA_VERSION:
        problems.append(
            HealthCheck(
                "schema",
                "warn",
                f"{name}: schema {version} < {SCHEMA_VERSION}",
                "nothing to do: it is migrated forward the next time the library opens it",
            )
        )
    if integrity != "ok":
        problems.append(
            HealthCheck("integrity", "fail", f"{name}: {integrity}", f"restore {name} from an export or backup")
        )
    kind, owner = meta.get("scope_kind"), meta.get("scope_owner", "")
    if version and kind in SCOPE_KINDS:
        try:
            ref = ScopeRef(kind, owner)
        except ValueError as exc:  # an owner no scope can have (a file from elsewhere, or edited)
            problems.append(
                HealthCheck(
                    "scope files",
                    "fail",
                    f"{name} names no scope of a store: {exc}",
                    "move it out of the store directory",
                )
            )
            return problems
        if scope_file_name(ref) != name:
            problems.append(
                HealthCheck(
                    "scope files",
                    "fail",
                    f"{name} holds scope {ref}, whose file is {scope_file_name(ref)}",
                    f"rename it to {scope_file_name(ref)} or move it out of the store directory",
                )
            )
    if model is not None:
        try:
            compare_model(ScopeRef("global"), meta, model)  # the backends' rule (the scope only names its error)
        except EmbeddingModelMismatchError:
            problems.append(
                HealthCheck(
                    "model match",
                    "fail",
                    f"{name}: vectors from {meta.get('embedding_model')} ({meta.get('embedding_dim')}-d), configured "
                    f"{model.model_id} ({model.dimension}-d)",
                    "pass --model DIR with the model that wrote it, or run `autogen-shared-memory reembed`",
                )
            )
    return problems


def check_store(root: Path, model: ModelInfo | None) -> list[HealthCheck]:
    """The store directory, then one check per kind of problem over every scope file (a summary ``ok`` when
    no file has it).

    Args:
        root: the store's directory.
        model: the configured embedding model (None: the model match is skipped, not passed).

    Returns:
        The checks: ``store directory`` first, then (when there are scope files) ``scope files``,
        ``permissions``, ``wal``, ``schema``, ``integrity`` and ``model match``.
    """
    if not root.exists():
        return [HealthCheck("store directory", "fail", f"{root} does not exist", "create it, or name another store")]
    if not root.is_dir():
        return [
            HealthCheck("store directory", "fail", f"{root} is a file", "--root takes the directory holding global.db")
        ]
    if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        return [
            HealthCheck(
                "store directory",
                "fail",
                f"{root} is not readable and writable by this user",
                f"chmod u+rwx {root} (or run as the user that owns the store)",
            )
        ]
    files = scope_file_candidates(root)
    what = f"{len(files)} scope file" + ("" if len(files) == 1 else "s")
    checks = [HealthCheck("store directory", "ok", f"{root} ({what})")]
    problems = [p for path in files for p in inspect_file(path, model)]
    for name, summary in (
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
            found = [HealthCheck(name, "skip", "not checked: the configured embedding model could not be read")]
        checks += found or [HealthCheck(name, "ok", f"{summary} ({len(files)} files)")]
    return checks
