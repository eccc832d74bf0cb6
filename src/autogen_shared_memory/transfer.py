"""Export and import a store (or one agent's memory) as JSON Lines, losslessly.

One line per row: ``{"type": "row", "scope": {"kind": ..., "owner": ...}, "table": ..., "row": {...}}``
after a header line naming the format version and the embedding model, and before an end line counting
the rows (``{"type": "end", "rows": N}``: a file cut short is told from a whole one). Bytes (vectors) are
base64. Each scope is exported from one consistent read (:meth:`~.backends.base.Backend.snapshot`).

An import reads and checks the whole file first, every column of every row, against the rules and limits
a write applies (text without NUL, sizes, 64-bit integers), and against the store (a fact id that is
another fact here, a scope of the operator's id, access policy it was not asked to apply): a bad line is
reported with its number and nothing is written (unless ``skip_bad``, for lines that are bad in
themselves). Rows whose key already exists are skipped, so an import can be repeated; a fact already here
changes only through the audit events the file brings (see
:meth:`~.backends.base.Backend.import_scope`), and the report lists each such change. The same format
moves memory between backends.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .backends.base import FACT_JSON_COLUMNS, STORAGE_COLUMNS, is_policy_key, policy_change, same_fact
from .core.lifecycle import content_hash
from .core.records import TABLES, TableSpec, storable, storable_text
from .core.types import (
    DEFAULT_MAX_FACT_BYTES,
    MAX_ID_CHARS,
    MAX_METADATA_BYTES,
    SCOPE_KINDS,
    STATUSES,
    ScopeRef,
    finite_number,
    kind_of_fact_id,
    require_utf8,
    validate_confidence,
    validate_content,
    validate_label,
    validate_metadata,
    validate_owner_id,
    validate_reason,
    validate_session_id,
)
from .errors import ImportFormatError as ImportFormatError
from .errors import ImportModelError as ImportModelError
from .errors import ImportPolicyError as ImportPolicyError
from .errors import InvalidInputError
from .tempfiles import remove_stale_builds
from .views.state import MAX_STATE_BYTES

if TYPE_CHECKING:
    from .facts import FactStore

FORMAT = "autogen-shared-memory/jsonl"
FORMAT_VERSION = 2  # 2: the end line (version 1 files, without it, still import)
READ_VERSIONS = (1, 2)

# The storage tables' columns as an export writes them (JSON fields as JSON text): what an import checks
# every row against, with the record tables' own specs.
_STORAGE = {
    "meta": TableSpec("meta", dict(STORAGE_COLUMNS["meta"]), key=("key",), not_null=("key", "value")),
    "facts": TableSpec(
        "facts",
        {**{c: t for c, t in STORAGE_COLUMNS["facts"].items() if c != "seq"}, "embedding": bytes},
        key=("id",),
        not_null=("id", "content", "created_by", "created_at", "status", "content_hash", "embedding"),
        json_columns=tuple(FACT_JSON_COLUMNS),
    ),
    "audit": TableSpec(
        "audit",
        {c: t for c, t in STORAGE_COLUMNS["audit"].items() if c != "seq"},
        key=(),
        not_null=("fact_id", "event", "actor", "at"),
        json_columns=("detail",),
    ),
}
_SPECS: dict[str, TableSpec] = {**_STORAGE, **TABLES}
_FACT_JSON = FACT_JSON_COLUMNS  # the JSON a fact's JSON columns must hold (what reading a fact back expects)


@dataclass
class ImportReport:
    """What an import did: lines read, rows inserted, facts closed and updated, facts left out because this
    store purged them, bad lines skipped (``skip_bad``), the scopes written, and ``changes``: one line per
    change to something that was here before (a fact approved, closed, restated or withdrawn, as the events
    the file brought say) and per membership or privacy setting applied."""

    lines: int = 0
    inserted: int = 0
    closed: int = 0  # facts here closed by the forgotten / rejected / superseded events the export brought
    updated: int = 0  # facts here the export's events restated, approved or withdrew; records updated later
    purged: int = 0  # facts of the export this store purged: never brought back
    skipped_bad: list[str] = field(default_factory=list)
    scopes: set[ScopeRef] = field(default_factory=set)
    changes: list[str] = field(default_factory=list)


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
        raise InvalidInputError("export one agent or some scopes, not both")
    if agent_id is not None:
        ref = ScopeRef("agent", agent_id)
        targets = [ref] if store.backend.exists(ref) else []
    elif scopes is not None:
        targets = list(dict.fromkeys(scopes))
        for ref in targets:
            if not store.backend.exists(ref):
                raise InvalidInputError(f"no scope {ref} in this store")
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
    rows = 0
    for ref in targets:
        scope = {"kind": ref.kind, "owner": ref.owner}
        for table, row in store.backend.export_scope(ref):
            if table == "meta" and row["key"] in ("scope_kind", "scope_owner"):
                continue  # implied by the scope of every line
            rows += 1
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
            rows += 1
            yield json.dumps(
                {
                    "type": "row",
                    "scope": {"kind": "global", "owner": ""},
                    "table": "agent_directory",
                    "row": row,
                }
            )
    yield json.dumps({"type": "end", "rows": rows})


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
            if progress is not None and count > 1 and not line.startswith('{"type": "end"'):
                progress(1)

    if isinstance(path, (str, Path)):
        path = Path(path)
        if not path.name or path.is_dir():
            raise IsADirectoryError(f"cannot export to {str(path)!r}: it is a directory, not a file name")
        if not path.parent.is_dir():
            raise FileNotFoundError(f"cannot export to {str(path)!r}: no directory {str(path.parent)!r}")
        # The export replaces the name: never a link (its target would stay as it was), a pipe or a device,
        # nor a database (a scope of this very store, say).
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise FileExistsError(
                f"cannot export to {str(path)!r}: it is not a regular file (a link, a pipe or a device); "
                "export to a file name, or to a stream"
            )
        if path.is_file():
            with open(path, "rb") as existing:
                if existing.read(16) == b"SQLite format 3\x00":
                    raise FileExistsError(f"cannot export over {str(path)!r}: it is a SQLite database, not an export")
        if store.backend.is_storage_path(path):
            raise FileExistsError(
                f"cannot export to {str(path)!r}: in the store's directory that name is (or will be) a scope's "
                "file; export to another name or directory"
            )
        # a name of its own (two exports to one path, in one process or two, never share a file), made with
        # the mode any new file gets (mkstemp's 0600 would hide a backup from the job that copies it)
        remove_stale_builds(path)  # what an export killed part-way to this path left behind (kill -9)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with open(fd, "w", encoding="utf-8") as out:
                write(out)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        write(path)
    return count - 2  # the header and the end line are not rows


def _parse(
    number: int, text: str, *, max_fact_bytes: int = DEFAULT_MAX_FACT_BYTES
) -> tuple[ScopeRef, str, dict[str, Any]] | dict[str, Any]:
    """One line of an export: the header or end line (a dict), or a row ``(scope, table, row)`` checked
    whole (ImportFormatError naming the line); ``max_fact_bytes``: the importing store's fact size limit."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"line {number}: not JSON ({exc.msg})") from exc
    except RecursionError:
        raise ImportFormatError(f"line {number}: JSON nested too deeply") from None
    if not isinstance(item, dict) or item.get("type") not in ("header", "row", "end"):
        raise ImportFormatError(f"line {number}: expected an object with type 'header', 'row' or 'end'")
    if item["type"] == "header":
        if item.get("format") != FORMAT or item.get("version") not in READ_VERSIONS:
            raise ImportFormatError(
                f"line {number}: not a {FORMAT} export of version {' or '.join(map(str, READ_VERSIONS))}"
            )
        return item
    if item["type"] == "end":
        if type(item.get("rows")) is not int:
            raise ImportFormatError(f"line {number}: an end line must count the rows")
        return item
    scope, table, row = item.get("scope"), item.get("table"), item.get("row")
    if not isinstance(scope, dict) or scope.get("kind") not in SCOPE_KINDS:
        raise ImportFormatError(f"line {number}: bad scope {scope!r}")
    if not isinstance(table, str) or table not in _SPECS or not isinstance(row, dict):
        raise ImportFormatError(f"line {number}: unknown table {table!r} or row is not an object")
    try:
        ref = ScopeRef(scope["kind"], scope.get("owner", ""))
        decoded = {k: _decode(v) for k, v in row.items()}
    except (ValueError, TypeError) as exc:
        raise ImportFormatError(f"line {number}: {exc}") from exc
    decoded.pop("seq", None)  # the source's write order: the importing store numbers its own rows
    for column in _SPECS[table].json_columns:  # JSON columns as JSON text (a driver may give values)
        if decoded.get(column) is not None and not isinstance(decoded[column], str):
            try:
                decoded[column] = json.dumps(decoded[column], ensure_ascii=False, allow_nan=False)
            except (ValueError, TypeError, RecursionError) as exc:
                raise ImportFormatError(f"line {number}: {table} row: {column} is not JSON ({exc})") from None
    try:
        _check_columns(_SPECS[table], decoded, stored=table in _STORAGE)
        if table == "facts":
            _check_fact(ref, decoded, max_fact_bytes)
        elif table == "audit":
            _check_event(decoded, max_fact_bytes)
        elif table == "meta":
            _check_meta(decoded)
    except (ValueError, TypeError) as exc:
        raise ImportFormatError(f"line {number}: {table} row: {exc}") from exc
    if table == "facts":
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


