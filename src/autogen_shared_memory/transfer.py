"""Export and import a store (or one agent's memory) as JSON Lines, losslessly.

One line per row: ``{"type": "row", "scope": {"kind": ..., "owner": ...}, "table": ..., "row": {...}}``
after a header line naming the format version and the embedding model. Bytes (vectors) are base64.
An import reads and checks the whole file first: a malformed line is reported with its number and
nothing is written (unless ``skip_bad``). Rows whose key already exists are skipped, so an import can be
repeated. The same format moves memory between backends.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .core.lifecycle import content_hash
from .core.records import TABLES, storable, storable_text
from .core.types import (
    SCOPE_KINDS,
    STATUSES,
    EmbeddingModelMismatchError,
    ScopeRef,
    SharedMemoryError,
    kind_of_fact_id,
    validate_content,
)

if TYPE_CHECKING:
    from .facts import FactStore

FORMAT = "autogen-shared-memory/jsonl"
FORMAT_VERSION = 1
_TABLES = {"meta", "facts", "audit", *TABLES}


class ImportFormatError(SharedMemoryError, ValueError):
    """A line of an import file is not a valid export line (the message names the line)."""


class ImportModelError(ImportFormatError, EmbeddingModelMismatchError):
    """The export's vectors come from another embedding model than the store's."""


@dataclass
class ImportReport:
    lines: int = 0
    inserted: int = 0
    closed: int = 0  # facts open here that the export had forgotten or superseded, closed as it says
    updated: int = 0  # facts here that the export's copy added to (restatements, their authors, tags, ...)
    skipped_bad: list[str] = field(default_factory=list)
    scopes: set[ScopeRef] = field(default_factory=set)


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$b64"}:
        return base64.b64decode(value["$b64"], validate=True)
    return value


def export_scopes(
    store: FactStore, *, agent_id: str | None = None, scopes: Iterable[ScopeRef] | None = None
) -> list[ScopeRef]:
    """The scopes an export covers: every scope, one agent's, or ``scopes`` — checked before anything is
    written. A named scope the store lacks is a ValueError; a scope whose vectors come from another model
    than the store's is refused (EmbeddingModelMismatchError), because the export's header names the model."""
    if agent_id is not None and scopes is not None:
        raise ValueError("export one agent or some scopes, not both")
    if agent_id is not None:
        ref = ScopeRef("agent", agent_id)
        targets = [ref] if store.backend.exists(ref) else []
    elif scopes is not None:
        targets = list(dict.fromkeys(scopes))
        for ref in targets:
            if not store.backend.exists(ref):
                raise ValueError(f"no scope {ref} in this store")
    else:
        targets = store.backend.scopes()
    for ref in targets:
        store.backend.check_model(ref, store.model)
    return targets


def export_lines(
    store: FactStore, *, agent_id: str | None = None, scopes: Iterable[ScopeRef] | None = None
) -> Iterator[str]:
    """The export as JSON lines: every scope, one agent's (its file plus its directory entry), or ``scopes``
    (checked first, see :func:`export_scopes`)."""
    return _lines(store, agent_id, export_scopes(store, agent_id=agent_id, scopes=scopes))


def _lines(store: FactStore, agent_id: str | None, targets: list[ScopeRef]) -> Iterator[str]:
    yield json.dumps(
        {
            "type": "header",
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "model": store.model.model_id,
            "dimension": store.model.dimension,
            "exported_at": time.time(),
            "agent_id": agent_id,
        }
    )
    for ref in targets:
        scope = {"kind": ref.kind, "owner": ref.owner}
        for table, row in store.backend.export_scope(ref):
            if table == "meta" and row["key"] in ("scope_kind", "scope_owner"):
                continue  # implied by the scope of every line
            yield json.dumps(
                {
                    "type": "row",
                    "scope": scope,
                    "table": table,
                    "row": {k: _encode(v) for k, v in sorted(row.items())},  # one column order for every backend
                },
                ensure_ascii=False,
            )
    if agent_id is not None:
        for row in store.backend.read_records(ScopeRef("global"), "agent_directory", {"agent_id": agent_id}):
            row.pop("seq", None)
            yield json.dumps(
                {
                    "type": "row",
                    "scope": {"kind": "global", "owner": ""},
                    "table": "agent_directory",
                    "row": row,
                }
            )


def export_jsonl(
    store: FactStore,
    path: str | Path | IO[str],
    *,
    agent_id: str | None = None,
    scopes: Iterable[ScopeRef] | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write the export to a file path (atomically: a failed export leaves no partial file) or a text
    stream; returns the number of rows written."""
    lines = export_lines(store, agent_id=agent_id, scopes=scopes)
    count = 0

    def write(out: IO[str]) -> None:
        nonlocal count
        for line in lines:
            out.write(line + "\n")
            count += 1
            if progress is not None and count > 1:
                progress(1)

    if isinstance(path, (str, Path)):
        path = Path(path)
        if not path.name or path.is_dir():
            raise IsADirectoryError(f"cannot export to {str(path)!r}: it is a directory, not a file name")
        if not path.parent.is_dir():
            raise FileNotFoundError(f"cannot export to {str(path)!r}: no directory {str(path.parent)!r}")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                write(out)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        write(path)
    return count - 1  # the header is not a row


