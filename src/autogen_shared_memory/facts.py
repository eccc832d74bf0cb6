"""``FactStore``: the framework-neutral core of the memory: facts, search, policy and records.

The store is where the rules live once: validation at the boundary, the access policy, embedding (never
while a write lock is held), hybrid recall (lexical + semantic candidates fused by Reciprocal Rank
Fusion across the caller's scopes) and capsules. Storage is a :class:`~.backends.base.Backend`; every
async method is the sync one run off the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import inspect
import os
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from typing_extensions import Self

from . import feed
from .backends import open_backend
from .backends.base import Backend, ModelInfo, ScopeTx, StatusChange, reembed_scope
from .core.capsule import capsule as render_capsule
from .core.lifecycle import content_hash, purge_due
from .core.policy import PRIVATE_KEY, AccessPolicy
from .core.records import ConversationRecord, Record, ToolCallRecord, bounded_text, storable_text
from .core.types import (
    MAX_TAGS,
    RUN_SESSION_PREFIX,
    SCOPE_KINDS,
    AuditEvent,
    Change,
    Draft,
    Fact,
    FactNotFoundError,
    Filters,
    Hit,
    MemoryAccessDenied,
    Position,
    Receipt,
    ScopeKind,
    ScopeName,
    ScopeRef,
    ScopeStats,
    expiry_from_ttl,
    finite_number,
    kind_of_fact_id,
    new_fact_id,
    require_utf8,
    shown,
    validate_confidence,
    validate_content,
    validate_label,
    validate_metadata,
    validate_owner_id,
    validate_reason,
    validate_session_id,
    validate_tags,
)
from .embedding import Embedder
from .errors import InvalidInputError, InvalidInputTypeError
from .onnx_embedding import OnnxEmbedder
from .search import engine
from .search.text import query_terms
from .settings import DedupSettings, RecallSettings, WritePolicy

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

ENV_ROOT = "AUTOGEN_SHARED_MEMORY_DIR"
ENV_DSN = "AUTOGEN_SHARED_MEMORY_DSN"
DEFAULT_ROOT = Path("~/.autogen/shared_memory")
MAX_QUERY_CHARS = 4096
MAX_SUPERSEDES = 32
_FACT_FIELDS = {
    "content",
    "fact",
    "scope",
    "confidence",
    "ttl_days",
    "tags",
    "category",
    "metadata",
    "supersedes",
    "session_id",
}


def _off_loop(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Awaitable[R]]:
    """The async twin of a sync method: the same call in a worker thread, so the event loop never blocks."""

    @functools.wraps(fn)
    async def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(fn, self, *args, **kwargs)

    run.__doc__ = f"Async version of :meth:`{fn.__name__}` (runs in a worker thread)."
    return run


def as_engine(store: Any) -> FactStore:
    """The engine of a store: ``store`` itself (a :class:`FactStore`) or a façade's ``engine``.

    Args:
        store: a :class:`FactStore` or a :class:`~.store.SharedMemoryStore`.

    Returns:
        The engine.

    Raises:
        InvalidInputTypeError: neither.
    """
    engine = store if isinstance(store, FactStore) else getattr(store, "engine", None)
    if not isinstance(engine, FactStore):
        raise InvalidInputTypeError(f"expected a SharedMemoryStore, got {type(store).__name__}")
    return engine


def default_root() -> Path:
    """``$AUTOGEN_SHARED_MEMORY_DIR`` if set, else ``~/.autogen/shared_memory``."""
    env = os.environ.get(ENV_ROOT)
    return Path(env).expanduser() if env else DEFAULT_ROOT.expanduser()


def _timestamp(value: float | datetime | None, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputTypeError(f"{what} must be a datetime or a UNIX timestamp")
    return finite_number(value, what)


def _distinct(planned: Sequence[tuple[Any, Draft]], refs: Sequence[ScopeRef], ref: ScopeRef, held: bool) -> int:
    """How many facts a batch may create in ``ref``, as one call per item would count them against a write
    budget: the same text twice is one fact and its restatement, but a correction and a write ``held`` for
    review are always a fact of their own (they are never merged)."""
    drafts = [draft for (_, draft), r in zip(planned, refs, strict=True) if r == ref]
    if held:
        return len(drafts)
    return len({d.content_hash for d in drafts if not d.supersedes}) + sum(1 for d in drafts if d.supersedes)


def _as_stored(value: object, what: str) -> str:
    """A record filter's value as records store it (NUL and lone surrogates escaped, :func:`storable_text`):
    the same answer from every backend (PostgreSQL refused a NUL in a query)."""
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a str, got {type(value).__name__}")
    return storable_text(value)


def _in_a_day(events: list[dict[str, Any]], now: float) -> int:
    """How many of ``events`` (audit rows) happened in the 24 hours before ``now``: a write budget's count."""
    return sum(1 for e in events if e["at"] >= now - 86400.0)