INT64 = (-(2**63), 2**63)  # what every backend's integer columns hold (PostgreSQL bigint, SQLite INTEGER)
MAX_RECORD_TEXT_BYTES = MAX_STATE_BYTES  # the largest text any record write stores (an agent's state value)
MAX_META_VALUE_BYTES = 64 * 1024
MAX_LABEL_TEXT = 1024  # a meta key, an audit event's name
MAX_IMPORTED_TAGS = 1024  # a write adds 32 at most; restatements merged more before that limit applied to them


def _check_columns(spec: TableSpec, row: dict[str, Any], *, stored: bool = False) -> None:
    """Every column one the table has, of its type (None where it may be null; a float column takes an
    integer, never a bool; numbers finite; integers 64-bit), the not-null ones present; ``stored`` (the
    storage tables): no text with NUL or a lone surrogate, refused there as every write refuses it; a record
    table's text (escaped as records are, see :func:`_storable_record`) at most :data:`MAX_RECORD_TEXT_BYTES`.
    A row that would fail inside the write (with the scopes before it imported) or break reading its scope
    back is refused up front."""
    unknown = sorted(set(row) - set(spec.columns))
    if unknown:
        raise ValueError(f"unknown column {unknown[0]!r}")
    missing = [c for c in spec.not_null if row.get(c) is None]
    if missing:
        raise ValueError(f"lacks {missing}")
    for column, value in row.items():
        want = spec.columns[column]
        if value is None:
            continue
        if want is float:
            try:
                finite_number(value, column)
            except (TypeError, ValueError):
                raise TypeError(f"{column} must be a finite number: {value!r:.40}") from None
        elif want is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{column} must be int: {value!r:.40}")
            if not INT64[0] <= value < INT64[1]:
                raise ValueError(f"{column} is {str(value)[:24]}: beyond a 64-bit integer")
        elif not isinstance(value, want):
            raise TypeError(f"{column} must be {want.__name__}: {value!r:.40}")
        elif isinstance(value, str):
            if stored:
                _stored_text(value, column)
            elif len(value) > MAX_RECORD_TEXT_BYTES // 4 and len(value.encode("utf-8", "replace")) > (
                MAX_RECORD_TEXT_BYTES
            ):
                raise ValueError(f"{column} is over {MAX_RECORD_TEXT_BYTES} bytes, the most a record write stores")


