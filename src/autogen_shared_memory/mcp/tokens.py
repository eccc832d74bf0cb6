"""The bearer tokens of the HTTP server: each maps to an identity, and the file keeps only their hashes.

The tokens file is JSON::

    {"tokens": [{"sha256": "<hex digest of the token>", "agent_id": "alice", "group_id": "crew",
                 "read_only": false, "label": "alice's laptop", "created_at": 1764000000.0}]}

A token is 32 random bytes (``asm_`` + URL-safe base64), printed once when it is made; the file holds its
SHA-256, so reading the file does not give a token away. A token is looked up by its hash, compared in
constant time. The file is written whole (a temporary file renamed over it) with mode 0600, under a lock
file, so two ``mcp-token`` commands never lose each other's token, and a server reading it meanwhile sees the
old or the new file, never half of one. A running server reads the file again when it changes, so a token
made (or removed from the file) takes effect without a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .server import Identity

TOKEN_PREFIX = "asm_"


def token_hash(token: str) -> str:
    """The SHA-256 hex digest of a token, as the file keeps it.

    Args:
        token: the bearer token.

    Returns:
        64 hex digits.
    """
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class Grant:
    """What one token grants: an identity, under the hash the file keeps."""

    sha256: str
    identity: Identity
    label: str | None = None
    created_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "agent_id": self.identity.agent_id,
            "group_id": self.identity.group_id,
            "read_only": self.identity.read_only,
            "label": self.label,
            "created_at": self.created_at,
        }


def _grant(entry: object, path: Path, n: int) -> Grant:
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: token {n} is not an object")
    digest = entry.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{path}: token {n} has no sha256 of 64 lowercase hex digits")
    read_only = entry.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ValueError(f"{path}: token {n}: read_only must be true or false")
    try:
        identity = Identity(entry.get("agent_id"), entry.get("group_id"), read_only)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: token {n}: {exc}") from None
    label = entry.get("label")
    created = entry.get("created_at")
    return Grant(
        digest,
        identity,
        label if isinstance(label, str) else None,
        float(created) if isinstance(created, (int, float)) else None,
    )


def read_grants(path: Path) -> list[Grant]:
    """The grants of a tokens file (none if it does not exist).

    Args:
        path: the tokens file.

    Returns:
        Its grants, in the file's order.

    Raises:
        ValueError: the file is not a tokens file (not JSON, or an entry without a valid hash or identity).
        OSError: it cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not a tokens file (not JSON: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
        raise ValueError(f'{path} is not a tokens file (no "tokens" list)')
    return [_grant(entry, path, n) for n, entry in enumerate(data["tokens"], start=1)]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_token(path: Path, identity: Identity, *, label: str | None = None) -> str:
    """Make a token for ``identity`` and add its hash to the tokens file (made, mode 0600, if missing).

    Args:
        path: the tokens file.
        identity: what the token grants.
        label: a note on whom the token is for.

    Returns:
        The token: it is not stored anywhere, so it must be handed over now.

    Raises:
        ValueError: the file exists and is not a tokens file.
        OSError: it cannot be written.
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    grant = Grant(token_hash(token), identity, label, time.time())
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        grants = read_grants(path)
        data = {"tokens": [g.as_json() for g in [*grants, grant]]}
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, 0o600)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
    return token


class TokenFile:
    """The grants of a tokens file, read again when the file changes.

    Args:
        path: the tokens file (it must exist: a server without tokens would refuse every caller).

    Raises:
        ValueError: the file is not a tokens file, or holds no token.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._grants: dict[str, Grant] = {}
        if not self.path.exists():
            raise ValueError(f"no tokens file at {self.path} (make a token with `autogen-shared-memory mcp-token`)")
        read_grants(self.path)  # a file that is not a tokens file is an error here, with its reason
        self._reload()
        if not self._grants:
            raise ValueError(f"{self.path} holds no token (make one with `autogen-shared-memory mcp-token`)")

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        # A file that became unreadable or invalid grants nothing: a broken edit must not keep old tokens alive.
        try:
            grants = read_grants(self.path) if stamp is not None else []
        except (OSError, ValueError):
            grants = []
        self._grants = {g.sha256: g for g in grants}
        self._stamp = stamp

    def grant(self, token: str) -> Grant | None:
        """What ``token`` grants, or None for a token the file does not hold.

        Args:
            token: the bearer token a request presented.

        Returns:
            Its grant, or None.
        """
        digest = token_hash(token)
        with self._lock:
            self._reload()
            found = self._grants.get(digest)
        # The dictionary lookup is by the hash; confirm in constant time all the same.
        return found if found is not None and hmac.compare_digest(found.sha256, digest) else None