def _parse(number: int, text: str) -> tuple[ScopeRef, str, dict[str, Any]] | dict[str, Any]:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"line {number}: not JSON ({exc.msg})") from exc
    if not isinstance(item, dict) or item.get("type") not in ("header", "row"):
        raise ImportFormatError(f"line {number}: expected an object with type 'header' or 'row'")
    if item["type"] == "header":
        if item.get("format") != FORMAT or item.get("version") != FORMAT_VERSION:
            raise ImportFormatError(f"line {number}: not a {FORMAT} v{FORMAT_VERSION} export")
        return item
    scope, table, row = item.get("scope"), item.get("table"), item.get("row")
    if not isinstance(scope, dict) or scope.get("kind") not in SCOPE_KINDS:
        raise ImportFormatError(f"line {number}: bad scope {scope!r}")
    if table not in _TABLES or not isinstance(row, dict):
        raise ImportFormatError(f"line {number}: unknown table {table!r} or row is not an object")
    try:
        ref = ScopeRef(scope["kind"], scope.get("owner", ""))
        decoded = {k: _decode(v) for k, v in row.items()}
    except (ValueError, TypeError) as exc:
        raise ImportFormatError(f"line {number}: {exc}") from exc
    required = {
        "facts": ("id", "content", "embedding", "content_hash"),
        "audit": ("fact_id", "event"),
        "meta": ("key", "value"),
    }.get(table, TABLES[table].key if table in TABLES else ())
    missing = [c for c in required if decoded.get(c) is None]
    if missing:
        raise ImportFormatError(f"line {number}: {table} row lacks {missing}")
    if table == "facts":
        try:
            _check_fact(ref, decoded)
        except (ValueError, TypeError) as exc:
            raise ImportFormatError(f"line {number}: {exc}") from exc
        decoded["content_hash"] = content_hash(decoded["content"])  # exports before the hash's current rule
    elif table in TABLES:
        decoded = _storable_record(TABLES[table].json_columns, decoded)
    return ref, table, decoded


def _storable_record(json_columns: Iterable[str], row: dict[str, Any]) -> dict[str, Any]:
    """A record row as ``log_records`` stores it (:func:`~autogen_shared_memory.core.records.storable`): an
    export of a file written before, or by SQLite, can hold a NUL or a lone surrogate, which PostgreSQL's
    ``jsonb`` refuses, with the whole import."""
    row = {k: storable_text(v) if isinstance(v, str) and k not in json_columns else v for k, v in row.items()}
    for column in json_columns:
        if isinstance(row.get(column), str):
            try:
                row[column] = json.dumps(storable(json.loads(row[column])), ensure_ascii=False)
            except (ValueError, RecursionError):
                row[column] = storable_text(row[column])  # not JSON after all: kept as text
    return row