def _stored_text(value: str, what: str) -> None:
    """Text a fact, an audit event or a setting stores: valid Unicode without NUL, as every write takes it
    (PostgreSQL cannot store a NUL in text; refused on every backend, so that no store's export holds one)."""
    require_utf8(value, what)
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character; not allowed")


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


def _check_fact(ref: ScopeRef, row: dict[str, Any], max_fact_bytes: int = DEFAULT_MAX_FACT_BYTES) -> None:
    """What a write would refuse, refused in an import too: an id that is not one of this scope's kind (the
    fact could never be found by id, so never forgotten or corrected), text ``remember`` refuses (empty, NUL,
    a lone surrogate, over ``max_fact_bytes``), metadata over its limits, a session id, reason or author a
    write refuses, an unknown status, a confidence outside [0, 1], counts below 1, JSON columns that do not
    hold what reading the fact expects."""
    if kind_of_fact_id(row["id"]) != ref.kind or len(row["id"]) > MAX_ID_CHARS:
        raise ValueError(f"fact id {row['id']!r:.60} is not the id of a {ref.kind} fact")
    validate_content(row["content"], max_bytes=max_fact_bytes, stored=True)
    if row["status"] not in STATUSES:
        raise ValueError(f"unknown fact status {row['status']!r}")
    if row.get("confidence") is not None:
        validate_confidence(row["confidence"])
    for column in ("reinforcement", "version"):
        if row.get(column) is not None and row[column] < 1:
            raise ValueError(f"{column} must be at least 1, got {row[column]}")
    values: dict[str, Any] = {}
    for column, shape in _FACT_JSON.items():
        if row.get(column) is None:
            continue
        if len(row[column]) > 2 * MAX_METADATA_BYTES and column != "metadata":
            raise ValueError(f"{column} is over {2 * MAX_METADATA_BYTES} characters")
        try:
            value = json.loads(row[column])
        except (ValueError, RecursionError):
            raise ValueError(f"{column} is not JSON: {row[column]!r:.40}") from None
        if not isinstance(value, shape) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            raise ValueError(f"{column} must hold a JSON {'list of strings' if shape is list else 'object'}")
        values[column] = value
    validate_metadata(values.get("metadata"))  # 64 KiB, 16 levels, no NUL: as a write
    validate_session_id(row.get("session_id"))
    validate_reason(row.get("tombstone_reason"))
    # the rules every writer applies to who and how a fact is labelled (shown in capsules, matched by filters)
    validate_owner_id(row["created_by"], "created_by")
    for who in values.get("stated_by", ()):
        validate_owner_id(who, "stated_by")
    if row.get("tombstone_by") is not None:
        validate_owner_id(row["tombstone_by"], "tombstone_by")
    if len(values.get("tags", ())) > MAX_IMPORTED_TAGS:
        raise ValueError(f"{len(values['tags'])} tags; an import takes at most {MAX_IMPORTED_TAGS}")
    for tag in values.get("tags", ()):  # each as a write checks it; their count up to what restatements added
        validate_label(tag, "each tag")
    if row.get("category") is not None:
        validate_label(row["category"], "category")
    for other in [*values.get("supersedes", ()), *([row["superseded_by"]] if row.get("superseded_by") else [])]:
        if kind_of_fact_id(other) != ref.kind or len(other) > MAX_ID_CHARS:
            raise ValueError(f"{other!r:.60} is not the id of a {ref.kind} fact")


