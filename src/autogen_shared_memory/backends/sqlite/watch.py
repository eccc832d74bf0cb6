"""Which scopes of a SQLite store may have changed since the last look, from file metadata alone: what the
change feed polls instead of reading every scope (:meth:`.backend.SQLiteBackend.change_watcher`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from ...core.types import ScopeRef
from .files import is_scope_file_name, scope_file_name

RACY_SECONDS = 2.0  # a file modified this close to the last look counts as changed (coarse file times)

_Signature = tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]


def _stat(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _newest(signature: _Signature) -> float:
    return max((s[2] for s in signature if s is not None), default=0) / 1e9


class ScopeFiles:
    """Which scopes of a SQLite store may have changed since the last look, from file metadata alone (no file is
    opened unless it is new): each scope file's and its WAL's inode, size and modification time.

    Args:
        root: the store's directory.
        scopes: lists the store's scopes (:meth:`~.backend.SQLiteBackend.scopes`), called when a file
            appears that is not known yet.
    """

    def __init__(self, root: Path, scopes: Callable[[], list[ScopeRef]]) -> None:
        self.root = root
        self._list = scopes
        self._seen: dict[str, tuple[_Signature, float]] = {}
        self._scopes: dict[str, ScopeRef | None] = {}  # file name -> its scope (None: not a scope file)
        self._unknown: dict[str, _Signature] = {}  # the files found not to be scope files, as they were then

    def changed(self) -> set[ScopeRef]:
        """The scopes whose files are new, changed, or modified within :data:`RACY_SECONDS` of the last look.

        Returns:
            Those scopes (every scope file's scope on the first call).
        """
        looked = time.time()  # before any stat: a conservative time of this look
        try:
            names = sorted(e.name for e in os.scandir(self.root) if is_scope_file_name(e.name))
        except FileNotFoundError:
            names = []
        signatures = {
            name: (_stat(os.path.join(self.root, name)), _stat(os.path.join(self.root, name) + "-wal"))
            for name in names
        }
        # New files, and files that were not scope files when listed but have changed since (one copied in,
        # read half-written, or locked at that moment): listed again, never ignored for good.
        unknown = [
            n
            for n in names
            if n not in self._scopes or (self._scopes[n] is None and self._unknown.get(n) != signatures[n])
        ]
        if unknown:
            listed = {scope_file_name(ref): ref for ref in self._list()}
            for name in unknown:
                self._scopes[name] = listed.get(name)
                if self._scopes[name] is None:
                    self._unknown[name] = signatures[name]
        found: set[ScopeRef] = set()
        seen: dict[str, tuple[_Signature, float]] = {}
        for name in names:
            signature = signatures[name]
            before = self._seen.get(name)
            seen[name] = (signature, looked)
            scope = self._scopes.get(name)
            if scope is None:
                continue
            # Changed, new, or modified so close to the last look that a write since may have left the same
            # metadata (file times are coarse): read it.
            if before is None or before[0] != signature or _newest(before[0]) >= before[1] - RACY_SECONDS:
                found.add(scope)
        self._seen = seen
        return found