def _positive_int(value: object, what: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(f"{what} must be an int, got {type(value).__name__}")
    if not 1 <= value <= maximum:
        raise InvalidInputError(f"{what} must be between 1 and {maximum}, got {value}")
    return value


# the refusals a batch re-raises with the item's place in the message (their constructors take a message only)
_PLAIN_INPUT_ERRORS = (InvalidInputError, InvalidInputTypeError, ValueError, TypeError)


class FactStore:
    """The engine behind every handle: facts in agent, group and global scopes, the access policy, hybrid
    recall and records. Its methods take the caller's identity explicitly (``agent_id``: an agent, or
    ``None`` for the operator, always written out: it has no default); applications use
    :class:`~.store.SharedMemoryStore` and its handles (``store.as_agent(...)``, ``store.operator``).

    Args:
        location, embedder, recall, dedup, policy, backend_options: as for
            :class:`~.store.SharedMemoryStore`, which makes the engine from them.

    Raises:
        InvalidInputError: a backend option the chosen backend does not support.
        InvalidInputTypeError: a settings argument of the wrong type.
    """

    def __init__(
        self,
        location: str | os.PathLike[str] | Backend | None = None,
        *,
        embedder: Embedder | None = None,
        recall: RecallSettings | None = None,
        dedup: DedupSettings | None = None,
        policy: WritePolicy | None = None,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value, cls in (
            ("recall", recall, RecallSettings),
            ("dedup", dedup, DedupSettings),
            ("policy", policy, WritePolicy),
        ):
            if value is not None and not isinstance(value, cls):
                raise InvalidInputTypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
        self.recall: RecallSettings = recall or RecallSettings()
        self.dedup: DedupSettings = dedup or DedupSettings()
        self.policy: WritePolicy = policy or WritePolicy()
        options = dict(backend_options or {})
        self.location: str | None = None  # what a dumped config keeps: never a DSN read from the environment
        if isinstance(location, Backend):
            if options:
                raise InvalidInputError("backend_options apply to a location, not to a backend already made")
            backend = location
        else:
            if location is None:
                env = os.environ.get(ENV_DSN) or None
                text = env if env is not None else str(default_root())
            else:
                text = os.fspath(location)
                self.location = text
            backend = open_backend(text, **options)
        self.backend: Backend = backend
        self.backend_options: dict[str, Any] = options
        self.embedder: Embedder = embedder if embedder is not None else OnnxEmbedder()
        self.access = AccessPolicy(self.backend, self.policy.global_writers)
        self.operator_id = self.policy.operator_id
        self.session_id = f"{RUN_SESSION_PREFIX}{uuid.uuid4().hex}"  # facts' session when the writer names none
        self.facade: Any = None  # the SharedMemoryStore around this engine (what tools dump as their store)
        self._model: ModelInfo | None = None
        self._closed = False
        self._recorders: weakref.WeakSet[Any] = weakref.WeakSet()  # objects with flush(timeout): call recorders
        self._subscriptions: set[feed.Subscription] = set()  # running change-feed subscriptions, stopped by close()
        self._created()

    def _created(self) -> None:
        """Called at the end of ``__init__``: a subclass's own set-up (the component's config)."""

    # ------------------------------------------------------------------ plumbing
    @property
    def model(self) -> ModelInfo:
        if self._model is None:
            self._model = ModelInfo(self.embedder.model_id, int(self.embedder.dimension))
        return self._model

    def scope_ref(self, scope: ScopeKind, *, agent_id: str | None = None, group_id: str | None = None) -> ScopeRef:
        """The concrete scope a caller means by ``scope`` (its own agent scope, its group, or global)."""
        if scope == "agent":
            if agent_id is None:
                raise InvalidInputError("scope='agent' needs agent_id (whose private scope?)")
            return ScopeRef("agent", agent_id)
        if scope == "group":
            if group_id is None:
                raise InvalidInputError("scope='group' needs group_id")
            return ScopeRef("group", group_id)
        if scope == "global":
            return ScopeRef("global")
        raise InvalidInputError(f"scope must be one of {SCOPE_KINDS}, got {scope!r}")

    def _draft(
        self, item: str | Mapping[str, Any], defaults: dict[str, Any], actor: str | None, now: float
    ) -> tuple[ScopeKind, Draft]:
        spec = dict(defaults)
        if "fact" in spec:  # the alias, among the defaults: an item's own text still wins over it
            spec["content"] = spec.pop("fact")
        if isinstance(item, Mapping):
            unknown = set(item) - _FACT_FIELDS
            if unknown:
                raise InvalidInputError(f"unknown fact fields {sorted(unknown)}; allowed: {sorted(_FACT_FIELDS)}")
            if "fact" in item and "content" in item:
                raise InvalidInputError("give a fact's text as 'content' or as 'fact', not both")
            spec.update(item)
            if "fact" in spec:
                spec["content"] = spec.pop("fact")
        else:
            spec["content"] = item
        content = validate_content(spec.get("content"), self.policy.max_fact_bytes)
        kind = spec.get("scope")
        if kind not in SCOPE_KINDS:
            raise InvalidInputError(f"scope must be one of {SCOPE_KINDS}, got {kind!r}")
        metadata = validate_metadata(spec.get("metadata"))
        category = spec.get("category")
        if category is not None:
            validate_label(category, "category")
        raw = spec.get("supersedes") or ()
        if isinstance(raw, str) or not isinstance(raw, (list, tuple)) or len(raw) > MAX_SUPERSEDES:
            raise InvalidInputError(f"supersedes must be a list of at most {MAX_SUPERSEDES} fact ids")
        supersedes = tuple(dict.fromkeys(raw))
        for old in supersedes:
            if kind_of_fact_id(old) != kind:
                raise InvalidInputError(f"a {kind} fact can only supersede facts of the same scope, not {shown(old)}")
        session_id = validate_session_id(spec.get("session_id")) or self.session_id
        return kind, Draft(
            id=new_fact_id(kind),
            content=content,
            created_by=actor if actor is not None else self.operator_id,
            created_at=now,
            confidence=validate_confidence(spec.get("confidence", 1.0)),
            tags=validate_tags(spec.get("tags")),
            category=category,
            metadata=metadata,
            session_id=session_id,
            expires_at=expiry_from_ttl(spec.get("ttl_days"), now),
            supersedes=supersedes,
            content_hash=content_hash(content),
        )

    def _agent(self, agent_id: str | None) -> str | None:
        """Validate a caller's agent id; the operator's id is not an agent's (its facts read "by system")."""
        if agent_id is None:
            return None
        validate_owner_id(agent_id, "agent_id")
        if agent_id == self.operator_id:
            raise InvalidInputError(
                f"agent_id {agent_id!r} is this store's operator_id: agents may not act as the operator "
                "(call without agent_id for trusted code, or give the store another operator_id)"
            )
        return agent_id

    def _held(self, agent_id: str | None, ref: ScopeRef) -> bool:
        """Whether this agent's writes to ``ref`` are held for review instead of denied."""
        if not self.policy.review_global_writes or agent_id is None or ref.kind != "global":
            return False
        try:
            self.access.check_write(agent_id, ref)
        except MemoryAccessDenied:
            return True
        return False

    def pending(self) -> list[Fact]:
        """The global facts held for review, oldest first (trusted code's view)."""
        ref = ScopeRef("global")
        ids = self.backend.select_ids(ref, Filters(include_inactive=True), 1 << 30)
        return [f for f in self.backend.get(ref, ids) if f.status == "pending"]

    def approve(self, fact_id: str, *, agent_id: str | None, reason: str | None = None) -> Fact:
        """Release a fact held for review into recall; trusted code or a global writer only. If a live fact
        already says the same (the same text, or a near duplicate by the rule ``remember`` follows), that fact
        is reinforced in the held author's name and returned, and the held one is closed as its
        restatement: recall keeps one copy."""
        validate_reason(reason)
        fact = self._readable(fact_id, self._agent(agent_id), None)
        self.access.check_write(agent_id, fact.scope, "approve facts in")
        actor = agent_id if agent_id is not None else self.operator_id
        if fact.status != "pending":  # nothing to embed: the backend answers (a no-op, or why not)
            return self.backend.set_status(fact.scope, StatusChange(fact_id, "active", actor, time.time(), reason))
        self.backend.check_model(fact.scope, self.model)
        vector = self.embedder.embed([fact.content])  # no lock held while embedding
        return self.backend.approve(
            fact.scope,
            StatusChange(fact_id, "active", actor, time.time(), reason),
            vector,
            self.model,
            self.dedup.near_duplicate,
        )

    def _check_budget(self, agent_id: str | None, ref: ScopeRef, adding: int, now: float) -> None:
        """Refuse a batch that would take an agent past ``write_budget`` facts in one scope in 24 hours (before
        anything is embedded; :meth:`_budget_in_tx` counts again under the write's lock)."""
        if self.policy.write_budget is None or agent_id is None:
            return
        created = self.backend.rows(ref, "audit", {"actor": agent_id, "event": "created"})
        self._refuse_over_budget(agent_id, ref, _in_a_day(created, now), adding)  # counted as the write will

    def _budget_in_tx(
        self, agent_id: str | None, ref: ScopeRef, adding: int, now: float
    ) -> Callable[[ScopeTx], None] | None:
        """The budget counted inside the write's transaction, from the audit trail's ``created`` events (purged
        facts count too), so that writers in several processes cannot pass it together."""
        if self.policy.write_budget is None or agent_id is None:
            return None

        def check(tx: ScopeTx) -> None:
            created = tx.rows("audit", {"actor": agent_id, "event": "created"})
            self._refuse_over_budget(agent_id, ref, _in_a_day(created, now), adding)

        return check

    def _refuse_over_budget(self, agent_id: str, ref: ScopeRef, written: int, adding: int) -> None:
        if self.policy.write_budget is not None and written + adding > self.policy.write_budget:
            raise MemoryAccessDenied(
                f"agent {agent_id!r} has written {written} fact{'' if written == 1 else 's'} to {ref} in the last "
                f"24 hours and its write budget is {self.policy.write_budget} (write_budget)"
            )

    def _check_supersedes(self, refs: Sequence[ScopeRef], drafts: Sequence[Draft]) -> None:
        """Every fact a batch supersedes exists, is active and is superseded once: checked for the whole batch
        before anything is embedded or written (a concurrent writer can still close one first: then that
        scope's transaction fails whole, and scopes written before it stay written)."""
        wanted: dict[ScopeRef, list[str]] = {}
        for ref, draft in zip(refs, drafts, strict=True):
            for old in draft.supersedes:
                if old in wanted.get(ref, []):
                    raise InvalidInputError(f"{shown(old)} is superseded twice in one batch")
                wanted.setdefault(ref, []).append(old)
        for ref, ids in wanted.items():
            found = {f.id: f for f in self.backend.get(ref, ids)}
            for old in ids:
                if old not in found:
                    raise FactNotFoundError(f"cannot supersede {shown(old)}: no such fact in {ref}")
                if found[old].status != "active":
                    raise InvalidInputError(f"cannot supersede {shown(old)}: it is already {found[old].status}")

    # ------------------------------------------------------------------ writing
    def remember(
        self,
        content: str,
        scope: ScopeKind,
        *,
        agent_id: str | None,
        group_id: str | None = None,
        confidence: float = 1.0,
        ttl_days: float | None = None,
        tags: Sequence[str] | None = None,
        category: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        supersedes: Sequence[str] | None = None,
        session_id: str | None = None,
    ) -> Receipt:
        """Store one fact as ``agent_id`` (None: trusted code) and return its receipt.

        A fact that says the same thing as an active fact of the scope (equal after normalisation, or a near
        duplicate with the same wording) reinforces it instead of adding a copy: the receipt says
        ``reinforced``. Anything else is stored, and the receipt's ``similar`` lists the facts it resembles.
        ``supersedes`` makes this fact the correction of older facts of the same scope: it is always stored
        as a new fact and they are closed, atomically.
        """
        item = {
            "content": content,
            "scope": scope,
            "confidence": confidence,
            "ttl_days": ttl_days,
            "tags": tags,
            "category": category,
            "metadata": metadata,
            "supersedes": supersedes,
            "session_id": session_id,
        }
        return self.remember_many([item], agent_id=agent_id, group_id=group_id)[0]

    def remember_many(
        self,
        /,
        facts: Sequence[str | Mapping[str, Any]],
        scope: ScopeKind | None = None,
        *,
        agent_id: str | None,
        group_id: str | None = None,
        **defaults: Any,
    ) -> list[Receipt]:
        """Store many facts: one embedding call for all of them, one transaction per scope.

        Each item is a string or a mapping with ``content`` and optionally ``scope``, ``confidence``,
        ``ttl_days``, ``tags``, ``category``, ``metadata``, ``supersedes``; ``scope`` and keyword defaults
        apply to the items that leave them out. Every item is validated and every policy check passes
        before anything is embedded or written.
        """
        if isinstance(facts, (str, bytes)) or not isinstance(facts, Sequence):
            raise InvalidInputTypeError("facts must be a sequence of strings or mappings")
        unknown = set(defaults) - _FACT_FIELDS
        if unknown:
            raise InvalidInputTypeError(f"unexpected keyword arguments {sorted(unknown)}")
        self._agent(agent_id)
        now = time.time()
        base = {"scope": scope, **defaults}
        planned = []
        for i, item in enumerate(facts):
            try:
                planned.append(self._draft(item, base, agent_id, now))
            except (ValueError, TypeError) as exc:
                if len(facts) == 1 or type(exc) not in _PLAIN_INPUT_ERRORS:
                    raise
                raise type(exc)(f"item {i} of {len(facts)}: {exc}") from None  # which one of the batch
        kinds = dict.fromkeys(kind for kind, _ in planned)  # a scope's ref once, not once per fact
        scopes = {kind: self.scope_ref(kind, agent_id=agent_id, group_id=group_id) for kind in kinds}
        refs = [scopes[kind] for kind, _ in planned]
        held = {ref for ref in refs if self._held(agent_id, ref)}
        for ref in dict.fromkeys(refs):
            if ref not in held:
                self.access.check_write(agent_id, ref)
            self._check_budget(agent_id, ref, _distinct(planned, refs, ref, ref in held), now)
            self.backend.check_model(ref, self.model)
        if not planned:
            return []
        if held:
            for i, ref in enumerate(refs):
                if ref in held:
                    if planned[i][1].supersedes:
                        raise MemoryAccessDenied(
                            f"agent {agent_id!r} may not supersede global facts: its global writes are held "
                            "for review (not a global writer)"
                        )
                    planned[i] = (planned[i][0], dataclasses.replace(planned[i][1], status="pending"))
        self._check_supersedes(refs, [draft for _, draft in planned])
        vectors = self.embedder.embed([d.content for _, d in planned])  # no lock held while embedding
        receipts: list[Receipt | None] = [None] * len(planned)
        for ref in dict.fromkeys(refs):
            positions = [i for i, r in enumerate(refs) if r == ref]
            written = self.backend.write(
                ref,
                [planned[i][1] for i in positions],
                vectors[positions],
                self.model,
                self.dedup.near_duplicate,
                self.dedup.similar,
                self._budget_in_tx(agent_id, ref, _distinct(planned, refs, ref, ref in held), now),
            )
            for i, receipt in zip(positions, written, strict=True):
                receipts[i] = receipt
        return [r for r in receipts if r is not None]

    def forget(
        self,
        fact_id: str,
        reason: str | None = None,
        *,
        agent_id: str | None,
        group_id: str | None = None,
    ) -> Fact:
        """Tombstone a fact (soft delete): search stops returning it, its row and audit trail stay. A fact
        already forgotten or superseded is returned unchanged (its ``status`` says which): its history stays
        as it was.

        In a shared scope (group, global) an agent forgets only what it stated: another agent's fact is
        refused, and a fact other agents stated too keeps theirs (the agent's statement is withdrawn, the
        fact stays). One member, or a prompt injected into it, cannot erase what the team said; the operator
        may forget any fact."""
        validate_reason(reason)
        fact = self._readable(fact_id, self._agent(agent_id), group_id)
        self.access.check_write(agent_id, fact.scope, "forget facts in")
        actor = agent_id if agent_id is not None else self.operator_id
        change = StatusChange(fact_id, "forgotten", actor, time.time(), reason)
        if agent_id is not None and fact.scope.kind != "agent" and fact.status in ("active", "pending"):
            if agent_id not in fact.stated_by:
                raise MemoryAccessDenied(
                    f"agent {agent_id!r} may not forget fact {fact_id} in {fact.scope}: in a shared scope an "
                    f"agent forgets only what it stated (stated by {', '.join(map(repr, fact.stated_by))})"
                )
            if len(fact.stated_by) > 1:  # the others' statements stay: only this agent's is taken back
                self.backend.withdraw(fact.scope, change)
                return self.backend.get(fact.scope, [fact_id])[0]
        return self.backend.set_status(fact.scope, change)

    def forget_all(
        self,
        scope: ScopeKind,
        *,
        agent_id: str | None,
        group_id: str | None = None,
        reason: str | None = None,
    ) -> int:
        """Tombstone every active fact of the caller in a scope. In group and global: the facts it stated;
        where another agent stated one too, only the caller's statement is taken back (a ``withdrawn`` event),
        and the fact stays, the other agents'.

        Trusted code (no ``agent_id``) clears the whole scope. Returns how many facts were forgotten.
        """
        validate_reason(reason)
        ref = self.scope_ref(scope, agent_id=agent_id, group_id=group_id)
        self.access.check_write(agent_id, ref, "forget facts in")
        mine = ref.kind != "agent" and agent_id is not None
        filters = Filters(created_by=(agent_id,) if mine and agent_id else ())
        actor = agent_id if agent_id is not None else self.operator_id
        now = time.time()
        if mine:  # the facts it stated: forgotten, or only its statement taken back where others stated them too
            ids = self.backend.select_ids(ref, Filters(), 1_000_000)
            stated = [
                f.id
                for i in range(0, len(ids), 500)
                for f in self.backend.get(ref, ids[i : i + 500])
                if actor in f.stated_by
            ]
            return sum(self.backend.withdraw(ref, StatusChange(i, "forgotten", actor, now, reason)) for i in stated)
        ids = self.backend.select_ids(ref, filters, 1_000_000)
        for fact_id in ids:
            self.backend.set_status(ref, StatusChange(fact_id, "forgotten", actor, now, reason))
        return len(ids)

    @staticmethod
    def _purge_before(older_than: float | timedelta) -> float:
        days = older_than.total_seconds() / 86400 if isinstance(older_than, timedelta) else older_than
        if isinstance(days, bool) or not isinstance(days, (int, float)) or not 0 <= days <= 1e9:  # (NaN too)
            raise InvalidInputError(f"older_than must be a number of days from 0 to 1e9, got {shown(older_than)}")
        return time.time() - float(days) * 86400

    def purge(self, older_than: float | timedelta, *, scopes: Sequence[ScopeRef] | None = None) -> int:
        """Physically delete forgotten, superseded and expired facts older than ``older_than`` (days).

        The only physical delete, and only for trusted code; the audit trail keeps a ``purged`` event.
        """
        before = self._purge_before(older_than)
        targets = list(scopes) if scopes is not None else self.backend.scopes()
        return sum(len(self.backend.purge(ref, before, self.operator_id)) for ref in targets)

    def purge_plan(
        self, older_than: float | timedelta, *, scopes: Sequence[ScopeRef] | None = None
    ) -> dict[ScopeRef, dict[str, int]]:
        """What :meth:`purge` would delete now, per scope and status (``forgotten``, ``superseded``,
        ``expired``): the facts :func:`~autogen_shared_memory.core.lifecycle.purge_due` selects, the rule
        the backends apply. A dry run: nothing is changed."""
        before, now = self._purge_before(older_than), time.time()
        plan: dict[ScopeRef, dict[str, int]] = {}
        for ref in list(scopes) if scopes is not None else self.backend.scopes():
            counts = dict.fromkeys(("forgotten", "superseded", "expired"), 0)
            if any(self.backend.stats(ref).counts.get(k, 0) for k in counts):
                ids = self.backend.select_ids(ref, Filters(include_inactive=True), 1 << 62)
                for start in range(0, len(ids), 500):
                    for fact in self.backend.get(ref, ids[start : start + 500]):
                        if purge_due(fact, before, now):
                            counts[fact.status] += 1
            plan[ref] = counts
        return plan

    def reembed(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every fact of every scope with this store's embedder and record it as their model."""
        return sum(
            reembed_scope(self.backend, ref, self.embedder.embed, self.model, progress=progress, actor=self.operator_id)
            for ref in self.backend.scopes()
        )

    # ------------------------------------------------------------------ membership
    def add_group_member(self, group_id: str, agent_id: str) -> None:
        """Let ``agent_id`` read and write the group scope ``group_id`` (attach does this for a team)."""
        self.access.set_member(group_id, agent_id, True)

    def remove_group_member(self, group_id: str, agent_id: str) -> None:
        self.access.set_member(group_id, agent_id, False)

    def group_members(self, group_id: str) -> set[str]:
        return self.access.members(group_id)

    def set_agent_private(self, agent_id: str, private: bool = True) -> None:
        """Refuse (or allow again) cross-agent reads of ``agent_id``'s agent scope."""
        self.backend.set_meta(ScopeRef("agent", agent_id), PRIVATE_KEY, "1" if private else None)

    # ------------------------------------------------------------------ reading
    def _locate(self, fact_id: str, agent_id: str | None, group_id: str | None) -> Fact:
        kind = kind_of_fact_id(fact_id)
        hint = {"agent": agent_id, "group": group_id, "global": ""}[kind]
        found = self.backend.get(ScopeRef(kind, hint), [fact_id]) if hint is not None else []
        fact = found[0] if found else self.backend.find(fact_id)
        if fact is None:
            raise FactNotFoundError(f"no fact with id {shown(fact_id)}")
        return fact

    def _readable(self, fact_id: str, agent_id: str | None, group_id: str | None) -> Fact:
        """The fact, if the caller may read its scope; a fact it may not read is answered exactly as one that
        does not exist (no oracle for other agents' private ids)."""
        fact = self._locate(fact_id, agent_id, group_id)
        try:
            self.access.check_read(agent_id, fact.scope)
        except MemoryAccessDenied:
            raise FactNotFoundError(f"no fact with id {shown(fact_id)}") from None
        return fact

    def get(self, fact_id: str, *, agent_id: str | None, group_id: str | None = None) -> Fact:
        """One fact by id, with its provenance and lifecycle state (any status)."""
        return self._readable(fact_id, self._agent(agent_id), group_id)

    def supersede_chain(self, fact_id: str, *, agent_id: str | None, group_id: str | None = None) -> list[Fact | str]:
        """Every fact linked to this one by ``supersedes`` / ``superseded_by``, itself included, oldest first;
        a link whose fact was purged is its bare id, at the end."""
        return self._chain(self._readable(fact_id, self._agent(agent_id), group_id))

    def _chain(self, fact: Fact) -> list[Fact | str]:
        found: dict[str, Fact | None] = {}
        todo = [fact.id]
        while todo:
            fid = todo.pop()
            if fid in found:
                continue
            got = self.backend.get(fact.scope, [fid])
            found[fid] = got[0] if got else None
            if got:
                todo.extend(got[0].supersedes)
                if got[0].superseded_by:
                    todo.append(got[0].superseded_by)
        known = sorted((f for f in found.values() if f is not None), key=lambda f: (f.created_at, f.id))
        return [*known, *sorted(fid for fid, f in found.items() if f is None)]

    def history(self, fact_id: str, *, agent_id: str | None, group_id: str | None = None) -> list[AuditEvent]:
        """The audit trail of a fact and of its whole supersede chain, oldest first; for a purged fact, its
        own trail (the audit outlives the fact: it ends with the ``purged`` event)."""
        agent = self._agent(agent_id)
        try:
            fact = self._readable(fact_id, agent, group_id)
        except FactNotFoundError:
            events = self._purged_history(fact_id, agent, group_id)
            if not events:
                raise
            return events
        ids = [f.id if isinstance(f, Fact) else f for f in self._chain(fact)]
        events = [e for fid in ids for e in self.backend.history(fact.scope, fid)]
        return sorted(events, key=lambda e: (e.at, e.seq))

    def _purged_history(self, fact_id: str, agent_id: str | None, group_id: str | None) -> list[AuditEvent]:
        """The trail of a fact no longer stored, looked for where ``_locate`` would have found it (the id names
        the scope kind, the caller its owner; trusted code: every scope of that kind), in scopes the caller
        may read only."""
        kind = kind_of_fact_id(fact_id)
        owner = {"agent": agent_id, "group": group_id, "global": ""}[kind]
        refs = [ScopeRef(kind, owner)] if owner is not None else [r for r in self.backend.scopes() if r.kind == kind]
        for ref in refs:
            try:
                self.access.check_read(agent_id, ref)
            except MemoryAccessDenied:
                continue
            events = self.backend.history(ref, fact_id) if self.backend.exists(ref) else []
            if events:
                return sorted(events, key=lambda e: (e.at, e.seq))
        return []

    def stats(self) -> list[ScopeStats]:
        """Counts per status, size on disk, embedding model and last write, for every scope."""
        return [self.backend.stats(ref) for ref in self.backend.scopes()]

    def search(
        self,
        query: str,
        scope: ScopeName = "all",
        *,
        agent_id: str | None,
        group_id: str | None = None,
        top_k: int = 5,
        other_agent: str | None = None,
        tags: Sequence[str] | None = None,
        created_by: str | Sequence[str] | None = None,
        category: str | None = None,
        since: float | datetime | None = None,
        until: float | datetime | None = None,
        min_confidence: float | None = None,
        include_inactive: bool = False,
        as_of: float | datetime | None = None,
        scope_weights: Mapping[str, float] | None = None,
        context_weights: tuple[float, float] | None = None,
        scopes: Sequence[ScopeRef] | None = None,
    ) -> list[Hit]:
        """Hybrid recall: BM25 keyword and embedding cosine candidates fused by Reciprocal Rank Fusion.

        ``scope="all"`` fuses the caller's agent scope (if ``agent_id``), its group (if ``group_id``) and
        global. ``scope="agent"`` with ``other_agent`` is an explicit cross-agent read. ``scopes`` names the
        scopes to fuse instead of ``scope`` (every scope: ``store.backend.scopes()``, for trusted code such as
        the CLI); the access policy applies to each of them as to any search. Forgotten,
        superseded and expired facts are left out unless ``include_inactive``. ``as_of`` recalls what was
        believed then: facts written by that time and not yet superseded, forgotten or expired at it
        (purged facts are gone). ``context_weights=(prev, next)``
        sets neighbour context for this search, ``(0, 0)`` turns it off (see :class:`~.settings.RecallSettings`).
        """
        if not isinstance(query, str):
            raise InvalidInputTypeError(f"query must be a str, got {type(query).__name__}")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidInputError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
        require_utf8(query, "query")
        top_k = _positive_int(top_k, "top_k", 1000)
        refs = self._search_scopes(scope, agent_id, group_id, other_agent, scopes)
        if isinstance(created_by, str):
            created_by = [created_by]
        if created_by is not None and (not isinstance(created_by, (list, tuple)) or len(created_by) > MAX_TAGS):
            raise InvalidInputError(f"created_by must be an agent id or a list of at most {MAX_TAGS} of them")
        filters = Filters(
            tags=validate_tags(tags),
            created_by=tuple(validate_owner_id(a, "created_by") for a in created_by or ()),
            category=None if category is None else validate_label(category, "category"),
            since=_timestamp(since, "since"),
            until=_timestamp(until, "until"),
            min_confidence=None if min_confidence is None else validate_confidence(min_confidence, "min_confidence"),
            include_inactive=bool(include_inactive),
            as_of=_timestamp(as_of, "as_of"),
        )
        settings = self.recall
        if scope_weights is not None or context_weights is not None:  # this search's own ranking
            settings = dataclasses.replace(
                settings,
                scope_weights={**settings.scope_weights, **(scope_weights or {})},
                context_weights=settings.context_weights if context_weights is None else context_weights,
            )
        if not query.strip() or not refs:
            return []
        refs = [r for r in refs if self.backend.exists(r)]  # nothing to embed the query for otherwise
        if not refs:
            return []

        def check() -> None:  # beside the embedding and the scan (a round trip each on PostgreSQL)
            for ref in refs:
                self.backend.check_model(ref, self.model)

        ranked = engine.search(
            self.backend,
            refs,
            query,
            self.embedder.embed,
            settings,
            top_k,
            filters,
            check=check,
            fetch=self.backend.get_across,
        )
        return [
            Hit(r.fact, r.score, r.lexical_rank, r.semantic_rank, r.cosine, r.context_of)
            for r in ranked
            if r.fact is not None
        ]

    def _search_scopes(
        self,
        scope: ScopeName,
        agent_id: str | None,
        group_id: str | None,
        other_agent: str | None,
        scopes: Sequence[ScopeRef] | None = None,
    ) -> list[ScopeRef]:
        self._agent(agent_id)
        if scopes is not None:
            if not all(isinstance(ref, ScopeRef) for ref in scopes):
                raise InvalidInputTypeError("scopes must be ScopeRefs")
            refs = list(dict.fromkeys(scopes))
        elif scope == "all":
            refs = [ScopeRef("agent", agent_id)] if agent_id is not None else []
            if group_id is not None:
                refs.append(ScopeRef("group", group_id))
            refs.append(ScopeRef("global"))
        elif scope == "agent":
            target = other_agent if other_agent is not None else agent_id
            if target is None:
                raise InvalidInputError("scope='agent' needs agent_id (or other_agent for a cross-agent read)")
            refs = [ScopeRef("agent", target)]
        else:
            refs = [self.scope_ref(scope, agent_id=agent_id, group_id=group_id)]
        for ref in refs:
            self.access.check_read(agent_id, ref)
        return refs

    def capsule(self, hits: Sequence[Hit], max_bytes: int = 2048) -> str:
        """Render hits as compact text for a model, never more than ``max_bytes`` UTF-8 bytes."""
        return render_capsule(hits, max_bytes)

    # ------------------------------------------------------------------ records
    def log_records(self, records: Sequence[Record]) -> None:
        """Append conversation and tool-call records, each to its agent's file (one transaction per file)."""
        groups: dict[tuple[ScopeRef, str], list[dict[str, Any]]] = {}
        for record in records:
            if not isinstance(record, (ConversationRecord, ToolCallRecord)):
                raise InvalidInputTypeError(f"not a record: {type(record).__name__}")
            ref = ScopeRef("agent", record.agent_id)
            row = {k: storable_text(v) if isinstance(v, str) else v for k, v in record.to_row().items()}
            groups.setdefault((ref, record.table), []).append(row)
        for (ref, table), rows in groups.items():
            self.backend.append_records(ref, table, rows)

    def log_message(
        self,
        agent_id: str,
        content: str,
        *,
        role: str = "assistant",
        source: str | None = None,
        session_id: str | None = None,
        context: Mapping[str, Any] | None = None,
        task_id: str | None = None,
    ) -> ConversationRecord:
        """Record a message of ``agent_id`` (its conversation history, searchable by full text)."""
        record = ConversationRecord(
            agent_id=validate_owner_id(agent_id, "agent_id"),
            content=bounded_text(content, "message content"),
            role=role,
            source=source,
            session_id=session_id or self.session_id,
            context=dict(context or {}),
            task_id=task_id,
        )
        self.log_records([record])
        return record

    def log_tool_call(
        self,
        agent_id: str,
        tool_name: str,
        tool_args: Mapping[str, Any] | None = None,
        result: Any = None,
        *,
        success: bool = True,
        duration_ms: float | None = None,
        error: str | None = None,
        task_id: str | None = None,
        session_id: str | None = None,
        call_id: str | None = None,
    ) -> ToolCallRecord:
        """Record one tool call of ``agent_id``."""
        if not isinstance(tool_name, str) or not tool_name.strip():
            raise InvalidInputError("tool_name must be a non-empty string")
        record = ToolCallRecord(
            agent_id=validate_owner_id(agent_id, "agent_id"),
            tool_name=tool_name,
            tool_args=dict(tool_args or {}),
            result=None if result is None else bounded_text(result, "tool result"),
            success=bool(success),
            duration_ms=duration_ms,
            error=error,
            task_id=task_id,
            session_id=session_id or self.session_id,
            call_id=call_id,
        )
        self.log_records([record])
        return record

    def conversation(
        self, agent_id: str, *, session_id: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        """An agent's recorded messages: newest first, or ranked by full-text match of ``query``."""
        self._settle_records()
        where = {"session_id": _as_stored(session_id, "session_id")} if session_id else {}
        terms = query_terms(query) if query else []
        if query is not None and not terms:
            return []
        rows = self.backend.read_records(
            ScopeRef("agent", agent_id),
            "conversations",
            where,
            limit=_positive_int(limit, "limit", 100_000),
            query_terms=terms,
        )
        return [ConversationRecord.from_row(r) for r in rows]

    def _settle_records(self, timeout: float = 10.0) -> None:
        """Let this process's recorders write what they observed, so a read sees every record made before it."""
        for recorder in list(self._recorders):
            recorder.flush(timeout)

    def tool_history(self, agent_id: str, *, tool_name: str | None = None, limit: int = 50) -> list[ToolCallRecord]:
        """An agent's recorded tool calls, newest first."""
        self._settle_records()
        where = {"tool_name": _as_stored(tool_name, "tool_name")} if tool_name else {}
        rows = self.backend.read_records(
            ScopeRef("agent", agent_id), "tool_calls", where, limit=_positive_int(limit, "limit", 100_000)
        )
        return [ToolCallRecord.from_row(r) for r in rows]

    def purge_records(
        self,
        older_than: float | timedelta,
        *,
        kinds: Sequence[str] = ("conversations", "tool_calls"),
        include_case_log: bool = False,
    ) -> dict[str, int]:
        """Delete records older than ``older_than`` days, per kind (``conversations``, ``tool_calls``,
        ``tasks``, ``saved_conversations``). The case log is only purged when ``include_case_log``."""
        before = self._purge_before(older_than)
        allowed = {"conversations", "tool_calls", "tasks", "saved_conversations"}
        unknown = set(kinds) - allowed
        if unknown:
            raise InvalidInputError(f"unknown record kinds {sorted(unknown)}; purgeable: {sorted(allowed)}")
        counts = dict.fromkeys([*kinds, *(["case_log"] if include_case_log else [])], 0)
        for ref in self.backend.scopes():
            for kind in kinds:
                column = "updated_at" if kind == "saved_conversations" else "created_at"
                counts[kind] += self.backend.delete_records(ref, kind, before=before, time_column=column)
            if include_case_log and ref.kind == "group":
                counts["case_log"] += self.backend.delete_records(ref, "case_log", before=before, force=True)
        return counts

    # ------------------------------------------------------------------ the change feed
    def changes(self, since: Position | str | None = None, *, limit: int | None = None) -> list[Change]:
        """The changes to facts after ``since``, in every scope, by any process or host (trusted code).

        ``since``: a :class:`~.core.types.Position` or its token (``str(position)``), e.g. the ``position`` of
        the last change you handled; ``None``: from the beginning. At most ``limit`` changes (None: all). Each
        scope's changes come in the order they were committed; scopes are interleaved by time. Each change's
        ``position`` is the place just after it: ``changes(since=batch[-1].position)`` continues exactly where
        a batch ended, across restarts and hosts, without skipping or repeating a change. A change is one
        event of a fact's audit trail (``created``, ``reinforced``, ``superseded``, ``forgotten``,
        ``rejected``, ``approved``, ``purged``, ``reembedded``); records and scope settings are not in the feed.

        Like :meth:`stats`, this is for trusted code: it reports every scope, private agent scopes included,
        and applies no access policy (it carries ids, actors and events, never fact content).
        """
        if limit is not None:
            limit = _positive_int(limit, "limit", 10**9)
        return feed.read(self.backend, feed.start(self.backend, since), limit)

    def subscribe(
        self,
        callback: Callable[[Change], object],
        *,
        since: Position | str | None = "now",
        poll_interval: float | None = None,
    ) -> feed.Subscription:
        """Call ``callback(change)`` for every change to a fact made after ``since`` by any process or host,
        until stopped: ``stop = store.subscribe(print)`` ... ``stop()`` (trusted code, as :meth:`changes`).

        Every change is delivered exactly once, each scope's in commit order; the callback runs in the
        subscription's own thread, one change at a time; an exception it raises is logged and the feed goes
        on. ``since``: ``"now"`` (default: changes committed after this call), ``None`` (from the beginning),
        or a position, e.g. the ``position`` of the last change handled before a restart (nothing skipped,
        nothing repeated). Returns once the feed is listening, so a write committed after this returns is
        delivered. The returned :class:`~.feed.Subscription` stops it when called and tells its ``position``.

        PostgreSQL wakes the feed with ``LISTEN``/``NOTIFY`` (one connection per process, shared by every
        subscription to the server; after a reconnect it
        reads every scope, so nothing committed meanwhile is lost); ``poll_interval`` additionally reads
        every scope that often, as a safety net. SQLite files cannot notify: the feed looks at their
        metadata every ``poll_interval`` seconds (default 0.2) and reads the scopes that changed. ``close()``
        stops every subscription of the store.
        """
        subscription = feed.Subscription(
            self.backend,
            callback,
            feed.start(self.backend, since),
            poll_interval=poll_interval,
            on_stop=self._subscriptions.discard,
        )
        self._subscriptions.add(subscription)
        return subscription

    async def asubscribe(
        self,
        callback: Callable[[Change], object],
        *,
        since: Position | str | None = "now",
        poll_interval: float | None = None,
    ) -> feed.Subscription:
        """Async version of :meth:`subscribe`. ``callback`` may be a coroutine function: it then runs on this
        event loop, one change at a time, the feed waiting for each before the next."""
        loop = asyncio.get_running_loop()
        started: list[feed.Subscription] = []

        def deliver(change: Change) -> None:
            result = callback(change)
            if inspect.isawaitable(result):
                try:
                    _wait_on_loop(result, loop)
                except RuntimeError:
                    if loop.is_closed() or not loop.is_running():
                        for subscription in started:
                            subscription.stop()  # its loop is gone: nothing could run the callback any more
                    raise

        started.append(await asyncio.to_thread(self.subscribe, deliver, since=since, poll_interval=poll_interval))
        return started[0]

    # ------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        for recorder in list(self._recorders):  # what they have queued is written first
            close = getattr(recorder, "close", None)
            if close is not None:
                close()
        self._closed = True
        feed.stop_all(self._subscriptions)
        self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.backend!r}, model={self.embedder.model_id!r})"

    # ------------------------------------------------------------------ async twins
    aremember = _off_loop(remember)
    aapprove = _off_loop(approve)
    apending = _off_loop(pending)
    aremember_many = _off_loop(remember_many)
    aforget = _off_loop(forget)
    aforget_all = _off_loop(forget_all)
    apurge = _off_loop(purge)
    areembed = _off_loop(reembed)
    aget = _off_loop(get)
    ahistory = _off_loop(history)
    asupersede_chain = _off_loop(supersede_chain)
    astats = _off_loop(stats)
    asearch = _off_loop(search)
    aadd_group_member = _off_loop(add_group_member)
    alog_records = _off_loop(log_records)
    alog_message = _off_loop(log_message)
    alog_tool_call = _off_loop(log_tool_call)
    aconversation = _off_loop(conversation)
    atool_history = _off_loop(tool_history)
    apurge_records = _off_loop(purge_records)
    achanges = _off_loop(changes)


def _wait_on_loop(awaitable: Awaitable[object], loop: asyncio.AbstractEventLoop) -> None:
    """Run ``awaitable`` on ``loop`` from another thread and wait for it (RuntimeError once the loop stops)."""

    async def run() -> object:
        return await awaitable

    coroutine = run()
    try:
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
    except RuntimeError:
        coroutine.close()
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise
    while True:
        try:
            future.result(timeout=1.0)
            return
        except concurrent.futures.TimeoutError:
            if loop.is_closed() or not loop.is_running():
                future.cancel()
                raise RuntimeError("the event loop of an async change-feed callback is no longer running") from None