def _check_event(row: dict[str, Any], max_fact_bytes: int) -> None:
    """An audit event as a write records it: a fact id, a short event name, an actor id, a detail of JSON
    text without NUL no larger than a restatement's (its text, metadata and labels). The detail of a
    ``reinforced`` event is replayed on a fact here (:func:`~.backends.base.replay_event`): its tags,
    category, confidence, expiry and metadata must be what a write takes."""
    if len(row["fact_id"]) > MAX_ID_CHARS or len(row["event"]) > MAX_LABEL_TEXT:
        raise ValueError("fact_id or event is too long")
    validate_owner_id(row["actor"], "actor")
    detail_text = row.get("detail")
    if detail_text is None:
        return
    if len(detail_text) > 2 * (max_fact_bytes + MAX_METADATA_BYTES) + 64 * 1024:
        raise ValueError("detail is larger than any event a write records")
    try:
        detail = json.loads(detail_text)
    except (ValueError, RecursionError):
        raise ValueError(f"detail is not JSON: {detail_text!r:.40}") from None
    for text in _strings(detail):
        _stored_text(text, "detail")
    if row["event"] != "reinforced":
        return
    if not isinstance(detail, dict):
        raise ValueError("the detail of a reinforced event must be a JSON object")
    for tag in detail.get("tags") or ():
        validate_label(tag, "each tag")
    if detail.get("category") is not None:
        validate_label(detail["category"], "category")
    if detail.get("confidence") is not None:
        validate_confidence(detail["confidence"])
    if detail.get("expires_at") is not None:
        finite_number(detail["expires_at"], "expires_at")
    validate_metadata(detail.get("metadata"))


