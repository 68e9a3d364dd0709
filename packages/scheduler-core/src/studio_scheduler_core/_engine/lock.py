"""One engine per database: an exclusive ``flock`` on a lock file beside the database."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from .._exceptions import DatabaseUnavailable, EngineLocked


def lock_path_for(db_path: str | Path) -> str:
    """The lock file of a database: ``<db>.engine.lock`` in the same directory."""
    return f"{Path(db_path).expanduser().resolve()}.engine.lock"


class EngineLock:
    """Holds the exclusive lock; :meth:`acquire` raises :class:`EngineLocked` naming the holder."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = str(Path(db_path).expanduser())
        self.path = lock_path_for(db_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock without blocking and write our pid into the file.

        A lock file that cannot be created (a missing or unwritable directory, a full disk)
        raises :class:`DatabaseUnavailable` naming the database, not the lock file's errno.
        """
        if self._fd is not None:
            return
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DatabaseUnavailable(self.db_path, exc.strerror or str(exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise EngineLocked(holder, self.path) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the file stays; an empty pid means no holder)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class NoLock:
    """:class:`EngineLock`'s interface holding nothing (a PostgreSQL database has no file)."""

    held = False

    def acquire(self) -> None:
        """Nothing to take."""

    def release(self) -> None:
        """Nothing to release."""


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
