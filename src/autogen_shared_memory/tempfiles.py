"""Files built under a temporary name and then published under their own (scope files, exports): the
temporary names, and the clean-up of what a killed process left behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import StorageError

# A file built under a temporary name, then published under its own: ``.<name>.<pid>.<token>.tmp``, with what
# SQLite adds beside it while it builds, and the ``-lock`` file of :func:`building`.
_BUILD = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.(?P<token>\w+)\.tmp(?P<part>-wal|-shm|-journal|-lock)?")
_BUILD_PARTS = ("-wal", "-shm", "-journal", "", "-lock")  # the order they are removed in: the lock last
UNLOCKED_BUILD_SECONDS = 60.0  # a build locks its -lock file as soon as it has made it; never this long after


@contextmanager
def building(path: Path) -> Iterator[Path]:
    """A temporary name to build ``path`` under (``.<name>.<pid>.<token>.tmp``), removed with everything SQLite
    made beside it on the way out. The build's ``-lock`` file, made first and removed last, is locked
    (``flock``) while the build runs: the kernel drops the lock when the process dies, however it dies, so
    a later :func:`remove_stale` tells a killed build from a running one, whatever process or PID
    namespace runs it.

    Args:
        path: the file that will be built.

    Yields:
        The temporary name.

    Raises:
        StorageError: the lock file cannot be made (a read-only directory, a full disk).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    lock = Path(f"{tmp}-lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise StorageError(f"{lock} cannot be created: {exc}", path) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while another process's clean-up looks at it
        yield tmp
    finally:
        try:
            for part in _BUILD_PARTS:
                with contextlib.suppress(OSError):
                    Path(f"{tmp}{part}").unlink(missing_ok=True)
        finally:
            os.close(fd)


def remove_stale_builds(path: Path) -> None:
    """Delete what processes killed while building ``path`` under a temporary name left beside it (see
    :func:`remove_stale`)."""
    remove_stale(path.parent, lambda name: name == path.name)


def remove_stale(directory: Path, built: Callable[[str], bool]) -> None:
    """Delete what processes killed while building a file of ``directory`` whose name ``built`` accepts left
    there: its temporary file and the files beside it (``-wal``, ``-shm``, ``-journal``, ``-lock``). A build
    still under way is left alone: one whose ``-lock`` file is locked, whose lock file is still to be locked
    (its process runs and the file is newer than :data:`UNLOCKED_BUILD_SECONDS`), or that has no lock file
    (an export, or a build of an older version) while its process runs. This process's own builds are never
    touched: opening a file this process has open would drop its locks on it. Best effort: what cannot be
    removed (a read-only directory) is left for a process that can."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    builds: dict[str, int] = {}  # the temporary name of each build, and its process
    for name in names:
        match = _BUILD.fullmatch(name)
        if match and built(match["name"]) and int(match["pid"]) != os.getpid():
            builds[name[: match.start("part")] if match["part"] else name] = int(match["pid"])
    for tmp, pid in builds.items():
        try:
            fd: int | None = os.open(directory / f"{tmp}-lock", os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        except OSError:
            continue  # not ours to judge
        try:
            if fd is None:
                if _runs(pid):
                    continue
            else:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # locked: the build runs
                    continue
                if _runs(pid) and time.time() - os.fstat(fd).st_mtime < UNLOCKED_BUILD_SECONDS:
                    continue  # made, not yet locked
            for part in _BUILD_PARTS:
                with contextlib.suppress(OSError):  # a read-only directory: left for a process that can
                    (directory / f"{tmp}{part}").unlink(missing_ok=True)
        finally:
            if fd is not None:
                os.close(fd)


def _runs(pid: int) -> bool:
    """Whether a process ``pid`` runs (in this PID namespace; another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