def _check_meta(row: dict[str, Any]) -> None:
    """A scope setting: a short key, a value of at most :data:`MAX_META_VALUE_BYTES`; a member's id as a
    write checks it."""
    if len(row["key"]) > MAX_LABEL_TEXT or len(row["value"].encode("utf-8")) > MAX_META_VALUE_BYTES:
        raise ValueError("key or value is longer than any setting a write stores")
    if is_policy_key(row["key"]) and row["key"] != "private":
        validate_owner_id(row["key"].partition(":")[2], "member id")


def _check_vector(number: int, row: dict[str, Any], header: dict[str, Any]) -> None:
    """A vector of the export's dimension, every component finite (one bad row would stop its scope's index
    from loading, or poison every search)."""
    dimension = header.get("dimension")
    if not isinstance(dimension, int) or len(row["embedding"]) != 4 * dimension:
        raise ImportFormatError(f"line {number}: the embedding is not a {dimension}-d float32 vector")
    if not np.isfinite(np.frombuffer(row["embedding"], dtype=np.float32)).all():
        raise ImportFormatError(f"line {number}: the embedding has a NaN or infinite component")


MIN_LINE_CHARS = 64 * 1024 * 1024  # the longest line an import reads at least (a record, a state value)


def max_line_chars(store: FactStore) -> int:
    """The longest line an import of ``store`` reads: a fact of the store's size limit with its metadata,
    every character escaped (``\\uXXXX``), its vector in base64, and room for the rest; never below
    :data:`MIN_LINE_CHARS`. A longer line is refused (a device or a file without line breaks never fills
    the memory)."""
    return max(MIN_LINE_CHARS, 6 * (store.policy.max_fact_bytes + MAX_METADATA_BYTES) + 16 * store.model.dimension)


def read_lines(source: IO[str], limit: int) -> Iterator[tuple[int, str]]:
    """The lines of ``source`` (split at "\\n" only, a final "\\r" dropped) with their numbers; a line longer
    than ``limit`` characters is an ImportFormatError."""
    number = 0
    while True:
        text = source.readline(limit + 1)
        if not text:
            return
        number += 1
        if len(text) > limit and not text.endswith("\n"):
            raise ImportFormatError(f"line {number}: longer than {limit} characters; not an export line")
        yield number, text.removesuffix("\n").removesuffix("\r")


