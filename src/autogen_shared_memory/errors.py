"""Every error the package raises, in one place; each is exported from ``autogen_shared_memory``.

The hierarchy (a second base after a comma is the built-in error it also is, so code that catches the
built-in one keeps working)::

    SharedMemoryError
    ├── MemoryAccessDenied, PermissionError        the access policy refused an operation
    ├── InvalidInputError, ValueError              an argument the API refuses (the message names the rule)
    │   ├── PositionError                          a change-feed position (token) that is not one
    │   └── ImportFormatError                      an import line that is not a valid export line
    │       ├── ImportModelError                   (also EmbeddingModelMismatchError) vectors of another model
    │       └── ImportPolicyError                  the export sets policy and the import was not asked to apply it
    ├── InvalidInputTypeError, TypeError           an argument of a type the API does not take
    ├── GroupIdRequired, TypeError                 attaching a team without naming its group
    ├── FactNotFoundError, KeyError                no fact with that id in the scopes searched
    ├── UnknownAgentError, KeyError                no agent with that id
    ├── TaskNotFoundError, KeyError                no task with that id
    ├── CheckpointError, KeyError                  a case-log checkpoint names an entry that is not there
    ├── EmbeddingModelMismatchError                the scope's vectors come from another embedding model
    ├── EmbeddingModelError                        the embedding model could not be loaded or failed
    ├── NotAStoreError                             a file at a scope path is not a SQLite database
    ├── StorageError                               a scope file could not be read or written
    └── BackendUnavailableError, ConnectionError   the database server cannot be reached or used

This module imports nothing from the package (every other module imports its errors from here), and nothing
heavy: the PostgreSQL backend's error lives here so that naming it needs no ``psycopg``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BackendUnavailableError",
    "CheckpointError",
    "EmbeddingModelError",
    "EmbeddingModelMismatchError",
    "FactNotFoundError",
    "GroupIdRequired",
    "ImportFormatError",
    "ImportModelError",
    "ImportPolicyError",
    "InvalidInputError",
    "InvalidInputTypeError",
    "MemoryAccessDenied",
    "NotAStoreError",
    "PositionError",
    "SharedMemoryError",
    "StorageError",
    "TaskNotFoundError",
    "UnknownAgentError",
]


class SharedMemoryError(Exception):
    """Base class of every error the package raises: ``except SharedMemoryError`` catches them all."""


class _Message:
    """Mixed into a ``KeyError``: its ``str()`` is its message (``KeyError`` would show the ``repr()`` of it)."""

    args: tuple[object, ...]
    _default = "not found"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else self._default


# ------------------------------------------------------------------------------------------ refusals
class MemoryAccessDenied(SharedMemoryError, PermissionError):
    """The access policy refused an operation; the message says who tried what, and which rule refused."""


class InvalidInputError(SharedMemoryError, ValueError):
    """An argument the API refuses: empty or oversized text, a bad id, a number out of range, an operation the
    named fact's state does not allow. The message names the rule; nothing was changed."""


class InvalidInputTypeError(SharedMemoryError, TypeError):
    """An argument of a type the API does not take (a number where text is expected, say); nothing was
    changed."""


class GroupIdRequired(SharedMemoryError, TypeError):
    """``store.attach`` was not told which team (group) the agents are: a team's memory lives under the name
    its application gives it, never under one derived from its roster."""

    EXAMPLE = 'store.attach(team, group_id="support-acme")'

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or f"attach needs the team's name: {self.EXAMPLE}. Its memory lives under that name, whatever agents "
            "the team has, and unrelated teams (whatever their agents are called) never share it. To share "
            "memory between teams on purpose, give them the same group_id"
        )


class PositionError(InvalidInputError):
    """A change-feed position (or its token) that is not one: the message names what is wrong."""


# ----------------------------------------------------------------------------------------- not found
class FactNotFoundError(_Message, KeyError, SharedMemoryError):
    """No fact with that id exists in the scopes that were searched."""

    _default = "fact not found"


class UnknownAgentError(_Message, SharedMemoryError, KeyError):
    """No agent with that id is known (not in the directory and no memory of its own)."""

    _default = "unknown agent"


class TaskNotFoundError(_Message, SharedMemoryError, KeyError):
    """No task with that id exists in the task list that was asked."""

    _default = "unknown task"


class CheckpointError(_Message, SharedMemoryError, KeyError):
    """A checkpoint names an entry that is not in this case log."""

    _default = "unknown checkpoint"


# -------------------------------------------------------------------------------------------- models
class EmbeddingModelMismatchError(SharedMemoryError):
    """The scope's vectors were made by another embedding model; mixing them would make recall garbage."""


class EmbeddingModelError(SharedMemoryError):
    """The embedding model could not be loaded or failed to embed; nothing was written."""


# --------------------------------------------------------------------------------------------- import
class ImportFormatError(InvalidInputError):
    """A line of an import file is not a valid export line, or one this store refuses (the message names the
    line)."""


class ImportModelError(ImportFormatError, EmbeddingModelMismatchError):
    """The export's vectors come from another embedding model than the store's."""


class ImportPolicyError(ImportFormatError):
    """The export sets group membership or privacy (access policy) this store lacks, and the import was not
    asked to apply policy (``policy=True``, CLI ``--with-policy``)."""


# -------------------------------------------------------------------------------------------- storage
class NotAStoreError(SharedMemoryError):
    """A file at a scope path exists but is not a SQLite database (it is left untouched)."""


class StorageError(SharedMemoryError):
    """A scope file could not be read or written: a read-only file or directory, a full disk, a file that
    cannot be opened, an I/O error. The message names the file and what to do; ``path`` is the file and
    the SQLite error, when there is one, is the ``__cause__``. Lock timeouts are not storage errors."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class BackendUnavailableError(SharedMemoryError, ConnectionError):
    """The database server cannot be reached or used; the message names it (without its password)."""