def _check_fact(ref: ScopeRef, row: dict[str, Any]) -> None:
    """What a write would refuse, refused in an import too: an id that is not one of this scope's kind (the
    fact could never be found by id, so never forgotten or corrected), text ``remember`` refuses (empty, NUL,
    a lone surrogate; the size limit is the writers' and is not applied), an unknown status."""
    if kind_of_fact_id(row["id"]) != ref.kind:
        raise ValueError(f"fact id {row['id']!r} is not the id of a {ref.kind} fact")
    validate_content(row["content"], max_bytes=2**62)
    if row.get("status", "active") not in STATUSES:
        raise ValueError(f"unknown fact status {row.get('status')!r}")
    if not isinstance(row["embedding"], bytes):
        raise TypeError("a fact's embedding must be bytes ($b64)")


def _check_vector(number: int, row: dict[str, Any], header: dict[str, Any]) -> None:
    """A vector of the export's dimension, every component finite (one bad row would stop its scope's index
    from loading, or poison every search)."""
    dimension = header.get("dimension")
    if not isinstance(dimension, int) or len(row["embedding"]) != 4 * dimension:
        raise ImportFormatError(f"line {number}: the embedding is not a {dimension}-d float32 vector")
    if not np.isfinite(np.frombuffer(row["embedding"], dtype=np.float32)).all():
        raise ImportFormatError(f"line {number}: the embedding has a NaN or infinite component")


def import_jsonl(
    store: FactStore,
    source: str | Path | IO[str],
    *,
    skip_bad: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import an export; all lines are checked before anything is written."""
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    else:
        text = source.read()
    # Lines end at "\n" only: str.splitlines() also splits at U+2028, U+2029, U+0085 and more, which an
    # export writes raw inside its JSON strings (ensure_ascii=False); JSON escapes every "\n" and "\r".
    lines = text.removesuffix("\n").split("\n") if text else []
    lines = [line.removesuffix("\r") for line in lines]
    report = ImportReport(lines=len(lines))
    per_scope: dict[ScopeRef, list[tuple[str, dict[str, Any]]]] = {}
    header: dict[str, Any] | None = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            parsed = _parse(number, text)
            if not isinstance(parsed, dict):
                if header is None:  # an export writes it first: rows are checked against it
                    raise ImportFormatError(f"line {number}: missing the export header (the first line)")
                if parsed[1] == "facts":
                    _check_vector(number, parsed[2], header)
        except ImportFormatError as exc:
            if not skip_bad:
                raise
            report.skipped_bad.append(str(exc))
            continue
        if isinstance(parsed, dict):
            header = parsed
            continue
        ref, table, row = parsed
        per_scope.setdefault(ref, []).append((table, row))
    if header is None:
        raise ImportFormatError("line 1: missing the export header")
    if per_scope and (header.get("model") != store.model.model_id or header.get("dimension") != store.model.dimension):
        raise ImportModelError(
            f"the export's vectors come from {header.get('model')!r} ({header.get('dimension')}-d); this store embeds "
            f"with {store.model.model_id!r}: import with a store that uses that model, then reembed() if needed"
        )
    for ref, items in per_scope.items():  # every model conflict is found before anything is written
        for table, row in items:
            if table == "meta" and row["key"] == "embedding_model":
                current = store.backend.get_meta(ref, "embedding_model") if store.backend.exists(ref) else None
                if row["value"] != store.model.model_id or (current is not None and current != row["value"]):
                    raise ImportModelError(
                        f"{ref} in the export holds vectors of {row['value']!r}; this store embeds with "
                        f"{store.model.model_id!r}"
                        + (f" and {ref} here holds {current!r}" if current else "")
                        + ": import with a store using the same model, then reembed() if needed"
                    )
    for ref, items in per_scope.items():
        inserted, closed, updated = store.backend.import_scope(ref, items)
        report.inserted += inserted
        report.closed += closed
        report.updated += updated
        report.scopes.add(ref)
        if progress is not None:
            progress(len(items))
    return report