def import_jsonl(
    store: FactStore,
    source: str | Path | IO[str],
    *,
    skip_bad: bool = False,
    policy: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ImportReport:
    """Import an export; every line is checked, against the rules of a write and against this store, before
    anything is written.

    Args:
        store: the store to import into.
        source: a file path or a text stream of an export.
        skip_bad: skip lines that are bad in themselves (listed in ``skipped_bad``) instead of refusing
            the file; what the store refuses (a fact id that is another fact here, a scope of the operator's
            id, access policy) is refused whatever it says.
        policy: apply the group memberships and privacy settings the file holds and this store lacks (each
            listed in ``changes``); without it such a file is refused.
        progress: called with the number of rows of each scope once it is written.

    Returns:
        An :class:`ImportReport`.

    Raises:
        ImportFormatError: a line that is not a valid export line, or that this store refuses (the message
            names the line); nothing was written. ImportModelError: vectors of another embedding model.
            ImportPolicyError: access policy the import was not asked to apply.
    """
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8", newline="\n") as fh:
            return _import(store, fh, skip_bad, policy, progress)
    return _import(store, source, skip_bad, policy, progress)


def _import(
    store: FactStore, source: IO[str], skip_bad: bool, policy: bool, progress: Callable[[int], None] | None
) -> ImportReport:
    # Lines end at "\n" only: str.splitlines() also splits at U+2028, U+2029, U+0085 and more, which an
    # export writes raw inside its JSON strings (ensure_ascii=False); JSON escapes every "\n" and "\r".
    report = ImportReport()
    per_scope: dict[ScopeRef, list[tuple[str, dict[str, Any]]]] = {}
    numbers: dict[ScopeRef, list[int]] = {}  # the line of each row of per_scope
    header: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    rows = 0  # row lines, bad ones included: what the end line counts
    for number, text in read_lines(source, max_line_chars(store)):
        report.lines = number
        if not text.strip():
            continue
        try:
            if end is not None:
                raise ImportFormatError(f"line {number}: a line after the export's end line")
            if header is not None:
                rows += 1
            parsed = _parse(number, text, max_fact_bytes=store.policy.max_fact_bytes)
            if isinstance(parsed, dict):
                if (parsed["type"] == "header") != (header is None):  # an export writes it first, once
                    raise ImportFormatError(
                        f"line {number}: " + ("a second header" if header else "missing the export header")
                    )
                if parsed["type"] == "end":
                    rows -= 1
            elif header is None:
                raise ImportFormatError(f"line {number}: missing the export header (the first line)")
            elif parsed[1] == "facts":
                _check_vector(number, parsed[2], header)
        except ImportFormatError as exc:
            if not skip_bad or header is None:
                raise
            report.skipped_bad.append(str(exc))
            continue
        if isinstance(parsed, dict):
            if parsed["type"] == "header":
                header = parsed
            else:
                end = parsed
            continue
        ref, table, row = parsed
        per_scope.setdefault(ref, []).append((table, row))
        numbers.setdefault(ref, []).append(number)
    if header is None:
        raise ImportFormatError("line 1: missing the export header")
    if header["version"] >= 2 and (end is None or end["rows"] != rows):
        problem = (
            f"the export ends without its end line after {rows} row{'' if rows == 1 else 's'}"
            if end is None
            else f"the export's end line counts {end['rows']} rows, the file holds {rows}"
        )
        if not skip_bad:
            raise ImportFormatError(f"{problem}: it was cut short or changed (nothing was imported)")
        report.skipped_bad.append(problem)
    if per_scope and (header.get("model") != store.model.model_id or header.get("dimension") != store.model.dimension):
        raise ImportModelError(
            f"the export's vectors come from {header.get('model')!r} ({header.get('dimension')}-d); this store embeds "
            f"with {store.model.model_id!r}: import with a store that uses that model, then reembed() if needed"
        )
    for ref, items in per_scope.items():  # every conflict with this store is found before anything is written
        _check_against(store, ref, items, numbers[ref], policy)
    for ref, items in per_scope.items():
        done = store.backend.import_scope(ref, items, policy)
        report.inserted += done.inserted
        report.closed += done.closed
        report.updated += done.updated
        report.purged += done.purged
        report.changes += done.changes
        report.scopes.add(ref)
        if progress is not None:
            progress(len(items))
    return report


def _check_against(
    store: FactStore, ref: ScopeRef, items: list[tuple[str, dict[str, Any]]], numbers: list[int], policy: bool
) -> None:
    """What this store refuses of the rows of one scope, with the line that holds it: a scope owned by the
    operator's id (no agent may be it), an embedding model other than the store's, access policy it lacks
    (without ``policy``), a fact id that is another fact here."""
    if ref.kind == "agent" and ref.owner == store.operator_id:
        raise ImportFormatError(
            f"line {numbers[0]}: {ref} is the scope of this store's operator_id {ref.owner!r}, which no agent may be"
        )
    exists = store.backend.exists(ref)
    mine = {"embedding_model": store.model.model_id, "embedding_dim": str(store.model.dimension)}
    facts: dict[str, int] = {}
    for (table, row), number in zip(items, numbers, strict=True):
        if table == "facts":
            facts[str(row["id"])] = number
        if table != "meta":
            continue
        key = row["key"]
        current = store.backend.get_meta(ref, key) if exists and (key in mine or is_policy_key(key)) else None
        if key in mine and (row["value"] != mine[key] or (current is not None and current != row["value"])):
            raise ImportModelError(
                f"line {number}: {ref} in the export holds vectors of {key} {row['value']!r}; this store embeds "
                f"with {mine[key]!r}"
                + (f" and {ref} here holds {current!r}" if current else "")
                + ": import with a store using the same model, then reembed() if needed"
            )
        if is_policy_key(key) and current is None and not policy:
            raise ImportPolicyError(
                f"line {number}: the export sets access policy ({ref}: {policy_change(key)}), which an import "
                "applies only when asked to (policy=True, CLI --with-policy)"
            )
    if not exists or not facts:
        return
    ids = sorted(facts)
    rows = {str(r["id"]): r for table, r in items if table == "facts"}
    for start in range(0, len(ids), 500):
        for fact in store.backend.get(ref, ids[start : start + 500]):
            why = same_fact(fact, rows[fact.id])
            if why:
                raise ImportFormatError(
                    f"line {facts[fact.id]}: fact {fact.id} is another fact in {ref} ({why}); an import never "
                    "changes another fact"
                )
