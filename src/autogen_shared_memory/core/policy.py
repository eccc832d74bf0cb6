"""The access policy, enforced by the store from the caller's bound identity (never from model arguments).

* agent scope: only its owner writes or forgets; others may read it through an explicit cross-agent read,
  unless the owner is marked private.
* group scope: members of the group read and write (membership is recorded in the group's file).
* global scope: everyone reads; writers come from an allow-list (``"*"`` for all; default: no agent).

The identity ``None`` is trusted code (the application itself, an operator): it may do anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .types import MemoryAccessDenied, ScopeRef, validate_owner_id

MEMBER_PREFIX = "member:"  # one meta key per member: adding or removing one never races another
PRIVATE_KEY = "private"


class ScopeMeta(Protocol):
    """The three scope-setting calls the policy needs (every backend has them)."""

    def get_meta(self, scope: ScopeRef, key: str) -> str | None: ...

    def list_meta(self, scope: ScopeRef, prefix: str) -> dict[str, str]: ...

    def set_meta(self, scope: ScopeRef, key: str, value: str | None) -> None: ...


class AccessPolicy:
    def __init__(self, backend: ScopeMeta, global_writers: Iterable[str] = ()) -> None:
        self.backend = backend
        writers = [global_writers] if isinstance(global_writers, str) else list(global_writers)
        self.global_writers = frozenset(w if w == "*" else validate_owner_id(w, "global writer id") for w in writers)

    # ------------------------------------------------------------ membership and privacy
    def members(self, group_id: str) -> set[str]:
        found = self.backend.list_meta(ScopeRef("group", group_id), MEMBER_PREFIX)
        return {key[len(MEMBER_PREFIX) :] for key in found}

    def is_member(self, group_id: str, agent_id: str) -> bool:
        return self.backend.get_meta(ScopeRef("group", group_id), MEMBER_PREFIX + agent_id) is not None

    def set_member(self, group_id: str, agent_id: str, member: bool) -> None:
        validate_owner_id(agent_id, "agent id")
        self.backend.set_meta(ScopeRef("group", group_id), MEMBER_PREFIX + agent_id, "1" if member else None)

    def is_private(self, agent_id: str) -> bool:
        return self.backend.get_meta(ScopeRef("agent", agent_id), PRIVATE_KEY) == "1"

    # ------------------------------------------------------------ checks
    def check_write(self, actor: str | None, scope: ScopeRef, action: str = "write to") -> None:
        if actor is None:
            return
        if scope.kind == "agent" and scope.owner != actor:
            raise MemoryAccessDenied(
                f"agent {actor!r} may not {action} the agent scope of {scope.owner!r}: "
                "only the owning agent writes or forgets its private facts"
            )
        if scope.kind == "group" and not self.is_member(scope.owner, actor):
            raise MemoryAccessDenied(
                f"agent {actor!r} may not {action} group {scope.owner!r}: it is not a member of that group"
            )
        if scope.kind == "global" and "*" not in self.global_writers and actor not in self.global_writers:
            raise MemoryAccessDenied(
                f"agent {actor!r} may not {action} the global scope: it is not in global_writers "
                "(global facts come from trusted code unless the deployment allows the agent)"
            )

    def check_read(self, actor: str | None, scope: ScopeRef) -> None:
        if actor is None or scope.kind == "global":
            return
        if scope.kind == "agent" and scope.owner != actor and self.is_private(scope.owner):
            raise MemoryAccessDenied(
                f"agent {actor!r} may not read the agent scope of {scope.owner!r}: that agent is private"
            )
        if scope.kind == "group" and not self.is_member(scope.owner, actor):
            raise MemoryAccessDenied(
                f"agent {actor!r} may not read group {scope.owner!r}: it is not a member of that group"
            )
